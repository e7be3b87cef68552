"""The posterior over partitions: decision-theoretic summaries of clustering draws.

* :class:`PartitionPosterior` (draws: (S, N) labels, one draw per row): posterior similarity,
  expected Binder / VI / NVI / omARI loss, SALSO point estimate, credible balls (Wade &
  Ghahramani 2018), per-item confidence, the posterior of the number of clusters, plots.
* :class:`PartitionConsensus`: the same search as a consensus function on an ensemble.
* Loss functions: :func:`expected_loss`, :func:`loss_to_draws`, :func:`binder_loss`,
  :func:`vi_loss`, :func:`nvi_loss`, :func:`omari_loss`.
"""

from .consensus import PartitionConsensus
from .credible_ball import CredibleBall
from .losses import (
    binder_loss,
    expected_loss,
    loss_to_draws,
    nvi_loss,
    omari_loss,
    vi_loss,
)
from .posterior import PartitionPosterior
from .search import SearchInfo

__all__ = [
    "PartitionPosterior",
    "PartitionConsensus",
    "CredibleBall",
    "SearchInfo",
    "expected_loss",
    "loss_to_draws",
    "binder_loss",
    "vi_loss",
    "nvi_loss",
    "omari_loss",
]
