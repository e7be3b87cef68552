"""BCE's initialisations side by side: accuracy on the accuracy-table ensembles, and cost.

* Accuracy: the construction of ``experiments/accuracy_table.py`` (iris, wine, glass,
  ecoli; 20 k-means base clusterings with k in 2..2C per seed), ``BCE(C)`` with its other
  defaults and ``init`` = ``"kmeans"`` (today's default: scikit-learn k-means on the one-hot
  rows, once per restart) or ``"seeded"`` (k-means++ seeding + two assignment steps on
  2,000 sampled rows); mean (std) accuracy over ``--seeds`` seeds, and the mean final bound.
* Cost: a planted ensemble of ``--n`` rows (default 20,000; 20 columns, 6 labels, 4
  groups, 30% noise): CPU seconds of one initialisation (median of ``--repeats``) and of
  the default fit (``n_init=3``) with each init, one thread.

Usage::

    python experiments/bench_init.py [--seeds 5] [--n 20000]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

for _v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

INITS = ("kmeans", "seeded")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    sys.path.insert(0, os.path.dirname(__file__))
    from accuracy_table import DATASETS, base_clusterings, load

    import consensuskit as ck
    from consensuskit.data.ensemble import Ensemble
    from consensuskit.data.generate import noisy_copies
    from consensuskit.evaluation.metrics import accuracy
    from consensuskit.models.bce import initialise

    print(f"accuracy, BCE(C) defaults, {args.seeds} seeds: mean (std); mean final bound")
    print(f"{'dataset':8s} " + " ".join(f"{i:>24s}" for i in INITS))
    for name in DATASETS:
        F, y = load(name)
        C = len(np.unique(y))
        acc = {i: [] for i in INITS}
        bound = {i: [] for i in INITS}
        for s in range(args.seeds):
            X = base_clusterings(F, C, 20, s)
            for init in INITS:
                est = ck.BCE(C, init=init, random_state=s).fit(X)
                acc[init].append(accuracy(y, est.labels_))
                bound[init].append(est.lower_bound_)
        print(f"{name:8s} " + " ".join(
            f"{np.mean(acc[i]):.3f} ({np.std(acc[i]):.3f}) {np.mean(bound[i]):9.1f}"
            for i in INITS))

    rng = np.random.default_rng(0)
    z = rng.integers(4, size=args.n)
    X = noisy_copies(z, 20, noise=0.3, n_labels=np.full(20, 6), random_state=0)
    ens = Ensemble.from_labels(X)
    print(f"\ncost, planted N={args.n:,} x 20, K=4, one thread (CPU s, median of "
          f"{args.repeats})")
    for init, fn in (("kmeans", lambda r: initialise.init_beta_kmeans(ens, 4, r, n_jobs=1)),
                     ("seeded", lambda r: initialise.init_beta_seeded(ens, 4, r))):
        t = []
        for r in range(args.repeats):
            c = time.process_time()
            fn(np.random.RandomState(r))
            t.append(time.process_time() - c)
        fits, accs = [], []
        for r in range(args.repeats):
            c = time.process_time()
            est = ck.BCE(4, init=init, random_state=r).fit(X)
            fits.append(time.process_time() - c)
            accs.append(accuracy(z, est.labels_))
        print(f"{init:8s} one init {np.median(t):.3f} s; default fit (n_init=3) "
              f"{np.median(fits):.3f} s; accuracy {np.mean(accs):.3f}")


if __name__ == "__main__":
    main()
