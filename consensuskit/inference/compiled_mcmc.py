"""NUTS on a spec's compiled potential (:mod:`consensuskit.inference.compiled_potential`).

Same sampler as :func:`consensuskit.inference.pyro_mcmc.fit_nuts` (Pyro's NUTS, its step
size and mass-matrix adaptation, chains one after another with their own seeds) and the same
output (constrained global sites, shape (chains, draws, ...)); only the potential and its
gradient come from a :class:`~consensuskit.inference.compiled_potential.FlatPotential`
built once instead of re-running the model under Pyro's handlers at every leapfrog step.
NUTS sees the sites packed into one vector (:meth:`FlatPotential.vector_potential_fn`): Pyro's
per-step work loops over sites in Python, and a user's variant has dozens of them.  The
vector lists the sites in the order Pyro's mass matrix lays them out (sorted by name), so
the adaptation and the momenta are Pyro's, and the draws are those of Pyro's NUTS with one
site per model site, number for number (``tests/test_compiled_potential.py``).
"""

from __future__ import annotations

import time

import numpy as np
import pyro
import torch
from pyro.infer import MCMC

from consensuskit.inference.compiled_potential import VECTOR_SITE, FlatPotential, build_potential
from consensuskit.inference.pyro_mcmc import RecordingNUTS, collect_chains

__all__ = ["fit_nuts_compiled"]


def fit_nuts_compiled(model, labels, *, model_kwargs, num_samples=500, warmup_steps=500,
                      num_chains=2, max_plate_nesting=2, target_accept_prob=0.8,
                      max_tree_depth=8, full_mass=False, seed=None, progress=False,
                      method="auto", compile=False, potential: FlatPotential | None = None,
                      init="potential"):
    """Run ``num_chains`` NUTS chains on the compiled potential of ``model(labels, ...)``.

    Parameters
    ----------
    method, compile : passed to :func:`build_potential` ("auto": the hand-written potential
        of a built-in spec, else Pyro's potential traced once).
    potential : FlatPotential, optional
        Use this one (e.g. a user's registered potential) instead of building it.
    init : {"potential", "uniform"}
        Each chain's start: the potential's own ``init`` (a prior draw; the hand-written
        MM potential's Dirichlet draws), or "uniform": every unconstrained coordinate
        uniform in (-2, 2), Pyro's NUTS default (``init_to_uniform``), which keeps a
        variant's chains away from the prior's tails at the start of warm-up.
    Others as in :func:`consensuskit.inference.pyro_mcmc.fit_nuts`.

    Returns
    -------
    samples : dict site -> Tensor (num_chains, num_samples, ...), constrained values
    info : dict
        ``seconds`` (CPU, building the potential included), ``build_seconds``,
        ``divergences`` and ``accept_prob`` per chain, ``potential`` (its method), and, as
        :func:`~consensuskit.inference.pyro_mcmc.fit_nuts`, ``sample_stats`` and
        ``warmup_stats`` (:class:`~consensuskit.inference.pyro_mcmc.RecordingNUTS`).
    """
    if init not in ("potential", "uniform"):
        raise ValueError(f"init must be 'potential' or 'uniform'; got {init!r}")
    rs = np.random.default_rng(seed)
    t0 = time.process_time()
    if potential is None:
        potential = build_potential(model, labels, model_kwargs,
                                    max_plate_nesting=max_plate_nesting, method=method,
                                    compile=compile, progress=progress)
    build = time.process_time() - t0
    chains = []
    for _ in range(num_chains):
        chain_seed = int(rs.integers(2**31 - 1))
        pyro.set_rng_seed(chain_seed)
        if init == "uniform":
            g = torch.Generator().manual_seed(chain_seed)
            start = torch.rand(potential.packed_size, generator=g,
                               dtype=potential.packed_dtype) * 4.0 - 2.0
        else:
            start = potential.pack(potential.init(np.random.default_rng(chain_seed)))
        kernel = RecordingNUTS(potential_fn=potential.vector_potential_fn,
                               target_accept_prob=target_accept_prob,
                               max_tree_depth=max_tree_depth, full_mass=full_mass)
        mcmc = MCMC(kernel, num_samples=num_samples, warmup_steps=warmup_steps,
                    num_chains=1, initial_params={VECTOR_SITE: start}, transforms={},
                    disable_progbar=not progress)
        mcmc.run()
        chains.append((mcmc, kernel))
    samples, info = collect_chains(
        chains, transform=lambda draws: potential.constrain(draws[VECTOR_SITE]))
    info.update(seconds=time.process_time() - t0, build_seconds=build,
                potential=potential.method, target_accept_prob=target_accept_prob)
    return samples, info
