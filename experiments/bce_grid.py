"""BCE's default estimate on data simulated from BCE, one printed row per grid cell (issue 24).

Cells: K consensus clusters, M base clusterings with ``kj`` labels each, ``alpha_h =
alpha`` per cluster, every row of every ``beta_j`` from ``Dirichlet(0.5)``
(:func:`experiments.bce_alpha.simulate`, BCE's Pyro spec); ``N`` training rows and 500
held out; seeds.  Per cell and seed:

* ``default/or``: held-out perplexity of ``BCE(K)`` (its default estimate) over the
  oracle's, the true parameters' (exact count-vector marginal where ``C(M+K, K) <=
  20,000``, else importance sampling with ``--particles`` (1,000) particles of the
  defensive mixture proposal; ``or_se`` its SE relative to the perplexity);
* ``mf/or``, ``MM/or``, ``NBCE/or`` (``--nbce``): the same for
  ``alpha_estimate="meanfield"``, MM(K) and NBCE (TSB, truncation 2K, its own
  posterior-predictive score; 2 chains of 100 + 200 sweeps unless ``--nbce-full``, and
  the Dahl point estimate, since labels are not used);
* ``z(d-MM)``: paired per-row difference of held-out ``log p(x_i)``, default minus MM,
  over its standard error (negative: the default is worse; the goal is ``>= -2``); the
  JSON rows also hold the mean differences and SEs against MM, the oracle and NBCE;
* ``sa/true``: fitted ``sum(alpha)`` over the truth (default and meanfield);
* CPU seconds of each fit (one thread).

Every perplexity of a BCE fit is computed the same way as the oracle's (exact where the
oracle is, else IS with the same particles and random numbers), so no estimator's own
scoring enters.  A cell that raises is written as a row with its ``error``.

Usage (cells are the product of the lists, by default the whole grid of issue 24,
ordered so that the first cells cover every value of every factor (``--order cover``),
and every cell at the first N before the next N; ``--out`` appends a JSON line per
cell as it finishes, and a cell already there is skipped, so an interrupted run
resumes)::

    python experiments/bce_grid.py --N 1000 10000 --seeds 0 1 --nbce --out grid.jsonl
    python experiments/bce_grid.py --K 2 5 --M 4 10 --alpha 0.1 1 --kj 3 --N 1000
    python experiments/bce_grid.py --cells 2,4,0.1,3 12,40,1,6 --N 10000 --seeds 0
    python experiments/bce_grid.py --report grid.jsonl [--baseline earlier.jsonl]
    python experiments/bce_grid.py --N 1000 --bce-kwargs '{"n_sweeps": 100}' --out short.jsonl

``--bce-kwargs`` fits a variant of the default in the "default" columns (its keyword
arguments are kept in each row), to be compared with a run of the default by
``--report short.jsonl --baseline default.jsonl``.
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
EXACT_STATES = 20_000
#: a few cells that together show every K, M, alpha and k_j value, run first (``--order cover``)
COVER = [(2, 4, 0.1, 3), (3, 10, 0.3, 6), (5, 20, 1.0, 3), (8, 40, 0.1, 6), (12, 4, 0.3, 3),
         (12, 40, 1.0, 6), (8, 10, 1.0, 3), (5, 40, 0.3, 6)]


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


def paired(a, b):
    """Mean per-row difference ``a - b`` of held-out ``log p(x_i)``, its SE and z."""
    d = np.asarray(a) - np.asarray(b)
    se = float(d.std(ddof=1) / np.sqrt(d.size))
    return float(d.mean()), se, float(d.mean() / se) if se > 0 else float("nan")


#: NBCE's sampler in this experiment (its defaults are 4 chains of 200 + 500 sweeps, the
#: grid's largest cost; ``--nbce-full`` uses them)
NBCE_SHORT = dict(n_chains=2, burn_in=100, n_samples=200)


def run_cell(K, M, alpha, kj, N, seed, nbce=False, particles=1000, meanfield=True,
             nbce_kw=None, bce_kw=None):
    """One cell and seed; ``bce_kw``: keyword arguments for the default fit (a variant of
    the default to compare with it, e.g. ``{"n_sweeps": 100}``; None: the default)."""
    rng = np.random.default_rng([K, M, int(alpha * 100), kj, N, seed])
    X, a, betas = simulate(rng, N + N_HELD, M, n_clusters=K, n_labels=kj, alpha=alpha)
    train, test = X[:N], X[N:]
    d, t_d = timed(BCE(K, random_state=seed, **(bce_kw or {})), train)
    if meanfield:
        mf, t_mf = timed(BCE(K, alpha_estimate="meanfield", random_state=seed), train)
    mm, t_mm = timed(MM(K, random_state=seed), train)
    held = d.ensemble_.encode(test, unknown="missing")
    n_obs = held.n_observed
    cats = d.ensemble_.categories
    true_b = [b[:, cats[j]] / b[:, cats[j]].sum(1, keepdims=True) for j, b in enumerate(betas)]
    # common random numbers: the same seed for the oracle's and the fits' importance sampler
    ll_or, var_or = rows_loglik(a, true_b, held, seed, particles)
    ll_d, var_d = rows_loglik(d.alpha_, d.beta_, held, seed, particles)
    ll_mm = mm_rows(mm, held)

    def ratio(ll):
        return float(np.exp(-(ll.sum() - ll_or.sum()) / n_obs))

    d_mm, se_mm, z_mm = paired(ll_d, ll_mm)
    d_or, se_or, z_or = paired(ll_d, ll_or)
    out = {"K": K, "M": M, "alpha": alpha, "kj": kj, "N": N, "seed": seed,
           "scoring": "exact" if n_count_states(M, K) <= EXACT_STATES else f"is{particles}",
           "oracle": float(np.exp(-ll_or.sum() / n_obs)),
           "or_se": float(np.sqrt(var_or.sum()) / n_obs),
           "default_se": float(np.sqrt(var_d.sum()) / n_obs),
           "default": ratio(ll_d), "MM": ratio(ll_mm),
           "z_d_mm": z_mm, "d_mm": d_mm, "d_mm_se": se_mm, "d_or": d_or, "d_or_se": se_or,
           "sa_true": float(a.sum()), "sa_default": float(d.alpha_.sum()),
           "alpha_default": [float(x) for x in d.alpha_], "eta_default": float(d.eta_),
           "cpu": {"default": t_d, "MM": t_mm}}
    if bce_kw:
        out["bce_kw"] = dict(bce_kw)
    if meanfield:
        ll_mf, _ = rows_loglik(mf.alpha_, mf.beta_, held, seed, particles)
        out.update(meanfield=ratio(ll_mf), sa_meanfield=float(mf.alpha_.sum()))
        out["cpu"]["meanfield"] = t_mf
    if nbce:
        from consensuskit.models.nbce.estimator import NBCE

        # labels_ are not used here: the Dahl point estimate skips the VI search
        nb, t_nb = timed(NBCE(truncation=2 * K, point_estimate="dahl", random_state=seed,
                              **(NBCE_SHORT if nbce_kw is None else nbce_kw)), train)
        ll_nb, _ = nb._pointwise_log_likelihood(nb._encode_new(test, unknown="missing"))
        out["NBCE"] = ratio(np.asarray(ll_nb))
        out["d_nbce"], out["d_nbce_se"], out["z_d_nbce"] = paired(ll_d, ll_nb)
        out["cpu"]["NBCE"] = t_nb
    return out


def fmt(r):
    if "error" in r:
        return (f"{r['K']:>2} {r['M']:>3} {r['alpha']:>4} {r['kj']:>2} {r['N']:>6} "
                f"{r['seed']:>2} FAILED: {r['error']}")
    nb = f"{r['NBCE']:7.4f}" if "NBCE" in r else f"{'-':>7}"
    mf = f"{r['meanfield']:7.4f}" if "meanfield" in r else f"{'-':>7}"
    mfs = (f"{r['sa_meanfield'] / r['sa_true']:7.2f}" if "meanfield" in r else f"{'-':>7}")
    c = r["cpu"]
    return (f"{r['K']:>2} {r['M']:>3} {r['alpha']:>4} {r['kj']:>2} {r['N']:>6} {r['seed']:>2} "
            f"{r['oracle']:8.4f} {r['or_se'] / r['oracle']:.1e} {r['default']:8.4f} "
            f"{mf} {r['MM']:7.4f} {nb} {r['z_d_mm']:7.2f} "
            f"{r['sa_default'] / r['sa_true']:6.2f} {mfs} "
            f"{c['default']:6.1f} {c.get('meanfield', float('nan')):5.1f} {c['MM']:5.1f} "
            f"{c.get('NBCE', float('nan')):5.1f}")


HEAD = (f"{'K':>2} {'M':>3} {'a':>4} {'kj':>2} {'N':>6} {'sd':>2} {'oracle':>8} {'or_se':>7} "
        f"{'dflt/or':>8} {'mf/or':>7} {'MM/or':>7} {'NBCE/or':>7} {'z(d-MM)':>7} "
        f"{'sa/tru':>6} {'mf sa/t':>7} {'cpu d':>6} {'mf':>5} {'MM':>5} {'NBCE':>5}")


def ordered(cells, order, seed=0):
    """``"grid"``: as given; ``"cover"``: :data:`COVER`'s cells (those in ``cells``) first,
    then the rest in a fixed random order, so that a run cut short has every value of
    every factor (the seeds of a cell run back to back)."""
    if order == "grid":
        return cells
    first = [c for c in COVER if c in cells]
    rest = [c for c in cells if c not in first]
    perm = np.random.default_rng(seed).permutation(len(rest))
    return first + [rest[i] for i in perm]


def report(path):
    """The rows of a ``--out`` file, then what the must-show asks of them."""
    rows = [json.loads(line) for line in open(path)]
    print(HEAD)
    for r in rows:
        print(fmt(r))
    ok = [r for r in rows if "error" not in r]
    bad = [r for r in rows if "error" in r]
    print(f"\n{len(rows)} rows, {len(bad)} failed")
    for N in sorted({r["N"] for r in ok}):
        at = [r for r in ok if r["N"] == N]
        cells = {(r["K"], r["M"], r["alpha"], r["kj"]) for r in at}
        both = {c for c in cells if sum((r["K"], r["M"], r["alpha"], r["kj"]) == c
                                        for r in at) >= 2}
        print(f"N = {N}: {len(at)} rows, {len(cells)} cells ({len(both)} with 2 seeds)")
        for name, i in (("K", 0), ("M", 1), ("alpha", 2), ("kj", 3)):
            vals = sorted({c[i] for c in both})
            print(f"  {name} values with both seeds: {vals}")
        d = np.array([r["default"] for r in at])
        print(f"  default/oracle: {d.min():.4f} - {d.max():.4f}; above 1.01 in "
              f"{(d > 1.01).sum()} of {d.size}")
        z = np.array([r["z_d_mm"] for r in at])
        print(f"  z(default - MM): {z.min():.2f} - {z.max():.2f}; below -2 in "
              f"{(z < -2).sum()} of {z.size}")
        nb = [r for r in at if "NBCE" in r]
        if nb:
            zn = np.array([r["z_d_nbce"] for r in nb])
            print(f"  z(default - NBCE): {zn.min():.2f} - {zn.max():.2f}; below -2 in "
                  f"{(zn < -2).sum()} of {zn.size}")
        for M in sorted({r["M"] for r in at}):
            sa = np.array([r["sa_default"] / r["sa_true"] for r in at if r["M"] == M])
            print(f"  M = {M:>2}: default sum(alpha)/truth {sa.min():.2f} - {sa.max():.2f} "
                  f"(median {np.median(sa):.2f}, {sa.size} rows)")


def compare(path, baseline):
    """The default's held-out perplexity over the oracle's and its CPU, ``path``'s rows
    against the same cells and seeds in ``baseline`` (an earlier ``--out`` file)."""
    def key(r):
        return tuple(r[k] for k in ("K", "M", "alpha", "kj", "N", "seed"))

    old = {key(r): r for r in map(json.loads, open(baseline)) if "error" not in r}
    new = [r for r in map(json.loads, open(path)) if "error" not in r and key(r) in old]
    if not new:
        print(f"\nagainst {baseline}: no (cell, N, seed) in both files, nothing to compare")
        return
    d = np.array([r["default"] for r in new])
    o = np.array([old[key(r)]["default"] for r in new])
    cpu_new = sum(r["cpu"]["default"] for r in new)
    cpu_old = sum(old[key(r)]["cpu"]["default"] for r in new)
    print(f"\nagainst {baseline}, {len(new)} rows in both: default/oracle "
          f"{d.min():.4f} - {d.max():.4f} (baseline {o.min():.4f} - {o.max():.4f}); "
          f"difference mean {np.mean(d - o):+.5f}, largest |.| {np.max(np.abs(d - o)):.5f}; "
          f"default CPU in all {cpu_new:.0f} s (baseline {cpu_old:.0f} s)")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--report", default=None, metavar="FILE",
                    help="print a --out file's rows and the must-show checks, then exit")
    ap.add_argument("--baseline", default=None, metavar="FILE",
                    help="with --report: compare with an earlier --out file's same cells")
    ap.add_argument("--K", type=int, nargs="+", default=[2, 3, 5, 8, 12])
    ap.add_argument("--M", type=int, nargs="+", default=[4, 10, 20, 40])
    ap.add_argument("--alpha", type=float, nargs="+", default=[0.1, 0.3, 1.0])
    ap.add_argument("--kj", type=int, nargs="+", default=[3, 6])
    ap.add_argument("--N", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--cells", nargs="+", default=None, metavar="K,M,ALPHA,KJ",
                    help="explicit cells instead of the product of --K --M --alpha --kj")
    ap.add_argument("--order", choices=["grid", "cover"], default="cover")
    ap.add_argument("--particles", type=int, default=1000,
                    help="importance-sampling particles per held-out row (oracle and fits)")
    ap.add_argument("--nbce", action="store_true", help="also fit NBCE (N <= 1000 cells)")
    ap.add_argument("--nbce-full", action="store_true",
                    help="NBCE with its default sampler length (else NBCE_SHORT)")
    ap.add_argument("--no-meanfield", action="store_true")
    ap.add_argument("--out", default=None, help="JSON lines file; cells in it are skipped")
    ap.add_argument("--bce-kwargs", default=None, metavar="JSON",
                    help='keyword arguments for the "default" fit, e.g. \'{"n_sweeps": 100}\' '
                         "(recorded in each row as bce_kw)")
    args = ap.parse_args(argv)
    if args.report:
        report(args.report)
        if args.baseline:
            compare(args.report, args.baseline)
        return None
    bce_kw = json.loads(args.bce_kwargs) if args.bce_kwargs else None  # bad JSON: fail now
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
    cells = ordered(cells, args.order)
    for N in args.N:  # the whole N = 1,000 column before N = 10,000 (default order)
        for (K, M, alpha, kj), seed in itertools.product(cells, args.seeds):
            if (K, M, alpha, kj, N, seed) in done:
                continue
            try:
                r = run_cell(K, M, alpha, kj, N, seed, nbce=args.nbce and N <= 1000,
                             particles=args.particles, meanfield=not args.no_meanfield,
                             nbce_kw={} if args.nbce_full else None,
                             bce_kw=bce_kw)
            except Exception as exc:  # a failed cell is a result: recorded, not hidden
                r = {"K": K, "M": M, "alpha": alpha, "kj": kj, "N": N, "seed": seed,
                     "error": f"{type(exc).__name__}: {exc}"}
            print(fmt(r), flush=True)
            if args.out:
                with open(args.out, "a") as fh:
                    fh.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
