"""``consensuskit warmup``: compile every numba kernel once, at install, into numba's cache.

The compiled models (BCE's E-step kernel, MM's fused EM pass, NBCE's collapsed Gibbs
sampler, PCC's descent: each family's record names its step,
:class:`consensuskit.models.family.WarmUp`) are numba functions with ``cache=True``: the
first call in a fresh installation compiles them (tens of seconds of CPU in all) and writes
the machine code to numba's cache, and later processes load it in a fraction of a second.  This
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

__all__ = ["STEPS", "steps", "warm_up"]


def _labels(n=60, m=6, k=3, seed=0):
    """A small (n, m) label matrix with a few missing entries (every code path of masks)."""
    rng = np.random.default_rng(seed)
    X = rng.integers(0, k, size=(n, m))
    X[rng.random(X.shape) < 0.05] = -1
    X[:, 0] = np.arange(n) % k  # every column keeps observed labels
    return X


def _family_step(family):
    """The warm-up step of a model family: one tiny fit per dict of its record's
    ``warm_up.fits`` on :func:`_labels` (seed 0)."""

    def step():
        cls = family.load()
        X = _labels()
        for params in family.warm_up.fits:
            cls(random_state=0, **params).fit(X)

    step.__name__ = f"warm_up_{family.name}"
    step.__doc__ = family.warm_up.title
    return step


def _mm_potential():
    """MM's hand-written potential and gradient (NUTS / MAP-SVI on the spec), for the
    label integer types an Ensemble stores (compiled once per type)."""
    from consensuskit.models.mm.potential import mm_potential

    X = _labels()
    for dtype in (np.int8, np.int16, np.int32, np.int64):
        pot = mm_potential(X.astype(dtype), n_labels=[int(c.max()) + 1 for c in X.T],
                           n_clusters=3)
        params = pot.init(np.random.default_rng(0))
        pot(params)
        pot.map_value_and_grad(*[params[k] for k in pot.names])


def _bce_row_subset():
    """BCE's default estimate on more rows than ``max_rows``: the sweeps run on a row
    subset and the other rows join once (``gibbs_kernels.add_rows``), which no fit of
    the warm-up's size reaches at the default ``max_rows`` (10,000)."""
    from consensuskit.data.ensemble import Ensemble
    from consensuskit.inference.driver import fit as drive
    from consensuskit.models.bce import initialise
    from consensuskit.models.bce.collapsed_gibbs import CollapsedGibbsEM

    ens = Ensemble.from_labels(_labels())
    engine = CollapsedGibbsEM(ens.codes, ens.offsets, 3,
                              lambda rng: initialise.init_beta_random(ens, 3, rng),
                              n_sweeps=4, max_rows=30, final_sweeps=3)
    drive(engine, max_iter=engine.total_sweeps, tol=None, rng=np.random.RandomState(0))


def _bce_importance_sampler():
    """The importance sampler of BCE's row marginal (audition score and perplexity SE
    where ``C(M + K, K)`` is beyond enumeration), which the warm-up's small fits do not
    reach."""
    import torch

    from consensuskit.models.bce.alpha import mixture_log_weights_lik

    gen = torch.Generator().manual_seed(0)
    lik = torch.rand(4, 3, 2, generator=gen, dtype=torch.float64)
    mixture_log_weights_lik(torch.ones(2, dtype=torch.float64), lik,
                            torch.ones(4, 3, dtype=torch.float64), 2, gen, use_kernel=True)


def _nbce_row_scores():
    """NBCE's per-draw row scores (perplexity, ``predict_proba`` and the log-likelihood
    draws of ``inference_data_``, Gibbs and variational), which a fit does not call."""
    from consensuskit.data.ensemble import Ensemble
    from consensuskit.models.nbce.gibbs import draw_counts
    from consensuskit.models.nbce.row_scores import (
        draw_component_logliks,
        draw_loo_logliks,
        draw_row_logliks,
        mixture_row_logliks,
    )

    ens = Ensemble.from_labels(_labels())
    idx, n_labels = ens.offset_index(), ens.n_labels
    z = np.arange(ens.n_samples) % 3
    Nkl, Nkm = draw_counts(idx, z, 4, n_labels)
    args = (np.bincount(z, minlength=4), Nkl, Nkm, 1.0, 0.5, n_labels, "tsb")
    draw_row_logliks(idx, *args)
    draw_component_logliks(idx, *args)
    draw_loo_logliks(idx, z, *args)
    mixture_row_logliks(idx, np.log(np.full(3, 1 / 3)), np.log(np.full((3, Nkl.shape[1]), 0.5)))


def _nbce_identical_rows():
    """The check of NBCE's grouping of identical rows (``identical_row_groups``), which
    runs only when rows repeat: the warm-up's random labels have no repeated row, the
    demo's have many.  For the code types the sampler reads (int8, int16, int32)."""
    from consensuskit.models.nbce.gibbs.moves import identical_row_groups

    X = _labels()
    for dtype in (np.int8, np.int16, np.int32):
        identical_row_groups(np.concatenate([X, X[:5]]).astype(dtype))


def _posterior_step():
    """Compile the partition-posterior kernels (SALSO search and losses)."""
    from consensuskit.posterior.warmup import warm_up as posterior_warm_up

    posterior_warm_up()


#: Steps of the numba modules that no family's estimator fit compiles.
OTHER_STEPS = [
    ("Partition posterior search", _posterior_step, ("consensuskit.posterior._kernels",)),
    ("MM potential for NUTS", _mm_potential, ("consensuskit.models.mm.potential",)),
    ("NBCE row scores", _nbce_row_scores, ("consensuskit.models.nbce.row_scores",)),
    ("NBCE identical rows", _nbce_identical_rows, ("consensuskit.models.nbce.gibbs.moves",)),
    ("BCE row-subset Gibbs", _bce_row_subset, ("consensuskit.models.bce.gibbs_kernels",)),
    ("BCE importance sampler", _bce_importance_sampler, ("consensuskit.models.bce.is_kernel",
                                                         "consensuskit.models.vector_math")),
]


def steps() -> list:
    """``(name, callable, modules whose numba kernels it compiles)`` of each step, in
    order: every model family's (its record's ``warm_up``,
    :func:`consensuskit.models.family.families`), then :data:`OTHER_STEPS`."""
    from consensuskit.models.family import families

    return [(f.warm_up.title, _family_step(f), tuple(f.warm_up.modules))
            for f in families() if f.warm_up is not None] + list(OTHER_STEPS)


#: :func:`steps` when this module was imported.
STEPS = steps()


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
        for name, step, _ in steps():
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
