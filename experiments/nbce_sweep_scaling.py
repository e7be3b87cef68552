"""CPU seconds per iteration of NBCE's default Gibbs sampler against N, and the log-log
slope: one chain, one thread, planted data (M = 20 noisy copies of 5 equal clusters,
k_j = 5, 20% noise; ``bench_bce.planted``) started at the planted partition, so every N
is timed at the same occupancy.

An iteration is what the estimator runs per sweep with its defaults
(:meth:`GibbsState.iterate` with the default split-merge count and its default share of
near pairs, group moves, TSB label swaps, alpha0 and beta sampled; untruncated TSB).
Per iteration = (CPU of ``--iters[i]`` iterations) / ``--iters[i]`` after one untimed
iteration, median of ``--repeats``.

    OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1 PYTHONPATH=$PWD \\
        python experiments/nbce_sweep_scaling.py --sizes 10000 100000 1000000 --iters 20 6 2

``--compare-index`` also times, in the same process and in turn with it, the same chain on
the int16 global label index that the estimator passed before it passed the codes (issue
27), prints the ratio of the two, and checks that both ran the same chain (equal z).
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def per_iteration(N, iters, repeats, truth, X, layout="codes"):
    """Median CPU seconds per iteration, occupied components and the final z, with the
    sampler reading ``layout``: ``"codes"`` (the codes and the columns' offsets, what the
    estimator passes) or ``"index"`` (the int16 global label index)."""
    from consensuskit.data.ensemble import Ensemble
    from consensuskit.models.nbce.gibbs import GibbsState
    from consensuskit.models.nbce.gibbs.chains import INITIAL_TABLE_SIZE, _default_split_merge
    from consensuskit.models.nbce.gibbs.kernels import _seed

    ens = Ensemble.from_labels(X[:N])
    rows = ((ens.codes, ens.offsets) if layout == "codes"
            else ens.offset_index(np.int16, order="C"))
    g = GibbsState(rows, ens.n_labels, truth[:N], INITIAL_TABLE_SIZE, 1.0, 0.5, "tsb",
                   unbounded=True)
    _seed(0)
    n_sm = _default_split_merge(N)
    g.iterate(n_sm, True)
    times = []
    for _ in range(repeats):
        c0 = time.process_time()
        for _ in range(iters):
            g.iterate(n_sm, True)
        times.append((time.process_time() - c0) / iters)
    return float(np.median(times)), int(np.count_nonzero(g.cnt)), g.z


def main(argv=None):
    from experiments.bench_bce import planted

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    p.add_argument("--iters", type=int, nargs="+", default=[20, 6, 2])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--compare-index", action="store_true",
                   help="also time the int16 global index layout, and print the ratio")
    a = p.parse_args(argv)
    truth, X = planted(max(a.sizes))
    rows = []
    for N, its in zip(a.sizes, a.iters):
        t, occ, z = per_iteration(N, its, a.repeats, truth, X)
        rows.append((N, t))
        print(f"N={N:.0e}: {t:.4f} s CPU per iteration ({its} iterations, median of "
              f"{a.repeats}; {occ} occupied)", flush=True)
        if a.compare_index:
            t_idx, _, z_idx = per_iteration(N, its, a.repeats, truth, X, layout="index")
            print(f"        int16 index: {t_idx:.4f} s; codes / index {t / t_idx:.3f}; "
                  f"same chain: {bool(np.array_equal(z, z_idx))}", flush=True)
    n, t = np.log10(np.array(rows)).T
    print(f"log-log slope of CPU per iteration against N: {np.polyfit(n, t, 1)[0]:.3f}")
    for (n0, t0), (n1, t1) in zip(rows, rows[1:]):
        print(f"  {n0:.0e} -> {n1:.0e}: {np.log(t1 / t0) / np.log(n1 / n0):.3f}")


if __name__ == "__main__":
    main()
