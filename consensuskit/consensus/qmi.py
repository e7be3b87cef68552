"""Quadratic mutual information consensus (Topchy, Jain & Punch 2003/2004).

Topchy et al. show that maximising the sum of quadratic (Gini) mutual
information between the consensus and the base partitions is equivalent to
k-means on the one-hot (binary) representation of the base labels, each block
centred by its column means.  This module runs that k-means.
"""

from __future__ import annotations

import numpy as np

from consensuskit.base import ConsensusEstimator, check_positive_int
from consensuskit.consensus.resampling import resolve_n_clusters
from consensuskit.data.ensemble import Ensemble

__all__ = ["QMI"]


class QMI(ConsensusEstimator):
    """Consensus by quadratic mutual information: k-means on centred one-hot labels.

    Each base clustering ``j`` becomes ``k_j`` indicator features; every feature
    is centred by its mean over the points labelled in ``j``.  k-means
    (scikit-learn, Lloyd, ``n_init`` restarts) on these ``n x sum_j k_j``
    features gives the consensus.  Memory O(n * sum_j k_j) (dense features; no
    n x n array).

    Missing labels: a missing block is set to 0 after centring, i.e. imputed
    with that base clustering's label distribution (its mean indicator vector),
    so it pulls toward no cluster in particular.

    Parameters
    ----------
    n_clusters : int or None, default 2
        None: chosen by resampling consensus (see docs/consensus_functions.md).
    n_init : int, default 10
    max_iter : int, default 300
    random_state : None, int or RandomState
    """

    def __init__(self, n_clusters=2, *, n_init=10, max_iter=300, random_state=None):
        self.n_clusters = n_clusters
        self.n_init = n_init
        self.max_iter = max_iter
        self.random_state = random_state

    @staticmethod
    def features(ensemble: Ensemble) -> np.ndarray:
        """The centred indicator features, shape (n, sum_j k_j), float64."""
        B = ensemble.onehot(dtype=np.float64).toarray()
        mask = np.repeat(ensemble.mask, ensemble.n_labels, axis=1)
        cnt = mask.sum(axis=0)
        mean = B.sum(axis=0) / np.maximum(cnt, 1)
        return np.where(mask, B - mean[None, :], 0.0)

    def _fit(self, ensemble: Ensemble):
        from sklearn.cluster import KMeans


        K = resolve_n_clusters(self, ensemble)
        n_init = check_positive_int(self.n_init, "n_init")
        max_iter = check_positive_int(self.max_iter, "max_iter")
        F = self.features(ensemble)
        km = KMeans(n_clusters=K, n_init=n_init, max_iter=max_iter,
                    random_state=self.random_state).fit(F)
        _, inv = np.unique(km.labels_, return_inverse=True)
        self.labels_ = inv.astype(np.int64)
        self.n_clusters_ = int(self.labels_.max() + 1)
        self.inertia_ = float(km.inertia_)
        self.n_iter_ = int(km.n_iter_)
        return self
