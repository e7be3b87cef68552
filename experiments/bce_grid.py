"""BCE's default estimate on data simulated from BCE, one printed row per grid cell (issue 24).

Cells: K consensus clusters, M base clusterings with ``kj`` labels each, ``alpha_h =
alpha`` per cluster, every row of every ``beta_j`` from ``Dirichlet(0.5)``
(:func:`experiments.bce_alpha.simulate`, BCE's Pyro spec); ``N`` training rows and 500
held out; seeds.  Per cell and seed:

* ``default/or``: held-out perplexity of ``BCE(K)`` (its default estimate) over the
  oracle's, the true parameters' (exact count-vector marginal where ``C(M+K, K) <=
  200,000``, else importance sampling with 4,000 particles of the defensive mixture
  proposal, ``or_se`` its SE relative to the perplexity);
* ``mf/or``, ``MM/or``, ``NBCE/or`` (``--nbce``): the same for
  ``alpha_estimate="meanfield"``, MM(K) and NBCE (TSB, truncation 2K);
* ``z(d-MM)``: paired per-row difference of held-out ``log p(x_i)``, default minus MM,
  over its standard error (negative: the default is worse; the goal is ``>= -2``);
* ``sa/true``: fitted ``sum(alpha)`` over the truth (default and meanfield);
* CPU seconds of each fit (one thread).

Every perplexity of a BCE fit is computed the same way as the oracle's (exact where the
oracle is, else 2,000-particle IS), so no estimator's own scoring enters.

Usage (cells are the product of the lists; ``--out`` appends JSON lines, and a cell
already there is skipped, so an interrupted run resumes)::

    python experiments/bce_grid.py --K 2 5 --M 4 10 --alpha 0.1 1 --kj 3 --N 1000 \\
        --seeds 0 1 [--nbce] [--out grid.jsonl]
    python experiments/bce_grid.py --cells 2,4,0.1,3 12,40,1,6 --N 10000 --seeds 0
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
import warnings

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
from bce_alpha import mm_rows, simulate  # noqa: E402

from consensuskit.models.bce import cavi as bce_cavi  # noqa: E402
from consensuskit.models.bce.alpha import row_log_marginals  # noqa: E402
from consensuskit.models.bce.estimator import BCE  # noqa: E402
from consensuskit.models.bce.marginal import n_count_states  # noqa: E402
from consensuskit.models.mm.estimator import MM  # noqa: E402

N_HELD = 500
EXACT_STATES = 200_000


def rows_loglik(alpha, betas, ensemble, seed, n_samples):
    """``log p(x_i | alpha, beta)`` per held-out row and its variance (exact or IS)."""
    data = bce_cavi.prepare_data(ensemble)
    beta = bce_cavi.pack_beta([np.asarray(b, dtype=np.float64) for b in betas])
    a = torch.as_tensor(np.asarray(alpha, dtype=np.float64))
    K, M = a.shape[0], ensemble.n_partitions
    method = "exact" if n_count_states(M, K) <= EXACT_STATES else "is"
    gen = torch.Generator().manual_seed(seed)
    ll, var = row_log_marginals(a, beta, data, n_samples, gen, method=method)
    return ll.numpy(), var.numpy()


def timed(est, X):
    t0 = time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        est.fit(X)
    return est, time.process_time() - t0


def run_cell(K, M, alpha, kj, N, seed, nbce=False):
    rng = np.random.default_rng([K, M, int(alpha * 100), kj, N, seed])
    X, a, betas = simulate(rng, N + N_HELD, M, n_clusters=K, n_labels=kj, alpha=alpha)
    train, test = X[:N], X[N:]
    d, t_d = timed(BCE(K, random_state=seed), train)
    mf, t_mf = timed(BCE(K, alpha_estimate="meanfield", random_state=seed), train)
    mm, t_mm = timed(MM(K, random_state=seed), train)
    held = d.ensemble_.encode(test, unknown="missing")
    n_obs = held.n_observed
    cats = d.ensemble_.categories
    true_b = [b[:, cats[j]] / b[:, cats[j]].sum(1, keepdims=True) for j, b in enumerate(betas)]
    ll_or, var_or = rows_loglik(a, true_b, held, seed, 4000)
    ll_d, _ = rows_loglik(d.alpha_, d.beta_, held, seed + 1, 2000)
    ll_mf, _ = rows_loglik(mf.alpha_, mf.beta_, held, seed + 2, 2000)
    ll_mm = mm_rows(mm, held)

    def ratio(ll):
        return float(np.exp(-(ll.sum() - ll_or.sum()) / n_obs))

    diff = ll_d - ll_mm
    out = {"K": K, "M": M, "alpha": alpha, "kj": kj, "N": N, "seed": seed,
           "oracle": float(np.exp(-ll_or.sum() / n_obs)),
           "or_se": float(np.sqrt(var_or.sum()) / n_obs),
           "default": ratio(ll_d), "meanfield": ratio(ll_mf), "MM": ratio(ll_mm),
           "z_d_mm": float(diff.sum() / (diff.std(ddof=1) * np.sqrt(diff.size))),
           "sa_true": float(a.sum()), "sa_default": float(d.alpha_.sum()),
           "sa_meanfield": float(mf.alpha_.sum()),
           "cpu": {"default": t_d, "meanfield": t_mf, "MM": t_mm}}
    if nbce:
        from consensuskit.models.nbce.estimator import NBCE

        nb, t_nb = timed(NBCE(truncation=2 * K, random_state=seed), train)
        total, _, n = nb._checked_log_likelihood(test, unknown="missing")
        out["NBCE"] = float(np.exp(-total / n) / out["oracle"])
        out["cpu"]["NBCE"] = t_nb
    return out


def fmt(r):
    nb = f"{r['NBCE']:7.4f}" if "NBCE" in r else f"{'-':>7}"
    c = r["cpu"]
    return (f"{r['K']:>2} {r['M']:>3} {r['alpha']:>4} {r['kj']:>2} {r['N']:>6} {r['seed']:>2} "
            f"{r['oracle']:8.4f} {r['or_se'] / r['oracle']:.1e} {r['default']:8.4f} "
            f"{r['meanfield']:7.4f} {r['MM']:7.4f} {nb} {r['z_d_mm']:7.2f} "
            f"{r['sa_default'] / r['sa_true']:6.2f} {r['sa_meanfield'] / r['sa_true']:7.2f} "
            f"{c['default']:6.1f} {c['meanfield']:5.1f} {c['MM']:5.1f}")


HEAD = (f"{'K':>2} {'M':>3} {'a':>4} {'kj':>2} {'N':>6} {'sd':>2} {'oracle':>8} {'or_se':>7} "
        f"{'dflt/or':>8} {'mf/or':>7} {'MM/or':>7} {'NBCE/or':>7} {'z(d-MM)':>7} "
        f"{'sa/tru':>6} {'mf sa/t':>7} {'cpu d':>6} {'mf':>5} {'MM':>5}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--K", type=int, nargs="+", default=[2, 3, 5, 8, 12])
    ap.add_argument("--M", type=int, nargs="+", default=[4, 10, 20, 40])
    ap.add_argument("--alpha", type=float, nargs="+", default=[0.1, 0.3, 1.0])
    ap.add_argument("--kj", type=int, nargs="+", default=[3, 6])
    ap.add_argument("--N", type=int, nargs="+", default=[10000, 1000])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--cells", nargs="+", default=None, metavar="K,M,ALPHA,KJ",
                    help="explicit cells instead of the product of --K --M --alpha --kj")
    ap.add_argument("--nbce", action="store_true", help="also fit NBCE (N = 1000 cells)")
    ap.add_argument("--out", default=None, help="JSON lines file; cells in it are skipped")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    done = set()
    if args.out and os.path.exists(args.out):
        with open(args.out) as fh:
            for line in fh:
                r = json.loads(line)
                done.add((r["K"], r["M"], r["alpha"], r["kj"], r["N"], r["seed"]))
    print(HEAD, flush=True)
    if args.cells:
        cells = [(int(k), int(m), float(a), int(j))
                 for k, m, a, j in (c.split(",") for c in args.cells)]
    else:
        cells = list(itertools.product(args.K, args.M, args.alpha, args.kj))
    for N, (K, M, alpha, kj), seed in itertools.product(args.N, cells, args.seeds):
        if (K, M, alpha, kj, N, seed) in done:
            continue
        r = run_cell(K, M, alpha, kj, N, seed, nbce=args.nbce and N <= 1000)
        print(fmt(r), flush=True)
        if args.out:
            with open(args.out, "a") as fh:
                fh.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
