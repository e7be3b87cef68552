"""``consensuskit warmup``: compile every numba kernel once, at install, into numba's cache.

The compiled models (BCE's E-step kernel, MM's fused EM pass, NBCE's collapsed Gibbs sampler, PCC's
descent) are numba functions with ``cache=True``: the first call in a fresh
installation compiles them (tens of seconds of CPU in all) and writes the machine
code to numba's cache, and later processes load it in a fraction of a second.  This
step makes that first call on purpose, on tiny synthetic ensembles in the
configurations that the demo and the estimators' defaults use, so that the user's
first ``consensuskit demo`` or fit does not spend its time compiling.  It moves the
compilation to install time (``make`` runs it after ``pip install``); it does not
remove it.  The cache lives next to the installed sources (or in
``NUMBA_CACHE_DIR``) and is rebuilt automatically when a source file changes.

Each step is a real fit or kernel call, so a step that succeeds has compiled (or
loaded) exactly what that code path calls.
"""

from __future__ import annotations

import time

import numpy as np

__all__ = ["STEPS", "warm_up"]


def _labels(n=60, m=6, k=3, seed=0):
    """A small (n, m) label matrix with a few missing entries (every code path of masks)."""
    rng = np.random.default_rng(seed)
    X = rng.integers(0, k, size=(n, m))
    X[rng.random(X.shape) < 0.05] = -1
    X[:, 0] = np.arange(n) % k  # every column keeps observed labels
    return X


def _bce():
    """BCE's fused E-step kernel in float64 (the default) and float32; one kernel per dtype
    serves every number of clusters."""
    from consensuskit import BCE

    X = _labels()
    for dtype in ("float64", "float32"):
        BCE(n_clusters=3, max_iter=2, n_init=1, dtype=dtype, n_perplexity_samples=10,
            random_state=0).fit(X)


def _mm():
    """MM's fused EM pass: its E-pass is compiled once per number of clusters (K fixed at
    compile time, about 0.8 s each), so K = 2..8 are compiled here; another K compiles
    on its first fit."""
    from consensuskit import MM

    X = _labels()
    for k in range(2, 9):
        MM(n_clusters=k, max_iter=2, n_init=1, random_state=0).fit(X)


def _nbce():
    """NBCE's collapsed Gibbs sampler (both priors, several chains on threads)."""
    from consensuskit import NBCE

    X = _labels()
    for prior in ("tsb", "fsd"):
        NBCE(truncation=5, prior=prior, n_samples=2, burn_in=1, n_chains=2,
             random_state=0).fit(X)


def _pcc():
    """PCC's descent: both divergences, dense and on sampled pairs."""
    from consensuskit import PCC

    X = _labels()
    for divergence in ("kl", "l2"):
        for sparse_pairs in (None, 0.5):
            PCC(n_clusters=3, divergence=divergence, sparse_pairs=sparse_pairs, max_iter=3,
                random_state=0).fit(X)


def _mm_potential():
    """MM's hand-written potential and gradient (NUTS / MAP-SVI on the spec), for the
    label integer types an Ensemble stores (compiled once per type)."""
    from consensuskit.inference.compiled_potential import mm_potential

    X = _labels()
    for dtype in (np.int8, np.int16, np.int32, np.int64):
        pot = mm_potential(X.astype(dtype), n_labels=[int(c.max()) + 1 for c in X.T],
                           n_clusters=3)
        params = pot.init(np.random.default_rng(0))
        pot(params)
        pot.map_value_and_grad(*[params[k] for k in pot.names])


#: ``(name, callable, modules whose numba kernels it compiles)`` of each step, in order.
STEPS = [
    ("BCE E-step kernel", _bce, ("consensuskit.models.bce.kernels",)),
    ("MM fused EM pass", _mm, ("consensuskit.models.mm.kernels",)),
    ("NBCE Gibbs sampler", _nbce, ("consensuskit.models.nbce.gibbs.kernels",
                                    "consensuskit.models.nbce.gibbs.moves")),
    ("PCC descent", _pcc, ("consensuskit.models.pcc.descent",)),
    ("MM potential for NUTS", _mm_potential, ("consensuskit.models.mm.potential",)),
]


def warm_up(out=None):
    """Run every step; print one line per step to ``out`` (a text stream) if given.

    Returns
    -------
    list of (name, cpu_seconds, wall_seconds)
    """
    import warnings

    import torch

    done = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for name, step, _ in STEPS:
            c, w = time.process_time(), time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # tiny fits: convergence notes are noise
                step()
            done.append((name, time.process_time() - c, time.perf_counter() - w))
            if out is not None:
                print(f"{name:<22} {done[-1][1]:6.1f} s CPU  {done[-1][2]:6.1f} s wall",
                      file=out, flush=True)
    finally:
        torch.set_num_threads(threads)
    return done
