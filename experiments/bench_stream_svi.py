"""Streaming SVI over a label matrix on disk: memory flat in N, time per epoch.

Writes an (N, M) int8 label matrix simulated from MM's spec to a ``np.memmap`` file (in
chunks, so the writer's memory is flat too), then runs
:func:`consensuskit.inference.pyro_svi.stream_svi` with MM's spec and its MAP guide (no
per-row parameters: ``z`` is enumerated), one SVI step per chunk of rows.  Reports the
peak resident memory of the process (``ru_maxrss``) and the CPU and wall seconds per
epoch.  A benchmark, not a test.

    PYTHONPATH=. python experiments/bench_stream_svi.py --rows 10000000 --cols 20 \
        --chunk 8192 --epochs 1 [--path /tmp/labels.int8]
"""

import argparse
import os
import resource
import time

import numpy as np
import torch

from consensuskit.inference.pyro_svi import iter_row_chunks, stream_svi
from consensuskit.models import mm

torch.set_num_threads(1)


def peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def write_labels(path, N, M, K=4, k=5, seed=0, chunk=100_000):
    """Simulate N rows from MM's spec (fixed pi, theta) into an int8 memmap."""
    rs = np.random.default_rng(seed)
    pi = torch.tensor(rs.dirichlet(np.full(K, 5.0)))
    theta = [torch.tensor(rs.dirichlet(np.full(k, 0.3), size=K)) for _ in range(M)]
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.int8, shape=(N, M))
    for s in range(0, N, chunk):
        n = min(chunk, N - s)
        _, x = mm.sample(pi, theta, n, generator_seed=seed + s)
        out[s:s + n] = x.numpy().astype(np.int8)
    out.flush()
    del out
    return [k] * M


def main(N, M, chunk, epochs, path, jit):
    t0 = time.perf_counter()
    if not os.path.exists(path):
        n_labels = write_labels(path, N, M)
        print(f"wrote {N} x {M} labels to {path} in {time.perf_counter() - t0:.0f} s "
              f"({os.path.getsize(path) / 2**20:.0f} MiB); peak RSS {peak_mb():.0f} MiB")
    labels = np.load(path, mmap_mode="r")
    assert labels.shape == (N, M)
    n_labels = [5] * M
    kw = dict(n_labels=n_labels, n_clusters=4)
    print(f"before SVI: peak RSS {peak_mb():.0f} MiB")
    w0 = time.perf_counter()
    fit = stream_svi(mm.model, mm.map_guide, lambda: iter_row_chunks(labels, chunk),
                     n_rows=N, model_kwargs=kw, n_epochs=epochs, learning_rate=0.05,
                     max_plate_nesting=1, jit=jit, seed=0, progress=True)
    wall = time.perf_counter() - w0
    print(f"streaming SVI, MM spec + MAP guide, N={N}, M={M}, chunk={chunk}, jit={jit}")
    for e, (loss, sec) in enumerate(zip(fit.losses, fit.extra["epoch_seconds"])):
        print(f"  epoch {e + 1}: mean loss per step {loss:.4g}, CPU {sec:.1f} s")
    print(f"  wall {wall:.1f} s for {epochs} epoch(s); {-(-N // chunk)} steps per epoch")
    print(f"peak RSS of the process: {peak_mb():.0f} MiB (limit 1024)")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--cols", type=int, default=20)
    ap.add_argument("--chunk", type=int, default=8192)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--path", default="/tmp/ck_stream_labels.npy")
    ap.add_argument("--jit", action="store_true")
    a = ap.parse_args()
    main(a.rows, a.cols, a.chunk, a.epochs, a.path, a.jit)
