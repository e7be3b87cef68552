"""Fold-in of new rows: labels a column never showed in fit."""

import numpy as np
import pytest


@pytest.mark.parametrize("name", ["MM", "BCE", "GBCE", "NBCE"])
def test_predict_unknown_label_raises_or_is_missing(name):
    """A label a column never showed in fit: ValueError by default, missing on request."""
    import consensuskit

    X = np.array([[0, 0], [0, 0], [1, 1], [1, 1], [0, 0], [1, 1]])
    kw = {"truncation": 3, "n_samples": 20, "burn_in": 20} if name == "NBCE" else {
        "n_clusters": 2}
    est = getattr(consensuskit, name)(random_state=0, **kw).fit(X)
    new = np.array([[0, 9]])
    with pytest.raises(ValueError, match="not seen"):
        est.predict_proba(new)
    as_missing = est.predict_proba(new, unknown="missing")
    np.testing.assert_allclose(as_missing, est.predict_proba(np.array([[0, -1]])))
