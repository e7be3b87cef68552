"""consensuskit.posterior's SALSO search side by side with R's salso on the same draws.

For each draw set (S draws of N labels) both searches minimise the expected VI and the expected
Binder (a = 1) loss with the same settings (16 runs, up to 10 zealous attempts, probability 0.5
of a sequential-allocation start, max clusters = the most clusters of a draw, one core); then
ONE function written here (numpy contingency tables, independent of both packages) scores all
four estimates.  CPU seconds: ours by ``time.process_time`` in this process (n_jobs=1), salso's
by R's own ``proc.time()`` (user + system) around ``salso(..., nCores=1)`` in an Rscript
process; medians over ``--repeats`` repeats (seed r for both in repeat r, ours and salso
interleaved so that both see the same machine load; the losses shown are those of the seed-0
estimates).

Draw sets: salso's ``iris.clusterings`` (exported from R), NBCE posterior draws (``z`` of
``NBCE.samples_``) on three bundled datasets with k-means base clusterings, and synthetic draws
(a planted partition with random merges, splits and relabelled items) up to N = 10,000.

``--scale``: our VI search alone on N = 100,000 items and S = 1,000 synthetic draws: CPU time
and peak resident memory (``ru_maxrss``); an N x N float64 matrix would take 80 GB.

Needs R with salso in ``--rlib`` (``experiments/peers/build_salso.sh``).  Run with one thread:
``OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1 python experiments/partition_posterior_vs_salso.py``.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

R_SCRIPT = r"""
args <- commandArgs(trailingOnly = TRUE)
suppressMessages(library(salso, lib.loc = args[1]))
con <- file(args[2], "rb"); dims <- readBin(con, "integer", 2)
x <- matrix(readBin(con, "integer", dims[1] * dims[2]), nrow = dims[1], byrow = TRUE)
close(con)
lossname <- args[4]
set.seed(as.integer(args[5]))
loss <- if (lossname == "vi") VI() else binder()
warned <- NULL
t0 <- proc.time()
est <- withCallingHandlers(
  salso(x, loss = loss, nRuns = 16, maxZealousAttempts = 10, probSequentialAllocation = 0.5,
        nCores = 1),
  warning = function(w) {
    warned <<- c(warned, conditionMessage(w)); invokeRestart("muffleWarning")
  })
t1 <- proc.time() - t0
if (args[5] == "0" && length(warned)) message("salso (", lossname, "): ", unique(warned))
cat(t1[["user.self"]] + t1[["sys.self"]], as.integer(est), "\n", file = args[3])
"""

R_EXPORT_IRIS = r"""
args <- commandArgs(trailingOnly = TRUE)
suppressMessages(library(salso, lib.loc = args[1]))
data(iris.clusterings, package = "salso")
write.table(iris.clusterings, args[2], row.names = FALSE, col.names = FALSE)
"""


# ------------------------------------------------------------------ the one loss function


def independent_losses(est, draws):
    """(expected VI in bits, expected Binder a=1 over N^2 ordered pairs) of ``est`` (N,)
    against ``draws`` (S, N), from numpy contingency tables; shares no code with either
    package."""
    est = np.unique(est, return_inverse=True)[1].ravel()
    n = est.size
    ne = np.bincount(est).astype(float)
    he = float((ne * np.log2(ne)).sum())
    se = float((ne**2).sum())
    vi = binder = 0.0
    for d in draws:
        d = np.unique(d, return_inverse=True)[1].ravel()
        nd = np.bincount(d).astype(float)
        joint = np.bincount(est * (int(d.max()) + 1) + d)
        joint = joint[joint > 0].astype(float)
        hd = float((nd * np.log2(nd)).sum())
        hj = float((joint * np.log2(joint)).sum())
        vi += (he + hd - 2 * hj) / n
        binder += (se + float((nd**2).sum()) - 2 * float((joint**2).sum())) / n**2
    return vi / len(draws), binder / len(draws)


# ------------------------------------------------------------------ draw sets


def synthetic_draws(n, s, k=8, seed=0, dtype=np.int32):
    """S draws around a planted partition of n items into k clusters: per draw, with
    probability 0.3 two clusters merge, with probability 0.3 one splits in two, and 5% of the
    items take a uniformly random label."""
    rng = np.random.default_rng(seed)
    truth = rng.integers(0, k, n)
    out = np.empty((s, n), dtype=dtype)
    for r in range(s):
        z = truth.copy()
        if rng.random() < 0.3:
            a, b = rng.choice(k, 2, replace=False)
            z[z == b] = a
        if rng.random() < 0.3:
            c = rng.integers(k)
            idx = np.flatnonzero(z == c)
            z[idx[rng.random(idx.size) < 0.5]] = k
        m = rng.random(n) < 0.05
        z[m] = rng.integers(0, k + 1, int(m.sum()))
        out[r] = z
    return out


def iris_clusterings(rlib):
    with tempfile.TemporaryDirectory() as td:
        path = os.path.join(td, "iris.txt")
        subprocess.run(["Rscript", "-e", R_EXPORT_IRIS, rlib, path], check=True,
                       capture_output=True)
        return np.loadtxt(path, dtype=np.int64)


def nbce_draws(name, n_draws, seed=0):
    import consensuskit as ck
    from consensuskit import datasets, generate

    X, _ = datasets.load(name)
    E = generate.kmeans_partitions(X, 20, n_clusters=(2, 10), random_state=seed)
    m = ck.NBCE(truncation=15, n_samples=n_draws // 2, burn_in=200, n_chains=2, n_jobs=1,
                random_state=seed).fit(E)
    z = m.samples_["z"]
    return z.reshape(-1, z.shape[-1]).astype(np.int64)


# ------------------------------------------------------------------ runners


def run_salso_once(path, rlib, loss, seed):
    """One salso(..., nCores=1) call on the draws in ``path``: (CPU s by R's proc.time, est)."""
    out = path + ".out"
    subprocess.run(["Rscript", "-e", R_SCRIPT, rlib, path, out, loss, str(seed)], check=True,
                   env={**os.environ, "OMP_NUM_THREADS": "1"})
    with open(out) as f:
        parts = f.read().split()
    return float(parts[0]), np.array(parts[1:], dtype=np.int64)


def compare(name, draws, rlib, repeats):
    """Ours and salso on ``draws``, repeats interleaved (ours, salso, ours, ...) so that both
    see the same machine load; medians of the CPU seconds, losses of the seed-0 estimates."""
    from consensuskit.posterior import PartitionPosterior

    pp = PartitionPosterior(draws)
    rows = []
    with tempfile.TemporaryDirectory() as td:
        path = os.path.join(td, "draws.bin")
        with open(path, "wb") as f:
            np.array(draws.shape, dtype=np.int32).tofile(f)
            np.ascontiguousarray(draws, dtype=np.int32).tofile(f)
        for loss in ("vi", "binder"):
            t_ours, t_salso = [], []
            for r in range(repeats):
                t0 = time.process_time()
                est, _ = pp.point_estimate(loss=loss, n_runs=16, n_jobs=1, random_state=r)
                t_ours.append(time.process_time() - t0)
                t, est_s = run_salso_once(path, rlib, loss, r)
                t_salso.append(t)
                if r == 0:
                    e_ours, e_salso = est, est_s
            j = 0 if loss == "vi" else 1
            rows.append(dict(set=name, N=draws.shape[1], S=draws.shape[0], loss=loss,
                             ours=independent_losses(e_ours, draws)[j],
                             salso=independent_losses(e_salso, draws)[j],
                             k_ours=len(set(e_ours)), k_salso=len(set(e_salso)),
                             cpu_ours=float(np.median(t_ours)),
                             cpu_salso=float(np.median(t_salso))))
    return rows


def print_rows(rows):
    print(f"{'draw set':<22}{'N':>7}{'S':>6} {'loss':<7}{'E[loss] ours':>14}{'salso':>14}"
          f"{'K ours':>7}{'K salso':>8}{'CPU ours':>10}{'salso':>9}{'ratio':>7}")
    for r in rows:
        print(f"{r['set']:<22}{r['N']:>7}{r['S']:>6} {r['loss']:<7}{r['ours']:>14.6f}"
              f"{r['salso']:>14.6f}{r['k_ours']:>7}{r['k_salso']:>8}{r['cpu_ours']:>10.3f}"
              f"{r['cpu_salso']:>9.3f}{r['cpu_ours'] / r['cpu_salso']:>7.2f}", flush=True)


def scale(n, s, n_runs):
    from consensuskit.posterior import PartitionPosterior

    t0 = time.process_time()
    draws = synthetic_draws(n, s, seed=1, dtype=np.int16)
    t_gen = time.process_time() - t0
    t0 = time.process_time()
    pp = PartitionPosterior(draws)
    del draws
    t_prep = time.process_time() - t0
    t0 = time.process_time()
    est, info = pp.point_estimate(loss="vi", n_runs=n_runs, n_jobs=1, random_state=0)
    t_search = time.process_time() - t0
    t0 = time.process_time()
    el = pp.expected_loss(est, "vi")
    t_loss = time.process_time() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB
    print(f"scale: N={n} S={s} n_runs={n_runs}: generate {t_gen:.1f} s, prepare {t_prep:.1f} s, "
          f"search {t_search:.1f} s CPU ({info.n_scans.tolist()} scans), expected VI "
          f"{el:.4f} ({t_loss:.1f} s), K={info.n_clusters}; peak RSS {rss:.2f} GiB "
          f"(an N x N float64 matrix: {8 * n * n / 2**30:.0f} GiB)")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rlib", default="/work/peers/Rlib")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sets", default="iris,nbce,synthetic")
    ap.add_argument("--scale", action="store_true")
    ap.add_argument("--scale-n", type=int, default=100_000)
    ap.add_argument("--scale-s", type=int, default=1000)
    ap.add_argument("--scale-runs", type=int, default=1)
    args = ap.parse_args(argv)
    if args.scale:
        scale(args.scale_n, args.scale_s, args.scale_runs)
        return
    from consensuskit.posterior import PartitionPosterior

    PartitionPosterior(synthetic_draws(20, 5)).point_estimate(n_runs=1, n_jobs=1)  # warm up
    sets = args.sets.split(",")
    rows = []

    def go(name, draws):
        rows.extend(compare(name, draws, args.rlib, args.repeats))
        print_rows(rows[-2:])

    if "iris" in sets:
        go("iris.clusterings", iris_clusterings(args.rlib))
    if "nbce" in sets:
        for name, s in (("wine", 1000), ("ecoli_332", 2000), ("segmentation_2310", 1000)):
            go(f"NBCE {name}", nbce_draws(name, s))
    if "synthetic" in sets:
        for n, s in ((1000, 4000), (5000, 500), (10_000, 1000)):
            go("synthetic", synthetic_draws(n, s, seed=n))
    print()
    print_rows(rows)
    worse = [r for r in rows if r["ours"] > r["salso"] + 1e-9 * (1 + abs(r["salso"]))]
    slower = [r for r in rows if r["cpu_ours"] > r["cpu_salso"]]
    print(f"\nours' expected loss > salso's on {len(worse)} of {len(rows)} rows; "
          f"ours slower on {len(slower)} of {len(rows)}", file=sys.stderr)


if __name__ == "__main__":
    main()
