"""NUTS for any spec (Pyro's MCMC), with the discrete per-row sites enumerated out.

The gold-standard posterior for small data.  The continuous sites (global and per-row)
are sampled by NUTS; sites marked ``infer={"enumerate": "parallel"}`` are summed out of
the potential, and their posterior is recovered afterwards by exact enumeration (see
:mod:`consensuskit.inference.pointwise`).  Chains run one after another in this process
(the machine's cores are not assumed free); each has its own seed.
"""

from __future__ import annotations

import time

import numpy as np
import pyro
import torch
from pyro.infer import MCMC, NUTS

__all__ = ["fit_nuts"]


def fit_nuts(model, labels, *, model_kwargs, num_samples=500, warmup_steps=500, num_chains=2,
             max_plate_nesting=2, jit=True, target_accept_prob=0.8, max_tree_depth=8,
             full_mass=False, seed=None, progress=False):
    """Run ``num_chains`` NUTS chains on ``model(labels, **model_kwargs)``.

    ``full_mass``: adapt a dense mass matrix in warm-up (Pyro's ``full_mass``) instead of a
    diagonal one.

    Returns
    -------
    samples : dict site -> Tensor (num_chains, num_samples, ...)
        Every latent continuous site (global and per-row).
    info : dict
        ``seconds`` (CPU), ``divergences`` per chain, ``accept_prob`` per chain.
    """
    rs = np.random.default_rng(seed)
    per_chain, div, acc = [], [], []
    t0 = time.process_time()
    for _ in range(num_chains):
        pyro.set_rng_seed(int(rs.integers(2**31 - 1)))
        kernel = NUTS(model, max_plate_nesting=max_plate_nesting, jit_compile=jit,
                      ignore_jit_warnings=True, target_accept_prob=target_accept_prob,
                      max_tree_depth=max_tree_depth, full_mass=full_mass)
        mcmc = MCMC(kernel, num_samples=num_samples, warmup_steps=warmup_steps,
                    num_chains=1, disable_progbar=not progress)
        mcmc.run(labels, **model_kwargs)
        per_chain.append(mcmc.get_samples())
        diag = mcmc.diagnostics()
        div.append(sum(len(v) for v in diag.get("divergences", {}).values()))
        acc.append(float(np.mean(list(diag.get("acceptance rate", {}).values()) or [np.nan])))
    samples = {k: torch.stack([s[k] for s in per_chain]) for k in per_chain[0]}
    return samples, {"seconds": time.process_time() - t0, "divergences": div,
                     "accept_prob": acc}
