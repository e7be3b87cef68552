"""Stochastic variational inference for any spec + guide: full batch, minibatch, streaming.

The spec follows the convention of :mod:`consensuskit.models` (labels (N, M), a ``"rows"``
plate at dim -1 that accepts ``subsample_size`` / ``subsample`` and ``n_rows``).  Three
ways to feed it:

* full batch: every step sees all rows;
* minibatch: ``batch_size`` rows per step, drawn by the rows plate (``subsample_size``),
  the ELBO rescaled by N / B so the globals get unbiased gradients;
* streaming: row chunks from an iterator or from a memory-mapped (N, M) array
  (:class:`numpy.memmap`), passed with their global indices (``subsample``) and
  ``n_rows = N``; only one chunk is in memory at a time, so memory does not grow with N
  (as long as the guide keeps no per-row parameters, e.g. MM's MAP guide).

The ELBO is ``TraceEnum_ELBO`` when the model marks sites for enumeration (else
``Trace_ELBO``), JIT-compiled with ``jit=True``, averaging ``num_particles`` particles
(one after another; see :func:`make_elbo`).  :class:`SVIDriverEngine` is SVI as an engine
of the fit driver (state, one step, objective): :func:`fit_svi` runs it there;
:class:`SVIEngine` is the bare step.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field

import numpy as np
import pyro
import torch
from pyro import poutine
from pyro.infer import SVI, JitTrace_ELBO, JitTraceEnum_ELBO, Trace_ELBO, TraceEnum_ELBO
from pyro.optim import Adam, ClippedAdam

from consensuskit.inference.driver import Engine

__all__ = ["make_elbo", "SVIEngine", "SVIDriverEngine", "SVIFit", "fit_svi", "stream_svi",
           "iter_row_chunks"]


def _has_enumeration(model, args, kwargs):
    tr = poutine.trace(model).get_trace(*args, **kwargs)
    return any(s["type"] == "sample" and s["infer"].get("enumerate") == "parallel"
               for s in tr.nodes.values())


def make_elbo(model, args, kwargs, *, max_plate_nesting, jit=False, num_particles=1,
              vectorize_particles=False):
    """The ELBO that fits ``model``: (Jit)TraceEnum_ELBO if it enumerates, else (Jit)Trace_ELBO.

    ``num_particles > 1`` runs the particles one after another by default: vectorised
    particles need every site of the model and guide to broadcast over an extra batch
    dimension on the left, which the built-in specs (a hyper-parameter ``.expand``-ed to a
    label vector, BCE's integrated row latents in their own particle plate) and most
    users' variants do not; ``vectorize_particles=True`` is for a model that does.
    """
    enum = _has_enumeration(model, args, kwargs)
    if enum:
        cls = JitTraceEnum_ELBO if jit else TraceEnum_ELBO
    else:
        cls = JitTrace_ELBO if jit else Trace_ELBO
    opts = dict(max_plate_nesting=max_plate_nesting, num_particles=num_particles,
                vectorize_particles=vectorize_particles and num_particles > 1)
    if jit:
        opts["ignore_jit_warnings"] = True
    return cls(**opts)


@dataclass
class SVIFit:
    """Result of an SVI run: losses per step (or mean per epoch) and the param-store state."""

    losses: list
    param_state: dict
    n_steps: int
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)


class SVIEngine:
    """One SVI run as state + step + objective (the shape a fit driver runs).

    ``step(*args, **kwargs)`` takes one gradient step and returns the loss; ``objective``
    is the last ELBO estimate (``-loss``); ``state()`` the param-store state.  The
    parameters live in the current param store: run the engine inside
    ``pyro.get_param_store().scope()`` to keep the user's store untouched (as
    :func:`fit_svi` and :func:`stream_svi` do).
    """

    def __init__(self, model, guide, elbo, *, learning_rate=0.05, clip_norm=None,
                 lr_decay=None):
        self.model, self.guide, self.elbo = model, guide, elbo
        if lr_decay is not None:  # ClippedAdam multiplies the rate by lrd every step
            optim = ClippedAdam({"lr": learning_rate, "lrd": float(lr_decay),
                                 "clip_norm": 1e16 if clip_norm is None else clip_norm})
        else:
            optim = (Adam({"lr": learning_rate}) if clip_norm is None
                     else ClippedAdam({"lr": learning_rate, "clip_norm": clip_norm}))
        self.svi = SVI(model, guide, optim, loss=elbo)
        self.objective = -math.inf

    def step(self, *args, **kwargs) -> float:
        loss = float(self.svi.step(*args, **kwargs))
        self.objective = -loss
        return loss

    @staticmethod
    def state() -> dict:
        return pyro.get_param_store().get_state()


class SVIDriverEngine(Engine):
    """SVI as an engine of the fit driver (:mod:`consensuskit.inference.driver`).

    ``state`` is the run's param-store state and its last loss; each ``step`` takes one
    gradient step inside that state's scope, so restarts never share parameters.  Adam's
    moments live in the engine (a resumed run restarts them).
    """

    def __init__(self, model, guide, elbo, args, kwargs, *, learning_rate=0.05,
                 clip_norm=None, lr_decay=None, init_state=None, stop_when=None):
        self.model, self.guide, self.elbo = model, guide, elbo
        self.args, self.kwargs = args, kwargs
        self.learning_rate, self.clip_norm = learning_rate, clip_norm
        self.lr_decay, self.init_state = lr_decay, init_state
        self.stop_when = stop_when

    def init(self, rng, run=0):
        pyro.set_rng_seed(int(rng.randint(2**31 - 1)))
        self._svi = SVIEngine(self.model, self.guide, self.elbo,
                              learning_rate=self.learning_rate, clip_norm=self.clip_norm,
                              lr_decay=self.lr_decay)
        # parameters copied; constraint objects shared (copies of Pyro's singletons would
        # no longer compare equal to them, e.g. after a save and load)
        start = ({"params": copy.deepcopy(self.init_state["params"]),
                  "constraints": dict(self.init_state["constraints"])}
                 if self.init_state is not None else {"params": {}, "constraints": {}})
        return {"param_state": start, "loss": math.inf, "step": 0}

    def step(self, state, rng):
        with pyro.get_param_store().scope(state["param_state"]) as st:
            loss = self._svi.step(*self.args, **self.kwargs)
        if not math.isfinite(loss):
            raise FloatingPointError(
                f"SVI loss is {loss} at step {state['step']}: lower learning_rate, set "
                "clip_norm, or give the latent sites priors that keep them inside their "
                "support")
        return {"param_state": st, "loss": loss, "step": state["step"] + 1}

    def objective(self, state) -> float:
        return -state["loss"]

    def converged(self, objectives, tol, state) -> bool:
        """``stop_when(losses)`` (the losses so far, a list); never without one."""
        return self.stop_when is not None and bool(self.stop_when([-v for v in objectives]))


def fit_svi(model, guide, labels, *, model_kwargs, num_steps=1000, learning_rate=0.05,
            batch_size=None, max_plate_nesting=2, jit=False, num_particles=1, seed=None,
            progress=False, desc="SVI", clip_norm=None, n_runs=1, lr_decay=None,
            init_state=None, stop_when=None) -> SVIFit:
    """Fit ``model``/``guide`` on ``labels`` (N, M) by SVI, full batch or on minibatches.

    Runs under the fit driver (:func:`consensuskit.inference.driver.fit`): ``n_runs``
    restarts, the best final ELBO kept, a progress bar.

    Parameters
    ----------
    model, guide : callables following the spec convention
    labels : LongTensor (N, M)
    model_kwargs : dict
        ``n_labels``, ``n_clusters`` and hyper-parameters, passed to model and guide.
    num_steps : int
        Gradient steps per run.
    batch_size : int, optional
        Rows per step (the rows plate's ``subsample_size``); None: all rows.
    jit, num_particles : see :func:`make_elbo`.
    seed : int, optional
        Seeds the runs (parameters' random inits, minibatches, particles).
    clip_norm : float, optional
        Clip gradient norms (``ClippedAdam``).
    n_runs : int
        Restarts.
    lr_decay : float, optional
        Multiply the learning rate by this every step (``ClippedAdam``'s ``lrd``).
    init_state : dict, optional
        Param-store state every run starts from (e.g. the best of short restarts).
    stop_when : callable(losses) -> bool, optional
        Called after every step with the run's losses so far; True stops the run early
        (e.g. an ELBO plateau).  Default: all ``num_steps`` steps.

    Returns
    -------
    SVIFit with the loss of every step of the kept run (each evaluated before its
    update), its param-store state and ``extra["final_loss"]``, the loss at the final
    parameters.  The global param store is untouched.
    """
    from sklearn.utils import check_random_state

    from consensuskit.inference.driver import fit as drive

    kw = dict(model_kwargs)
    if batch_size is not None and batch_size < labels.shape[0]:
        kw["subsample_size"] = int(batch_size)
    elbo = make_elbo(model, (labels,), kw, max_plate_nesting=max_plate_nesting, jit=jit,
                     num_particles=num_particles)
    engine = SVIDriverEngine(model, guide, elbo, (labels,), kw, learning_rate=learning_rate,
                             clip_norm=clip_norm, lr_decay=lr_decay, init_state=init_state,
                             stop_when=stop_when)
    t0 = time.process_time()
    res = drive(engine, max_iter=num_steps, n_runs=n_runs,
                tol=None if stop_when is None else 0.0,
                rng=check_random_state(seed), progress=progress, desc=desc, unit="step")
    state = res.best.params["param_state"]
    with pyro.get_param_store().scope(state):
        final = float(engine._svi.svi.evaluate_loss(labels, **kw))
    return SVIFit([-v for v in res.best.objectives], state, res.best.n_iter,
                  time.process_time() - t0, extra={"final_loss": final})


def iter_row_chunks(source, chunk_size, *, shuffle=False, random_state=None):
    """Yield ``(indices LongTensor (B,), labels LongTensor (B, M))`` chunks of ``source``.

    ``source`` is an (N, M) integer array-like, e.g. a :class:`numpy.memmap`; only one chunk
    is read into memory at a time.  ``shuffle`` visits the chunks in random order.
    """
    N = source.shape[0]
    starts = np.arange(0, N, chunk_size)
    if shuffle:
        np.random.default_rng(random_state).shuffle(starts)
    for s in starts:
        e = min(N, s + chunk_size)
        yield (torch.arange(s, e), torch.from_numpy(np.asarray(source[s:e], dtype=np.int64)))


def stream_svi(model, guide, chunks, *, n_rows, model_kwargs, n_epochs=1, learning_rate=0.05,
               max_plate_nesting=2, jit=False, num_particles=1, seed=None, progress=False,
               engine=None, param_state=None) -> SVIFit:
    """SVI over a stream of row chunks: one step per chunk, ``n_epochs`` passes.

    Parameters
    ----------
    chunks : callable returning an iterable of ``(indices, labels)``, or an (N, M) array
        A fresh iterator is taken each epoch; an array (e.g. ``np.memmap``) is read in
        chunks of 65536 rows by :func:`iter_row_chunks`.
    n_rows : int
        ``N``, the total number of rows (the plate size: each chunk's ELBO is scaled by
        N / B).
    engine : SVIEngine, optional
        Continue a previous run (with its ``param_state``).
    param_state : dict, optional
        Param-store state to start from.

    Returns
    -------
    SVIFit with the mean loss per epoch (per row-chunk step), the param-store state, the
    number of epochs; ``extra["epoch_seconds"]`` holds the CPU seconds of every epoch.
    """
    if not callable(chunks):
        source = chunks

        def chunks():
            return iter_row_chunks(source, 65536)
    if seed is not None:
        pyro.set_rng_seed(int(seed))
    losses, secs = [], []
    with pyro.get_param_store().scope(param_state) as state:
        for epoch in range(n_epochs):
            t0 = time.process_time()
            tot, k = 0.0, 0
            it = chunks()
            if progress:
                from tqdm.auto import tqdm

                it = tqdm(it, desc=f"streaming SVI epoch {epoch + 1}/{n_epochs}")
            for ind, lab in it:
                kw = dict(model_kwargs, n_rows=int(n_rows), subsample=ind)
                if engine is None:
                    elbo = make_elbo(model, (lab,), kw, max_plate_nesting=max_plate_nesting,
                                     jit=jit, num_particles=num_particles)
                    engine = SVIEngine(model, guide, elbo, learning_rate=learning_rate)
                tot += engine.step(lab, **kw)
                k += 1
            losses.append(tot / max(k, 1))
            secs.append(time.process_time() - t0)
    return SVIFit(losses, state, len(losses), float(sum(secs)),
                  extra={"epoch_seconds": secs, "engine": engine})
