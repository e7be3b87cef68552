"""GBCE's CAVI registered as a fast path of its spec (``tests/test_fast_paths.py``).

GBCE scores the labels with the features integrated out: the check compares its per-row
log-likelihood with its spec given no features, at the fitted alpha and beta
(``GBCE.to_spec()``, inherited from BCE), on GBCE's own data (:func:`check_data`).
"""

import numpy as np

from consensuskit.inference.registry import FastPath
from consensuskit.models.gbce import spec
from consensuskit.models.gbce.estimator import GBCE

__all__ = ["FAST_PATHS", "check_data"]


def check_data():
    """90 + 30 rows of GBCE's own data (labels and 2 features from its spec, alpha 0.2,
    label distributions from Dirichlet(0.5)), 10% of the labels and 5% of the feature
    values missing: ``(X_train (90, 5), X_test (30, 5), {"features": (90, 2)})``."""
    n_labels = [3, 3, 4, 2, 3]
    X, F, _ = spec.simulate(n_rows=120, n_labels=n_labels, n_clusters=3, n_features=2,
                            params={"alpha": np.full(3, 0.2)}, seed=3, label_prior=0.5)
    rs = np.random.default_rng(3)
    X[rs.random(X.shape) < 0.1] = -1
    X[(X < 0).all(1), 0] = 0
    F[rs.random(F.shape) < 0.05] = np.nan
    return X[:90], X[90:], dict(features=F[:90])


FAST_PATHS = [
    FastPath("gbce", "cavi", spec,
             lambda **o: GBCE(n_clusters=3, alpha_estimate="meanfield",
                              label_weight=[2.0, 1, 1, 0.5, 1],
                              feature_weight=[1.0, 0.5], n_init=1, tol=1e-13, max_iter=2000,
                              random_state=0, **o),
             data=check_data),
]
