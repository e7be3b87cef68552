"""ResamplingConsensus without n^2 memory: sampled pairs against the exact computation.

Two parts, each case in a fresh subprocess (peak RSS from ``ru_maxrss``; CPU and wall
seconds; one thread):

* ``check``: at ``--n-check`` items (default 2,000; planted ensemble, 4 groups, 10 noisy
  base clusterings; or ``--check-data NAME:labels|features``, a bundled dataset), one
  set of resampled partitions (average-linkage subsample trees, K = 2..8) summarised
  exactly (every pair) and on ``--pairs`` sampled pairs for ``--seeds`` seeds; prints,
  per K, the exact area and PAC, the sampled estimates with their stated standard error,
  and the largest |difference| / SE over the seeds; then the SD and largest |z| over K
  and seeds of the area and of every point of the CDF.
* ``scale``: ``--n`` items (default 100,000), ``--resamples`` (default 100), K = 2..8,
  ``clusterer=MM(n_init=1)`` and ``n_pairs=--pairs``: time, peak memory, chosen K and
  ARI with the planted groups.  The exact mode cannot run here (its consensus alone
  would be n(n-1)/2 floats per K: 37 GiB at n = 1e5).

Usage::

    python experiments/bench_resampling_pairs.py [--n 100000 --resamples 100 --pairs 1000000]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np


def planted(n, m=10, k=4, noise=0.3, seed=0):
    from consensuskit.data.generate import noisy_copies

    rng = np.random.default_rng(seed)
    y = rng.integers(k, size=n)
    X = noisy_copies(y, m, noise=noise, n_labels=rng.integers(k, k + 3, size=m),
                     random_state=seed)
    return X, y


def check_data(spec, n):
    """``(X, data)`` of the check: the planted ensemble, or ``NAME:labels`` (a k-means
    ensemble of bundled dataset NAME, M = 10, k from 2 to 10 per column) or
    ``NAME:features`` (its standardised features), at most ``n`` rows."""
    if spec == "planted":
        return planted(n)[0], "labels"
    from sklearn.preprocessing import StandardScaler

    from consensuskit.data import datasets
    from consensuskit.data.generate import kmeans_partitions

    name, _, data = spec.partition(":")
    if data not in ("labels", "features"):
        raise SystemExit(f"--check-data {spec!r}: use planted, NAME:labels or NAME:features")
    F = StandardScaler().fit_transform(np.asarray(datasets.load(name)[0], dtype=np.float64))
    if len(F) > n:
        F = F[np.random.RandomState(0).choice(len(F), n, replace=False)]
    if data == "features":
        return F, "features"
    return kmeans_partitions(F, 10, n_clusters=(2, 10), random_state=1), "labels"


def case_check(args):
    from consensuskit.consensus.resampling import ResamplingConsensus

    X, data = check_data(args.check_data, args.n_check)
    c0, t0 = time.process_time(), time.perf_counter()
    exact = ResamplingConsensus(n_resamples=args.resamples_check, data=data,
                                random_state=0).fit(X)
    exact_cpu, exact_wall = time.process_time() - c0, time.perf_counter() - t0
    rows = []
    for seed in range(args.seeds):
        c0 = time.process_time()
        est = ResamplingConsensus(n_resamples=args.resamples_check, n_pairs=args.pairs,
                                  data=data, random_state=seed).fit_resamples(exact.resamples_)
        se = np.asarray(est.cdf_se_)
        cdf_z = (np.asarray(est.cdf_) - np.asarray(exact.cdf_))[se > 0] / se[se > 0]
        rows.append({"area": est.area_.tolist(), "area_se": est.area_se_.tolist(),
                     "pac": est.pac_.tolist(), "pac_se": est.pac_se_.tolist(),
                     "cdf_z": cdf_z.tolist(), "cpu": time.process_time() - c0})
    return {"ks": exact.ks_.tolist(), "area": exact.area_.tolist(), "pac": exact.pac_.tolist(),
            "exact_cpu": exact_cpu, "exact_wall": exact_wall, "sampled": rows}


def case_scale(args):
    from sklearn.metrics import adjusted_rand_score

    from consensuskit import MM
    from consensuskit.consensus.resampling import ResamplingConsensus

    X, y = planted(args.n)
    c0, t0 = time.process_time(), time.perf_counter()
    est = ResamplingConsensus(n_resamples=args.resamples, n_pairs=args.pairs,
                              clusterer=MM(n_init=1, max_iter=50), random_state=0,
                              progress=args.progress).fit(X)
    return {"cpu": time.process_time() - c0, "wall": time.perf_counter() - t0,
            "k": int(est.n_clusters_), "ari": float(adjusted_rand_score(y, est.labels_)),
            "ks": est.ks_.tolist(), "pac": est.pac_.tolist(), "pac_se": est.pac_se_.tolist(),
            "area": est.area_.tolist(), "area_se": est.area_se_.tolist()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--resamples", type=int, default=100)
    ap.add_argument("--pairs", type=int, default=1_000_000)
    ap.add_argument("--n-check", type=int, default=2000)
    ap.add_argument("--resamples-check", type=int, default=100)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--parts", default="check,scale")
    ap.add_argument("--check-data", default="planted",
                    help="planted, or NAME:labels / NAME:features of a bundled dataset")
    ap.add_argument("--progress", action="store_true")
    ap.add_argument("--case", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.case:
        out = {"check": case_check, "scale": case_scale}[args.case](args)
        out["peak"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        print(json.dumps(out))
        return
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", NUMBA_NUM_THREADS="1",
               OPENBLAS_NUM_THREADS="1")
    for part in args.parts.split(","):
        cmd = [sys.executable, __file__, "--case", part] + [
            a for kv in (("--n", args.n), ("--resamples", args.resamples),
                         ("--pairs", args.pairs), ("--n-check", args.n_check),
                         ("--resamples-check", args.resamples_check), ("--seeds", args.seeds),
                         ("--check-data", args.check_data))
            for a in (kv[0], str(kv[1]))] + (["--progress"] if args.progress else [])
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"{part}: failed\n{proc.stderr[-2000:]}")
            continue
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        if part == "check":
            print(f"check ({args.check_data}): n={args.n_check}, {args.resamples_check} "
                  "resamples, exact vs "
                  f"{args.pairs:,} sampled pairs x {args.seeds} seeds; exact fit "
                  f"{r['exact_cpu']:.1f} s CPU ({r['exact_wall']:.1f} s wall), peak "
                  f"{r['peak'] / 2**30:.2f} GiB")
            print(f"{'K':>3s} {'area':>8s} {'sampled':>8s} {'SE':>8s} {'max|z|':>7s} "
                  f"{'PAC':>8s} {'sampled':>8s} {'SE':>8s} {'max|z|':>7s}")
            S = r["sampled"]
            for i, k in enumerate(r["ks"]):
                za = max(abs(s["area"][i] - r["area"][i]) / s["area_se"][i] for s in S)
                zp = max((abs(s["pac"][i] - r["pac"][i]) / s["pac_se"][i]
                          if s["pac_se"][i] > 0 else 0.0) for s in S)
                print(f"{k:3d} {r['area'][i]:8.4f} {S[0]['area'][i]:8.4f} "
                      f"{S[0]['area_se'][i]:8.5f} {za:7.2f} {r['pac'][i]:8.4f} "
                      f"{S[0]['pac'][i]:8.4f} {S[0]['pac_se'][i]:8.5f} {zp:7.2f}")
            print(f"    sampled summary: median {np.median([s['cpu'] for s in S]):.2f} s CPU")
            za = np.array([(np.array(s["area"]) - r["area"]) / s["area_se"] for s in S])
            zc = np.concatenate([s["cdf_z"] for s in S])
            print(f"    z over K and seeds: area SD {za.std():.2f}, max |z| "
                  f"{np.abs(za).max():.2f}; CDF ({zc.size} points) SD {zc.std():.2f}, "
                  f"max |z| {np.abs(zc).max():.2f}")
        else:
            print(f"scale: n={args.n:,}, {args.resamples} resamples, K=2..8, MM(n_init=1) per "
                  f"subsample, {args.pairs:,} pairs: {r['cpu']:.1f} s CPU ({r['wall']:.1f} s "
                  f"wall), peak {r['peak'] / 2**30:.2f} GiB; chosen K={r['k']} (planted 4), "
                  f"ARI {r['ari']:.3f}")
            for i, k in enumerate(r["ks"]):
                print(f"    K={k}: area {r['area'][i]:.4f} +- {r['area_se'][i]:.4f}, PAC "
                      f"{r['pac'][i]:.4f} +- {r['pac_se'][i]:.4f}")


if __name__ == "__main__":
    main()
