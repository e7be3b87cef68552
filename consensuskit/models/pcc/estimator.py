"""PCC estimator: probabilistic consensus clustering from co-association counts.

Lourenço et al. (2015), "Probabilistic consensus clustering using evidence
accumulation", Machine Learning 98.  See :mod:`consensuskit.models.pcc.spec` for
the model and :mod:`consensuskit.models.pcc.descent` for the optimiser.
"""

from __future__ import annotations

import numbers

import numpy as np
from sklearn.utils import check_random_state

from consensuskit.base import (
    ConsensusEstimator,
    check_n_clusters,
    check_positive_float,
    check_positive_int,
)
from consensuskit.data.ensemble import DENSE_COASSOCIATION_LIMIT, Ensemble, sample_pairs
from consensuskit.models.pcc.descent import DIVERGENCES, pcc_descent_dense, pcc_descent_pairs

__all__ = ["PCC"]

#: Weight of the random Dirichlet(1) part of the near-uniform starting point.
INIT_NOISE = 0.1


class PCC(ConsensusEstimator):
    """Probabilistic consensus clustering (PCC-KL and PCC-L2).

    Finds soft memberships ``Y`` (rows on the simplex) minimising

        f(Y) = sum_{i<j} N_ij d(c_ij / N_ij, y_i^T y_j)

    over all pairs (dense mode) or a random sample of pairs (sparse mode),
    where ``c_ij`` counts the base clusterings putting i and j together and
    ``N_ij`` those labelling both (so incomplete partitions are handled).  With
    ``divergence="kl"`` this is maximum likelihood in the model
    ``C_ij ~ Binomial(N_ij, y_i^T y_j)``; ``"l2"`` uses the squared error.

    Parameters
    ----------
    n_clusters : int, default 2
        ``K``, the *maximum* number of clusters.  Clusters the optimiser does
        not use come out empty; ``n_clusters_`` counts the used ones.
    divergence : {"kl", "l2"}, default "kl"
    sparse_pairs : None, int or float, default None
        None: all ``n (n - 1) / 2`` pairs with dense ``(n, n)`` arrays (about
        ``24 n^2`` bytes; refused above n = 20,000).  int: number of pairs
        sampled uniformly without replacement.  float in (0, 1): that fraction
        of all pairs (the paper's large-scale run used 0.00025).  Sparse mode
        never forms an ``n x n`` array.
    max_iter : int or None, default None
        Maximum number of coordinate steps per run (each moves one point's
        membership); None = ``20 n K``.
    tol : float, default 1e-6
        Stop when the steepest feasible directional derivative is above
        ``-tol * s``, ``s`` = mean over points of ``sum_j N_ij`` (KKT test).
    n_init : int, default 1
        Random restarts; the run with the lowest objective is kept.
    random_state : int, RandomState or None
        Seeds the starting points and the pair sample.
    verbose : bool, default False
        Show a progress bar.

    Attributes
    ----------
    membership_ : ndarray, shape (n_samples, n_clusters)
        Soft memberships ``y_i`` (rows sum to 1).  Columns are ordered so that
        the ``n_clusters_`` clusters that are the most probable cluster of at
        least one point come first (by decreasing total mass), followed by the
        unused ones.
    labels_ : ndarray of int, shape (n_samples,)
        ``argmax`` of ``membership_`` (maximum-likelihood hard consensus), in
        ``0..n_clusters_-1``.
    n_clusters_ : int
        Number of clusters that are the most probable cluster of some point.
    objective_ : float
        Final ``f(Y)`` (exact; a divergence, >= 0) of the kept run.
    objectives_ : ndarray
        Running objective of the kept run, recorded every ``n_samples`` steps
        (first entry: start, last entry: final exact value).
    n_iter_ : int
        Coordinate steps of the kept run.
    converged_ : bool
        Whether the kept run met the ``tol`` criterion before ``max_iter``.
    pairs_ : ndarray of int, shape (P, 2) or None
        The sampled pairs (sparse mode), None in dense mode.

    Notes
    -----
    Points that appear in no sampled pair keep their random starting
    membership.  The starting point of each run is
    ``(1 - 0.1) / K + 0.1 * Dirichlet(1)`` per row: the exactly uniform matrix
    that the paper suggests is a stationary point of ``f`` (every gradient
    has equal entries), so a small random perturbation is needed.

    Unused clusters (after the first ``n_clusters_`` columns) are nobody's
    most probable cluster but may keep a small residual mass on a few points:
    a point whose co-association with its own cluster is below the cluster's
    typical value is fitted better with some mass on a private cluster.
    ``n_clusters=1`` returns the trivial all-ones membership without
    optimising (``objective_`` is then infinite for KL if any pair was ever
    split).
    """

    def __init__(self, n_clusters=2, *, divergence="kl", sparse_pairs=None, max_iter=None,
                 tol=1e-6, n_init=1, random_state=None, verbose=False):
        self.n_clusters = n_clusters
        self.divergence = divergence
        self.sparse_pairs = sparse_pairs
        self.max_iter = max_iter
        self.tol = tol
        self.n_init = n_init
        self.random_state = random_state
        self.verbose = verbose

    # -- validation -----------------------------------------------------------
    def _n_pairs(self, n):
        total = n * (n - 1) // 2
        sp = self.sparse_pairs
        if sp is None:
            return None
        if isinstance(sp, bool):
            raise TypeError("sparse_pairs must be None, an int or a float in (0, 1); got a bool")
        if isinstance(sp, numbers.Integral):
            if sp < 1:
                raise ValueError(f"sparse_pairs must be >= 1 when an int; got {sp}")
            if sp > total:
                raise ValueError(
                    f"sparse_pairs={sp} exceeds the {total} distinct pairs of {n} samples"
                )
            return int(sp)
        if isinstance(sp, numbers.Real):
            if not 0.0 < float(sp) < 1.0:
                raise ValueError(
                    f"sparse_pairs as a float must be a fraction in (0, 1); got {sp}"
                )
            return max(1, int(round(float(sp) * total)))
        raise TypeError(
            f"sparse_pairs must be None, an int or a float in (0, 1); got {type(sp).__name__}"
        )

    def _fit(self, ensemble: Ensemble):
        n = ensemble.n_samples
        if n < 2:
            raise ValueError(f"PCC needs at least 2 samples; got n_samples={ensemble.n_samples}")
        K = check_n_clusters(self.n_clusters, n)
        if self.divergence not in DIVERGENCES:
            raise ValueError(
                f"divergence must be one of {sorted(DIVERGENCES)}; got {self.divergence!r}"
            )
        tol = check_positive_float(self.tol, "tol")
        n_init = check_positive_int(self.n_init, "n_init")
        max_iter = None if self.max_iter is None else check_positive_int(self.max_iter, "max_iter")
        n_pairs = self._n_pairs(n)
        if n_pairs is None and n > DENSE_COASSOCIATION_LIMIT:
            raise ValueError(
                f"dense PCC on n={n} samples would need {n}x{n} arrays; set sparse_pairs "
                f"(an int number of pairs or a fraction in (0, 1), e.g. sparse_pairs=0.001) "
                f"for n > {DENSE_COASSOCIATION_LIMIT}"
            )
        rs = check_random_state(self.random_state)
        starts = [
            (1.0 - INIT_NOISE) / K + INIT_NOISE * rs.dirichlet(np.ones(K), size=n)
            for _ in range(n_init)
        ]
        if n_pairs is None:
            C, N = ensemble.coassociation()
            C = C.astype(np.float64)
            N = N.astype(np.float64)
            self.pairs_ = None

            def run(Y0):
                return pcc_descent_dense(C, N, Y0, self.divergence, max_iter=max_iter, tol=tol,
                                         verbose=self.verbose)
        else:
            pairs = sample_pairs(n, n_pairs, rs)
            c, nn = ensemble.coassociation(pairs=pairs)
            self.pairs_ = pairs

            def run(Y0):
                return pcc_descent_pairs(pairs, c, nn, Y0, self.divergence, max_iter=max_iter,
                                         tol=tol, verbose=self.verbose)

        if K == 1:  # one cluster: nothing to optimise (f may be infinite for KL)
            from consensuskit.models.pcc.descent import PCCResult, dense_objective, pairs_objective

            Y = np.ones((n, 1))
            if n_pairs is None:
                f = dense_objective(Y, C, N, self.divergence)
            else:
                f = pairs_objective(Y, pairs, c, nn, self.divergence)
            self._set_result(PCCResult(Y, f, np.array([f]), 0, True, False))
            return
        best = None
        for Y0 in starts:
            res = run(Y0)
            if best is None or res.objective < best.objective:
                best = res
        self._set_result(best)

    def _set_result(self, res):
        Y = res.Y
        hard = Y.argmax(axis=1)
        mass = Y.sum(axis=0)
        used = np.unique(hard)
        unused = np.setdiff1d(np.arange(Y.shape[1]), used)
        order = np.concatenate([used[np.argsort(-mass[used], kind="stable")],
                                unused[np.argsort(-mass[unused], kind="stable")]])
        self.membership_ = np.ascontiguousarray(Y[:, order])
        self.labels_ = self.membership_.argmax(axis=1).astype(np.int64)
        self.n_clusters_ = int(used.size)
        self.objective_ = float(res.objective)
        self.objectives_ = res.objectives
        self.n_iter_ = res.n_iter
        self.converged_ = bool(res.converged)
