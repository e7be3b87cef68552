"""Benchmark: BCE variational EM (ours) vs scikit-learn LatentDirichletAllocation.

Both run in this one process with ``torch.set_num_threads(1)`` (and sklearn's
``n_jobs=1``) on the same synthetic ensemble: M = 20 base clusterings, k_j = 5
labels each, K = 4 clusters, N rows.  BCE with ``K`` topics is LDA on the
"documents" formed by each row's one-hot labels (vocabulary = all sum_j k_j base
labels), except that BCE keeps one label distribution per base clustering; the
E-steps cost the same, so LDA (batch learning) is the natural peer.

Both do the same number of EM iterations with 5 inner E-step passes
(sklearn: ``max_doc_update_iter=5``; ours: ``inner_iter=5``).  For the largest N
sklearn runs only ``--sklearn-iters-large`` iterations (it is slow); its seconds
per iteration are still comparable.  Peak memory is the peak resident set size
above the level before each run, sampled every 2 ms by a thread.

Usage::

    python experiments/bench_bce.py                      # N = 1e4, 1e5, 1e6
    python experiments/bench_bce.py --sizes 10000 --iters 5 --device cuda
"""

from __future__ import annotations

import argparse
import os
import threading
import time

import numpy as np
import torch

from consensuskit.ensemble import Ensemble
from consensuskit.inference import bce_cavi as cavi


class PeakRSS:
    """Peak resident set size (bytes) above the starting level, sampled by a thread."""

    def __init__(self, interval=0.002):
        self.interval = interval
        self.page = os.sysconf("SC_PAGE_SIZE")

    def _rss(self):
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * self.page

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self._rss())
            time.sleep(self.interval)

    def __enter__(self):
        self.start = self.peak = self._rss()
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()
        self.peak = max(self.peak, self._rss())
        self.delta = self.peak - self.start
        return False


def synthetic(N, M=20, K=4, k=5, seed=0):
    """Labels from the BCE generative process (alpha = 0.3, beta rows ~ Dirichlet(0.5))."""
    rng = np.random.default_rng(seed)
    theta = rng.dirichlet(np.full(K, 0.3), size=N)
    cum = np.cumsum(theta, 1)
    X = np.empty((N, M), dtype=np.int64)
    for j in range(M):
        beta = rng.dirichlet(np.full(k, 0.5), size=K)
        z = (rng.random(N)[:, None] > cum).sum(1).clip(max=K - 1)
        X[:, j] = (rng.random(N)[:, None] > np.cumsum(beta[z], 1)).sum(1).clip(max=k - 1)
    return X


def bench_ours(ens, K, iters, dtype, device):
    # warm-up (numba compilation / CUDA context) on a small slice, not timed
    small = ens.subset(np.arange(min(ens.n_samples, 1000)))
    cavi.variational_em(small.label_data(device, dtype), K,
                        cavi.init_beta_random(small, K, 0), max_iter=1, tol=0.0)
    data = ens.label_data(device, dtype)
    beta0 = cavi.init_beta_random(ens, K, 0)
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    with PeakRSS() as mem:
        t0 = time.perf_counter()
        res = cavi.variational_em(data, K, beta0, max_iter=iters, tol=0.0, inner_iter=5)
        if device.type == "cuda":
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
    gpu = torch.cuda.max_memory_allocated() if device.type == "cuda" else 0
    return dt / res.n_iter, mem.delta, gpu


def bench_sklearn(ens, K, iters):
    from sklearn.decomposition import LatentDirichletAllocation

    B = ens.onehot(dtype=np.float64)
    lda = LatentDirichletAllocation(n_components=K, learning_method="batch", max_iter=iters,
                                    max_doc_update_iter=5, evaluate_every=-1, n_jobs=1,
                                    random_state=0, mean_change_tol=0.0)
    with PeakRSS() as mem:
        t0 = time.perf_counter()
        lda.fit(B)
        dt = time.perf_counter() - t0
    return dt / lda.n_iter_, mem.delta


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    p.add_argument("--iters", type=int, default=5, help="EM iterations (both)")
    p.add_argument("--sklearn-iters-large", type=int, default=2,
                   help="sklearn iterations for N >= 1e6")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--device", default="cpu")
    p.add_argument("--no-sklearn", action="store_true")
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    dtype = torch.float32 if a.dtype == "float32" else torch.float64
    device = torch.device(a.device)
    K = 4
    print(f"BCE CAVI vs sklearn LDA(batch), M=20, K={K}, k_j=5, 5 inner E-steps, "
          f"{a.dtype}, device={device}, torch threads=1")
    print(f"{'N':>9} {'ours s/it':>10} {'ours MB':>8} {'sk s/it':>9} {'sk MB':>7} "
          f"{'sk iters':>8} {'ratio':>7}")
    for N in a.sizes:
        ens = Ensemble.from_labels(synthetic(N))
        ours, mem, gpu = bench_ours(ens, K, a.iters, dtype, device)
        extra = f"  (GPU peak {gpu / 2**20:.0f} MB)" if gpu else ""
        if a.no_sklearn:
            print(f"{N:>9} {ours:>10.3f} {mem / 2**20:>8.0f}{extra}")
            continue
        sk_iters = a.sklearn_iters_large if N >= 1_000_000 else a.iters
        sk, skmem = bench_sklearn(ens, K, sk_iters)
        print(f"{N:>9} {ours:>10.3f} {mem / 2**20:>8.0f} {sk:>9.3f} {skmem / 2**20:>7.0f} "
              f"{sk_iters:>8} {sk / ours:>6.1f}x{extra}", flush=True)


if __name__ == "__main__":
    main()
