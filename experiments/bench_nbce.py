"""Collapsed-Gibbs throughput of NBCE: numba sweep vs a plain numpy per-point sweep.

One process, one thread.  For N in {1e4, 1e5}, M = 10 base clusterings with 8
labels each, and truncation K in {20, 100}, both TSB and FSD: time whole compiled
sweeps (after a warm-up that also triggers/loads the numba compilation) and a
plain numpy implementation of the same conditional (log space, vectorised over
K for each point, Python loop over points) on a few thousand points.  Each
timed sweep is what ``gibbs_nbce`` does per sweep (compiled sweep + the TSB
label-swap pass; hyper-parameter updates excluded).  Report
point-updates per second (at the random start, where all K components are
occupied, and after a short burn-in, where only the components the data need
are) and the ratio of the burnt-in numba rate to numpy.  Rates use the process CPU time
(``time.process_time``), which is less distorted than wall time on a shared
machine (it still suffers from cache and memory-bandwidth contention).

    python experiments/bench_nbce.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from consensuskit.inference.nbce_gibbs import GibbsState  # noqa: E402


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
    idx, z, cnt, nlk, ckm = st.idx, st.z, st.cnt, st.nlk, st.ckm
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="smaller timing runs")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    M, k = 10, 8
    # warm-up: load or compile the kernels
    idx, nl = planted_codes(rng, 200, M, k)
    GibbsState(idx, nl, rng.integers(0, 5, 200), 5, 1.0, 0.5, "tsb").sweep(1)
    GibbsState(idx, nl, rng.integers(0, 5, 200), 5, 1.0, 0.5, "fsd").sweep(1)
    print(f"{'prior':5} {'N':>7} {'K':>4} {'start upd/s':>12} {'occupied':>8} "
          f"{'numba upd/s':>12} {'numpy upd/s':>12} {'ratio':>6}")
    for N in (10_000, 100_000):
        idx, nl = planted_codes(rng, N, M, k)
        for K in (20, 100):
            for prior in ("tsb", "fsd"):
                st = GibbsState(idx, nl, rng.integers(0, K, N), K, 1.0, 0.5, prior)
                n_sw = 1 if (args.quick or N >= 100_000) else 3
                t0 = time.process_time()
                run(st, n_sw)  # first sweeps from the random start: all K occupied
                rate0 = n_sw * N / (time.process_time() - t0)
                run(st, 8 if args.quick else 15)  # burn in
                occ = np.count_nonzero(st.cnt)
                t0 = time.process_time()
                run(st, n_sw)
                rate = n_sw * N / (time.process_time() - t0)
                ref = GibbsState(idx, nl, st.z, K, 1.0, 0.5, prior)
                n_np = 500 if args.quick else 2000
                t0 = time.process_time()
                numpy_sweep(ref, n_np, rng)
                rate_np = n_np / (time.process_time() - t0)
                print(f"{prior:5} {N:>7} {K:>4} {rate0:>12.3e} {occ:>8d} {rate:>12.3e} "
                      f"{rate_np:>12.3e} {rate / rate_np:>6.0f}", flush=True)


if __name__ == "__main__":
    main()
