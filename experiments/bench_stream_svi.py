"""Streaming SVI over a label matrix on disk: memory flat in N, time per epoch.

Writes an (N, M) int8 label matrix simulated from the chosen model's spec (fixed
parameters) to a ``.npy`` file opened as a ``np.memmap`` (written in chunks, so the
writer's memory is flat too), then runs
:func:`consensuskit.inference.pyro_svi.stream_svi`, one SVI step per chunk of rows:

* ``--model mm``: MM's spec with its MAP guide (``z`` enumerated; no per-row parameters);
* ``--model bce``: BCE's spec with :class:`consensuskit.models.bce.guides.AmortizedGuide`
  (``q(theta_i)`` from a network of the row's labels, MAP ``alpha`` and ``beta``; ``z``
  enumerated), whose parameters do not grow with N either.

Reports the peak resident memory of the process (``ru_maxrss``), CPU and wall seconds
per epoch and per chunk.  ``--max-chunks`` stops each epoch after that many chunks;
the per-epoch time is then *extrapolated* from the time per chunk (and printed as
such).  A benchmark, not a test.

    PYTHONPATH=. python experiments/bench_stream_svi.py --model bce --rows 10000000 \
        --cols 20 --chunk 8192 --epochs 1 [--max-chunks 200] [--path /tmp/labels.npy]
"""

import argparse
import itertools
import os
import resource
import time

import numpy as np
import pyro
import torch

from consensuskit.inference.pyro_svi import iter_row_chunks, stream_svi
from consensuskit.models.bce import spec as bce
from consensuskit.models.bce.guides import AmortizedGuide
from consensuskit.models.mm import spec as mm

torch.set_num_threads(1)


def peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _simulate_mm(n, M, K, k, rs, seed):
    pi = torch.tensor(rs.dirichlet(np.full(K, 5.0)))
    theta = [torch.tensor(rs.dirichlet(np.full(k, 0.3), size=K)) for _ in range(M)]

    def draw(n_rows, s):
        return mm.sample(pi, theta, n_rows, generator_seed=seed + s)[1]
    return draw


def _simulate_bce(n, M, K, k, rs, seed):
    alpha = torch.full((K,), 0.3, dtype=torch.float64)
    beta = [torch.tensor(rs.dirichlet(np.full(k, 0.3), size=K)) for _ in range(M)]

    def draw(n_rows, s):
        pyro.set_rng_seed(seed + s)
        return bce.model(None, n_labels=[k] * M, n_clusters=K, n_rows=n_rows, alpha=alpha,
                         beta=beta)
    return draw


def write_labels(path, model, N, M, K=4, k=5, seed=0, chunk=100_000):
    """Simulate N rows from the model's spec (fixed parameters) into an int8 .npy memmap."""
    rs = np.random.default_rng(seed)
    draw = (_simulate_mm if model == "mm" else _simulate_bce)(N, M, K, k, rs, seed)
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.int8, shape=(N, M))
    for s in range(0, N, chunk):
        n = min(chunk, N - s)
        out[s:s + n] = draw(n, s).numpy().astype(np.int8)
    out.flush()
    del out


def main(model, N, M, chunk, epochs, path, jit, max_chunks, hidden):
    t0 = time.perf_counter()
    if not os.path.exists(path):
        write_labels(path, model, N, M)
        print(f"wrote {N} x {M} labels ({model} spec) to {path} in "
              f"{time.perf_counter() - t0:.0f} s ({os.path.getsize(path) / 2**20:.0f} MiB); "
              f"peak RSS {peak_mb():.0f} MiB")
    labels = np.load(path, mmap_mode="r")
    if labels.shape != (N, M):
        raise SystemExit(f"{path} holds {labels.shape}, not ({N}, {M}): remove it or use "
                         "another --path")
    n_labels = [5] * M
    kw = dict(n_labels=n_labels, n_clusters=4)
    if model == "mm":
        spec, guide, nesting, what = mm.model, mm.map_guide, 1, "MM spec + MAP guide"
    else:
        torch.manual_seed(0)  # the network's initial weights
        guide = AmortizedGuide(n_labels, 4, hidden=hidden)
        spec, nesting = bce.model, bce.MAX_PLATE_NESTING
        what = (f"BCE spec + amortised guide (hidden={hidden}, "
                f"{guide.n_parameters()} parameters)")
    print(f"before SVI: peak RSS {peak_mb():.0f} MiB")
    n_chunks = -(-N // chunk)
    steps = n_chunks if max_chunks is None else min(max_chunks, n_chunks)

    def chunks():
        return itertools.islice(iter_row_chunks(labels, chunk), steps)

    w0 = time.perf_counter()
    fit = stream_svi(spec, guide, chunks, n_rows=N, model_kwargs=kw, n_epochs=epochs,
                     learning_rate=0.05, max_plate_nesting=nesting, jit=jit, seed=0,
                     progress=True)
    wall = time.perf_counter() - w0
    print(f"streaming SVI, {what}, N={N}, M={M}, chunk={chunk}, jit={jit}")
    params = sum(v.numel() for v in fit.param_state["params"].values())
    print(f"  parameters in the store: {params}")
    for e, (loss, sec) in enumerate(zip(fit.losses, fit.extra["epoch_seconds"])):
        print(f"  epoch {e + 1}: mean loss per step {loss:.4g}, CPU {sec:.1f} s "
              f"({sec / steps * 1e3:.1f} ms per chunk)")
    cpu = float(np.mean(fit.extra["epoch_seconds"]))
    print(f"  wall {wall:.1f} s for {epochs} epoch(s) of {steps} chunk(s); "
          f"{n_chunks} chunks make an epoch")
    if steps < n_chunks:
        print(f"  EXTRAPOLATED full epoch ({n_chunks} chunks at the measured time per chunk): "
              f"CPU {cpu / steps * n_chunks:.0f} s, wall {wall / epochs / steps * n_chunks:.0f} s")
    print(f"peak RSS of the process: {peak_mb():.0f} MiB (limit 1024)")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["mm", "bce"], default="mm")
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--cols", type=int, default=20)
    ap.add_argument("--chunk", type=int, default=8192)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--max-chunks", type=int, default=None,
                    help="chunks per epoch at most (the full epoch's time is extrapolated)")
    ap.add_argument("--hidden", type=int, default=32, help="BCE guide's hidden width")
    ap.add_argument("--path", default=None,
                    help="label file (.npy); default /tmp/ck_stream_<model>_<rows>x<cols>.npy")
    ap.add_argument("--jit", action="store_true")
    a = ap.parse_args()
    path = a.path or f"/tmp/ck_stream_{a.model}_{a.rows}x{a.cols}.npy"
    main(a.model, a.rows, a.cols, a.chunk, a.epochs, path, a.jit, a.max_chunks, a.hidden)
