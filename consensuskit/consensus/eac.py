"""Evidence accumulation clustering (EAC; Fred & Jain 2005).

The co-association matrix ``a_ij = c_ij / n_ij`` (fraction of the base
clusterings labelling both i and j that put them together) is turned into a
distance and cut by agglomerative clustering (scipy.cluster.hierarchy).
"""

from __future__ import annotations

import numpy as np

from consensuskit.base import ConsensusEstimator
from consensuskit.consensus.coassociation import condensed_coassociation_distance
from consensuskit.consensus.resampling import resolve_n_clusters
from consensuskit.data.ensemble import Ensemble

__all__ = ["EAC"]

_LINKAGES = ("single", "average", "complete", "ward")


class EAC(ConsensusEstimator):
    """Evidence accumulation: hierarchical clustering of the co-association matrix.

    Parameters
    ----------
    n_clusters : int or None, default 2
        None: chosen by resampling consensus (see docs/consensus_functions.md).
        The dendrogram is cut into this many clusters (``fcluster(maxclust)``).
    linkage : {"single", "average", "complete", "ward"}, default "average"
        * single / average / complete: on the distance ``1 - a_ij``;
        * ward: on ``sqrt(1 - a_ij)``.  For a complete ensemble this is, up to
          the factor ``sqrt(2 r)``, the Euclidean distance between the points'
          one-hot rows (``||x_i - x_j||^2 = 2 (r - c_ij)``), so Ward's criterion
          is exact in that embedding; with missing labels it is the same formula
          on ``c_ij / n_ij`` (a pseudo-Euclidean approximation).
    random_state : unused (EAC is deterministic); kept for a uniform API and
        checked like everywhere else.

    Notes
    -----
    Missing labels: ``a_ij`` uses only the base clusterings labelling both
    points; a pair labelled by none gets distance 1.  Needs the dense condensed
    distance (``N (N-1)/2`` floats): refuses ``N > 20,000`` with a ValueError.
    """

    def __init__(self, n_clusters=2, *, linkage="average", random_state=None):
        self.n_clusters = n_clusters
        self.linkage = linkage
        self.random_state = random_state

    def _fit(self, ensemble: Ensemble):
        from scipy.cluster.hierarchy import fcluster, linkage
        from sklearn.utils import check_random_state


        N = ensemble.n_samples
        K = resolve_n_clusters(self, ensemble)
        if self.linkage not in _LINKAGES:
            raise ValueError(f"linkage must be one of {_LINKAGES}; got {self.linkage!r}")
        check_random_state(self.random_state)  # unused, but a bad value is not ignored
        if N == 1:
            self.labels_ = np.zeros(1, dtype=np.int64)
            return self
        d = condensed_coassociation_distance(ensemble, sqrt=self.linkage == "ward")
        Z = linkage(d, method=self.linkage)
        del d
        lab = fcluster(Z, t=K, criterion="maxclust")
        _, inv = np.unique(lab, return_inverse=True)
        self.labels_ = inv.astype(np.int64)
        self.n_clusters_ = int(self.labels_.max() + 1)
        self.linkage_matrix_ = Z
        return self
