"""Credible balls around a point estimate of a partition (Wade & Ghahramani 2018).

Wade & Ghahramani ("Bayesian cluster analysis: point estimation and credible balls", Bayesian
Analysis 13(2), 2018, section 3.2) define, for a point estimate ``c*``, a distance ``d`` (VI or
Binder) and a level ``1 - alpha``:

* the credible ball ``B = {c : d(c*, c) <= eps*}``, with radius ``eps*`` the smallest ``eps``
  such that the posterior probability of ``{c : d(c*, c) <= eps}`` is at least ``1 - alpha``;
  estimated with the draws, ``eps*`` is the ``ceil((1 - alpha) S)``-th smallest distance;
* the *horizontal bound*: the partitions in the ball at the largest distance from ``c*``;
* the *upper vertical bound*: among the partitions in the ball with the fewest clusters, those
  farthest from ``c*``; the *lower vertical bound*: among those with the most clusters, those
  farthest from ``c*``.

Ties, as mcclust.ext's ``credibleball`` treats them: every draw achieving the extreme is
returned (duplicated partitions appear once here, with the indices of all draws that equal
them).  One difference: mcclust.ext keeps exactly the first ``ceil((1 - alpha) S)`` draws of
the sorted distances, so when draws tie at the radius some of them are left out of its ball;
here every draw within the radius is in the ball, as the definition says.  Distances are
compared with a relative tolerance of 1e-10 (two draws equal as partitions always tie).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["CredibleBall", "credible_ball_from_distances"]

_RTOL = 1e-10


@dataclass
class CredibleBall:
    """A credible ball around ``estimate``.

    Attributes
    ----------
    estimate : (N,) the centre.
    loss : ``"vi"`` or ``"binder"``; level : the credibility ``1 - alpha``.
    radius : float, ``eps*``.
    distances : (S,) distance of each draw from the estimate.
    in_ball : (S,) bool, draws within the radius.
    horizontal, upper_vertical, lower_vertical : lists of (N,) partitions (distinct), the bounds.
    horizontal_draws, upper_vertical_draws, lower_vertical_draws : int arrays, the indices of the
        draws that are those partitions.
    dist_horizontal, dist_upper_vertical, dist_lower_vertical : their distances from the estimate.
    n_clusters_upper_vertical, n_clusters_lower_vertical : their numbers of clusters.
    """

    estimate: np.ndarray
    loss: str
    level: float
    radius: float
    distances: np.ndarray = field(repr=False)
    in_ball: np.ndarray = field(repr=False)
    horizontal: list = field(repr=False)
    upper_vertical: list = field(repr=False)
    lower_vertical: list = field(repr=False)
    horizontal_draws: np.ndarray = field(repr=False)
    upper_vertical_draws: np.ndarray = field(repr=False)
    lower_vertical_draws: np.ndarray = field(repr=False)
    dist_horizontal: float = 0.0
    dist_upper_vertical: float = 0.0
    dist_lower_vertical: float = 0.0
    n_clusters_upper_vertical: int = 0
    n_clusters_lower_vertical: int = 0


def _close(x, y):
    return np.abs(x - y) <= _RTOL * (1.0 + np.abs(y))


def _distinct(draw_rows, idx):
    """Distinct partitions (as canonical 0..k-1 label vectors, in draw order) of draws ``idx``."""
    out, seen = [], set()
    for s in idx:
        row = np.asarray(draw_rows(int(s)))
        _, first = np.unique(row, return_index=True)
        rank = np.argsort(np.argsort(first))
        canon = rank[np.unique(row, return_inverse=True)[1].ravel()].astype(np.int64)
        key = canon.tobytes()
        if key not in seen:
            seen.add(key)
            out.append(canon)
    return out


def credible_ball_from_distances(estimate, distances, n_clusters, draw_rows, level=0.95,
                                 loss="vi"):
    """Build the :class:`CredibleBall` from the draws' distances to ``estimate``.

    Parameters
    ----------
    estimate : (N,) the centre; distances : (S,) its distance to each draw.
    n_clusters : (S,) number of clusters of each draw.
    draw_rows : callable ``s -> (N,) labels of draw s`` (the draws are not copied).
    level : credibility in (0, 1].
    """
    d = np.asarray(distances, dtype=np.float64)
    S = d.shape[0]
    level = float(level)
    if not 0.0 < level <= 1.0:
        raise ValueError(f"level must be in (0, 1]; got {level}")
    m = int(np.ceil(level * S - 1e-9))
    m = min(max(m, 1), S)
    radius = float(np.sort(d)[m - 1])
    inside = (d <= radius) | _close(d, radius)
    idx = np.flatnonzero(inside)
    dh = float(d[idx].max())
    horiz = idx[_close(d[idx], dh)]
    kk = np.asarray(n_clusters)[idx]
    lo, hi = idx[kk == kk.min()], idx[kk == kk.max()]
    du, dl = float(d[lo].max()), float(d[hi].max())
    upper = lo[_close(d[lo], du)]
    lower = hi[_close(d[hi], dl)]
    return CredibleBall(
        estimate=np.asarray(estimate), loss=loss, level=level, radius=radius, distances=d,
        in_ball=inside, horizontal=_distinct(draw_rows, horiz),
        upper_vertical=_distinct(draw_rows, upper), lower_vertical=_distinct(draw_rows, lower),
        horizontal_draws=horiz, upper_vertical_draws=upper, lower_vertical_draws=lower,
        dist_horizontal=dh, dist_upper_vertical=du, dist_lower_vertical=dl,
        n_clusters_upper_vertical=int(kk.min()), n_clusters_lower_vertical=int(kk.max()),
    )
