"""MM's engines registered as fast paths of its spec (``tests/test_fast_paths.py``).

EM and the SVI of the hub: each estimator's fitted state read by ``MM.to_spec()``; EM's
reported objective (the log joint at the MAP) checked against the spec's.
"""

import torch

from consensuskit.inference.registry import FastPath
from consensuskit.models.mm import spec
from consensuskit.models.mm.estimator import MM

__all__ = ["FAST_PATHS", "objective"]


def objective(est):
    """``(engine value, spec value, spec SE)``: EM's reported log joint against the
    spec's :func:`~consensuskit.models.mm.spec.log_joint` at the fitted state (exact)."""
    kw, draws = est.to_spec()
    lj, _ = spec.log_joint(torch.as_tensor(est.ensemble_.codes), draws["pi"][0],
                           [draws[f"theta_{j}"][0] for j in range(len(est.theta_))], **kw)
    return float(est.lower_bound_), lj, 0.0


FAST_PATHS = [
    FastPath("mm", "em", spec, lambda **o: MM(n_clusters=3, random_state=0, **o),
             objective=objective),
    FastPath("mm", "svi", spec,
             lambda **o: MM(n_clusters=3, inference="svi", max_iter=60, random_state=0, **o),
             objective=objective),
]
