"""Co-association distances of an ensemble: ``1 - c_ij / n_ij`` for every pair of rows.

``c_ij`` counts the base clusterings that put rows ``i`` and ``j`` together and ``n_ij``
those that label both.  Evidence accumulation (:mod:`consensuskit.consensus.eac`) cuts
these distances into clusters, and resampling consensus
(:mod:`consensuskit.consensus.resampling`) builds its consensus matrices from them; both
import them from here.
"""

from __future__ import annotations

import numpy as np

from consensuskit.data.ensemble import DENSE_COASSOCIATION_LIMIT, Ensemble

__all__ = ["condensed_coassociation_distance"]


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
