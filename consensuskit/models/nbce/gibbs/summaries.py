"""Summaries of NBCE draws: count tables, co-clustering probabilities, Dahl's point
consensus and relabelling by size."""

from __future__ import annotations

import numpy as np
from numba import njit
from sklearn.utils import check_random_state

from consensuskit.models.nbce.gibbs.kernels import _label
from consensuskit.models.nbce.gibbs.rows import sampler_rows

__all__ = ["draw_counts", "co_clustering", "point_consensus", "draw_votes",
           "draw_memberships", "relabel_by_size", "split_rhat", "RHAT_THRESHOLD"]


def draw_counts(rows, z, truncation, n_labels):
    """Label counts ``N_kl`` (T, L) and per-column counts ``N_kj`` (T, M) of one draw.

    ``rows``: the (N, M) global label index (-1 missing), or the pair ``(codes,
    offsets)`` the sampler reads (:func:`~consensuskit.models.nbce.gibbs.rows.
    sampler_rows`); ``z`` (N,).  Counted in one compiled pass over the rows, with no
    (N,) temporaries (the column-at-a-time bincounts had taken about 24 B per row at 1e7
    rows; the pairs of observed positions before them, 3.2 GB).
    """
    rows = sampler_rows(rows)
    z = np.asarray(z)
    T = int(truncation)
    L = int(np.sum(n_labels))
    Nkl = np.zeros((T, L), dtype=np.int64)
    Nkm = np.zeros((T, rows[0].shape[1]), dtype=np.int64)
    _count(rows, z, Nkl, Nkm)
    return Nkl, Nkm


@njit(cache=True)
def _count(rows, z, Nkl, Nkm):
    """:func:`draw_counts`'s loop: ``Nkl[z_i, x_ij] += 1`` and ``Nkm[z_i, j] += 1`` over the
    observed ``(i, j)``."""
    N, M = rows[0].shape
    for i in range(N):
        k = z[i]
        for j in range(M):
            x = _label(rows, i, j)
            if x >= 0:
                Nkl[k, x] += 1
                Nkm[k, j] += 1


# ---------------------------------------------------------------------------
# posterior summaries
# ---------------------------------------------------------------------------
def _pairs_for(N, max_pairs, rng):
    from consensuskit.data.ensemble import sample_pairs

    total = N * (N - 1) // 2
    if total <= max_pairs:
        i, j = np.triu_indices(N, k=1)
        return np.stack([i, j], axis=1)
    return sample_pairs(N, max_pairs, rng)


def co_clustering(z_draws, pairs=None):
    """Posterior co-clustering probabilities P(z_i = z_j | x).

    Parameters
    ----------
    z_draws : int array, shape (S, N)
        Retained draws (all chains stacked).
    pairs : None or int array (P, 2)
        None: the dense (N, N) matrix (N <= 5000 only); otherwise the
        probabilities of these pairs only, shape (P,), in O(S P) time.
    """
    Z = np.asarray(z_draws)
    S, N = Z.shape
    if pairs is None:
        if N > 5_000:
            raise ValueError(
                f"dense co-clustering for N={N} needs an {N}x{N} array; pass pairs= "
                "(e.g. consensuskit.data.ensemble.sample_pairs) for N > 5000"
            )
        P = np.zeros((N, N))
        for s in range(S):
            P += Z[s][:, None] == Z[s][None, :]
        return P / S
    pairs = np.asarray(pairs)
    return (Z[:, pairs[:, 0]] == Z[:, pairs[:, 1]]).mean(axis=0)


def point_consensus(z_draws, max_pairs=200_000, random_state=None):
    """Label-switching-free point estimate: the retained draw closest to the posterior
    co-clustering matrix in squared loss (Dahl's least-squares clustering).

    For ``N(N-1)/2 > max_pairs`` the loss is evaluated on ``max_pairs`` sampled pairs.

    Returns
    -------
    labels : int64 (N,), relabelled to 0..K-1 by decreasing cluster size
    best : int, index of the chosen draw in ``z_draws``
    """
    Z = np.asarray(z_draws)
    S, N = Z.shape
    rng = check_random_state(random_state)
    pairs = _pairs_for(N, max_pairs, rng)
    same = Z[:, pairs[:, 0]] == Z[:, pairs[:, 1]]  # (S, P)
    p = same.mean(axis=0)
    loss = ((same - p[None, :]) ** 2).sum(axis=1)
    best = int(np.argmin(loss))
    return relabel_by_size(Z[best]), best


def draw_votes(Z, labels, T):
    """Votes of draws ``Z`` (D, N) of components 0..T-1 for the consensus ``labels`` (N,)
    0..K-1, free of label switching.

    Each draw's occupied components are mapped to the consensus cluster they overlap most
    (many to one: a component that ``labels`` splits goes to its larger part, two components
    that ``labels`` merges both go to the merged cluster), so every row gets one vote per
    draw.  Returns ``votes`` (N, K), the number of draws voting for each cluster (uint16,
    or uint32 from 65,536 draws: a quarter of the float64 shares' memory), and ``maps``
    (D, T), component -> consensus cluster (-1 for empty components).
    """
    Z = np.asarray(Z)
    labels = np.asarray(labels)
    D, N = Z.shape
    K = int(labels.max()) + 1
    maps = np.full((D, T), -1, dtype=np.int64)
    votes = np.zeros((N, K), dtype=np.uint16 if D < 2**16 else np.uint32)
    # in one compiled pass per draw: numpy's bincount of ``Z[s] * K + labels`` and the
    # fancy-indexed increment took about 30 B per row of (N,) int64 temporaries, the peak
    # of an NBCE fit at 1e7 rows (issue 27)
    _vote(Z, labels, maps, votes)
    return votes, maps


@njit(cache=True)
def _vote(Z, labels, maps, votes):
    """:func:`draw_votes`'s loop: ``maps`` (D, T) filled (the first largest overlap, as
    ``argmax``; -1 where empty), ``votes`` (N, K) incremented once per row and draw."""
    D, N = Z.shape
    T = maps.shape[1]
    K = votes.shape[1]
    cont = np.zeros((T, K), dtype=np.int64)
    for s in range(D):
        cont[:] = 0
        for i in range(N):
            cont[Z[s, i], labels[i]] += 1
        for t in range(T):
            top = 0
            for k in range(K):
                if cont[t, k] > top:
                    top = cont[t, k]
                    maps[s, t] = k
        for i in range(N):
            votes[i, maps[s, Z[s, i]]] += 1


def draw_memberships(Z, labels, T):
    """``(membership (N, K), maps (D, T))``: :func:`draw_votes` as the share of the D draws
    voting for each cluster (float64)."""
    votes, maps = draw_votes(Z, labels, T)
    return votes / np.float64(Z.shape[0]), maps


def relabel_by_size(z):
    """Relabel a partition to 0..K-1 with cluster 0 the largest (ties: the smaller label
    first).  Non-negative labels below ``len(z)`` are counted with ``np.bincount`` (no
    (N,) int64 temporaries beyond the result; absent labels count 0 and rank last, so
    the result is ``np.unique``'s), others through ``np.unique``."""
    z = np.asarray(z)
    if z.size and np.issubdtype(z.dtype, np.integer) and z.min() >= 0 and z.max() < z.size:
        inv, cnt = z, np.bincount(z.reshape(-1))
    else:
        _, inv, cnt = np.unique(z, return_inverse=True, return_counts=True)
    order = np.argsort(-cnt, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return rank[inv].astype(np.int64, copy=False)


#: split R-hat of the log joint above which NBCE's Gibbs chains count as in separate modes
RHAT_THRESHOLD = 1.05


def split_rhat(x):
    """Split R-hat (Gelman et al., BDA3 eq. 11.4) of ``x`` (chains, draws): each chain cut
    in two halves, then the potential scale reduction of the 2C half-chains."""
    x = np.asarray(x, dtype=np.float64)
    h = x.shape[1] // 2
    if h < 2:
        return float("nan")
    parts = np.concatenate([x[:, :h], x[:, -h:]], axis=0)  # (2C, h)
    W = parts.var(axis=1, ddof=1).mean()
    B = h * parts.mean(axis=1).var(ddof=1)
    if W <= 0:
        return float("inf") if B > 0 else 1.0
    return float(np.sqrt(((h - 1) / h * W + B / h) / W))
