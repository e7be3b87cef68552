"""The mode of a spec's posterior density in the unconstrained space, from several starts.

This is where :class:`~consensuskit.inference.pyro_consensus.PyroConsensus` starts its
default variational fit.  The objective is Pyro's *potential*, the function NUTS samples
(``pyro.infer.mcmc.util.initialize_model``): ``-log p(latents, data)`` of every continuous
latent site (global and row-local), with the enumerated sites summed out exactly, written
in the unconstrained coordinates with the log-Jacobian of each transform (so a Dirichlet
site's mode stays inside the simplex, unlike the constrained-space MAP, which runs to a
corner when a concentration is below 1).

Why this start: the potential is a deterministic function, so starts are compared
exactly.  The first session compared SVI restarts by their (noisy) loss after a short run,
which picked a start with a collapsed cluster; here ``n_init`` prior draws each get
``init_iter`` L-BFGS iterations, the one with the lowest potential is continued to
convergence, and the variational guide is centred there.  A mean-field Gaussian in the
unconstrained space fitted by the ELBO sits close to that mode when the posterior is
unimodal around it, so the SVI that follows only has to fit scales and small shifts.

Works for any spec that NUTS can run (continuous latents, discrete ones enumerated);
``pyro.param`` sites keep their current values here (SVI fits them afterwards).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pyro
import torch
from pyro.infer.autoguide import init_to_sample

__all__ = ["PosteriorMode", "posterior_mode"]


@dataclass
class PosteriorMode:
    """Result of :func:`posterior_mode`.

    values : dict site -> Tensor, the mode in the constrained space (the sites' supports)
    potential : float, ``-log p(latents, data)`` (unconstrained, with Jacobians) there
    start_potentials : ndarray (n_init,), each start's potential after ``init_iter``
        iterations (the lowest was continued)
    n_iter : int, L-BFGS iterations of the continued start (after its ``init_iter``)
    converged : bool, the potential changed by less than ``tol`` (relative) over the last
        block of iterations
    """

    values: dict
    potential: float
    start_potentials: np.ndarray
    n_iter: int
    converged: bool
    unconstrained: dict = field(default_factory=dict, repr=False)


def _lbfgs(potential_fn, params, n_iter):
    """``n_iter`` L-BFGS iterations (strong Wolfe) on ``potential_fn`` from ``params``;
    returns (params, potential).  A start whose potential is not finite keeps inf."""
    ps = {k: v.detach().clone().requires_grad_(True) for k, v in params.items()}
    opt = torch.optim.LBFGS(list(ps.values()), max_iter=int(n_iter),
                            line_search_fn="strong_wolfe", tolerance_grad=1e-9,
                            tolerance_change=1e-12, history_size=20)

    def closure():
        opt.zero_grad()
        U = potential_fn(ps)
        U.backward()
        return U

    try:
        opt.step(closure)
    except (RuntimeError, ValueError):  # a start outside the support's numerics
        return params, math.inf
    with torch.no_grad():
        U = float(potential_fn(ps))
    out = {k: v.detach() for k, v in ps.items()}
    return out, (U if math.isfinite(U) else math.inf)


def posterior_mode(model, labels, *, model_kwargs, max_plate_nesting, n_init=8,
                   init_iter=20, max_iter=500, block=25, tol=1e-7, seed=0) -> PosteriorMode:
    """Mode of ``model``'s posterior in the unconstrained space (see the module docstring).

    Parameters
    ----------
    model : callable following the spec convention
    labels : LongTensor (N, M)
    model_kwargs : dict (``n_labels``, ``n_clusters``, hyper-parameters)
    max_plate_nesting : int
    n_init : int
        Starts, each a draw from the prior (``init_to_sample``).
    init_iter : int
        L-BFGS iterations per start before they are compared.
    max_iter : int
        Further iterations of the best start at most, in blocks of ``block``; it stops
        when a block changes the potential by less than ``tol`` relative.
    seed : int

    Returns
    -------
    PosteriorMode

    Raises
    ------
    FloatingPointError
        When no start has a finite potential.
    """
    from pyro.infer.mcmc.util import initialize_model

    with torch.random.fork_rng():
        pyro.set_rng_seed(int(seed))
        init, potential_fn, transforms, _ = initialize_model(
            model, (labels,), dict(model_kwargs), max_plate_nesting=max_plate_nesting,
            num_chains=int(n_init), init_strategy=init_to_sample)
        if int(n_init) == 1:
            init = {k: v[None] for k, v in init.items()}
        starts = [_lbfgs(potential_fn, {k: v[c] for k, v in init.items()}, init_iter)
                  for c in range(int(n_init))]
    U0 = np.array([u for _, u in starts])
    if not np.isfinite(U0).any():
        raise FloatingPointError("the potential (-log joint) is not finite at any start of "
                                 "the posterior-mode search: check the spec's supports")
    params, U = starts[int(np.argmin(U0))]
    it, converged = 0, False
    while it < max_iter:
        params, U_new = _lbfgs(potential_fn, params, block)
        it += block
        converged = abs(U - U_new) <= tol * max(1.0, abs(U_new))
        U = U_new
        if converged:
            break
    with torch.no_grad():
        values = {k: transforms[k].inv(v) for k, v in params.items()}
    return PosteriorMode(values, float(U), U0, it, bool(converged), params)
