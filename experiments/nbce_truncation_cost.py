"""Does the cost of NBCE's Gibbs kernels grow with the truncation T beyond the occupied
components?  CPU time per kernel of an iteration, the *same* states placed in tables of
T = 20, 108 (the FSD default at N = 2,000) and 400 components.

A state with K occupied components (from a short FSD chain) is relabelled into the first
K components of each table size and every kernel of an iteration is run ``--reps`` times
from a fresh copy of it (same numba seed for every T, so the moves are the same): the
single-site sweep, 100 split-merge proposals, the moves of identical-row groups, the
slice updates of alpha0 and beta, and the log joint.  Process CPU seconds, one thread
(run with NUMBA_NUM_THREADS=1).  Run against another checkout (PYTHONPATH=/other) to
compare code versions on the same states.

    PYTHONPATH=$PWD python experiments/nbce_truncation_cost.py --dataset letter_AJ \\
        --M 20 --family gmm
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def _state(idx, n_labels, z, T, alpha0, beta):
    from consensuskit.models.nbce.gibbs import GibbsState

    return GibbsState(idx, n_labels, z, T, alpha0, beta, "fsd")


def burnt_in_state(idx, n_labels, T, sweeps, seed):
    """z, alpha0, beta after ``sweeps`` default iterations of one FSD chain with T
    components, its labels made 0..K-1 by size."""
    from consensuskit.models.nbce.gibbs import gibbs_step

    rng = np.random.RandomState(seed)
    g = _state(idx, n_labels, rng.randint(0, T, size=idx.shape[0]), T, 1.0, 0.5)
    for _ in range(sweeps):
        gibbs_step(g, rng, 100, True)
    order = np.argsort(-g.cnt, kind="stable")
    new = np.empty(T, dtype=np.int64)
    new[order] = np.arange(T)
    return new[g.z], g.alpha0, g.beta


def kernel_times(idx, n_labels, z, T, alpha0, beta, reps):
    from consensuskit.models.nbce.gibbs.kernels import _seed
    from consensuskit.models.nbce.gibbs.moves import _update_hyper

    kernels = {
        "sweep": lambda g: g.sweep(1),
        "split_merge": lambda g: g.split_merge(100),
        "group_moves": lambda g: g.group_moves(),
        "hyper": lambda g: _update_hyper(g.cnt, g.nlk, g.num, g.ckm, g.invden, g.Jbeta,
                                         g.inv1a, g.hyp, g.n_labels, g.prior_code,
                                         np.ones(4), g.stats),
        "log_joint": lambda g: g.log_joint(),
    }
    out = {}
    for name, fn in kernels.items():
        fn(_state(idx, n_labels, z, T, alpha0, beta))  # compile / warm up
        total = 0.0
        for r in range(reps):
            g = _state(idx, n_labels, z, T, alpha0, beta)
            _seed(r)
            c0 = time.process_time()
            fn(g)
            total += time.process_time() - c0
        out[name] = total / reps
    return out


def main(argv=None):
    from consensuskit.data.ensemble import Ensemble
    from experiments.nbce_validation import ensemble

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dataset", default="letter_AJ")
    p.add_argument("--M", type=int, default=20)
    p.add_argument("--family", default="gmm")
    p.add_argument("--T", nargs="*", type=int, default=[20, 108, 400])
    p.add_argument("--burn-in-T", nargs="*", type=int, default=[20, 108],
                   help="table sizes of the chains whose states are timed")
    p.add_argument("--sweeps", type=int, default=60)
    p.add_argument("--reps", type=int, default=20)
    a = p.parse_args(argv)
    X = ensemble(a.dataset, a.M, a.family)
    ens = Ensemble.from_labels(X)
    idx = ens.offset_index(np.int16, order="C")
    n_labels = np.asarray(ens.n_labels)
    print(f"{a.dataset} M={a.M} {a.family}: N={idx.shape[0]}, L={int(n_labels.sum())}")
    for T0 in a.burn_in_T:
        z, alpha0, beta = burnt_in_state(idx, n_labels, T0, a.sweeps, 0)
        K = int(z.max()) + 1
        print(f"\nstate after {a.sweeps} iterations at T={T0}: {np.unique(z).size} occupied "
              f"(alpha0 {alpha0:.2f}, beta {beta:.4f}); CPU ms per call, mean of {a.reps}")
        print(f"{'T':>5} " + " ".join(f"{k:>12}" for k in
                                     ("sweep", "split_merge", "group_moves", "hyper",
                                      "log_joint", "iteration")))
        for T in a.T:
            if T < K:
                continue
            t = kernel_times(idx, n_labels, z, T, alpha0, beta, a.reps)
            print(f"{T:>5} " + " ".join(f"{1e3 * v:>12.3f}" for v in t.values())
                  + f" {1e3 * sum(t.values()):>12.3f}")


if __name__ == "__main__":
    main()
