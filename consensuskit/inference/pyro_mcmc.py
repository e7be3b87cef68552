"""NUTS for any spec (Pyro's MCMC), with the discrete per-row sites enumerated out.

The gold-standard posterior for small data.  The continuous sites (global and per-row)
are sampled by NUTS; sites marked ``infer={"enumerate": "parallel"}`` are summed out of
the potential, and their posterior is recovered afterwards by exact enumeration (see
:mod:`consensuskit.inference.pointwise`).  Chains run one after another in this process
(the machine's cores are not assumed free); each has its own seed.

Acceptance.  Pyro's ``MCMC.diagnostics()["acceptance rate"]`` is the share of iterations
after warm-up whose trajectory moved the chain (``_accept_cnt``), which for NUTS is close to
1 whatever the step size; it is not the statistic the step-size adaptation targets.  Until
round 3 ``info["accept_prob"]`` reported it (the 1.0 / 0.995 of issue 25).
:class:`RecordingNUTS` records the adaptation's statistic (the mean Metropolis acceptance
probability over each trajectory); with ``target_accept_prob=0.8`` its post-warm-up means
are about 0.86-0.91 (MM and BCE on 60 wine rows, ``experiments/nuts_inference_data.py``):
above the target because the step size kept after warm-up is dual averaging's averaged
iterate, smaller than its last one (as in Stan), not a failed adaptation.
"""

from __future__ import annotations

import time

import numpy as np
import pyro
import torch
from pyro.infer import MCMC, NUTS

__all__ = ["fit_nuts", "RecordingNUTS", "SAMPLE_STATS", "collect_chains"]

#: the per-iteration statistics :class:`RecordingNUTS` records (ArviZ's names)
SAMPLE_STATS = ("diverging", "tree_depth", "n_steps", "step_size", "energy",
                "acceptance_rate", "lp")


class RecordingNUTS(NUTS):
    """Pyro's NUTS that also records, for every iteration, the statistics ArviZ's
    ``sample_stats`` group holds (Pyro keeps only running means and divergence indices).

    Per iteration (``records``, a list of dicts, warm-up included, ``warmup`` flag):
    ``diverging`` (any leapfrog step of the trajectory diverged), ``tree_depth`` (number of
    trajectory doublings), ``n_steps`` (leapfrog steps), ``step_size`` (the step size used),
    ``energy`` (the Hamiltonian at the start of the trajectory, after the momentum refresh:
    what ``az.plot_energy``/BFMI read), ``acceptance_rate`` (mean Metropolis acceptance
    probability over the trajectory's proposals: the statistic the step-size adaptation
    drives to ``target_accept_prob``) and ``lp`` (minus the potential energy at the kept
    point: the log joint density up to a constant, on the unconstrained scale).

    Recording wraps ``_build_tree`` / ``_build_basetree`` and ``sample``; the trajectory
    itself is Pyro's, unchanged.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.records = []
        self._trajectory = None

    def _build_basetree(self, z, r, z_grads, log_slice, direction, energy_current):
        tree = super()._build_basetree(z, r, z_grads, log_slice, direction, energy_current)
        t = self._trajectory
        if t is not None:
            t["energy"] = float(energy_current)
            t["n_steps"] += 1
            t["accept_sum"] += float(tree.sum_accept_probs)
            t["diverging"] = t["diverging"] or bool(tree.diverging)
        return tree

    def _build_tree(self, z, r, z_grads, log_slice, direction, tree_depth, energy_current):
        if self._trajectory is not None:
            self._trajectory["depth"] = max(self._trajectory["depth"], int(tree_depth) + 1)
        return super()._build_tree(z, r, z_grads, log_slice, direction, tree_depth,
                                   energy_current)

    def sample(self, params):
        warmup = self._t < self._warmup_steps
        step_size = float(self.step_size)
        self._trajectory = {"energy": float("nan"), "n_steps": 0, "accept_sum": 0.0,
                            "diverging": False, "depth": 0}
        try:
            out = super().sample(params)
        finally:
            t, self._trajectory = self._trajectory, None
        cached = self._fetch_from_cache()
        lp = float("nan") if cached[1] is None else -float(cached[1])
        self.records.append({
            "warmup": warmup, "diverging": t["diverging"], "tree_depth": t["depth"],
            "n_steps": t["n_steps"], "step_size": step_size, "energy": t["energy"],
            "acceptance_rate": t["accept_sum"] / max(t["n_steps"], 1), "lp": lp})
        return out


def _stats_arrays(records, warmup):
    """Records of one chain -> dict stat -> array (iterations,) of the kept phase."""
    rows = [r for r in records if r["warmup"] == warmup]
    return {k: np.asarray([r[k] for r in rows]) for k in SAMPLE_STATS}


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
        ``seconds`` (CPU), ``divergences`` per chain, ``accept_prob`` per chain (mean of the
        recorded per-iteration acceptance statistic after warm-up), ``sample_stats`` and
        ``warmup_stats``: stat -> array (num_chains, iterations) of
        :data:`SAMPLE_STATS` after / during warm-up (:class:`RecordingNUTS`).
    """
    rs = np.random.default_rng(seed)
    chains = []
    t0 = time.process_time()
    for _ in range(num_chains):
        pyro.set_rng_seed(int(rs.integers(2**31 - 1)))
        kernel = RecordingNUTS(model, max_plate_nesting=max_plate_nesting, jit_compile=jit,
                               ignore_jit_warnings=True, target_accept_prob=target_accept_prob,
                               max_tree_depth=max_tree_depth, full_mass=full_mass)
        mcmc = MCMC(kernel, num_samples=num_samples, warmup_steps=warmup_steps,
                    num_chains=1, disable_progbar=not progress)
        mcmc.run(labels, **model_kwargs)
        chains.append((mcmc, kernel))
    samples, info = collect_chains(chains)
    info.update(seconds=time.process_time() - t0, target_accept_prob=target_accept_prob)
    return samples, info


def collect_chains(chains, transform=None):
    """Draws and statistics of finished single-chain runs ``[(MCMC, RecordingNUTS)]``:
    ``(samples, info)`` with samples site -> Tensor (chains, draws, ...) and ``info`` keys
    ``divergences``, ``accept_prob`` (per chain), ``sample_stats``, ``warmup_stats``
    (stat -> array (chains, iterations)).  ``transform``: applied to each chain's
    ``get_samples()`` dict (e.g. packed draws -> the model's sites)."""
    per_chain, div, acc, stats, warm = [], [], [], [], []
    for mcmc, kernel in chains:
        draws = mcmc.get_samples()
        per_chain.append(draws if transform is None else transform(draws))
        diag = mcmc.diagnostics()
        div.append(sum(len(v) for v in diag.get("divergences", {}).values()))
        stats.append(_stats_arrays(kernel.records, warmup=False))
        warm.append(_stats_arrays(kernel.records, warmup=True))
        acc.append(float(np.mean(stats[-1]["acceptance_rate"])))
    samples = {k: torch.stack([s[k] for s in per_chain]) for k in per_chain[0]}
    return samples, {"divergences": div, "accept_prob": acc,
                     "sample_stats": {k: np.stack([s[k] for s in stats]) for k in SAMPLE_STATS},
                     "warmup_stats": {k: np.stack([s[k] for s in warm]) for k in SAMPLE_STATS}}
