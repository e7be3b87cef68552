"""Partition consensus in the sense of clue (Hornik 2005): the medoid partition and the
least-squares soft consensus under the Euclidean partition dissimilarity ("SE").

A partition with k classes is its (n, k) membership matrix ``U``; two partitions
are compared after the best matching of their classes (columns padded with zeros
to a common number of classes):

    d(U, V)^2 = min over column permutations P of ||U - V P||_F^2.

For hard partitions ``d^2 = 2 (n - best matched overlap)``, so the matching is one
linear assignment on the contingency table.  Missing labels (``-1``): a base
clustering contributes only the rows it labels; the dissimilarity of two base
clusterings uses the rows both label, scaled to n rows.
"""

from __future__ import annotations

import warnings

import numpy as np
from scipy.optimize import linear_sum_assignment
from sklearn.utils import check_random_state

from consensuskit.base import (
    ConsensusEstimator,
    check_n_clusters,
    check_positive_float,
    check_positive_int,
)
from consensuskit.consensus.graph import relabel_consecutive
from consensuskit.consensus.resampling import resolve_n_clusters
from consensuskit.data.ensemble import Ensemble

__all__ = [
    "MedoidConsensus",
    "LeastSquaresConsensus",
    "partition_dissimilarities",
    "align_labels",
    "project_to_simplex",
]


#: clue's default relative tolerance, sqrt(machine epsilon).
_SQRT_EPS = float(np.sqrt(np.finfo(np.float64).eps))


def _contingency(a: np.ndarray, b: np.ndarray, ka: int, kb: int) -> np.ndarray:
    """(ka, kb) counts of rows labelled ``(a, b)``; rows missing in either are skipped.

    The pair index ``a * kb + b`` is formed in int64: the ensemble's codes may be int8, where
    it wrapped negative once ``ka * kb`` passed 127."""
    a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    ok = (a >= 0) & (b >= 0)
    return np.bincount(a[ok] * kb + b[ok], minlength=ka * kb).reshape(ka, kb).astype(np.float64)


def align_labels(labels, reference, n_labels: int, n_reference: int) -> np.ndarray:
    """Map the classes of ``labels`` onto those of ``reference`` by maximal overlap.

    The one-to-one part is a linear assignment on the contingency table (the
    Hungarian method); a class left over when ``labels`` has more classes than
    the reference goes to the reference class it overlaps most.  Missing (-1)
    stays missing.

    Returns
    -------
    (n,) int64 labels in the reference's class numbering.
    """
    C = _contingency(labels, reference, n_labels, n_reference)
    rows, cols = linear_sum_assignment(C, maximize=True)
    mapping = np.argmax(C, axis=1)
    mapping[rows] = cols
    out = np.where(labels >= 0, mapping[np.maximum(labels, 0)], -1)
    return out.astype(np.int64)


def partition_dissimilarities(ensemble: Ensemble) -> np.ndarray:
    """(M, M) Euclidean dissimilarities between the base clusterings (clue's "euclidean").

    ``d_ab = sqrt(2 (n - m_ab))`` with ``m_ab`` the best one-to-one class overlap
    (classes padded to the larger count).  With missing labels, over the ``n_ab``
    rows both label, scaled by ``n / n_ab``; pairs sharing no row get ``inf``.
    """
    codes, K = ensemble.codes, ensemble.n_labels
    N, M = ensemble.shape
    D = np.zeros((M, M))
    for a in range(M):
        for b in range(a + 1, M):
            C = _contingency(codes[:, a], codes[:, b], int(K[a]), int(K[b]))
            n_ab = C.sum()
            if n_ab == 0:
                D[a, b] = D[b, a] = np.inf
                continue
            r, c = linear_sum_assignment(C, maximize=True)
            D[a, b] = D[b, a] = np.sqrt(max(0.0, 2.0 * (n_ab - C[r, c].sum())) * N / n_ab)
    return D


def project_to_simplex(Y: np.ndarray) -> np.ndarray:
    """Euclidean projection of each row of ``Y`` onto the probability simplex."""
    Y = np.asarray(Y, dtype=np.float64)
    k = Y.shape[1]
    U = -np.sort(-Y, axis=1)
    css = np.cumsum(U, axis=1) - 1.0
    idx = np.arange(1, k + 1)
    rho = np.count_nonzero(U - css / idx > 0, axis=1)
    theta = css[np.arange(Y.shape[0]), rho - 1] / rho
    return np.maximum(Y - theta[:, None], 0.0)


class MedoidConsensus(ConsensusEstimator):
    """The base clustering closest to all others (clue's ``cl_medoid``).

    The medoid minimises ``sum_b d(P, P_b)`` over the base clusterings ``P`` (the
    Euclidean partition dissimilarity of :func:`partition_dissimilarities`).

    Parameters
    ----------
    n_clusters : int or None, default None
        None: the medoid of the whole ensemble.  An int: the medoid among the
        base clusterings with exactly that many classes; if none has, the
        medoid of all of them, with a RuntimeWarning (``n_clusters_`` then
        differs from ``n_clusters``).
    random_state : unused (deterministic); checked for a uniform API.

    Attributes
    ----------
    medoid_ : int, column of the medoid in ``X``.
    dissimilarity_sums_ : (M,) ``sum_b d(P_j, P_b)`` of every base clustering.
    labels_ : (n,) the medoid's labels; rows it leaves missing take the
        majority label of the other base clusterings aligned to it
        (``n_filled_`` counts them).
    """

    def __init__(self, n_clusters=None, *, random_state=None):
        self.n_clusters = n_clusters
        self.random_state = random_state

    def _fit(self, ensemble: Ensemble):
        check_random_state(self.random_state)
        D = partition_dissimilarities(ensemble)
        sums = D.sum(axis=1)
        candidates = np.arange(ensemble.n_partitions)
        if self.n_clusters is not None:
            k = check_n_clusters(self.n_clusters, ensemble.n_samples)
            candidates = np.flatnonzero(ensemble.n_labels == k)
            if candidates.size == 0:
                candidates = np.arange(ensemble.n_partitions)
                warnings.warn(
                    f"MedoidConsensus: no base clustering has n_clusters={k} classes (they have "
                    f"{sorted(set(ensemble.n_labels.tolist()))}); returning the medoid of all "
                    "of them (see n_clusters_)", RuntimeWarning, stacklevel=3,
                )
        j = int(candidates[np.argmin(sums[candidates])])
        self.medoid_ = j
        self.dissimilarity_sums_ = sums
        lab = ensemble.codes[:, j].copy()
        missing = lab < 0
        self.n_filled_ = int(missing.sum())
        if self.n_filled_:
            k = int(ensemble.n_labels[j])
            votes = np.zeros((ensemble.n_samples, k))
            for b in range(ensemble.n_partitions):
                aligned = align_labels(ensemble.codes[:, b], lab, int(ensemble.n_labels[b]), k)
                ok = aligned >= 0
                votes[np.flatnonzero(ok), aligned[ok]] += 1.0
            lab[missing] = np.argmax(votes[missing], axis=1)
        self.labels_ = relabel_consecutive(lab)
        self.n_clusters_ = int(self.labels_.max() + 1)
        return self


class LeastSquaresConsensus(ConsensusEstimator):
    """Least-squares soft consensus partition (clue's ``cl_consensus(method="SE")``).

    Finds the soft partition ``M`` (n x K, rows on the simplex) minimising

        sum_b w_b min_P ||M - U_b P||^2

    (weights normalised to sum 1) by alternating optimisation (Hornik 2005): match
    every base clustering's classes to ``M`` (a linear assignment each), then set
    every row of ``M`` to the weighted mean of the matched memberships projected
    onto the simplex over the first K classes.  With missing labels a row's mean
    is over the base clusterings that label it and the objective counts only
    observed labels.  Random stochastic starts, ``n_init`` times; the smallest
    objective wins.

    Parameters
    ----------
    n_clusters : int or None, default 2
        None: chosen by resampling consensus (see docs/consensus_functions.md).
    weights : None or (M,) non-negative weights of the base clusterings
    n_init : int, default 10
    max_iter : int, default 100
    tol : float, default sqrt(machine eps)
        Stop when the objective changes by less than ``tol`` relative (as clue).
    random_state : None, int or RandomState

    Attributes
    ----------
    membership_ : (n, K) soft consensus; labels_ its row-wise argmax.
    objective_ : the minimised weighted sum of squared distances.
    n_iter_ : iterations of the kept start; converged_ : whether it met ``tol``.
    """

    def __init__(self, n_clusters=2, *, weights=None, n_init=10, max_iter=100,
                 tol=_SQRT_EPS, random_state=None):
        self.n_clusters = n_clusters
        self.weights = weights
        self.n_init = n_init
        self.max_iter = max_iter
        self.tol = tol
        self.random_state = random_state

    def _fit(self, ensemble: Ensemble):

        N, M = ensemble.shape
        K = resolve_n_clusters(self, ensemble)
        n_init = check_positive_int(self.n_init, "n_init")
        max_iter = check_positive_int(self.max_iter, "max_iter")
        tol = check_positive_float(self.tol, "tol")
        w = self._check_weights(M)
        rs = check_random_state(self.random_state)
        codes = ensemble.codes
        K_all = max(K, int(ensemble.n_labels.max()))
        best = None
        for _ in range(n_init):
            U = rs.random_sample((N, K))
            U /= U.sum(axis=1, keepdims=True)
            run = self._run(codes, ensemble.n_labels, w, U, K, K_all, max_iter, tol)
            if best is None or run[1] < best[1]:
                best = run
        U, value, n_iter, converged = best
        self.membership_ = U
        self.objective_ = float(value)
        self.n_iter_ = n_iter
        self.converged_ = converged
        self.labels_ = np.argmax(U, axis=1).astype(np.int64)
        self.n_clusters_ = K
        return self

    def _check_weights(self, M):
        if self.weights is None:
            return np.full(M, 1.0 / M)
        w = np.asarray(self.weights, dtype=np.float64)
        if w.shape != (M,) or not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
            raise ValueError(f"weights must be {M} finite non-negative numbers, not all zero; "
                             f"got {self.weights!r}")
        return w / w.sum()

    @staticmethod
    def _match(codes, n_labels, U_pad, K_all):
        """Each column's labels renumbered to the consensus classes (best matching)."""
        matched = np.empty_like(codes)
        for b in range(codes.shape[1]):
            col = codes[:, b]
            ok = col >= 0
            S = np.zeros((K_all, K_all))
            np.add.at(S, col[ok], U_pad[ok])  # S[c, l] = sum of consensus mass l over class c
            r, c = linear_sum_assignment(S, maximize=True)
            to = np.empty(K_all, dtype=np.int64)
            to[r] = c
            matched[:, b] = np.where(ok, to[np.maximum(col, 0)], -1)
        return matched

    @staticmethod
    def _value(U_pad, matched, w):
        sq = np.sum(U_pad ** 2, axis=1)
        total = 0.0
        for b in range(matched.shape[1]):
            ok = matched[:, b] >= 0
            rows = np.flatnonzero(ok)
            total += w[b] * np.sum(sq[rows] - 2 * U_pad[rows, matched[rows, b]] + 1.0)
        return total

    def _run(self, codes, n_labels, w, U, K, K_all, max_iter, tol):
        N = codes.shape[0]
        pad = np.zeros((N, K_all))
        pad[:, :K] = U
        matched = self._match(codes, n_labels, pad, K_all)
        old = self._value(pad, matched, w)
        converged = False
        for it in range(1, max_iter + 1):  # noqa: B007 - `it` is returned
            mean = np.zeros((N, K_all))
            mass = np.zeros(N)
            for b in range(codes.shape[1]):
                rows = np.flatnonzero(matched[:, b] >= 0)
                mean[rows, matched[rows, b]] += w[b]
                mass[rows] += w[b]
            mean /= mass[:, None]
            pad = np.zeros((N, K_all))
            pad[:, :K] = project_to_simplex(mean[:, :K]) if K < K_all else mean[:, :K]
            matched = self._match(codes, n_labels, pad, K_all)
            new = self._value(pad, matched, w)
            if abs(old - new) < tol * (abs(old) + tol):
                converged = True
                break
            old = new
        return pad[:, :K], new, it, converged
