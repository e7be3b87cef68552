"""What a new user meets first: ``dir(consensuskit)`` and warnings whose advice is true."""

import rlcompleter
import warnings

import numpy as np
import pytest

import consensuskit


def test_dir_lists_every_public_name_and_completion_sees_them():
    names = dir(consensuskit)
    assert set(consensuskit.__all__) <= set(names)
    for name in ("BCE", "NBCE", "MM", "KCC", "Ensemble", "datasets", "metrics"):
        assert name in names
    assert "import_module" not in names  # no helper leaks into the public listing
    completer = rlcompleter.Completer({"ck": consensuskit})
    found = {completer.complete("ck.NB", i) for i in range(3)} - {None}
    assert found == {"ck.NBCE("}


def test_jedi_completion_sees_the_lazy_estimators():
    """IPython and Jupyter complete through jedi, which asks the live module for its dir()."""
    jedi = pytest.importorskip("jedi")
    names = {c.name for c in jedi.Interpreter("ck.", [{"ck": consensuskit}]).complete()}
    assert {"BCE", "NBCE", "MM", "KCC", "CSPA", "Ensemble", "metrics"} <= names


@pytest.mark.parametrize("init", ["kmeans", "random"])
def test_degenerate_warning_advises_only_what_was_not_tried(init):
    from consensuskit import BCE

    # labels independent across columns: no consensus structure, alpha grows without bound
    X = np.random.default_rng(3).integers(0, 3, size=(400, 6))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # the degenerate optimum is the mean-field bound's (the default estimate has none)
        BCE(3, alpha_estimate="meanfield", n_init=2, init=init, random_state=0,
            max_iter=200).fit(X)
    messages = [str(w.message) for w in caught if "degenerate optimum" in str(w.message)]
    assert len(messages) == 1
    assert ("init='kmeans'" in messages[0]) == (init == "random")
    assert "n_init=2" in messages[0] and "MM" in messages[0]
