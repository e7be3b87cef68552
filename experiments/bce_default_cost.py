"""CPU of BCE's default estimate ("gibbs") against the paper's mean-field fit, side by side.

Rows simulated from BCE (by default K = 5, M = 10; ``--settings K,M ...`` for others;
k_j = 6, alpha_h = 0.3, beta rows from Dirichlet(0.5)); for each setting and N both
estimators fit the same rows in this process, one thread, ``--repeats`` times (different
seeds), the two fits of a repeat back to back so that the shared machine's load falls on
both alike; the median CPU seconds (``time.process_time``) and wall seconds of each, and
the median of the repeats' CPU ratios, are printed.  The numba
kernels are compiled (or loaded) by a small fit first, outside the timings.

Usage: python experiments/bce_default_cost.py [--N 2000 20000 100000] [--repeats 3]
       [--settings 5,10 12,40] [--bce-kwargs '{"n_sweeps": 100}']

``--bce-kwargs``: keyword arguments for the "gibbs" fit (a variant of the default).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
from bce_alpha import simulate  # noqa: E402

from consensuskit.models.bce.estimator import BCE  # noqa: E402

K, M, KJ, ALPHA = 5, 10, 6, 0.3


def timed(est, X):
    w0, c0 = time.perf_counter(), time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        est.fit(X)
    return time.process_time() - c0, time.perf_counter() - w0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--N", type=int, nargs="+", default=[2000, 20000, 100000])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--settings", nargs="+", default=[f"{K},{M}"],
                    help="K,M pairs (default: 5,10)")
    ap.add_argument("--bce-kwargs", default="{}", metavar="JSON",
                    help="keyword arguments for the gibbs fit (default: none)")
    args = ap.parse_args(argv)
    kw = json.loads(args.bce_kwargs)
    torch.set_num_threads(1)
    X0, _, _ = simulate(np.random.default_rng(0), 200, M, n_clusters=K, n_labels=KJ, alpha=ALPHA)
    for est in ("gibbs", "meanfield"):  # compile / load the kernels
        BCE(K, alpha_estimate=est, n_init=1, n_sweeps=4, max_iter=3, random_state=0).fit(X0)
    print(f"{'K':>3} {'M':>3} {'N':>7} {'gibbs cpu':>9} {'mf cpu':>7} {'ratio':>6} "
          f"{'gibbs wall':>10} {'mf wall':>8}  (medians of {args.repeats})")
    for setting in args.settings:
        k, m_ = (int(v) for v in setting.split(","))
        for N in args.N:
            X, _, _ = simulate(np.random.default_rng(N), N, m_, n_clusters=k, n_labels=KJ,
                               alpha=ALPHA)
            g, m = [], []
            for r in range(args.repeats):
                g.append(timed(BCE(k, random_state=r, **kw), X))
                m.append(timed(BCE(k, alpha_estimate="meanfield", random_state=r), X))
            ratio = np.median([a[0] / b[0] for a, b in zip(g, m)])
            g, m = np.median(g, 0), np.median(m, 0)
            print(f"{k:>3} {m_:>3} {N:>7} {g[0]:9.2f} {m[0]:7.2f} {ratio:6.2f} {g[1]:10.2f} "
                  f"{m[1]:8.2f}", flush=True)


if __name__ == "__main__":
    main()
