"""Warm-up of :mod:`consensuskit.posterior`'s numba kernels (for ``consensuskit warmup``).

:func:`warm_up` runs every kernel once on tiny draws so that numba's on-disk cache holds them
for the common signatures (uint16 draws and uint16 counts, i.e. fewer than 65,535 items and
labels); draws of 65,535 items or more compile their int32/uint32 variants on first use.
Meant to become one step of :data:`consensuskit.warmup.STEPS`, covering the module
``consensuskit.posterior._kernels``.
"""

from __future__ import annotations

import numpy as np

__all__ = ["warm_up"]


def warm_up():
    """Compile the posterior kernels: every loss's search, expected losses, PSM, confidence."""
    from .posterior import PartitionPosterior

    rng = np.random.default_rng(0)
    draws = rng.integers(0, 3, size=(6, 12))
    pp = PartitionPosterior(draws)
    for loss in ("vi", "binder", "nvi", "omari"):
        est, _ = pp.point_estimate(loss=loss, n_runs=2, n_jobs=1, random_state=0)
        pp.expected_loss(est, loss)
    pp.credible_ball(est, level=0.9)
    pp.item_confidence(est)
    pp.psm()
    pp.psm(pairs=([0, 1], [2, 3]))
