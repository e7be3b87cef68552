"""Held-out perplexity of NBCE, BCE and MM on planted mixture data with outlier rows.

Replicates the setting of the NBCE paper's Table 3 (Wang, Domeniconi & Laskey
2010): base clusterings are noisy copies of a planted consensus (a fraction
``noise`` of each base clustering's labels replaced at random), plus 5% outlier
rows that the base clusterings label inconsistently (each base clustering puts
an outlier, with probability 0.5, in a small cluster of its own, else in a
random planted cluster).  A quarter of the rows is held out; every model is
fitted on the rest with the true number of clusters for the parametric ones
(MM, BCE), and the perplexity of the held-out labels is reported (labels a
column never showed in training are treated as missing).  The paper claims
NBCE < BCE < MM.

    python experiments/nbce_perplexity.py [--quick]
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np
import torch

from consensuskit.estimators.nbce import NBCE


def planted(rng, n=800, n_clusters=5, m=10, noise=0.1, outliers=0.05, fresh=0.5):
    n_out = int(round(outliers * n))
    n_in = n - n_out
    z = rng.integers(0, n_clusters, size=n_in)
    cols = []
    for _ in range(m):
        perm = rng.permutation(n_clusters)
        lab = np.where(rng.random(n_in) < noise, rng.integers(0, n_clusters, n_in), perm[z])
        out = np.where(rng.random(n_out) < fresh, n_clusters + np.arange(n_out),
                       rng.integers(0, n_clusters, n_out))
        cols.append(np.concatenate([lab, out]))
    X = np.column_stack(cols)
    return X[rng.permutation(n)]


def load_peers():
    peers = {}
    for name in ("BCE", "MM"):
        try:
            import consensuskit

            peers[name] = getattr(consensuskit, name)
        except (ImportError, AttributeError) as exc:
            print(f"{name}: not importable yet ({type(exc).__name__}: {exc}); skipped")
    return peers


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", category=FutureWarning)
    peers = load_peers()
    n = 400 if args.quick else 800
    K = 5
    print(f"planted: N={n}, M=10, {K} clusters, 5% outlier rows; 1/4 of rows held out")
    header = ["noise", "seed", "NBCE"] + list(peers)
    print(" ".join(f"{h:>8}" for h in header))
    results = []
    for noise in (0.05, 0.10, 0.15, 0.20):
        for seed in range(args.seeds):
            rng = np.random.default_rng(seed)
            X = planted(rng, n=n, n_clusters=K, noise=noise)
            n_test = n // 4
            train, test = X[n_test:], X[:n_test]
            row = {}
            nb = NBCE(50, prior="tsb", n_samples=100 if args.quick else 200,
                      burn_in=100, n_chains=2, random_state=seed).fit(train)
            row["NBCE"] = nb.perplexity(test, unknown="missing")
            for name, cls in peers.items():
                try:
                    est = cls(n_clusters=K, random_state=seed).fit(train)
                    row[name] = est.perplexity(test, unknown="missing")
                except Exception as exc:  # report, keep going
                    print(f"{name} failed: {type(exc).__name__}: {exc}")
                    row[name] = np.nan
            results.append((noise, row))
            print(" ".join([f"{noise:>8.2f}", f"{seed:>8d}"]
                           + [f"{row[h]:>8.3f}" for h in header[2:]]), flush=True)
    print()
    for noise in sorted({r[0] for r in results}):
        rows = [r for nz, r in results if nz == noise]
        means = {h: float(np.nanmean([r[h] for r in rows])) for h in header[2:]}
        txt = ", ".join(f"{h} {v:.3f}" for h, v in means.items())
        order = ""
        if {"BCE", "MM"} <= set(means):
            nb, bc, mm = means["NBCE"], means["BCE"], means["MM"]
            order = f" | NBCE<BCE: {nb < bc}, NBCE<MM: {nb < mm}, BCE<MM: {bc < mm}"
        print(f"noise {noise:.2f}: mean held-out perplexity {txt}{order}")

    print("\nNBCE engines (paper Table 7 claims training perplexity Gibbs < CVB < VB):")
    rng = np.random.default_rng(0)
    X = planted(rng, n=n, n_clusters=K, noise=0.10)
    train, test = X[n // 4:], X[: n // 4]
    for inf, prior in (("gibbs", "tsb"), ("gibbs", "fsd"), ("cvb", "tsb"), ("cvb", "fsd"),
                       ("vb", "fsd")):
        m = NBCE(50, prior=prior, inference=inf, n_samples=100 if args.quick else 200,
                 burn_in=100, max_iter=300, tol=1e-5, random_state=0).fit(train)
        print(f"  {inf:5} {prior}: clusters {m.n_clusters_:3d}  train perplexity "
              f"{m.perplexity(train):.4f}  held-out {m.perplexity(test, unknown='missing'):.4f}",
              flush=True)


if __name__ == "__main__":
    main()
