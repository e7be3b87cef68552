"""Co-association counts for large N: sparse pairs versus the dense N x N computation.

Ours: ``Ensemble.coassociation(pairs)`` on N=200,000 points, M=50 base
clusterings (random labels, k_j uniform in 2..20, 10 % of labels missing) and
10^6 pairs from ``sample_pairs``.  Peer, in the same process: the dense path
``Ensemble.coassociation()`` (sparse one-hot product, N x N output) on a small N,
since at N=200,000 it would need N^2 * 8 bytes = 320 GB per array.

Reports the median wall time of ``--repeats`` runs and the peak memory allocated
during one call (tracemalloc, which sees numpy's allocations), single-threaded.

Run from the repository root:
    PYTHONPATH=. python experiments/bench_coassociation.py [--n 200000] [--pairs 1000000]
"""

import os

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import time  # noqa: E402
import tracemalloc  # noqa: E402

import numpy as np  # noqa: E402

from consensuskit.data.ensemble import Ensemble, sample_pairs  # noqa: E402


def random_ensemble(n, m, missing, rng):
    k = rng.integers(2, 21, size=m)
    X = rng.integers(0, k[None, :], size=(n, m))
    drop = rng.random((n, m)) < missing
    drop[np.arange(n), rng.integers(0, m, size=n)] = False  # every row keeps a label
    X[drop] = -1
    return Ensemble.from_labels(X)


def measure(fn, repeats):
    """Median wall time over ``repeats`` calls and the peak bytes allocated in one call."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    fn()
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    return float(np.median(times)), peak


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--m", type=int, default=50)
    ap.add_argument("--pairs", type=int, default=1_000_000)
    ap.add_argument("--missing", type=float, default=0.1)
    ap.add_argument("--dense-n", type=int, default=4_000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:  # pragma: no cover
        pass
    from sklearn.utils import check_random_state  # noqa: F401  (import outside the timings)

    rng = np.random.default_rng(0)

    t0 = time.perf_counter()
    ens = random_ensemble(args.n, args.m, args.missing, rng)
    t_build = time.perf_counter() - t0
    t0 = time.perf_counter()
    pairs = sample_pairs(args.n, args.pairs, random_state=0)
    t_pairs = time.perf_counter() - t0
    t_sparse, mem_sparse = measure(lambda: ens.coassociation(pairs), args.repeats)

    # the peer: dense counts on a small N, and ours on the same small ensemble
    small = random_ensemble(args.dense_n, args.m, args.missing, rng)
    small_pairs = sample_pairs(args.dense_n, min(args.pairs, args.dense_n * 50), random_state=1)
    t_dense, mem_dense = measure(lambda: small.coassociation(), args.repeats)
    t_small, mem_small = measure(lambda: small.coassociation(small_pairs), args.repeats)
    c, n = small.coassociation()
    cs, ns = small.coassociation(small_pairs)
    assert np.array_equal(cs, c[small_pairs[:, 0], small_pairs[:, 1]])
    assert np.array_equal(ns, n[small_pairs[:, 0], small_pairs[:, 1]])
    del c, n

    mb = 1024.0**2
    print(f"setup: Ensemble.from_labels {args.n}x{args.m}: {t_build:.2f} s; "
          f"sample_pairs({args.pairs:,}): {t_pairs:.2f} s")
    print(f"{'method':<20}{'N':>9}{'pairs':>14}{'median s':>10}{'peak MB':>10}"
          f"{'N^2*8 MB':>12}{'peak/N^2*8':>12}{'ns/pair/col':>13}")
    rows = [
        ("sparse pairs (ours)", args.n, args.pairs, t_sparse, mem_sparse),
        ("sparse pairs (ours)", args.dense_n, small_pairs.shape[0], t_small, mem_small),
        ("dense N x N (peer)", args.dense_n, args.dense_n * (args.dense_n - 1) // 2, t_dense,
         mem_dense),
    ]
    for name, N, P, t, mem in rows:
        full = N * N * 8
        print(f"{name:<20}{N:>9,}{P:>14,}{t:>10.3f}{mem / mb:>10.1f}{full / mb:>12,.0f}"
              f"{mem / full:>12.2e}{1e9 * t / (P * args.m):>13.2f}")
    print(f"dense at N={args.n:,} would need at least 2 x {args.n**2 * 8 / 1024**3:,.0f} GiB "
          f"(c and n); sparse used {mem_sparse / mb:.1f} MiB")
    ok = t_sparse < 5.0 and mem_sparse < 1e-3 * args.n**2 * 8
    print(f"must-show (< 5 s and memory far below N^2*8): {'yes' if ok else 'NO'} "
          "(timings on a shared, contended machine)")


if __name__ == "__main__":
    main()
