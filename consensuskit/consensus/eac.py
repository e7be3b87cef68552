"""Evidence accumulation clustering (EAC; Fred & Jain 2005).

The co-association matrix ``a_ij = c_ij / n_ij`` (fraction of the base
clusterings labelling both i and j that put them together) is turned into a
distance and cut by agglomerative clustering (scipy.cluster.hierarchy).
"""

from __future__ import annotations

import numpy as np

from consensuskit.base import ConsensusEstimator
from consensuskit.data.ensemble import DENSE_COASSOCIATION_LIMIT, Ensemble

__all__ = ["EAC"]

_LINKAGES = ("single", "average", "complete", "ward")


def condensed_coassociation_distance(ensemble: Ensemble, *, sqrt: bool = False,
                                     block: int = 2048) -> np.ndarray:
    """Condensed ``1 - c_ij/n_ij`` (or its square root), built in row blocks.

    ``n_ij = 0`` (no base clustering labels both points) gives distance 1.
    Memory: the ``N (N-1) / 2`` float64 output plus one ``block x N`` slab.
    """
    N = ensemble.n_samples
    if N > DENSE_COASSOCIATION_LIMIT:
        raise ValueError(
            f"EAC needs the N(N-1)/2 co-association distances; N={N} exceeds "
            f"{DENSE_COASSOCIATION_LIMIT}. Use a sparse consensus function (KCC, HBGF, MCLA, "
            "QMI, or CSPA's sparse mode) for large N"
        )
    import scipy.sparse as sp

    B = ensemble.onehot(dtype=np.float64)
    BT = B.T.tocsc()
    miss = ensemble.has_missing
    if miss:
        O = sp.csr_matrix(ensemble.mask.astype(np.float64))
        OT = O.T.tocsc()
    out = np.empty(N * (N - 1) // 2)
    pos = 0
    for a in range(0, N, block):
        b = min(N, a + block)
        c = (B[a:b] @ BT).toarray()
        if miss:
            n = (O[a:b] @ OT).toarray()
            s = np.where(n > 0, c / np.maximum(n, 1.0), 0.0)
        else:
            s = c / ensemble.n_partitions
        for i in range(a, b):
            row = 1.0 - s[i - a, i + 1:]
            np.clip(row, 0.0, 1.0, out=row)
            out[pos:pos + row.size] = np.sqrt(row) if sqrt else row
            pos += row.size
    return out


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

        from consensuskit.consensus.resampling import resolve_n_clusters

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
