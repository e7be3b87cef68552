"""PCC sparse mode on the KDD Cup 99 120,000-row sample (paper section 7.3).

One process:

1. standardise the 41 features (constant columns dropped), build 100 k-means
   partitions on random 50% row subsamples (k uniform in 2..10,
   ``KMeans(init="random", n_init=1)``; rows outside the subsample get -1);
2. sample 0.25 per mille of the ~7.2e9 point pairs and count ``c_ij`` / ``N_ij``;
3. fit PCC-L2 and PCC-KL on those pairs with at most ``n K`` coordinate steps
   (as in the paper) and time the optimiser; then time the whole estimator
   ``PCC(sparse_pairs=...).fit`` (its own pair sample, counting and descent);
4. beside it, a peer on the same pairs and objective: plain numpy projected
   gradient descent (row-wise Euclidean projection onto the simplex, Armijo
   backtracking), run until it matches PCC's objective or its time budget ends.

The paper's single-core C code took 13.8 s (L2) and 16.7 s (KL).

Usage::

    python experiments/bench_pcc.py [--data PATH] [--n-partitions 100]
        [--pair-fraction 0.00025] [--k 3] [--peer-budget 60] [--seed 0]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import linear_sum_assignment
from sklearn.cluster import KMeans
from threadpoolctl import threadpool_limits

from consensuskit.data.ensemble import Ensemble, sample_pairs
from consensuskit.models.pcc.descent import pairs_objective, pcc_descent_pairs
from consensuskit.models.pcc.estimator import PCC

DEFAULT_DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "datasets"
DEFAULT_DATA = DEFAULT_DATA / "kdd99_10pct_sample120k.csv.gz"


def kmeans_ensemble(X, n_partitions, rate, k_range, rng):
    n = X.shape[0]
    L = np.full((n, n_partitions), -1, dtype=np.int64)
    for m in range(n_partitions):
        rows = rng.choice(n, size=int(rate * n), replace=False)
        k = int(rng.integers(k_range[0], k_range[1] + 1))
        km = KMeans(k, init="random", n_init=1, random_state=int(rng.integers(2**31 - 1)))
        L[rows, m] = km.fit_predict(X[rows])
    return L


def accuracy(truth, labels):
    """H criterion: Hungarian-matched fraction of points."""
    t = np.unique(truth, return_inverse=True)[1]
    p = np.unique(labels, return_inverse=True)[1]
    cont = np.zeros((t.max() + 1, p.max() + 1))
    np.add.at(cont, (t, p), 1)
    r, c = linear_sum_assignment(-cont)
    return cont[r, c].sum() / t.size


def project_rows_to_simplex(V):
    """Euclidean projection of each row onto the probability simplex (sort-based)."""
    n, K = V.shape
    U = -np.sort(-V, axis=1)
    css = np.cumsum(U, axis=1) - 1.0
    ind = np.arange(1, K + 1)
    cond = U - css / ind > 0
    rho = K - 1 - np.argmax(cond[:, ::-1], axis=1)
    theta = css[np.arange(n), rho] / (rho + 1)
    return np.maximum(V - theta[:, None], 0.0)


def projected_gradient(pairs, c, nn, Y0, div, target, budget_s):
    """Numpy peer: full-gradient projected descent on the same pair objective."""
    i, j = pairs[:, 0], pairs[:, 1]
    n, K = Y0.shape
    Y = Y0.copy()

    def f_and_w(Y):
        a = np.einsum("pk,pk->p", Y[i], Y[j])
        if div == "l2":
            f = np.sum((c - nn * a) ** 2 / nn)
            w = 2.0 * (nn * a - c)
        else:
            with np.errstate(divide="ignore", invalid="ignore"):
                f = np.sum(
                    np.where(c > 0, c * np.log(c / (nn * a)), 0.0)
                    + np.where(nn > c, (nn - c) * np.log((nn - c) / (nn * (1 - a))), 0.0)
                )
                w = np.where(c > 0, -c / a, 0.0) + np.where(nn > c, (nn - c) / (1 - a), 0.0)
        return f, w

    t0 = time.perf_counter()
    c0 = time.process_time()
    f, w = f_and_w(Y)
    step = 1.0 / max(1e-12, 2.0 * nn.sum() / n)
    it = 0
    while f > target and time.process_time() - c0 < budget_s:
        G = np.empty_like(Y)
        for k in range(K):
            G[:, k] = np.bincount(i, w * Y[j, k], minlength=n) + np.bincount(
                j, w * Y[i, k], minlength=n
            )
        while True:
            Yn = project_rows_to_simplex(Y - step * G)
            fn, wn = f_and_w(Yn)
            if np.isfinite(fn) and fn <= f - 1e-4 * np.sum(G * (Y - Yn)):
                break
            step *= 0.5
            if step < 1e-20:
                return Y, f, time.perf_counter() - t0, time.process_time() - c0, it
        Y, f, w = Yn, fn, wn
        step *= 1.5
        it += 1
    return Y, f, time.perf_counter() - t0, time.process_time() - c0, it


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--n-partitions", type=int, default=100)
    ap.add_argument("--pair-fraction", type=float, default=0.00025)
    ap.add_argument("--k", type=int, default=3, help="PCC n_clusters (a maximum)")
    ap.add_argument("--peer-budget", type=float, default=60.0,
                    help="peer CPU seconds per divergence")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(args.seed)

    df = pd.read_csv(args.data)
    y = df.pop("label").to_numpy()
    X = df.to_numpy(dtype=np.float64)
    sd = X.std(axis=0)
    X = (X[:, sd > 0] - X[:, sd > 0].mean(axis=0)) / sd[sd > 0]
    n = X.shape[0]
    print(f"kdd99 sample: n={n}, d={X.shape[1]} (standardised), {np.unique(y).size} labels")

    t = time.perf_counter()
    with threadpool_limits(1):
        L = kmeans_ensemble(X, args.n_partitions, 0.5, (2, 10), rng)
    print(f"{args.n_partitions} k-means partitions on 50% subsamples: "
          f"{time.perf_counter() - t:.1f} s")

    seen = (L >= 0).any(axis=1)
    if not seen.all():  # only with few partitions: rows no subsample drew
        print(f"dropping {np.count_nonzero(~seen)} rows that no partition labelled")
        L, y = L[seen], y[seen]
    n = L.shape[0]
    ens = Ensemble.from_labels(L)
    total = n * (n - 1) // 2
    n_pairs = int(round(args.pair_fraction * total))
    t = time.perf_counter()
    t_cpu = time.process_time()
    pairs = sample_pairs(n, n_pairs, int(rng.integers(2**31 - 1)))
    t_pairs = time.perf_counter() - t
    t = time.perf_counter()
    c, nn = ens.coassociation(pairs=pairs)
    t_counts = time.perf_counter() - t
    t_cpu = time.process_time() - t_cpu
    keep = nn > 0
    print(f"pairs: {n_pairs} of {total} ({args.pair_fraction * 1000:.3g} per mille), "
          f"{keep.sum()} with N_ij > 0; mean pairs per point {2 * keep.sum() / n:.1f}; "
          f"sampling {t_pairs:.2f} s, counting {t_counts:.2f} s wall ({t_cpu:.2f} s CPU together)")
    pairs, c, nn = pairs[keep], c[keep].astype(float), nn[keep].astype(float)

    base_acc = np.mean([accuracy(y[L[:, m] >= 0], L[L[:, m] >= 0, m]) for m in range(L.shape[1])])
    print(f"mean base-partition accuracy (observed rows, vs the 23 labels): {base_acc:.3f}")

    K = args.k
    Y0 = (0.9 / K) + 0.1 * rng.dirichlet(np.ones(K), size=n)
    # compile the kernels outside the timed region
    pcc_descent_pairs(pairs[:100], c[:100], nn[:100], Y0[:, :], "l2", max_iter=10)
    pcc_descent_pairs(pairs[:100], c[:100], nn[:100], Y0[:, :], "kl", max_iter=10)

    rows = []
    for div, paper_s in (("l2", 13.8), ("kl", 16.7)):
        t = time.perf_counter()
        cpu = time.process_time()
        res = pcc_descent_pairs(pairs, c, nn, Y0, div, max_iter=n * K)
        t_ours = time.perf_counter() - t
        cpu_ours = time.process_time() - cpu
        lab = res.Y.argmax(1)
        acc = accuracy(y, lab)
        f0 = pairs_objective(Y0, pairs, c, nn, div)
        print(f"PCC-{div}: {t_ours:.2f} s wall ({cpu_ours:.2f} s CPU) for {res.n_iter} steps "
              f"(max n K = {n * K}), "
              f"converged={res.converged}, objective {f0:.6g} -> {res.objective:.6g}, "
              f"{np.unique(lab).size} clusters used, accuracy {acc:.3f} (paper C code: "
              f"{paper_s} s)")
        Yp, fp, t_peer, cpu_peer, it_peer = projected_gradient(
            pairs, c, nn, Y0, div, target=res.objective, budget_s=args.peer_budget
        )
        reached = fp <= res.objective
        ratio = cpu_peer / cpu_ours
        ge = "" if reached else ">= "
        print(f"  peer numpy projected gradient: {t_peer:.2f} s wall ({cpu_peer:.2f} s CPU), "
              f"{it_peer} iterations, objective {fp:.6g} "
              f"({'reached' if reached else 'NOT reached within budget'}); "
              f"CPU-time ratio peer/ours {ge}{ratio:.1f}x")
        rows.append((div, t_ours, cpu_ours, res.objective, t_peer, cpu_peer, fp, ge, ratio))
        t = time.perf_counter()
        cpu = time.process_time()
        est = PCC(K, divergence=div, sparse_pairs=args.pair_fraction, max_iter=n * K,
                  random_state=args.seed).fit(ens)
        print(f"  end-to-end PCC(sparse_pairs={args.pair_fraction}).fit (pair sampling, "
              f"counting, descent): {time.perf_counter() - t:.2f} s wall "
              f"({time.process_time() - cpu:.2f} s CPU), objective {est.objective_:.6g}, "
              f"accuracy {accuracy(y, est.labels_):.3f}")
    print("\ndivergence | PCC wall s | PCC CPU s | PCC objective | peer wall s | peer CPU s "
          "| peer objective | CPU ratio")
    for div, a, ac, fa, b, bc, fb, ge, r in rows:
        print(f"{div} | {a:.2f} | {ac:.2f} | {fa:.6g} | {b:.2f} | {bc:.2f} | {fb:.6g} "
              f"| {ge}{r:.1f}x")


if __name__ == "__main__":
    main()
