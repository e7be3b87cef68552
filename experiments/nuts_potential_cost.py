"""CPU of PyroConsensus(inference="nuts") on specs without a hand-written potential: the
traced potential (the default, ``nuts_potential="auto"``) beside Pyro's potential under its
handlers (``nuts_potential="pyro"``, the path before session 17), same data, same seed,
one process, one thread.

Specs: two users' variants of ``experiments/user_variants.py`` (MM with a hierarchical
label prior, BCE with a hyper-prior on alpha) and BCE's collapsed spec, on the small wine
ensemble of ``experiments/loo_vs_bruteforce.py`` (``--rows`` rows, 4 base clusterings,
K = 3), 2 chains x (``--draws`` warm-up + ``--draws`` draws).  Per fit: CPU seconds of the
whole fit (the traced potential's build included, and reported apart), leapfrog steps,
CPU per step outside the build, the chains' mean log density (the same target on both
paths: the traced potential is Pyro's, recorded) and the CPU ratio.

Usage: OMP_NUM_THREADS=1 python experiments/nuts_potential_cost.py [--rows 24] [--draws 120]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
import loo_vs_bruteforce as lbf  # noqa: E402
import user_variants  # noqa: E402

import consensuskit as ck  # noqa: E402
from consensuskit.models.bce import spec as bce  # noqa: E402


def specs():
    return {"MM-hierarchical": user_variants.mm_hierarchical,
            "BCE-alpha-hyperprior": user_variants.bce_alpha_hyperprior_collapsed,
            "BCE collapsed spec": bce.model_collapsed}


def fit(model, ens, potential, draws, seed):
    est = ck.PyroConsensus(model, n_clusters=3, inference="nuts", num_samples=draws,
                           warmup_steps=draws, num_chains=2, random_state=seed,
                           nuts_potential=potential)
    c = time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        est.fit(ens)
    cpu = time.process_time() - c
    info = est.mcmc_info_
    steps = int(info["sample_stats"]["n_steps"].sum() + info["warmup_stats"]["n_steps"].sum())
    build = float(info.get("build_seconds", 0.0))
    return dict(potential=est.potential_, cpu=cpu, build=build, steps=steps,
                per_step=1e3 * (cpu - build) / steps,
                lp=float(np.mean(info["sample_stats"]["lp"])))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=24)
    ap.add_argument("--draws", type=int, default=120)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    ens = lbf.small_ensemble("wine", args.rows, n_partitions=4, n_clusters=3, seed=0)
    print(f"wine, {args.rows} rows, M=4, K=3; 2 x ({args.draws} + {args.draws}); CPU s, one "
          "thread")
    print(f"{'spec':22s} {'path':11s} {'cpu s':>7s} {'build':>6s} {'steps':>6s} "
          f"{'ms/step':>7s} {'mean lp':>9s}")
    for name, model in specs().items():
        rows = {}
        for potential in ("pyro", "auto"):
            rows[potential] = r = fit(model, ens, potential, args.draws, args.seed)
            print(f"{name:22s} {r['potential']:11s} {r['cpu']:7.1f} {r['build']:6.1f} "
                  f"{r['steps']:6d} {r['per_step']:7.2f} {r['lp']:9.2f}", flush=True)
        print(f"{'':22s} CPU ratio pyro / default: {rows['pyro']['cpu'] / rows['auto']['cpu']:.2f}"
              f" (per step {rows['pyro']['per_step'] / rows['auto']['per_step']:.2f})")


if __name__ == "__main__":
    main()
