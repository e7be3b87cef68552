"""Distributed BCE: the paper's Figs. 6 and 5 and the per-iteration cost model, on this machine.

Three tables, all single-threaded per process, on planted ensembles (``K = 3``
true clusters, each base clustering a noisy relabelled copy with 3..8 labels,
10 % of labels missing):

1. cost model -- for ``P`` in {1, 2, 4}, row and column modes: payload bytes
   sent per rank per EM iteration (from the instrumented comm layer), CPU
   seconds per iteration per rank (process time, which time-sharing with other
   jobs does not inflate) and wall seconds spent inside communication calls;
2. Fig. 6 -- column-distributed versus single-process wall time as ``M`` grows
   (20 ... 960).  Single process: the estimator's engine
   (``bce_cavi.variational_em``) in this process.  Column-distributed: the fit
   wall time inside the workers (worker start-up reported separately), and
   its compute-only critical path, the largest CPU time of any rank, which is
   the paper's "ignoring the communication overhead" number (compared with the
   single process's CPU time);
3. Fig. 5 -- row-distributed ``P = 1..4``: accuracy (Hungarian-matched) and
   ARI against the planted truth, bound and time, for the exact and the
   heuristic sequential variants.

The machine has 2 cores shared with other jobs: with ``P > 2`` workers the
processes time-share cores, so wall times cannot show a speed-up beyond 2 and
are contended; byte counts are exact.

Run from the repository root (a few minutes):
    PYTHONPATH=. python experiments/bench_distributed.py [--n 400] [--iters 10]
Saves results/bench_distributed.png and results/bench_distributed.json.
"""

import os

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402

import numpy as np  # noqa: E402

# Heavy imports live in main(): worker processes re-import this module.


def planted(n, m, k=3, noise=0.2, missing=0.1, seed=0):
    """``m`` noisy relabelled copies of a planted ``k``-partition of ``n`` points."""
    rng = np.random.default_rng(seed)
    truth = rng.integers(0, k, size=n)
    cols = []
    for j in range(m):
        kj = 3 + j % 6
        lab = rng.permutation(kj)[(truth + rng.integers(0, 2, size=n) * k * (j % 2)) % kj]
        flip = rng.random(n) < noise
        lab[flip] = rng.integers(0, kj, size=flip.sum())
        cols.append(lab)
    X = np.column_stack(cols)
    drop = rng.random(X.shape) < missing
    drop[np.arange(n), rng.integers(0, m, size=n)] = False
    X[drop] = -1
    return X, truth


def hungarian_accuracy(y, z):
    from scipy.optimize import linear_sum_assignment

    c = np.zeros((y.max() + 1, z.max() + 1))
    np.add.at(c, (y, z), 1)
    r, s = linear_sum_assignment(-c)
    return c[r, s].sum() / y.size


def per_iter(fit):
    """Per-rank (bytes sent, CPU s, comm wall s) per EM iteration of a distributed fit."""
    n = max(fit.n_iter_, 1)
    rec = fit.distributed_
    sent = [b / n for b in rec.bytes_sent("fit")]
    cpu = [s["cpu"] / n for s in rec.seconds]
    comm = [s["comm"] / n for s in rec.seconds]
    return sent, cpu, comm


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=400, help="rows (shrunk from the paper's)")
    ap.add_argument("--n-cost", type=int, default=40000, help="rows for the cost table")
    ap.add_argument("--iters", type=int, default=10, help="EM iterations (fixed, tol=0)")
    ap.add_argument("--ms", default="20,60,120,240,480,960")
    ap.add_argument("--fig6-workers", type=int, default=2)
    ap.add_argument("--out", default="results")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(1)
    from sklearn.metrics import adjusted_rand_score

    from consensuskit.data.ensemble import Ensemble
    from consensuskit.distributed import fit_distributed
    from consensuskit.distributed.timing import column_vs_single, warm_up

    K, T = 3, args.iters
    report = {"n": args.n, "n_cost": args.n_cost, "iters": T, "cost": [], "fig6": [], "fig5": []}

    # warm the worker fork server once (its start-up is not part of any number below)
    warm_up(K)

    # 1. cost model -----------------------------------------------------------------
    X, truth = planted(args.n_cost, 40)
    ens = Ensemble.from_labels(X)
    print(f"\n[1] cost per EM iteration: N={args.n_cost}, M=40, L={ens.n_total_labels}, K={K}, "
          f"{T} iterations, inner_iter=5 (bytes = payload contributed by the rank)")
    print(f"{'mode':8s} {'P':>2s} {'bytes/rank/iter':>24s} {'CPU s/iter':>22s} "
          f"{'comm s/iter':>20s}")
    for mode in ("row", "column"):
        for P in (1, 2, 4):
            fit = fit_distributed(X, K, n_workers=P, mode=mode, max_iter=T, tol=0.0,
                                  random_state=0)
            sent, comp, comm = per_iter(fit)
            report["cost"].append({"mode": mode, "P": P, "bytes": sent, "compute": comp,
                                   "comm": comm})
            print(f"{mode:8s} {P:2d} {str([int(b) for b in sent]):>24s} "
                  f"{str([round(c, 4) for c in comp]):>22s} "
                  f"{str([round(c, 4) for c in comm]):>20s}")

    # 2. Fig. 6 -----------------------------------------------------------------------
    P6 = args.fig6_workers
    print(f"\n[2] Fig. 6: column-distributed (P={P6}) vs single process, N={args.n}, {T} "
          "iterations; seconds")
    print(f"{'M':>5s} {'single':>8s} {'column':>8s} {'ratio':>6s} {'single CPU':>10s} "
          f"{'max rank CPU':>12s} {'ratio':>6s} {'start-up':>8s}")
    for M in [int(v) for v in args.ms.split(",")]:
        X, truth = planted(args.n, M, seed=M)
        row = column_vs_single(X, K, n_workers=P6, max_iter=T, seed=0)
        row["M"] = M
        t_single, c_single = row["single"], row["single_cpu"]
        t_fit, t_comp, t_start = row["column"], row["compute_only"], row["startup"]
        report["fig6"].append(row)
        print(f"{M:5d} {t_single:8.3f} {t_fit:8.3f} {t_single / t_fit:6.2f} {c_single:10.3f} "
              f"{t_comp:12.3f} {c_single / t_comp:6.2f} {t_start:8.2f}")

    # 3. Fig. 5 -----------------------------------------------------------------------
    X, truth = planted(args.n, 20, noise=0.7, seed=5)
    print(f"\n[3] Fig. 5: row-distributed P=1..4, N={args.n}, M=20; up to 50 iterations, "
          "tol=1e-6; accuracy vs planted truth")
    print(f"{'mode':15s} {'P':>2s} {'acc':>6s} {'ARI':>6s} {'iters':>5s} {'bound':>11s} "
          f"{'fit s':>7s}")
    for mode in ("row", "row-sequential"):
        for P in (1, 2, 3, 4):
            fit = fit_distributed(X, K, n_workers=P, mode=mode, max_iter=50, tol=1e-6,
                                  random_state=0)
            acc = hungarian_accuracy(truth, fit.labels_)
            ari = adjusted_rand_score(truth, fit.labels_)
            t_fit = max(s["total"] for s in fit.distributed_.seconds)
            report["fig5"].append({"mode": mode, "P": P, "accuracy": acc, "ari": ari,
                                   "n_iter": fit.n_iter_, "bound": fit.lower_bound_,
                                   "seconds": t_fit})
            print(f"{mode:15s} {P:2d} {acc:6.3f} {ari:6.3f} {fit.n_iter_:5d} "
                  f"{fit.lower_bound_:11.2f} {t_fit:7.3f}")

    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "bench_distributed.json"), "w") as fh:
        json.dump(report, fh, indent=1)
    plot(report, os.path.join(args.out, "bench_distributed.png"), P6)


def plot(report, path, P6):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(11, 4.2))
    f6 = report["fig6"]
    Ms = [r["M"] for r in f6]
    ax[0].loglog(Ms, [r["single"] for r in f6], "o-", label="single process, wall")
    ax[0].loglog(Ms, [r["column"] for r in f6], "s-", label=f"column-distributed P={P6}, wall")
    ax[0].loglog(Ms, [r["single_cpu"] for r in f6], "o:", label="single process, CPU")
    ax[0].loglog(Ms, [r["compute_only"] for r in f6], "^--",
                 label=f"column-distributed P={P6}, max rank CPU")
    ax[0].set_xlabel("number of base clusterings M")
    ax[0].set_ylabel(f"seconds for {report['iters']} EM iterations")
    ax[0].set_title(f"Fig. 6 analogue (N={report['n']}, 2 shared cores)")
    ax[0].legend(fontsize=8)
    f5 = report["fig5"]
    for mode, mk in (("row", "o-"), ("row-sequential", "s--")):
        rows = [r for r in f5 if r["mode"] == mode]
        ax[1].plot([r["P"] for r in rows], [r["accuracy"] for r in rows], mk,
                   label=f"{mode}" + (" (exact)" if mode == "row" else " (heuristic)"))
    ax[1].set_xlabel("number of row partitions P")
    ax[1].set_ylabel("accuracy vs planted truth")
    ax[1].set_xticks([1, 2, 3, 4])
    ax[1].set_ylim(0.5, 1.0)
    ax[1].set_title("Fig. 5 analogue: row-distributed BCE")
    ax[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"\nsaved {path}")


if __name__ == "__main__":
    main()
