"""MAP by SVI on a spec's compiled loss (:mod:`consensuskit.inference.compiled_potential`).

With a point-mass guide on every latent site (MM's ``map_guide``, an ``AutoDelta``), Pyro's
``TraceEnum_ELBO`` loss is ``-log p(X, T(u))`` with the enumerated sites summed out, and its
Adam steps move the unconstrained ``u``.  Here that loss and its gradient come from a
:class:`~consensuskit.inference.compiled_potential.FlatPotential` built once, and Adam
(Pyro's defaults: betas (0.9, 0.999), eps 1e-8; the same per-element update as
``torch.optim.Adam``) runs on one flat vector, so a step costs the loss's arithmetic.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from consensuskit.inference.compiled_potential import FlatPotential, build_potential

__all__ = ["CompiledMAPFit", "fit_map_svi_compiled"]


@dataclass
class CompiledMAPFit:
    """Result of :func:`fit_map_svi_compiled`.

    params : dict site -> Tensor, constrained values at the last step
    losses : ndarray (num_steps,), the loss before each step
    seconds : CPU seconds (building the loss included); build_seconds
    """

    params: dict
    losses: np.ndarray
    seconds: float
    build_seconds: float


def fit_map_svi_compiled(model, labels, *, model_kwargs, num_steps=1000, learning_rate=0.05,
                         seed=None, max_plate_nesting=2, method="auto", compile=False,
                         init=None, potential: FlatPotential | None = None,
                         betas=(0.9, 0.999), eps=1e-8) -> CompiledMAPFit:
    """Full-batch MAP of ``model`` by Adam on its compiled loss.

    init : dict site -> constrained value, optional
        Starting point (default: a prior draw, ``potential.init``).
    Others: see :func:`consensuskit.inference.compiled_potential.build_potential`.
    """
    t0 = time.process_time()
    if potential is None:
        potential = build_potential(model, labels, model_kwargs,
                                    max_plate_nesting=max_plate_nesting, method=method,
                                    compile=compile)
    if potential.map_value_and_grad is None:
        raise ValueError("this potential has no MAP loss (map_value_and_grad)")
    build = time.process_time() - t0
    names, shapes = potential.names, potential.unconstrained_shapes
    if init is None:
        start = potential.init(np.random.default_rng(seed))
    else:
        start = {k: potential.transforms[k](torch.as_tensor(init[k])) for k in names}
    sizes = [int(np.prod(s)) for s in shapes]
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    dtype = potential.init(np.random.default_rng(0))[names[0]].dtype  # the model's precision
    u = torch.cat([torch.as_tensor(start[k]).reshape(-1).to(dtype) for k in names])
    m, v = torch.zeros_like(u), torch.zeros_like(u)
    b1, b2 = betas
    losses = np.empty(num_steps)
    fn = potential.map_value_and_grad
    for t in range(1, num_steps + 1):
        parts = [u[bounds[i]:bounds[i + 1]].view(s) for i, s in enumerate(shapes)]
        value, grads = fn(*parts)
        g = torch.cat([x.reshape(-1) for x in grads])
        losses[t - 1] = float(value)
        m.mul_(b1).add_(g, alpha=1 - b1)
        v.mul_(b2).addcmul_(g, g, value=1 - b2)
        denom = (v / (1 - b2 ** t)).sqrt_().add_(eps)
        u.addcdiv_(m, denom, value=-learning_rate / (1 - b1 ** t))
    params = {k: potential.transforms[k].inv(u[bounds[i]:bounds[i + 1]].view(s))
              for i, (k, s) in enumerate(zip(names, shapes))}
    return CompiledMAPFit(params, losses, time.process_time() - t0, build)
