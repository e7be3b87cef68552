"""Does NBCE Gibbs leave a merged start?  Sweeps until the planted clusters are found.

Planted ensembles (``generate.noisy_copies``: K equal clusters, M noisy copies with
K + 2 labels each), every chain started with all points in one component, NBCE's
defaults otherwise (truncation 20, TSB, alpha0 and beta sampled).  For each
split-merge setting the script prints how many of the chains reach the planted
partition (adjusted Rand index >= 0.95) within ``--sweeps`` sweeps, the median and
largest number of sweeps that took, and the CPU seconds of the whole run.  Without
split-merge moves (``0``) single-site Gibbs has to peel the clusters off one point
at a time and is slow to do it; the default schedule (``default``) should find the
planted clusters within a few sweeps.

    PYTHONPATH=$PWD python experiments/nbce_schedule.py [--schedules default 0 2 5]

Run it against another checkout (``PYTHONPATH=/path/to/other``) to compare its
default schedule.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from sklearn.metrics import adjusted_rand_score

from consensuskit.data.ensemble import Ensemble
from consensuskit.data.generate import noisy_copies
from consensuskit.models.nbce.gibbs import gibbs_nbce


def planted(N, K, M, noise, seed):
    """``(truth, ensemble)``: noisy copies of K equal planted clusters."""
    truth = np.random.default_rng(seed).permutation(np.arange(N) % K)
    X = noisy_copies(truth, M, noise=noise, n_labels=K + 2, random_state=seed)
    return truth, Ensemble.from_labels(X)


def sweeps_to_planted(truth, ens, n_split_merge, n_chains, n_sweeps, seed):
    """Per chain, the first sweep whose partition has ARI >= 0.95 with ``truth`` (inf if
    none within ``n_sweeps``), from a merged start; and the CPU seconds."""
    c0 = time.process_time()
    out = gibbs_nbce(ens.offset_index(), ens.n_labels, 20, n_chains=n_chains, n_jobs=1,
                     n_samples=n_sweeps, burn_in=0, n_split_merge=n_split_merge,
                     init=np.zeros(ens.n_samples, dtype=np.int64), random_state=seed)
    cpu = time.process_time() - c0
    first = []
    for z in out["z"]:
        hit = np.flatnonzero([adjusted_rand_score(truth, zs) >= 0.95 for zs in z])
        first.append(hit[0] + 1 if hit.size else np.inf)
    return np.asarray(first, dtype=float), cpu


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--schedules", nargs="+", default=["default", "0", "2", "5"],
                   help="n_split_merge values ('default' = None)")
    p.add_argument("--chains", type=int, default=8)
    p.add_argument("--sweeps", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    cases = [(200, 5, 10, 0.3), (1000, 5, 10, 0.3), (3000, 8, 10, 0.3), (10000, 8, 20, 0.3)]
    print(f"merged start, {a.chains} chains x {a.sweeps} sweeps; a chain has found the "
          "planted clusters at the first sweep with ARI >= 0.95")
    print(f"{'N':>6} {'K':>3} {'M':>3} {'noise':>5} {'n_split_merge':>13} {'found':>7} "
          f"{'median':>7} {'max':>5} {'CPU s':>7}")
    for N, K, M, noise in cases:
        truth, ens = planted(N, K, M, noise, a.seed)
        for sched in a.schedules:
            n_sm = None if sched == "default" else int(sched)
            first, cpu = sweeps_to_planted(truth, ens, n_sm, a.chains, a.sweeps, a.seed)
            found = np.isfinite(first)
            print(f"{N:>6} {K:>3} {M:>3} {noise:>5} {sched:>13} "
                  f"{found.sum():>3d}/{found.size:<3d} {np.median(first):>7.1f} "
                  f"{first.max():>5.0f} {cpu:>7.2f}", flush=True)


if __name__ == "__main__":
    main()
