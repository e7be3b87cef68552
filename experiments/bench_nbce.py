"""Collapsed-Gibbs throughput of NBCE: numba sweeps vs a plain numpy per-point sweep,
during burn-in and at matched occupancy, one chain and two chains on two threads.

Everything runs in this one process on planted ensembles (M = 10 base clusterings
with 8 labels each, 10 planted clusters, 20% label noise), truncation K in {20, 100},
TSB and FSD.  A timed sweep is what ``gibbs_nbce`` does per sweep (compiled sweep +
the TSB label-swap pass; split-merge and hyper-parameter updates excluded, so the
rate is point-updates of the Gibbs sweep).  Rates are point-updates per CPU second
(``time.process_time``, all threads) unless marked wall; every rate is the median of
``--repeats`` runs.  Three tables:

``burn-in``
    From a uniformly random start (all K components occupied), the first sweeps and
    then sweeps after a short single-site burn-in: the occupancy then still depends
    on the prior (TSB keeps many more small components than FSD), so these rates are
    *not* comparable between priors.  Beside them the plain numpy implementation of
    the same conditional (log space, vectorised over K, Python loop over points) on
    a few thousand points of the burnt-in state, and the ratio.
``matched``
    TSB and FSD timed from the *same* states, so they have the same occupied
    components: "low", the state after a full burn-in (split-merge moves included)
    relabelled by decreasing size, and "high", TSB's state after the short
    single-site burn-in.  Every repeat starts again from that state.
``threads``
    ``gibbs_nbce`` with 2 chains started from the "low" state (sweeps only:
    ``n_split_merge=0``, fixed hyper-parameters), on 1 and on 2 threads (``n_jobs``):
    aggregate point-updates per wall second and per CPU second (the driver's
    per-sweep work included; a run of S + 1 sweeps minus one of 1 sweep, so the
    setup cancels).  On a shared machine the 2-thread wall rate is only
    as good as the second core is free.

    python experiments/bench_nbce.py [--quick] [--repeats R] [--sizes N ...]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("NUMBA_NUM_THREADS", "2")

import numpy as np  # noqa: E402

from consensuskit.models.nbce.gibbs import GibbsState, gibbs_nbce, gibbs_step, relabel_by_size


def planted_codes(rng, N, M, k, n_clusters=10, noise=0.2):
    z = rng.integers(0, n_clusters, size=N)
    cols = []
    for _ in range(M):
        perm = rng.integers(0, k, size=n_clusters)
        cols.append(np.where(rng.random(N) < noise, rng.integers(0, k, N), perm[z]))
    codes = np.column_stack(cols)
    idx = codes + (np.arange(M) * k)[None, :]
    return idx, np.full(M, k)


def numpy_sweep(st: GibbsState, n_points: int, rng) -> None:
    """Reference: the same collapsed conditional in plain numpy, one point at a time."""
    codes, offsets = st.rows
    idx = np.where(codes >= 0, codes + offsets, -1)  # the global label index
    z, cnt, nlk, ckm = st.z, st.cnt, st.nlk, st.ckm
    T = st.T
    a0, b = st.alpha0, st.beta
    Jb = st.n_labels * b
    M = idx.shape[1]
    cols = np.arange(M)
    for n in range(n_points):
        k = z[n]
        lab = idx[n]
        cnt[k] -= 1
        nlk[lab, k] -= 1
        ckm[cols, k] -= 1
        if st.prior == "tsb":
            ge = np.cumsum(cnt[::-1])[::-1]
            stick = np.log1p(cnt) - np.log(1 + a0 + ge)
            rest = np.log(a0 + ge - cnt) - np.log(1 + a0 + ge)
            lw = np.concatenate([[0.0], np.cumsum(rest[:-1])])
            lw[:-1] += stick[:-1]
        else:
            lw = np.log(a0 / T + cnt)
        lw = lw + np.log(b + nlk[lab]).sum(0) - np.log(Jb[:, None] + ckm).sum(0)
        p = np.exp(lw - lw.max())
        knew = int(np.searchsorted(np.cumsum(p), rng.random() * p.sum()))
        knew = min(knew, T - 1)
        z[n] = knew
        cnt[knew] += 1
        nlk[lab, knew] += 1
        ckm[cols, knew] += 1


def run(st: GibbsState, n_sweeps: int) -> None:
    """Sweeps as gibbs_nbce runs them: a compiled sweep, then (TSB) label swaps."""
    for _ in range(n_sweeps):
        st.sweep(1)
        st.label_swaps()


def sweep_rate(idx, nl, z, K, prior, n_sweeps, repeats):
    """Median point-updates per CPU second of ``n_sweeps`` sweeps, each repeat from ``z``."""
    times = []
    for _ in range(repeats):
        st = GibbsState(idx, nl, z, K, 1.0, 0.5, prior)
        t0 = time.process_time()
        run(st, n_sweeps)
        times.append(time.process_time() - t0)
    return n_sweeps * idx.shape[0] / float(np.median(times))


def timed(fn):
    """``(cpu seconds, wall seconds)`` of ``fn()``."""
    c, w = time.process_time(), time.perf_counter()
    fn()
    return time.process_time() - c, time.perf_counter() - w


def occupied(z):
    return int(np.unique(z).size)


def burnt_in(idx, nl, K, prior, rng, iterations):
    """State after ``iterations`` full iterations (sweep, split-merge and group moves,
    label swaps) from a random start, relabelled by decreasing size."""
    st = GibbsState(idx, nl, rng.integers(0, K, idx.shape[0]), K, 1.0, 0.5, prior)
    g = np.random.RandomState(int(rng.integers(2**31 - 1)))
    for _ in range(iterations):
        gibbs_step(st, g, n_split_merge=10, update_hyperparameters=False)
    return relabel_by_size(st.z)


def table_burn_in(a, data, rng):
    print("\n[burn-in] from a random start; rates in point-updates per CPU second")
    print(f"{'prior':5} {'N':>7} {'K':>4} {'start upd/s':>12} {'occupied':>8} "
          f"{'burnt upd/s':>12} {'numpy upd/s':>12} {'ratio':>6}")
    states = {}
    for N, (idx, nl) in data.items():
        for K in (20, 100):
            for prior in ("tsb", "fsd"):
                n_sw = 1 if (a.quick or N >= 100_000) else 3
                z0 = rng.integers(0, K, N)
                rate0 = sweep_rate(idx, nl, z0, K, prior, n_sw, a.repeats)
                st = GibbsState(idx, nl, z0, K, 1.0, 0.5, prior)
                run(st, 8 if a.quick else 15)  # single-site burn-in
                states[(N, K, prior)] = st.z.copy()
                rate = sweep_rate(idx, nl, st.z, K, prior, n_sw, a.repeats)
                ref = GibbsState(idx, nl, st.z, K, 1.0, 0.5, prior)
                n_np = 500 if a.quick else 2000
                t0 = time.process_time()
                numpy_sweep(ref, n_np, rng)
                rate_np = n_np / (time.process_time() - t0)
                print(f"{prior:5} {N:>7} {K:>4} {rate0:>12.3e} {occupied(st.z):>8d} "
                      f"{rate:>12.3e} {rate_np:>12.3e} {rate / rate_np:>6.0f}", flush=True)
    return states


def table_matched(a, data, short, rng):
    print("\n[matched] TSB and FSD from the same states; point-updates per CPU second")
    print(f"{'N':>7} {'K':>4} {'state':>5} {'occupied':>8} {'TSB upd/s':>12} {'FSD upd/s':>12}")
    low = {}
    for N, (idx, nl) in data.items():
        for K in (20, 100):
            low[(N, K)] = burnt_in(idx, nl, K, "fsd", rng, 10 if a.quick else 30)
            for name, z in (("low", low[(N, K)]), ("high", relabel_by_size(short[(N, K, "tsb")]))):
                r = [sweep_rate(idx, nl, z, K, p, 1, a.repeats) for p in ("tsb", "fsd")]
                print(f"{N:>7} {K:>4} {name:>5} {occupied(z):>8d} {r[0]:>12.3e} {r[1]:>12.3e}",
                      flush=True)
    return low


def table_threads(a, data, low):
    print("\n[threads] gibbs_nbce, 2 chains from the matched 'low' state, sweeps only; "
          "aggregate point-updates per second")
    print(f"{'prior':5} {'N':>7} {'K':>4} {'occupied':>8} {'1 thr wall':>11} {'1 thr CPU':>11} "
          f"{'2 thr wall':>11} {'2 thr CPU':>11} {'speed-up':>8}")
    S = 2 if a.quick else 4
    for N, (idx, nl) in data.items():
        K = 100
        z = low[(N, K)]
        for prior in ("tsb", "fsd"):
            res = {}
            for jobs in (1, 2):
                def fit(n_samples, seed, jobs=jobs, prior=prior, idx=idx, nl=nl, K=K, z=z):
                    gibbs_nbce(idx, nl, K, prior=prior, n_chains=2, n_jobs=jobs,
                               n_samples=n_samples, burn_in=0, n_split_merge=0,
                               update_hyperparameters=False, init=np.stack([z, z]),
                               random_state=seed, store_z=False, store_counts=False)

                cpu, wall = [], []
                for r in range(a.repeats):
                    # S + 1 sweeps minus 1 sweep: the setup (state, groups of rows) cancels
                    c1, w1 = timed(lambda r=r: fit(S + 1, r))
                    c0, w0 = timed(lambda r=r: fit(1, r))
                    cpu.append(c1 - c0)
                    wall.append(w1 - w0)
                upd = 2 * S * N
                res[jobs] = (upd / float(np.median(wall)), upd / float(np.median(cpu)))
            print(f"{prior:5} {N:>7} {K:>4} {occupied(z):>8d} {res[1][0]:>11.3e} "
                  f"{res[1][1]:>11.3e} {res[2][0]:>11.3e} {res[2][1]:>11.3e} "
                  f"{res[2][0] / res[1][0]:>8.2f}", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="shorter burn-in and runs")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    a = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    M, k = 10, 8
    # warm-up: load or compile the kernels
    idx, nl = planted_codes(rng, 200, M, k)
    for prior in ("tsb", "fsd"):
        gibbs_nbce(idx, nl, 5, prior=prior, n_chains=2, n_jobs=2, n_samples=1, burn_in=1,
                   random_state=0)
        run(GibbsState(idx, nl, rng.integers(0, 5, 200), 5, 1.0, 0.5, prior), 1)
    print(f"python {sys.version.split()[0]}, numba threads {os.environ['NUMBA_NUM_THREADS']}, "
          f"CPU seconds = time.process_time (all threads), medians of {a.repeats}")
    data = {N: planted_codes(rng, N, M, k) for N in a.sizes}
    short = table_burn_in(a, data, rng)
    low = table_matched(a, data, short, rng)
    table_threads(a, data, low)


if __name__ == "__main__":
    main()
