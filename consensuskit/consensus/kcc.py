"""K-means-based consensus clustering (KCC; Wu et al. 2015, Lin et al. 2023).

KCC turns the maximisation of a utility ``sum_i w_i U(pi, pi_i)`` into k-means
on the binary (one-hot) representation of the base partitions with a matching
point-to-centroid distance (see :mod:`consensuskit.consensus.utilities`).  Here
the binary matrix is never formed: points are kept as the ``(n, r)`` offset
index (the paper's ``binIDX``, :meth:`Ensemble.offset_index`), a centroid is a
``(sum_i K_i,)`` vector of per-block label distributions, and both the
assignment and the update steps cost O(n r K) and O(n r) time with O(n K)
memory.
"""

from __future__ import annotations

import numpy as np
from sklearn.utils import check_random_state

from consensuskit.base import ConsensusEstimator, check_positive_float, check_positive_int
from consensuskit.consensus.resampling import resolve_n_clusters
from consensuskit.consensus.utilities import (
    centroids_from_counts,
    check_weights,
    contingency,
    distance_matrix,
    distance_weights,
    get_utility,
    objective_offset,
)
from consensuskit.data.ensemble import Ensemble, as_ensemble

__all__ = ["KCC", "choose_n_clusters"]


def _marginals(ensemble: Ensemble) -> np.ndarray:
    """(T,) vector holding each BP's cluster-size distribution ``P^(i)`` in its block."""
    idx = ensemble.offset_index()
    cnt = np.bincount(idx[idx >= 0], minlength=ensemble.n_total_labels).astype(np.float64)
    off = ensemble.offsets
    tot = np.add.reduceat(cnt, off[:-1])
    return cnt / np.repeat(tot, ensemble.n_labels)


class KCC(ConsensusEstimator):
    """K-means-based consensus clustering with the ten KCC utilities.

    Parameters
    ----------
    n_clusters : int or None, default 2
        None: chosen by resampling consensus (see docs/consensus_functions.md).
        Number K of consensus clusters.
    utility : str, default "UH"
        One of ``"Uc", "UH", "Ucos", "UL5", "UL8"`` (standard form, eq. 18) or
        ``"NUc", "NUH", "NUcos", "NUL5", "NUL8"`` (normalised form, eq. 19).
        UH/NUH follow the paper's sign (the authors' package reports UH with
        the wrong sign of ``H(P^(i))`` for complete ensembles; the clustering
        is the same, the reported ``utility_`` differs).
    weights : None or array-like of shape (n_partitions,)
        Per-partition weights ``w_i`` (default ``1/r``).  Normalised utilities
        divide them further by ``|mu(P^(i))|`` in the distance.
    n_init : int, default 10
        Number of restarts; the one with the smallest k-means objective (hence
        the largest utility) is kept.
    max_iter : int, default 40
        Maximum assignment/update passes per restart.
    tol : float, default 1e-5
        A restart stops when the objective decreases by less than ``tol``
        (absolute, as in the authors' package) between two passes.
    init : {"kmeans++", "random"}, default "kmeans++"
        How each restart picks its K seed points.  ``"random"``: K distinct
        points uniformly, as the authors' package does.  ``"kmeans++"``: the
        first uniformly, each next one with probability proportional to its
        utility distance to the nearest seed chosen so far; this avoids the
        poor optima that uniform seeding of UH/NUH often ends in (two seeds in
        one planted group), so restarts agree far more often.
    random_state : None, int or RandomState
        Seeds the initial centroids.
    verbose : bool, default False
        tqdm progress bar over restarts.

    Attributes
    ----------
    labels_ : ndarray of int64, shape (n_samples,)
        Consensus partition, labels ``0..K-1`` (every cluster non-empty when
        ``n_samples >= K``).
    utility_ : float
        Consensus-function value ``sum_i w_i (n_i/n) U_i`` of ``labels_`` (paper
        eqs. 1, 14, 18-21).
    objective_ : float
        k-means objective ``sum_l f(x_l, m_{k(l)})`` of ``labels_`` with its
        centroids; ``objective_ = const - n * utility_``.
    n_iter_ : int
        Passes run by the kept restart.
    centroids_ : ndarray, shape (K, sum_i K_i)
        Per-block label distributions ``m_{k,i}`` (eq. 21): block ``i`` of row
        ``k`` is the distribution of BP ``i``'s labels over the *labelled*
        members of cluster ``k``.  A block in which cluster ``k`` has no
        labelled member holds ``P^(i)`` (see Notes).
    utilities_ : ndarray, shape (n_init,)
        ``utility_`` of every restart.
    objective_history_ : ndarray
        Kept restart: the objective of each accepted assignment (against the
        centroids it was assigned to), then ``objective_`` (against the
        updated centroids).  Non-increasing.

    Notes
    -----
    * Initialisation: the one-hot rows of K distinct seed points (see
      ``init``); a block
      missing for a chosen point is filled with that BP's marginal
      distribution ``P^(i)`` (the package draws a random one-hot instead).
    * Incomplete partitions (eqs. 20-21): a point's distance sums only over the
      BPs that label it and a centroid block averages only labelled members.  A
      centroid block with no labelled member is set to ``P^(i)``; it then
      influences no term of the objective of the current partition.
    * Empty clusters: when an assignment leaves a cluster empty, it is
      re-seeded with the point farthest from its own centroid (its one-hot row
      becomes the centroid, so that point's distance drops to ~0 and the
      objective does not increase).  This replaces the package's random point.
    * Stopping: a pass whose assignment does not lower the objective by at
      least ``tol`` ends the restart (the assignment is kept if it did not
      raise the objective).
    """

    def __init__(self, n_clusters=2, *, utility="UH", weights=None, n_init=10, max_iter=40,
                 tol=1e-5, init="kmeans++", random_state=None, verbose=False):
        self.n_clusters = n_clusters
        self.init = init
        self.utility = utility
        self.weights = weights
        self.n_init = n_init
        self.max_iter = max_iter
        self.tol = tol
        self.random_state = random_state
        self.verbose = verbose

    # ------------------------------------------------------------------
    def _fit(self, ensemble: Ensemble):

        N = ensemble.n_samples
        K = resolve_n_clusters(self, ensemble)
        util = get_utility(self.utility)
        n_init = check_positive_int(self.n_init, "n_init")
        max_iter = check_positive_int(self.max_iter, "max_iter")
        tol = check_positive_float(self.tol, "tol", allow_zero=True)
        w = check_weights(self.weights, ensemble.n_partitions)
        dw = distance_weights(ensemble, util, w)
        rs = check_random_state(self.random_state)
        if self.init not in ("kmeans++", "random"):
            raise ValueError(f"init must be 'kmeans++' or 'random'; got {self.init!r}")

        idx = ensemble.offset_index()
        off = ensemble.offsets
        marg = _marginals(ensemble)
        T = ensemble.n_total_labels
        offset = objective_offset(ensemble, util, w)

        it = range(n_init)
        if self.verbose:
            from tqdm.auto import tqdm

            it = tqdm(it, desc=f"KCC({util.name}, K={K})")
        best = None
        utils = np.empty(n_init)
        for run in it:
            if self.init == "random":
                seeds = rs.choice(N, size=K, replace=False)
            else:
                seeds = self._kmeanspp_seeds(rs, idx, T, off, marg, util, dw, K)
            M = self._onehot_rows(idx[seeds], T, off, marg)
            labels, obj, n_iter, M, hist = self._lloyd(ensemble, idx, off, M, K, util, dw,
                                                       marg, max_iter, tol)
            utils[run] = (offset - obj) / N  # = sum_i w_i (n_i/n) U_i, see utilities
            if best is None or obj < best[1]:
                best = (labels, obj, n_iter, M, utils[run], hist)
        (self.labels_, self.objective_, self.n_iter_, self.centroids_, self.utility_,
         self.objective_history_) = best
        self.utilities_ = utils
        self.n_clusters_ = K
        return self

    @classmethod
    def _kmeanspp_seeds(cls, rs, idx, T, off, marg, util, dw, K):
        """K distinct seeds, each next drawn with probability ~ distance to the nearest seed."""
        N = idx.shape[0]
        seeds = [int(rs.randint(N))]

        def dist_to(point):
            M = cls._onehot_rows(idx[[point]], T, off, marg)
            with np.errstate(divide="ignore", invalid="ignore"):
                return distance_matrix(idx, M, off, util, dw)[:, 0]

        d = dist_to(seeds[0])
        for _ in range(1, K):
            w = np.where(np.isfinite(d), np.maximum(d, 0.0), 0.0)
            w[seeds] = 0.0
            total = w.sum()
            if total > 0:
                p = int(rs.choice(N, p=w / total))
            else:  # every point coincides with a seed: take any other point
                rest = np.setdiff1d(np.arange(N), seeds)
                p = int(rs.choice(rest))
            seeds.append(p)
            d = np.minimum(d, dist_to(p))
        return np.asarray(seeds)

    @staticmethod
    def _onehot_rows(rows_idx, T, off, marg):
        K, r = rows_idx.shape
        M = np.zeros((K, T))
        block_of = np.repeat(np.arange(r), np.diff(off))
        for k in range(K):
            obs = rows_idx[k] >= 0
            missing_blocks = ~obs
            if missing_blocks.any():
                sel = missing_blocks[block_of]
                M[k, sel] = marg[sel]
            M[k, rows_idx[k][obs]] = 1.0
        return M

    @staticmethod
    def _lloyd(ensemble, idx, off, M, K, util, dw, marg, max_iter, tol):
        N = idx.shape[0]
        rows = np.arange(N)
        labels = None
        prev = np.inf
        n_iter = 0
        history = []
        for n_iter in range(1, max_iter + 1):  # noqa: B007 - n_iter is used after the loop
            with np.errstate(divide="ignore", invalid="ignore"):
                D = distance_matrix(idx, M, off, util, dw)
            new = np.argmin(D, axis=1)
            obj = float(D[rows, new].sum())
            if obj > prev:  # cannot happen for exact k-means steps; guard rounding
                break
            new = KCC._fill_empty(new, D[rows, new], K)
            labels = new
            history.append(obj)
            counts = contingency(ensemble, labels, K)
            M, _ = centroids_from_counts(counts, off, marg)
            if prev - obj < tol:
                break
            prev = obj
        with np.errstate(divide="ignore", invalid="ignore"):
            D = distance_matrix(idx, M, off, util, dw)
        final = float(D[rows, labels].sum())
        history.append(final)
        return labels, final, n_iter, M, np.asarray(history)

    @staticmethod
    def _fill_empty(labels, own_dist, K):
        sizes = np.bincount(labels, minlength=K)
        empty = np.flatnonzero(sizes == 0)
        if empty.size == 0:
            return labels
        labels = labels.copy()
        order = np.argsort(-own_dist, kind="stable")
        j = 0
        for k in empty:
            # take the farthest point whose cluster keeps at least one member
            while sizes[labels[order[j]]] <= 1:
                j += 1
            p = order[j]
            sizes[labels[p]] -= 1
            labels[p] = k
            sizes[k] = 1
            j += 1
        return labels


# ----------------------------------------------------------------------
def _weighted_onehot(ensemble: Ensemble, weights):
    """One-hot CSR with block i scaled by ``sqrt(w_i)`` (missing blocks are all-zero)."""
    import scipy.sparse as sp

    w = check_weights(weights, ensemble.n_partitions)
    B = ensemble.onehot(dtype=np.float64)
    return B @ sp.diags(np.repeat(np.sqrt(w), ensemble.n_labels))


def _calinski_harabasz_sparse(X, labels, K):
    """Calinski-Harabasz index of ``labels`` on sparse rows ``X`` without densifying."""
    import scipy.sparse as sp

    N = X.shape[0]
    Z = sp.csr_matrix((np.ones(N), (np.arange(N), labels)), shape=(N, K))
    nk = np.asarray(Z.sum(axis=0)).ravel()
    S = np.asarray((Z.T @ X).todense())  # (K, T) class sums
    sq = float(X.multiply(X).sum())
    total_mean = np.asarray(X.sum(axis=0)).ravel() / N
    within = sq - float(np.sum(np.sum(S * S, axis=1) / np.maximum(nk, 1)))
    between = float(np.sum(np.sum(S * S, axis=1) / np.maximum(nk, 1))) - N * float(
        total_mean @ total_mean)
    if within <= 0:
        return np.inf
    return between / (K - 1) / (within / (N - K))


def choose_n_clusters(X, candidates, method="elbow", *, utility="UH", weights=None,
                      n_init=10, max_iter=40, random_state=None, sample_size=2000):
    """Choose the number of consensus clusters K for KCC.

    Fits :class:`KCC` for each K in ``candidates`` and scores the partitions.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_partitions) or Ensemble
        Base clusterings (``-1`` missing).
    candidates : iterable of int
        Candidate K values (each >= 2; at least 3 for ``"elbow"``).
    method : {"elbow", "silhouette", "calinski_harabasz"}
        * ``"elbow"``: the KCC objective (sum of the utility's point-to-centroid
          distances; for normalised utilities, weighted) as a function of K; the
          chosen K is the knee, the candidate farthest below the chord joining
          the first and last points of the curve after scaling both axes to
          [0, 1].
        * ``"silhouette"``: sklearn's silhouette score with Euclidean distance
          on the binary one-hot representation, block ``i`` scaled by
          ``sqrt(w_i)`` (so squared distances are ``sum_i w_i ||x_i - y_i||^2``,
          i.e. ``2 w``-weighted disagreements for complete ensembles; a missing
          block is a zero block).  For n > ``sample_size`` it is computed on a
          seeded random sample of ``sample_size`` points (O(sample_size^2)).
        * ``"calinski_harabasz"``: the Calinski-Harabasz index in the same
          weighted one-hot space, computed from sparse class sums in O(n r).
    utility, weights, n_init, max_iter, random_state
        Passed to :class:`KCC`.
    sample_size : int
        Silhouette sample size for large n.

    Returns
    -------
    best_k : int
        The chosen K.
    scores : dict
        ``{K: score}``: objective (elbow), silhouette or CH (higher is better).
    """
    from sklearn.metrics import silhouette_score

    ens = as_ensemble(X)
    cands = [check_positive_int(k, "candidate n_clusters", minimum=2) for k in candidates]
    if len(cands) == 0:
        raise ValueError("candidates is empty")
    if len(set(cands)) != len(cands):
        raise ValueError("candidates contain duplicates")
    cands = sorted(cands)
    if method not in ("elbow", "silhouette", "calinski_harabasz"):
        raise ValueError(
            f"method must be 'elbow', 'silhouette' or 'calinski_harabasz'; got {method!r}")
    if method == "elbow" and len(cands) < 3:
        raise ValueError("the elbow method needs at least 3 candidates")
    rs = check_random_state(random_state)
    seed = int(rs.randint(0, 2**31 - 1))
    Xb = None if method == "elbow" else _weighted_onehot(ens, weights)
    scores = {}
    for k in cands:
        model = KCC(k, utility=utility, weights=weights, n_init=n_init, max_iter=max_iter,
                    random_state=seed).fit(ens)
        if method == "elbow":
            scores[k] = model.objective_
        elif method == "silhouette":
            n_lab = np.unique(model.labels_).size
            if n_lab < 2:
                scores[k] = -1.0
                continue
            ss = sample_size if ens.n_samples > sample_size else None
            scores[k] = float(silhouette_score(Xb, model.labels_, metric="euclidean",
                                               sample_size=ss, random_state=seed))
        else:
            scores[k] = float(_calinski_harabasz_sparse(Xb, model.labels_, k))
    if method == "elbow":
        ks = np.asarray(cands, dtype=float)
        obj = np.asarray([scores[k] for k in cands])
        x = (ks - ks[0]) / (ks[-1] - ks[0])
        span = obj[0] - obj[-1]
        y = (obj - obj[-1]) / span if span > 0 else np.zeros_like(obj)
        # chord from (0, 1) to (1, 0): y = 1 - x; distance below it
        gap = (1.0 - x) - y
        best = cands[int(np.argmax(gap))]
    else:
        best = max(cands, key=lambda k: scores[k])
    return int(best), scores
