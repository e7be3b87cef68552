"""How many sweeps over all rows BCE's default needs above 10,000 rows (issue 24, cost).

Above ``max_rows`` (10,000) rows the collapsed Gibbs engine
(:class:`consensuskit.models.bce.collapsed_gibbs.CollapsedGibbsEM`) estimates alpha and
eta on a 10,000-row subset, then adds the other rows and runs ``final_sweeps`` sweeps
over all of them at fixed alpha, eta (the last two thirds pooled for beta and the
memberships).  Those sweeps are most of the fit's cost at N = 1e5.  This compares
``final_sweeps`` values on rows simulated from BCE, same data and seed per setting:
held-out perplexity over the oracle's (500 rows; exact or importance-sampled with common
random numbers, :func:`experiments.bce_grid.rows_loglik`), the share of training rows
whose hard label agrees with the first value's fit (after matching clusters), and CPU.

Usage: python experiments/bce_final_sweeps.py [--final 60 30 20] [--N 20000 100000]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment

sys.path.insert(0, os.path.dirname(__file__))
from bce_alpha import simulate  # noqa: E402
from bce_grid import N_HELD, rows_loglik  # noqa: E402

from consensuskit.models.bce.collapsed_gibbs import CollapsedGibbsEM  # noqa: E402
from consensuskit.models.bce.estimator import BCE  # noqa: E402

SETTINGS = [(5, 10, 0.3, 6), (8, 20, 0.1, 3), (3, 40, 1.0, 3)]


def agreement(a, b, K):
    """Share of rows with the same hard label after the best matching of clusters."""
    table = np.zeros((K, K))
    np.add.at(table, (a, b), 1)
    r, c = linear_sum_assignment(-table)
    return float(table[r, c].sum() / a.size)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--final", type=int, nargs="+", default=[60, 30, 20])
    ap.add_argument("--N", type=int, nargs="+", default=[20000, 100000])
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    defaults = CollapsedGibbsEM.__init__.__kwdefaults__
    print(f"{'K':>2} {'M':>3} {'a':>4} {'kj':>2} {'N':>6} {'final':>5} {'ppl/or':>8} "
          f"{'agree':>6} {'cpu':>5}")
    for (K, M, alpha, kj), N in ((s, n) for n in args.N for s in SETTINGS):
        rng = np.random.default_rng([K, M, int(100 * alpha), kj, N, args.seed])
        X, a, betas = simulate(rng, N + N_HELD, M, n_clusters=K, n_labels=kj, alpha=alpha)
        train, test = X[:N], X[N:]
        first, ll_or = None, None
        for final in args.final:
            defaults["final_sweeps"] = final
            est = BCE(K, random_state=args.seed)
            t0 = time.process_time()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                est.fit(train)
            cpu = time.process_time() - t0
            held = est.ensemble_.encode(test, unknown="missing")
            if ll_or is None:
                cats = est.ensemble_.categories
                true_b = [b[:, cats[j]] / b[:, cats[j]].sum(1, keepdims=True)
                          for j, b in enumerate(betas)]
                ll_or, _ = rows_loglik(a, true_b, held, args.seed, 1000)
            ll, _ = rows_loglik(est.alpha_, est.beta_, held, args.seed, 1000)
            ppl = float(np.exp(-(ll.sum() - ll_or.sum()) / held.n_observed))
            first = est.labels_ if first is None else first
            print(f"{K:>2} {M:>3} {alpha:>4} {kj:>2} {N:>6} {final:>5} {ppl:8.5f} "
                  f"{agreement(first, est.labels_, K):6.3f} {cpu:5.1f}", flush=True)
    defaults["final_sweeps"] = 60


if __name__ == "__main__":
    main()
