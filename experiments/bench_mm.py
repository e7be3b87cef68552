"""Benchmark: MM EM engine (torch, grouped joint codes) against a plain numpy EM.

Synthetic ensembles drawn from the MM generative process with M=20 base
clusterings of k_j=5 labels and K=4 components; N in {1e4, 1e5, 1e6}.  For
each N both implementations run 10 EM iterations (E-step + MAP M-step +
objective) from the same start; the script prints the median seconds of
``--repeats`` runs, the peak resident-memory increase during a run, and the
ratio numpy / torch (wall).  Both run in this one process on one thread; the
CPU seconds of the process are printed too, since on a shared machine they are
closer to the uncontended time than the wall clock.  The two
implementations' final objectives are compared as a correctness check.

Usage::

    python experiments/bench_mm.py [--sizes 10000 100000 1000000] [--repeats 3]
                                   [--dtypes float64 float32] [--device cpu]
"""

from __future__ import annotations

import argparse
import functools
import os
import threading
import time

import numpy as np
import torch

from consensuskit.models import simulate
from consensuskit.models.mm import em as mm_em
from consensuskit.models.mm import spec as mm_spec


def make_data(n, m=20, k=5, K=4, seed=0):
    """(N, M) labels simulated from MM's spec with Dirichlet(0.5) label distributions."""
    X, _ = simulate(mm_spec, n_rows=n, n_labels=[k] * m, n_clusters=K,
                    params={"pi": np.full(K, 1.0 / K)}, label_prior=0.5, seed=seed)
    return np.asfortranarray(X)


def _fixed_mmap_threshold():
    """Make glibc serve and return large arrays with mmap, so RSS tracks live memory.

    By default glibc raises its mmap threshold after large frees and keeps such
    memory in the heap, which hides the peak of later runs from RSS.
    """
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").mallopt(-3, 256 * 1024)  # M_MMAP_THRESHOLD
    except (OSError, AttributeError):  # pragma: no cover - not glibc
        pass


class PeakRSS:
    """Peak increase of the resident set size while the block runs (polled every 2 ms)."""

    def __enter__(self):
        self._page = os.sysconf("SC_PAGE_SIZE")
        self.base = self._rss()
        self.peak = self.base
        self._stop = False
        self._t = threading.Thread(target=self._poll, daemon=True)
        self._t.start()
        return self

    def _rss(self):
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * self._page

    def _poll(self):
        while not self._stop:
            self.peak = max(self.peak, self._rss())
            time.sleep(0.002)

    def __exit__(self, *exc):
        self._stop = True
        self._t.join()
        self.peak = max(self.peak, self._rss())
        self.mib = (self.peak - self.base) / 2**20


# -- the peer: a plain numpy EM of the same model ----------------------------------------
def numpy_em(codes_mn, n_labels, log_pi, log_theta, n_iter, a):
    """Same MAP-EM in numpy: per-column fancy indexing and bincount. Returns final objective."""
    K = log_pi.shape[0]
    M, N = codes_mn.shape
    log_theta = log_theta.copy()
    off = np.concatenate([[0], np.cumsum(n_labels)])
    F = None
    for _ in range(n_iter + 1):
        L = np.repeat(log_pi[:, None], N, axis=1)
        for j in range(M):
            L += log_theta[:, off[j] : off[j + 1]][:, codes_mn[j]]
        mx = L.max(0)
        np.exp(L - mx, out=L)
        s = L.sum(0)
        L /= s
        ll = float(np.sum(mx + np.log(s)))
        F = ll + (a - 1.0) * float(log_theta.sum())  # without the constant normalisers
        if _ == n_iter:
            break
        Nk = L.sum(1)
        log_pi = np.log(Nk / N)
        for j in range(M):
            kj = n_labels[j]
            C = np.stack([np.bincount(codes_mn[j], weights=L[k], minlength=kj) for k in range(K)])
            C += a - 1.0
            log_theta[:, off[j] : off[j + 1]] = np.log(C / C.sum(1, keepdims=True))
    return F


def median_time(fn, repeats):
    """Median wall seconds, median CPU seconds of this process, peak MiB, last output."""
    times, cpu, mems, out = [], [], [], None
    for _ in range(repeats):
        with PeakRSS() as mem:
            c = time.process_time()
            t = time.perf_counter()
            out = fn()
            times.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
        mems.append(mem.mib)
    return float(np.median(times)), float(np.median(cpu)), float(max(mems)), out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--dtypes", nargs="+", default=["float64", "float32"])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--no-peer", action="store_true", help="skip the numpy peer")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    _fixed_mmap_threshold()
    K, M, k, a = 4, 20, 5, 1.01
    print(f"torch {torch.__version__}, threads={torch.get_num_threads()}, device={args.device}")
    print(f"M={M}, k_j={k}, K={K}, {args.iters} EM iterations, median of {args.repeats}")
    print("wall = median wall seconds; cpu = median CPU seconds of the process (1 thread)")
    hdr = f"{'N':>9} {'dtype':>8} {'ours wall':>9} {'ours cpu':>8} {'ours MiB':>8}"
    hdr += f" {'np wall':>8} {'np cpu':>8} {'np MiB':>8} {'ratio':>6} {'|dF|/|F|':>9}"
    print(hdr)
    for n in args.sizes:
        X = make_data(n, M, k, K)
        n_labels = np.full(M, k)
        codes_mn = np.ascontiguousarray(X.T)
        peer = None
        for dname in args.dtypes:
            dtype = getattr(torch, dname)
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
            layout = mm_em.prepare(X, n_labels, device=args.device, dtype=dtype)
            lp0, lt0 = mm_em.init_params(layout, K, generator=torch.Generator().manual_seed(0))

            def ours(layout=layout, lp0=lp0, lt0=lt0):
                res = mm_em.run_em(layout, lp0, lt0, max_iter=args.iters, tol=0.0, label_prior=a)
                if layout.device.type == "cuda":
                    torch.cuda.synchronize()
                return res

            ours()  # warm-up
            t_ours, c_ours, m_ours, res = median_time(ours, args.repeats)
            if peer is None and not args.no_peer:
                lp_np = lp0.double().cpu().numpy()
                lt_np = lt0.double().cpu().numpy()
                peer = median_time(
                    functools.partial(numpy_em, codes_mn, n_labels, lp_np, lt_np, args.iters, a),
                    args.repeats,
                )
            if peer is not None:
                t_np, c_np, m_np, F_np = peer
                # peer objective omits the constant Dirichlet normalisers; compare the log-lik
                # part: both start from the same parameters and run the same updates
                F_ours = res.params.loglik + (a - 1.0) * float(res.params.log_theta.double().sum())
                rel = abs(F_ours - F_np) / abs(F_np)
                print(
                    f"{n:>9} {dname:>8} {t_ours:>9.3f} {c_ours:>8.3f} {m_ours:>8.1f}"
                    f" {t_np:>8.3f} {c_np:>8.3f} {m_np:>8.1f} {t_np / t_ours:>6.1f} {rel:>9.1e}"
                )
            else:
                print(f"{n:>9} {dname:>8} {t_ours:>9.3f} {c_ours:>8.3f} {m_ours:>8.1f}")
            del layout, res


if __name__ == "__main__":
    main()
