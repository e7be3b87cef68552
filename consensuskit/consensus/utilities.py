"""KCC utility functions and their k-means point-to-centroid distances.

The ten utilities of Lin et al. (ACM TOMS 2023, "KCC: a MATLAB package for
k-means-based consensus clustering"), after Wu et al. (2015):

========  ==========================  ============================================
name      convex function ``mu(v)``   distance ``f_i(x, m)`` of one block
========  ==========================  ============================================
Uc        ``||v||_2^2``               ``1 + ||m||_2^2 - 2 m_x``
UH        ``-H(v)`` (log base 2)      ``-log2(m_x + eps)`` (KL divergence)
Ucos      ``||v||_2``                 ``1 - m_x / ||m||_2``
UL5       ``||v||_5``                 ``1 - (m_x / ||m||_5)^4``
UL8       ``||v||_8``                 ``1 - (m_x / ||m||_8)^7``
========  ==========================  ============================================

Here ``x`` is the one-hot block of a point for base partition ``i`` and
``m_x`` the centroid entry at that point's label; ``N``-prefixed names
(NUc, NUH, NUcos, NUL5, NUL8) are the normalised forms.

Notation (paper eqs. 14, 15, 18, 19 and Table 2): for base partition (BP)
``i`` with ``n_i`` labelled points, ``P^(i)`` is its cluster-size distribution,
``p_k^(i)`` the fraction of those ``n_i`` points in consensus cluster ``k`` and
``m_{k,i} = P_k^(i)`` the distribution of BP ``i``'s labels inside cluster
``k`` (labelled members only, eq. 21).  Then

* standard form (eq. 18): ``U_i = sum_k p_k^(i) mu(m_{k,i}) - mu(P^(i))``;
* normalised form (eq. 19): ``U_i / |mu(P^(i))|``;
* consensus value (eqs. 1, 20-21): ``Gamma = sum_i w_i (n_i / n) U_i``; the
  factor ``n_i / n`` is 1 for complete ensembles.

The k-means objective ``sum_l sum_{i: l in X_i} w'_i f_i(x_{l,i}, m_{k(l),i})``
with ``w'_i = w_i`` (standard) or ``w_i / |mu(P^(i))|`` (normalised) equals
``sum_i w'_i n_i c_i - n * Gamma`` with ``c_i = 1 - mu(P^(i))`` for c, cos
and Lp and ``c_i = H(P^(i))`` for H, so minimising it maximises ``Gamma``.

Entropy is in bits.  The authors' package puts ``eps`` (``2.220446049250313e-16``)
inside the logarithm of the KL distance, ``log2(m_x + eps)``, so that an empty
label of a centroid gives a large finite distance; the same convention is used
here.  In the utilities the package also writes ``log2(x + eps)``; with
``0 log 0 = 0`` that changes values by ~1e-16, far below any tolerance.

Sign of UH: the paper's UH is ``sum_k p_k (-H(m_k)) + H(P^(i))``.  The authors'
package (``UCompute.m``, complete ensembles only) subtracts ``H(P^(i))``
instead, so its reported UH is shifted by ``-2 sum_i w_i H(P^(i))`` and its
NUH equals ``2 sum_i w_i - NUH_paper`` (ordering reversed).  This module
follows the PAPER; the clustering is unaffected because k-means minimises the
distances, which the package has right.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from consensuskit.data.ensemble import Ensemble

__all__ = [
    "UTILITIES",
    "EPS",
    "Utility",
    "get_utility",
    "check_weights",
    "contingency",
    "utility_value",
    "utility_per_partition",
    "centroids_from_counts",
    "distance_weights",
    "objective_offset",
    "distance_matrix",
    "distance_table",
    "objective_value",
]

#: The package's ``eps`` inside ``log2``: float64 machine epsilon.
EPS = float(np.finfo(np.float64).eps)


@dataclass(frozen=True)
class Utility:
    """One KCC utility: its convex family, form and (for Lp) the exponent."""

    name: str
    family: str  # "c", "H", "cos", "Lp"
    normalized: bool
    p: float | None = None

    def mu(self, v: np.ndarray) -> np.ndarray:
        """The convex function ``mu`` applied to each row of ``v`` (shape (..., k)) -> (...)."""
        v = np.asarray(v, dtype=np.float64)
        if self.family == "c":
            return np.sum(v * v, axis=-1)
        if self.family == "H":
            with np.errstate(divide="ignore", invalid="ignore"):
                t = np.where(v > 0, v * np.log2(np.where(v > 0, v, 1.0)), 0.0)
            return np.sum(t, axis=-1)  # -H(v)
        if self.family == "cos":
            return np.sqrt(np.sum(v * v, axis=-1))
        return np.sum(v**self.p, axis=-1) ** (1.0 / self.p)


UTILITIES: dict[str, Utility] = {}
for _fam, _base, _p in (("c", "Uc", None), ("H", "UH", None), ("cos", "Ucos", None),
                        ("Lp", "UL5", 5.0), ("Lp", "UL8", 8.0)):
    UTILITIES[_base] = Utility(_base, _fam, False, _p)
    UTILITIES["N" + _base] = Utility("N" + _base, _fam, True, _p)


def get_utility(utility) -> Utility:
    """Look up a utility by name (``"Uc"``, ``"NUH"``, ...) or pass a :class:`Utility` through."""
    if isinstance(utility, Utility):
        return utility
    if not isinstance(utility, str) or utility not in UTILITIES:
        raise ValueError(f"utility must be one of {sorted(UTILITIES)}; got {utility!r}")
    return UTILITIES[utility]


def check_weights(weights, n_partitions: int) -> np.ndarray:
    """Per-partition weights ``w_i``: None -> ``1/r`` each; else finite, >= 0, not all 0.

    Weights are used as given (not renormalised), as in the paper's eq. (1).
    """
    if weights is None:
        return np.full(n_partitions, 1.0 / n_partitions)
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (n_partitions,):
        raise ValueError(f"weights must have shape ({n_partitions},); got {w.shape}")
    if not np.all(np.isfinite(w)) or (w < 0).any():
        raise ValueError("weights must be finite and non-negative")
    if not (w > 0).any():
        raise ValueError("weights are all zero")
    return w


def contingency(ensemble: Ensemble, labels: np.ndarray, n_clusters: int) -> np.ndarray:
    """Counts ``n[k, t]`` of points in consensus cluster ``k`` with global label ``t``.

    ``t`` indexes the concatenated vocabulary (:meth:`Ensemble.offset_index`);
    missing labels are not counted.  O(N*r) time, (K, sum_i K_i) memory.
    """
    idx = ensemble.offset_index()
    T = ensemble.n_total_labels
    lab = np.asarray(labels, dtype=np.int64)
    if lab.shape != (ensemble.n_samples,):
        raise ValueError(f"labels must have shape ({ensemble.n_samples},); got {lab.shape}")
    if lab.size and (lab.min() < 0 or lab.max() >= n_clusters):
        raise ValueError(f"labels must lie in 0..{n_clusters - 1}")
    flat = (lab[:, None] * T + idx)[idx >= 0]
    return np.bincount(flat, minlength=n_clusters * T).reshape(n_clusters, T).astype(np.float64)


def _block_stats(counts: np.ndarray, offsets: np.ndarray, i: int, util: Utility):
    """For block i: (n_i, p_k (K,), mu(m_k) (K,), mu(P) scalar)."""
    C = counts[:, offsets[i]:offsets[i + 1]]
    nk = C.sum(axis=1)
    n_i = nk.sum()
    with np.errstate(invalid="ignore", divide="ignore"):
        m = np.where(nk[:, None] > 0, C / np.where(nk > 0, nk, 1.0)[:, None], 0.0)
    mu_m = np.where(nk > 0, util.mu(m), 0.0)
    P = C.sum(axis=0) / n_i
    return n_i, nk / n_i, mu_m, float(util.mu(P))


def utility_per_partition(ensemble: Ensemble, labels, n_clusters: int, utility="UH"):
    """Per-BP utilities ``U_i`` (standard or normalised) and coverage ``n_i / n``.

    Returns
    -------
    U : ndarray, shape (r,)
        ``sum_k p_k^(i) mu(m_{k,i}) - mu(P^(i))``, divided by ``|mu(P^(i))|`` for
        the normalised utilities (paper eqs. 14, 18, 19).
    coverage : ndarray, shape (r,)
        ``n_i / n``, the fraction of points BP ``i`` labels.
    """
    util = get_utility(utility)
    counts = contingency(ensemble, labels, n_clusters)
    off = ensemble.offsets
    r = ensemble.n_partitions
    U = np.empty(r)
    cov = np.empty(r)
    for i in range(r):
        n_i, p, mu_m, mu_P = _block_stats(counts, off, i, util)
        U[i] = float(p @ mu_m) - mu_P
        if util.normalized:
            U[i] /= abs(mu_P) if mu_P != 0 else np.nan
        cov[i] = n_i / ensemble.n_samples
    return U, cov


def utility_value(ensemble: Ensemble, labels, n_clusters: int, utility="UH", weights=None):
    """Consensus-function value ``Gamma = sum_i w_i (n_i/n) U_i`` of a partition.

    Parameters
    ----------
    ensemble : Ensemble
        Base partitions, shape (n, r); missing labels allowed (eqs. 20-21).
    labels : array of int, shape (n,)
        Consensus partition with labels in ``0..n_clusters-1``.
    n_clusters : int
        K.
    utility : str
        One of ``Uc, UH, Ucos, UL5, UL8, NUc, NUH, NUcos, NUL5, NUL8``.
    weights : None or array, shape (r,)
        ``w_i``; default ``1/r`` each.

    Notes
    -----
    UH/NUH follow the paper (``+H(P^(i))``), not the authors' package, which
    subtracts it for complete ensembles; see the module docstring.  A normalised
    utility of a BP with ``mu(P^(i)) = 0`` (one-cluster BP under H) is NaN.
    """
    w = check_weights(weights, ensemble.n_partitions)
    U, cov = utility_per_partition(ensemble, labels, n_clusters, utility)
    return float(np.sum(w * cov * U))


def distance_weights(ensemble: Ensemble, utility, weights) -> np.ndarray:
    """The per-BP distance weights ``w'_i``: ``w_i`` (standard) or ``w_i/|mu(P^(i))|``."""
    util = get_utility(utility)
    w = check_weights(weights, ensemble.n_partitions)
    if not util.normalized:
        return w
    idx = ensemble.offset_index()
    off = ensemble.offsets
    out = np.empty_like(w)
    for i in range(ensemble.n_partitions):
        col = idx[:, i]
        cnt = np.bincount(col[col >= 0] - off[i], minlength=int(ensemble.n_labels[i]))
        mu_P = float(util.mu(cnt / cnt.sum()))
        if mu_P == 0:
            raise ValueError(
                f"base clustering {i} has a single cluster, so mu(P^({i})) = 0 and the "
                f"normalised utility {util.name} is undefined; drop it or use {util.name[1:]}"
            )
        out[i] = w[i] / abs(mu_P)
    return out


def objective_offset(ensemble: Ensemble, utility, weights) -> float:
    """The constant ``sum_i w'_i n_i c_i`` with ``objective = constant - n * Gamma``.

    ``c_i = 1 - mu(P^(i))`` for the c, cos and Lp families and ``H(P^(i))`` for H
    (see the module docstring); lets KCC read the utility off its objective.
    """
    util = get_utility(utility)
    dw = distance_weights(ensemble, util, weights)
    idx = ensemble.offset_index()
    off = ensemble.offsets
    total = 0.0
    for i in range(ensemble.n_partitions):
        col = idx[:, i]
        cnt = np.bincount(col[col >= 0] - off[i], minlength=int(ensemble.n_labels[i]))
        n_i = cnt.sum()
        mu_P = float(util.mu(cnt / n_i))
        c_i = -mu_P if util.family == "H" else 1.0 - mu_P
        total += dw[i] * n_i * c_i
    return float(total)


def centroids_from_counts(counts: np.ndarray, offsets: np.ndarray, fallback: np.ndarray):
    """Centroids ``m_{k,i}``: per-block label distributions of each cluster (eq. 21).

    Parameters
    ----------
    counts : (K, T) contingency counts (labelled members only).
    offsets : (r+1,) block starts.
    fallback : (T,) row used for a block in which cluster k has no labelled
        member (each block of it must sum to 1).

    Returns
    -------
    M : (K, T), every block of every row sums to 1.
    empty : (K, r) bool, True where the fallback was used.
    """
    K, T = counts.shape
    r = offsets.size - 1
    block_of = np.repeat(np.arange(r), np.diff(offsets))
    tot = np.add.reduceat(counts, offsets[:-1], axis=1)  # tot[k, i] = sum over block i
    empty = tot == 0
    denom = np.where(empty, 1.0, tot)[:, block_of]
    M = counts / denom
    if empty.any():
        fill = empty[:, block_of]
        M = np.where(fill, fallback[None, :], M)
    return M, empty


def _block_norms(M: np.ndarray, offsets: np.ndarray, util: Utility) -> np.ndarray:
    """(K, r) norm of each centroid block needed by the distance (unused for H)."""
    r = offsets.size - 1
    out = np.empty((M.shape[0], r))
    for i in range(r):
        B = M[:, offsets[i]:offsets[i + 1]]
        if util.family == "c":
            out[:, i] = np.sum(B * B, axis=1)
        elif util.family == "cos":
            out[:, i] = np.sqrt(np.sum(B * B, axis=1))
        elif util.family == "Lp":
            out[:, i] = np.sum(B**util.p, axis=1) ** (1.0 / util.p)
        else:
            out[:, i] = 0.0
    return out


def distance_matrix(idx: np.ndarray, M: np.ndarray, offsets: np.ndarray, utility,
                    dweights: np.ndarray) -> np.ndarray:
    """Point-to-centroid distances ``D[l, k] = sum_{i: l in X_i} w'_i f_i(x_{l,i}, m_{k,i})``.

    Parameters
    ----------
    idx : (n, r) int
        Offset index (``-1`` missing) of the points.
    M : (K, T) centroids.
    offsets : (r+1,) block starts.
    utility : str or Utility.
    dweights : (r,) distance weights ``w'_i`` (see :func:`distance_weights`).

    Returns
    -------
    D : (n, K) float64.

    Notes
    -----
    A point's distance to centroid ``k`` in block ``i`` depends only on its
    label ``t`` there, so the (sum_i K_i, K) table ``w'_i f_i(t, m_{k,i})`` is
    computed once per call (O(K sum_i K_i) transcendental operations) and each
    point adds up ``r`` rows of it: O(n r K) additions and O(n K) memory,
    reading the offset index only (never the binary matrix).
    """
    util = get_utility(utility)
    n, r = idx.shape
    K, T = M.shape
    table = distance_table(M, offsets, util, dweights)  # (T + 1, K), last row 0
    D = np.zeros((n, K))
    for i in range(r):
        col = idx[:, i]
        D += table[np.where(col >= 0, col, T)]
    return D


def distance_table(M: np.ndarray, offsets: np.ndarray, utility, dweights: np.ndarray):
    """``table[t, k] = w'_i f_i(e_t, m_{k,i})`` for global label ``t`` of block ``i``.

    Shape (T + 1, K); the extra last row is 0 (used for missing labels).
    """
    util = get_utility(utility)
    K, T = M.shape
    r = offsets.size - 1
    norms = _block_norms(M, offsets, util)  # (K, r)
    block_of = np.repeat(np.arange(r), np.diff(offsets))
    nb = norms[:, block_of]  # (K, T)
    with np.errstate(divide="ignore", invalid="ignore"):
        if util.family == "c":
            d = 1.0 + nb - 2.0 * M
        elif util.family == "H":
            d = -np.log2(M + EPS)
        elif util.family == "cos":
            d = 1.0 - M / nb
        else:
            d = 1.0 - (M / nb) ** (util.p - 1.0)
    table = np.zeros((T + 1, K))
    table[:T] = (d * dweights[block_of][None, :]).T
    return table


def objective_value(ensemble: Ensemble, labels, n_clusters: int, utility="UH", weights=None):
    """k-means objective ``sum_l f(x_l, m_{k(l)})`` with centroids from ``labels``.

    Clusters/blocks without labelled members do not contribute (no point uses them).
    """
    util = get_utility(utility)
    dw = distance_weights(ensemble, util, weights)
    counts = contingency(ensemble, labels, n_clusters)
    off = ensemble.offsets
    M, _ = centroids_from_counts(counts, off, np.zeros(counts.shape[1]))
    D = distance_matrix(ensemble.offset_index(), M, off, util, dw)
    lab = np.asarray(labels, dtype=np.int64)
    return float(D[np.arange(lab.size), lab].sum())
