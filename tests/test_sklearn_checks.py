"""scikit-learn's estimator checks over every estimator (issue 7, item 3).

The estimators declare through their tags (``ConsensusEstimator.__sklearn_tags__``)
that ``X`` is categorical (integer labels) and may hold NaN (missing), so the
checks feed rounded, shifted integer matrices and most of them apply as written.
The exclusions below are checks that feed data which is not a label matrix and
cannot be adapted by any tag; each carries its reason (also in
``docs/sklearn_checks.md``).  Fast settings (one restart, few iterations) keep
the whole file to a few seconds.
"""

import warnings

import pytest
from _factories import ESTIMATORS, make_fast
from sklearn.utils.estimator_checks import parametrize_with_checks

#: check name -> why it cannot pass for a consensus function
EXPECTED_FAILED = {
    "check_clustering": (
        "fits continuous make_blobs coordinates directly (no tag-based rounding); "
        "those are not base-clustering labels and are rejected as non-integer"
    ),
    "check_positive_only_tag_during_fit": (
        "subtracts the mean from an integer matrix, giving non-integer values and "
        "labels below -1; labels are integers >= -1 and no tag expresses that"
    ),
}


#: BCE and GBCE only: their score_samples is an importance-sampling estimate
SAMPLING_SCORE = {
    "check_methods_sample_order_invariance": (
        "score_samples is an importance-sampling estimate drawn from one seeded stream, "
        "so reordering the rows changes which draws a row gets (within the estimate's SE)"
    ),
}


def expected_failed_checks(estimator):
    out = dict(EXPECTED_FAILED)
    if type(estimator).__name__ in ("BCE", "GBCE"):
        out.update(SAMPLING_SCORE)
    return out


@parametrize_with_checks(
    [make_fast(name) for name in ESTIMATORS], expected_failed_checks=expected_failed_checks
)
def test_sklearn_compatible(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # degenerate-optimum notes on noise
        check(estimator)


@pytest.mark.parametrize("name", ESTIMATORS)
def test_tags_declare_label_input(name):
    from sklearn.utils import get_tags

    est = make_fast(name)
    tags = get_tags(est)
    # PartitionConsensus refuses missing labels unless told what they mean (missing=)
    refuses_missing = getattr(est, "missing", None) == "error"
    assert tags.input_tags.categorical and tags.input_tags.allow_nan != refuses_missing
    if refuses_missing:
        assert get_tags(make_fast(name, missing="singletons")).input_tags.allow_nan
    assert not tags.input_tags.sparse
