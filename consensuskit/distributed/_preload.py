"""Imported once by the worker fork server: load the engines and compile their kernels.

Forked workers inherit the imported modules and numba's compiled E-step, so a
fit's workers start in well under a second instead of each importing torch
and numba and loading the kernels again.  Only the fork server imports this.
"""

import numpy as np
import torch

from consensuskit.data.ensemble import Ensemble
from consensuskit.distributed import _worker  # noqa: F401
from consensuskit.models.bce import cavi as _cavi


def _warm() -> None:
    ens = Ensemble.from_labels(np.array([[0, 1], [1, 0], [1, -1]]))
    data = ens.label_data()
    alpha = torch.ones(2, dtype=torch.float64)
    beta = torch.full((2, ens.n_total_labels), 0.5, dtype=torch.float64)
    gamma = _cavi.initial_gamma(alpha, data)
    for collect in (True, False):
        _cavi.e_step(alpha, beta, data, gamma, 1, collect=collect)


try:
    _warm()
except Exception:  # pragma: no cover - warming is an optimisation only
    pass
