"""``PartitionConsensus``: the expected-loss-optimal partition of an ensemble as a consensus.

The M base clusterings of an ensemble are treated as M equally weighted draws of a partition;
the consensus is the partition minimising their mean VI or Binder loss (a "median partition",
found by the SALSO search of :mod:`.search`).  With ``loss="binder"`` and ``a = 1`` this is
the partition minimising the number of pairwise disagreements with the base clusterings (the
median partition of Mirkin's distance); with ``loss="vi"``, the VI median.
"""

from __future__ import annotations

import numpy as np
from sklearn.utils import check_random_state

from consensuskit.base import ConsensusEstimator
from consensuskit.data.ensemble import Ensemble

from .posterior import PartitionPosterior

__all__ = ["PartitionConsensus"]


class PartitionConsensus(ConsensusEstimator):
    """Consensus of base clusterings as the VI- or Binder-optimal partition.

    Parameters
    ----------
    loss : {"vi", "binder", "nvi", "omari"}, default "vi"
    a : float, cost parameter of VI and Binder in [0, 2] (b = 2 - a).
    max_n_clusters : int or None, bound on the consensus' number of clusters (default: the
        most classes of a base clustering).
    n_runs, max_sweeps, n_jobs : search settings (see ``PartitionPosterior.point_estimate``).
    missing : {"error", "singletons"}, default "error"
        What a missing label (-1) in a base clustering means.  ``"error"`` raises a ValueError
        naming the columns with missing labels.  ``"singletons"`` gives each missing entry its
        own one-item class in that base clustering: the column then says nothing joins that row
        to any other, which pulls the consensus towards separating rows that many columns miss.
        Nothing is dropped silently.
    random_state : int, None, numpy RandomState or Generator.

    Attributes
    ----------
    labels_ : (N,) consensus labels 0..K-1.
    n_clusters_ : int.
    expected_loss_ : float, mean loss of ``labels_`` against the base clusterings.
    search_info_ : :class:`~consensuskit.posterior.SearchInfo`.
    posterior_ : :class:`~consensuskit.posterior.PartitionPosterior` over the base clusterings.
    """

    def __init__(self, loss="vi", *, a=1.0, max_n_clusters=None, n_runs=16, max_sweeps=None,
                 missing="error", n_jobs=None, random_state=None):
        self.loss = loss
        self.a = a
        self.max_n_clusters = max_n_clusters
        self.n_runs = n_runs
        self.max_sweeps = max_sweeps
        self.missing = missing
        self.n_jobs = n_jobs
        self.random_state = random_state

    def __sklearn_tags__(self):
        # missing labels (NaN or -1) are accepted only with missing="singletons"
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = self.missing != "error"
        return tags

    def _draws(self, ensemble: Ensemble) -> np.ndarray:
        codes = np.asarray(ensemble.codes)
        if self.missing not in ("error", "singletons"):
            raise ValueError(f"missing must be 'error' or 'singletons'; got {self.missing!r}")
        miss = codes < 0
        if miss.any():
            if self.missing == "error":
                cols = np.flatnonzero(miss.any(axis=0)).tolist()
                raise ValueError(
                    f"PartitionConsensus: base clusterings {cols[:10]}"
                    f"{'...' if len(cols) > 10 else ''} have missing labels (-1); pass "
                    "missing='singletons' to count each missing entry as its own class")
            codes = codes.copy()
            for j in np.flatnonzero(miss.any(axis=0)):
                rows = np.flatnonzero(miss[:, j])
                codes[rows, j] = int(ensemble.n_labels[j]) + np.arange(rows.size)
        return codes.T

    def _fit(self, ensemble: Ensemble):
        rs = self.random_state
        if not isinstance(rs, np.random.Generator):
            rs = check_random_state(rs)  # sklearn's seeds: int in [0, 2**32), None, RandomState
        pp = PartitionPosterior(self._draws(ensemble))
        labels, info = pp.point_estimate(loss=self.loss, a=self.a,
                                         max_n_clusters=self.max_n_clusters, n_runs=self.n_runs,
                                         max_sweeps=self.max_sweeps, n_jobs=self.n_jobs,
                                         random_state=rs)
        self.posterior_ = pp
        self.search_info_ = info
        self.labels_ = labels
        self.n_clusters_ = int(labels.max()) + 1
        self.expected_loss_ = info.expected_loss
        return self
