"""``PartitionPosterior``: a posterior over partitions given by S draws of N item labels.

A Bayesian clustering model's output is a posterior over partitions; it is summarised with
decision theory (Binder 1978; Dahl 2006; Wade & Ghahramani 2018; Dahl, Johnson & Mueller
2022): the partition minimising the posterior expected loss, a credible ball around it, the
posterior similarity matrix (PSM) and per-item uncertainty.  Everything here is computed from
contingency tables of a partition with each draw (O(N S)), so none of it needs the N x N PSM;
the PSM itself is available dense for small N, blockwise or for given pairs at any N.
"""

from __future__ import annotations

import numpy as np

from . import _kernels as _k
from .credible_ball import CredibleBall, credible_ball_from_distances
from .losses import _as_partition, _sums, check_loss, loss_to_draws_prepared, prepare_draws
from .search import SearchInfo, _check_int, salso_search

__all__ = ["PartitionPosterior", "SearchInfo", "CredibleBall"]

#: largest N for which ``psm()`` returns the dense matrix unless ``max_dense`` says otherwise
MAX_DENSE = 5000


class PartitionPosterior:
    """Posterior over partitions of N items, from S draws.

    Parameters
    ----------
    draws : array-like of shape (S, N)
        One posterior draw per row: the cluster label of each of the N items.  Labels are any
        non-negative integers (each draw is relabelled to 0..k-1; label values carry no
        meaning).  Every item must have a label in every draw.

    Attributes
    ----------
    n_draws, n_items : S and N.
    n_clusters_draws : (S,) number of clusters in each draw.

    Examples
    --------
    >>> pp = PartitionPosterior(draws)                       # draws: (S, N)
    >>> est, info = pp.point_estimate(loss="vi")             # SALSO search
    >>> ball = pp.credible_ball(est, level=0.95, loss="vi")  # Wade & Ghahramani 2018
    """

    def __init__(self, draws):
        self._lab, self._k = prepare_draws(draws)
        self.n_items, self.n_draws = self._lab.shape
        self.n_clusters_draws = self._k.copy()

    def __repr__(self):
        return f"PartitionPosterior(n_draws={self.n_draws}, n_items={self.n_items})"

    # -- draws ---------------------------------------------------------------------------
    def draw(self, s):
        """Draw ``s`` as (N,) labels 0..k-1 (by order of first appearance)."""
        return self._lab[:, int(s)].astype(np.int64)

    @property
    def draws(self):
        """(S, N) int64 copy of the relabelled draws (memory S N 8 bytes)."""
        return self._lab.T.astype(np.int64)

    def _partition(self, partition):
        return _as_partition(partition, self.n_items)

    # -- similarity ----------------------------------------------------------------------
    def psm(self, pairs=None, block=None, max_dense=MAX_DENSE):
        """Posterior similarity: the share of draws in which two items share a cluster.

        Parameters
        ----------
        pairs : optional ``(i, j)``, two int arrays of shape (P,): return the (P,) similarities
            of those pairs.  Cost O(P S).
        block : optional ``(rows, cols)``, int arrays of shapes (R,) and (C,): return the (R, C)
            block.  Cost O(R C S).
        max_dense : the whole (N, N) matrix is returned only for N <= max_dense (memory
            8 N^2 bytes); beyond, pass ``pairs`` or ``block``.
        """
        lab = self._lab
        if pairs is not None and block is not None:
            raise ValueError("pass at most one of pairs and block")
        if pairs is not None:
            ii, jj = (np.asarray(p, dtype=np.int64).ravel() for p in pairs)
            if ii.shape != jj.shape:
                raise ValueError("pairs must be two index arrays of the same length")
            self._check_idx(ii)
            self._check_idx(jj)
            out = np.empty(ii.shape[0])
            _k.psm_pairs(lab, ii, jj, out)
            return out
        if block is not None:
            rows, cols = (np.asarray(b, dtype=np.int64).ravel() for b in block)
        else:
            if self.n_items > max_dense:
                raise ValueError(
                    f"the dense PSM of N={self.n_items} items would take "
                    f"{8 * self.n_items**2 / 2**30:.1f} GiB; pass pairs=(i, j) or "
                    "block=(rows, cols), or raise max_dense")
            rows = cols = np.arange(self.n_items)
        self._check_idx(rows)
        self._check_idx(cols)
        out = np.empty((rows.shape[0], cols.shape[0]))
        _k.psm_block(lab, rows, cols, out)
        return out

    def _check_idx(self, idx):
        if idx.size and (idx.min() < 0 or idx.max() >= self.n_items):
            raise ValueError(f"item indices must be in [0, {self.n_items}); got "
                             f"[{idx.min()}, {idx.max()}]")

    # -- losses --------------------------------------------------------------------------
    def loss_to_draws(self, partition, loss="vi", a=1.0):
        """(S,) loss of ``partition`` (N,) against each draw (see :mod:`.losses`)."""
        z, K = self._partition(partition)
        return loss_to_draws_prepared(z, K, self._lab, int(self._k.max()), loss, a)

    def expected_loss(self, partition, loss="vi", a=1.0):
        """Posterior expected loss of ``partition`` (N,): ``"vi"`` (bits), ``"binder"``, ``"nvi"``
        or ``"omari"``; ``a`` the cost parameter of VI and Binder (b = 2 - a).  O(N S), no PSM."""
        return float(self.loss_to_draws(partition, loss, a).mean())

    # -- point estimate ------------------------------------------------------------------
    def point_estimate(self, loss="vi", a=1.0, max_n_clusters=None, n_runs=16, max_sweeps=None,
                       max_zealous=10, prob_sequential_allocation=0.5, max_draws=None,
                       n_jobs=None, random_state=None, progress=False):
        """The partition minimising the posterior expected ``loss``, by SALSO search.

        See :func:`consensuskit.posterior.search.salso_search` for the algorithm and every
        parameter (``max_sweeps`` is its ``max_scans``; ``max_n_clusters`` defaults to the
        most clusters of any draw).  ``max_draws``: the search scores its moves on at most
        this many draws, evenly spaced over the S (``None``: all).  Its cost grows faster
        than S (its tables hold S x clusters x clusters counts), while neighbouring draws
        of a Markov chain add little to the expected loss; the returned
        ``SearchInfo.expected_loss`` is then over all S draws, ``run_losses`` over the
        ``n_draws`` searched.  Returns ``(labels (N,), SearchInfo)``.
        """
        lab, k = self._lab, self._k
        if max_draws is not None:
            max_draws = _check_int(max_draws, "max_draws", 1)
            if max_draws < self.n_draws:
                keep = np.unique(np.linspace(0, self.n_draws - 1, max_draws).round()
                                 .astype(np.int64))
                lab, k = np.ascontiguousarray(lab[:, keep]), k[keep]
        if max_n_clusters is None:
            max_n_clusters = int(self._k.max())
        labels, info = salso_search(
            lab, k, loss=loss, a=a, max_n_clusters=max_n_clusters, n_runs=n_runs,
            max_scans=max_sweeps, max_zealous=max_zealous,
            prob_sequential_allocation=prob_sequential_allocation, n_jobs=n_jobs,
            random_state=random_state, progress=progress)
        if info.n_draws < self.n_draws:
            info.expected_loss = self.expected_loss(labels, loss=info.loss, a=info.a)
        return labels, info

    # -- credible ball -------------------------------------------------------------------
    def credible_ball(self, estimate, level=0.95, loss="vi"):
        """Credible ball around ``estimate`` (N,) at credibility ``level`` under the ``"vi"``
        or ``"binder"`` distance (a = 1), with its horizontal and vertical bounds, as
        defined in :mod:`.credible_ball` (Wade & Ghahramani 2018)."""
        name, _, _ = check_loss(loss)
        if name not in ("vi", "binder"):
            raise ValueError(f"credible balls use loss 'vi' or 'binder'; got {loss!r}")
        d = self.loss_to_draws(estimate, name)
        return credible_ball_from_distances(np.asarray(estimate), d, self._k, self.draw,
                                            level=level, loss=name)

    # -- uncertainty ---------------------------------------------------------------------
    def item_confidence(self, estimate):
        """(N,) per-item confidence in ``estimate`` (N,).

        Definition (salso's ``meanPS``, the "psm within cluster" of mcclust/salso summaries):
        for item ``i`` in estimate cluster ``C``, the mean posterior similarity of ``i`` to the
        members of ``C``, itself included: ``(1/|C|) sum_{j in C} psm_ij``.  A singleton scores
        1.  Computed from the contingency tables, O(N S), without the PSM.
        """
        z, K = self._partition(estimate)
        _, _, _, mates = _sums(z, K, self._lab, int(self._k.max()), _k.BINDER)
        sizes = np.bincount(z, minlength=K)
        return mates / (self.n_draws * sizes[z])

    def n_clusters_distribution(self):
        """``(values, probabilities)``: the posterior of the number of clusters (from draws)."""
        vals, counts = np.unique(self._k, return_counts=True)
        return vals, counts / self.n_draws

    # -- plots ---------------------------------------------------------------------------
    def plot_psm(self, estimate, ax=None, cmap="Greys", max_dense=MAX_DENSE):
        """Heat map of the PSM, items ordered by ``estimate`` (N,) cluster (larger clusters
        first; within a cluster by decreasing item confidence), with the cluster boundaries
        drawn.  Returns the Axes."""
        from .plots import plot_psm
        return plot_psm(self, estimate, ax=ax, cmap=cmap, max_dense=max_dense)

    def plot_credible_ball(self, ball, X=None, axes=None):
        """The estimate and the credible ball's bounds side by side: as scatter plots of ``X``
        (N, 2) coloured by cluster if given, else as co-clustering matrices ordered by the
        estimate.  Returns the Figure."""
        from .plots import plot_credible_ball
        return plot_credible_ball(self, ball, X=X, axes=axes)

    def plot_n_clusters(self, ax=None):
        """Bar chart of the posterior of the number of clusters.  Returns the Axes."""
        from .plots import plot_n_clusters
        return plot_n_clusters(self, ax=ax)
