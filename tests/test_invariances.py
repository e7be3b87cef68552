"""Determinism and invariances of the consensus (issue 7, item 4).

On a clearly planted ensemble the consensus of MM, BCE, KCC and PCC must be
* identical for the same ``random_state``;
* equivariant under a permutation of the rows;
* invariant under relabelling the ids inside any base clustering;
* invariant under a permutation of the base clusterings;
each "up to a permutation of the consensus labels" (compared with ARI = 1).
Hypothesis draws the permutations and relabellings.
"""

import numpy as np
import pytest
from _factories import ESTIMATORS, FACTORIES, K_PARAM, make_fast
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sklearn.metrics import adjusted_rand_score

from consensuskit.data.generate import noisy_copies

N_CLUSTERS = 3


def planted_ensemble(seed=0, n_per=20, m=8, noise=0.05):
    """Rows in 3 planted groups; each base clustering = truth with a few flips, ids shuffled."""
    rng = np.random.default_rng(seed)
    truth = np.repeat(np.arange(N_CLUSTERS), n_per)
    X = noisy_copies(truth, m, noise=noise, random_state=seed)
    ids = rng.permutation(10)[:N_CLUSTERS] * 7 + 3  # arbitrary, non-contiguous ids
    return ids[X], truth


X0, TRUTH = planted_ensemble()
SETTINGS = settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _fit(name, X, random_state=0):
    return np.asarray(FACTORIES[name](N_CLUSTERS, random_state).fit(X).labels_)


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_same_random_state_same_labels(name):
    a = _fit(name, X0, 7)
    b = _fit(name, X0, 7)
    np.testing.assert_array_equal(a, b)
    assert adjusted_rand_score(TRUTH, a) > 0.9  # the planted groups are found


@pytest.mark.parametrize("name", sorted(FACTORIES))
@SETTINGS
@given(perm_seed=st.integers(0, 2**31 - 1))
def test_row_permutation_equivariance(name, perm_seed):
    perm = np.random.default_rng(perm_seed).permutation(X0.shape[0])
    base = _fit(name, X0)
    permuted = _fit(name, X0[perm])
    assert adjusted_rand_score(base[perm], permuted) == 1.0


@pytest.mark.parametrize("name", sorted(FACTORIES))
@SETTINGS
@given(column=st.integers(0, X0.shape[1] - 1), seed=st.integers(0, 2**31 - 1))
def test_relabelling_one_column_invariance(name, column, seed):
    X = X0.copy()
    ids = np.unique(X[:, column])
    new_ids = np.random.default_rng(seed).permutation(1000)[: ids.size]
    X[:, column] = new_ids[np.searchsorted(ids, X[:, column])]
    assert adjusted_rand_score(_fit(name, X0), _fit(name, X)) == 1.0


@pytest.mark.parametrize("name", sorted(FACTORIES))
@SETTINGS
@given(seed=st.integers(0, 2**31 - 1))
def test_column_permutation_invariance(name, seed):
    perm = np.random.default_rng(seed).permutation(X0.shape[1])
    assert adjusted_rand_score(_fit(name, X0), _fit(name, X0[:, perm])) == 1.0


@pytest.mark.parametrize("name", ESTIMATORS)
def test_every_estimator_same_random_state_same_result(name):
    """Beyond the four models above: every estimator is deterministic on CPU."""
    def fit():
        est = make_fast(name, **{K_PARAM[name]: 5 if name == "NBCE" else 3})
        est.set_params(random_state=11)
        return est.fit(X0)

    a, b = fit(), fit()
    np.testing.assert_array_equal(a.labels_, b.labels_)
    if hasattr(a, "membership_"):
        np.testing.assert_array_equal(a.membership_, b.membership_)


def _many_labels_ensemble(seed=2, n=90, m=6, k=20):
    """Columns of ``k`` = 20 labels (a planted 3-group structure, each group split into
    sub-labels): the codes are int8, and a pair of columns has ``k * k`` = 400 > 127 cells."""
    rng = np.random.default_rng(seed)
    truth = np.repeat(np.arange(N_CLUSTERS), n // N_CLUSTERS)
    X = truth[:, None] * (k // N_CLUSTERS) + rng.integers(0, k // N_CLUSTERS, size=(n, m))
    X[:, 0] = np.arange(n) % k  # every label present in the first column
    X[rng.random(X.shape) < 0.1] = -1
    return X


@pytest.mark.parametrize("name", ESTIMATORS)
def test_every_estimator_the_same_on_int8_and_int64_codes(name):
    """The ensemble stores its codes in int8 (issue 27); an estimator that does arithmetic on
    them in their own type wraps around past 127.  MajorityVote's column-distance table did
    (``a * k_b + b`` in int8: "'list' argument must have no negative elements" on ecoli's
    k-means ensemble with up to 17 labels per column).  Every estimator must give the same
    consensus when the same codes come as int64."""
    import dataclasses

    from consensuskit import Ensemble

    ens8 = Ensemble.from_labels(_many_labels_ensemble())
    assert ens8.codes.dtype == np.int8 and int(ens8.n_labels.max()) ** 2 > 127
    ens64 = dataclasses.replace(ens8, codes=np.asfortranarray(ens8.codes, dtype=np.int64))

    def fit(ens):
        est = make_fast(name, **{K_PARAM[name]: 5 if name == "NBCE" else 3})
        est.set_params(random_state=11)
        if name == "PartitionConsensus":  # refuses missing labels unless told what they are
            est.set_params(missing="singletons")
        return est.fit(ens)

    a, b = fit(ens8), fit(ens64)
    np.testing.assert_array_equal(a.labels_, b.labels_)
    if hasattr(a, "membership_"):
        np.testing.assert_allclose(a.membership_, b.membership_, rtol=1e-12, atol=1e-12)
