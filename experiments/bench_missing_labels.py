"""CSPA with missing labels and HGPA's partitioner, on glass (one process).

Ensemble: 50 k-means base clusterings of glass (``generate.kmeans_partitions``,
k drawn from 2..10, or fixed at 6 with ``--fixed-k``), then 20% of the labels
removed (``generate.drop_labels``).  For each of ``--seeds`` ensembles, ARI with
the classes of:

* CSPA, spectral partitioner (the default) and METIS (Strehl & Ghosh's balanced cut);
* CSPA's graph normalised by M instead of n_ij (what a CSPA that ignores missing
  labels does; spectral partitioner), to show the normalisation's effect;
* HGPA with KaHyPar (the default) and the METIS star-expansion substitute.

Prints the mean ARI over the seeds with its standard error and each method's
median CPU and wall time per fit.  The ClusterEnsembles package (a peer that runs
CSPA as METIS on the raw co-occurrence counts and HGPA with KaHyPar, km1 objective)
is used when importable.

Usage::

    python experiments/bench_missing_labels.py [--seeds 10] [--fixed-k]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from sklearn.metrics import adjusted_rand_score


def _timed(fn, X):
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn(X)
    return out, time.process_time() - c0, time.perf_counter() - t0


def methods(k, announce=False):
    import scipy.sparse as sp

    import consensuskit as ck
    from consensuskit.consensus.graph import HGPA, spectral_partition

    def cspa_by_m(X):
        B = ck.as_ensemble(X).onehot(dtype=np.float64)
        return spectral_partition(sp.csr_matrix(B @ B.T) / X.shape[1], k, 0)

    def hgpa_metis(X):
        ens = ck.as_ensemble(X)
        runs = HGPA._metis_runs(ens, k, 5, np.random.RandomState(0))
        return min(runs, key=lambda r: r[1])[0]

    out = {
        "CSPA spectral (default)": lambda X: ck.CSPA(k, random_state=0).fit(X).labels_,
        "CSPA METIS": lambda X: ck.CSPA(k, partitioner="metis", random_state=0).fit(X).labels_,
        "CSPA spectral, / M": cspa_by_m,
        "HGPA KaHyPar (default)": lambda X: ck.HGPA(k, random_state=0).fit(X).labels_,
        "HGPA METIS star expansion": hgpa_metis,
    }
    try:  # optional peer
        import ClusterEnsembles as CE

        def peer(fn):
            return lambda X: fn(np.where(X < 0, np.nan, X).T, nclass=k)

        out["ClusterEnsembles cspa"] = peer(CE.cspa)
        out["ClusterEnsembles hgpa"] = peer(CE.hgpa)
    except ImportError:
        if announce:
            print("ClusterEnsembles is not importable here; peer rows skipped")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--fixed-k", action="store_true", help="k = 6 in every base clustering")
    ap.add_argument("--missing", type=float, default=0.2)
    args = ap.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    from consensuskit.data import datasets, generate

    F, y = datasets.load("glass")
    k = len(np.unique(y))
    table = {}
    methods(k, announce=True)
    for seed in range(args.seeds):
        X = generate.kmeans_partitions(F, 50, n_clusters=6 if args.fixed_k else (2, 10),
                                       random_state=seed)
        Xm = generate.drop_labels(X, args.missing, random_state=seed)
        for name, fn in methods(k).items():
            lab, cpu, wall = _timed(fn, Xm)
            table.setdefault(name, []).append((adjusted_rand_score(y, lab), cpu, wall))
    print(f"glass, 50 k-means partitions (k {'= 6' if args.fixed_k else 'in 2..10'}), "
          f"{args.missing:.0%} labels removed, {args.seeds} seeds")
    print(f"{'method':30s} {'ARI mean':>9s} {'+- SE':>7s} {'min':>6s} {'max':>6s} "
          f"{'cpu s':>7s} {'wall s':>7s}")
    for name, rows in table.items():
        a = np.array(rows)
        se = a[:, 0].std(ddof=1) / np.sqrt(len(a)) if len(a) > 1 else float("nan")
        print(f"{name:30s} {a[:, 0].mean():9.3f} {se:7.3f} {a[:, 0].min():6.3f} "
              f"{a[:, 0].max():6.3f} {np.median(a[:, 1]):7.3f} {np.median(a[:, 2]):7.3f}")


if __name__ == "__main__":
    main()
