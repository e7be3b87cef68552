"""Time and peak memory of KCC and the comparison consensus functions (one process).

Ensembles: N points in 5 planted groups, 10 base clusterings with k_j in 3..10
(planted groups relabelled, some split, 20% of the labels replaced at random).
For each N and method: wall time of ``fit`` (tracemalloc off) and the peak of
memory traced by tracemalloc during a second ``fit`` (numpy and Python
allocations; memory allocated natively inside METIS or BLAS is not seen).
A method that refuses the size (dense N x N needed) is reported as
"n/a (dense)".

Usage::

    python experiments/bench_consensus.py [--sizes 5000 20000 100000] [--no-memory]
        [--methods HGPA ...]
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

import numpy as np
from sklearn.metrics import adjusted_rand_score


def make_ensemble(n, n_partitions=10, k_true=5, noise=0.2, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k_true, size=n)
    cols = []
    for _ in range(n_partitions):
        k = int(rng.integers(3, 11))
        # map the k_true groups onto k labels (merging when k < k_true, splitting else)
        base = rng.integers(0, k, size=k_true)
        lab = base[y]
        if k > k_true:
            extra = rng.integers(0, k, size=n)
            lab = np.where(rng.random(n) < (k - k_true) / k, extra, lab)
        flip = rng.random(n) < noise
        lab = np.where(flip, rng.integers(0, k, size=n), lab)
        cols.append(lab)
    return np.column_stack(cols), y


def methods(k):
    from consensuskit.consensus.eac import EAC
    from consensuskit.consensus.graph import CSPA, HBGF, HGPA, MCLA
    from consensuskit.consensus.kcc import KCC
    from consensuskit.consensus.qmi import QMI

    return {
        "KCC(Uc)": lambda: KCC(k, utility="Uc", random_state=0),
        "KCC(UH)": lambda: KCC(k, utility="UH", random_state=0),
        "KCC(NUH)": lambda: KCC(k, utility="NUH", random_state=0),
        "CSPA": lambda: CSPA(k, random_state=0),
        "HGPA": lambda: HGPA(k, random_state=0),
        "MCLA": lambda: MCLA(k, random_state=0),
        "HBGF": lambda: HBGF(k, random_state=0),
        "EAC(average)": lambda: EAC(k, linkage="average"),
        "QMI": lambda: QMI(k, random_state=0),
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[5_000, 20_000, 100_000])
    ap.add_argument("--no-memory", action="store_true", help="skip the tracemalloc pass")
    ap.add_argument("--methods", nargs="+", default=None,
                    help="run only these methods (names as printed, e.g. HGPA 'KCC(Uc)')")
    args = ap.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    from consensuskit.data.ensemble import Ensemble

    k = 5
    rows = []
    for n in args.sizes:
        X, y = make_ensemble(n)
        ens = Ensemble.from_labels(X)
        for name, make in methods(k).items():
            if args.methods and name not in args.methods:
                continue
            try:
                t0 = time.perf_counter()
                lab = make().fit(ens).labels_
                wall = time.perf_counter() - t0
            except ValueError as err:
                if "exceeds" in str(err) or "dense" in str(err).lower():
                    rows.append((n, name, None, None, None, "n/a (dense)"))
                    print(f"N={n:>7} {name:<14} n/a (dense): {err}", flush=True)
                    continue
                raise
            peak = None
            if not args.no_memory:
                tracemalloc.start()
                make().fit(ens)
                peak = tracemalloc.get_traced_memory()[1] / 2**20
                tracemalloc.stop()
            ari = adjusted_rand_score(y, lab)
            rows.append((n, name, wall, peak, ari, ""))
            mem = f"{peak:9.1f}" if peak is not None else "      n/a"
            print(f"N={n:>7} {name:<14} {wall:8.2f} s {mem} MiB  ARI {ari:.3f}", flush=True)

    print("\n| N | method | time (s) | x fastest | peak traced MiB | ARI vs planted |")
    print("|---|---|---|---|---|---|")
    for n in args.sizes:
        sub = [r for r in rows if r[0] == n]
        fastest = min((r[2] for r in sub if r[2] is not None), default=None)
        for _, name, wall, peak, ari, note in sub:
            if wall is None:
                print(f"| {n} | {name} | {note} | | | |")
            else:
                pk = f"{peak:.1f}" if peak is not None else "n/a"
                print(f"| {n} | {name} | {wall:.2f} | {wall / fastest:.1f} | {pk} | {ari:.3f} |")


if __name__ == "__main__":
    main()
