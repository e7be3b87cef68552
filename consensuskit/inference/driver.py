"""One fit driver for every iterative engine: restarts/chains, convergence, degeneracy,
callbacks, progress bars, checkpoints and resume.

An engine says *what one iteration is*; :func:`fit` says *how iterations are run*.
This is the split of scikit-learn's ``BaseMixture.fit_predict`` (which owns ``n_init``,
``tol`` and best-run selection) and its subclasses (which supply ``_m_step`` and
``_compute_lower_bound``).

The engine protocol
-------------------
An engine is any object with these four methods (subclass :class:`Engine` to get the
optional ones with their defaults)::

    init(rng, run) -> state       a fresh start of run number ``run``; may draw from ``rng``
    step(state, rng) -> state     one EM iteration / one sweep (may update in place)
    objective(state) -> float     bound or log joint of ``state`` (higher is better)
    result(state) -> params       the typed parameters of a finished run (a dataclass)

Optional (defaults in :class:`Engine`)::

    degenerate(state) -> bool               stop this run: it hit a degenerate optimum
    converged(objectives, tol, state) -> bool
                                            default: |f_t - f_{t-1}| <= tol |f_t|
    info(state) -> dict                     extra keys for the callback's state
    initial_objective : bool                record objective(init state) first (EM)
    tie_rtol : float                        final objectives this close (relative) tie

``state`` is whatever the engine needs to take the next step (a dataclass); with a
checkpoint it is pickled, so it should hold arrays and numbers.  ``rng`` is the
caller's generator (a ``numpy.random.RandomState``); an engine that draws only from
it is exactly resumable.

What the driver does
--------------------
``n_runs`` runs (restarts or chains), each ``init`` then up to ``max_iter`` steps.  A
run stops early when ``degenerate(state)`` or (``tol`` not None) ``converged``.  With
``select="best"`` the kept run is the one with the highest final objective,
non-degenerate runs first (ties, to within the engine's relative ``tie_rtol``: the
earlier); the others keep their traces but not their parameters.  With
``select="all"`` (samplers) every run is kept.

After every step the driver builds a *snapshot* ``{"run", <run_name>, "iteration",
"objective", "objectives", "converged", "degenerate", "state", "runs", "rng", ...}``
(plus ``engine.info(state)``), passes it to ``callback`` (returning ``False`` stops
the fit; the unfinished run is kept with ``stopped=True``) and, every
``checkpoint_every`` snapshots and when stopped, to ``checkpoint`` (a writer, see
:func:`consensuskit.io.checkpoint.checkpoint_writer`).  ``fit(..., resume=snapshot)``
continues from such a snapshot and ends exactly where the uninterrupted fit ends.

Distributed engines use the same driver: their ``step`` all-reduces sufficient
statistics (row mode) or runs its exchange (column mode); see
:mod:`consensuskit.distributed`.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Engine", "Run", "Fit", "fit", "relative_change_small"]


def relative_change_small(objectives, tol: float) -> bool:
    """The convergence rule: ``|f_t - f_{t-1}| <= tol |f_t|`` (``tol = 0``: equal)."""
    return len(objectives) > 1 and abs(objectives[-1] - objectives[-2]) <= tol * abs(
        objectives[-1])


class Engine:
    """Base class with the optional parts of the engine protocol (module docstring)."""

    #: record ``objective(init(rng))`` as the first entry of the trace (EM objectives
    #: defined at the starting parameters)
    initial_objective = False

    #: runs whose final objectives differ by at most this (relative) are a tie, kept by
    #: the earlier run; engines whose sums are re-associated set it to a few ulps, so
    #: that which of two runs at the same optimum is kept does not hang on the last bits
    tie_rtol = 0.0

    def init(self, rng, run: int = 0):  # pragma: no cover - abstract
        raise NotImplementedError

    def step(self, state, rng):  # pragma: no cover - abstract
        raise NotImplementedError

    def objective(self, state) -> float:  # pragma: no cover - abstract
        raise NotImplementedError

    def result(self, state):
        """Typed parameters of a finished run; default: the state itself."""
        return state

    def degenerate(self, state) -> bool:
        return False

    def converged(self, objectives, tol: float, state) -> bool:
        """Default rule: :func:`relative_change_small`."""
        return relative_change_small(objectives, tol)

    def info(self, state) -> dict:
        return {}

    def run(self, **kw) -> Fit:
        """``fit(self, **kw)``: this engine under the driver (arguments of :func:`fit`)."""
        return fit(self, **kw)


@dataclass
class Run:
    """One finished (or stopped) run.

    Attributes
    ----------
    params : dataclass or None
        ``engine.result(state)``; None for a run that ``select="best"`` discarded.
    objectives : list of float
        The objective after every step (preceded by the starting value for engines
        with ``initial_objective``).
    n_iter : int
        Steps taken.
    converged, degenerate, stopped : bool
        Why it ended: ``tol`` reached, the engine's degeneracy test, the callback.
    """

    params: Any
    objectives: list
    n_iter: int
    converged: bool = False
    degenerate: bool = False
    stopped: bool = False

    @property
    def objective(self) -> float:
        return self.objectives[-1] if self.objectives else -math.inf

    def _key(self):
        return (not self.degenerate, self.objective)

    def beats(self, other: Run, tie_rtol: float = 0.0) -> bool:
        """Better than ``other``: non-degenerate first, then a higher objective.

        Objectives within ``tie_rtol`` (relative) of each other are a tie, which ``other``
        (the earlier run) keeps.
        """
        if self.degenerate != other.degenerate:
            return other.degenerate
        a, b = self.objective, other.objective
        return a > b and not (math.isfinite(b) and a - b <= tie_rtol * abs(b))


@dataclass
class Fit:
    """What :func:`fit` returns: every run, and which one is kept.

    Attributes
    ----------
    runs : list of Run
        In the order they ran (the stopped one last).
    best : Run or None
        The kept run (``select="best"``); None with ``select="all"``.
    stopped : bool
        The callback stopped the fit.
    """

    runs: list = field(default_factory=list)
    best: Run | None = None
    stopped: bool = False

    @property
    def n_degenerate(self) -> int:
        return sum(r.degenerate for r in self.runs)

    @property
    def all_degenerate(self) -> bool:
        return bool(self.runs) and all(r.degenerate for r in self.runs)


def _progress(enabled, total, desc, unit):
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit, leave=False)


def fit(engine, *, max_iter: int, n_runs: int = 1, tol: float | None = 0.0, rng=None,
        select: str = "best", callback=None, checkpoint=None, checkpoint_every: int = 10,
        resume: dict | None = None, progress: bool = False, desc: str = "fit",
        run_name: str = "run", unit: str = "it") -> Fit:
    """Run ``engine`` (see the module docstring) ``n_runs`` times and pick the result.

    Parameters
    ----------
    engine : Engine
    max_iter : int
        Steps per run at most (a sampler's total sweeps per chain).
    n_runs : int
        Restarts (``select="best"``) or chains (``select="all"``).
    tol : float or None
        Convergence threshold for ``engine.converged``; None: never test (samplers).
    rng : numpy RandomState or None
        Passed to ``init`` and ``step``; its state is saved in snapshots and restored on
        resume.
    select : {"best", "all"}
    callback : callable(snapshot) or None
        After every step; returning ``False`` stops the fit.
    checkpoint : callable(snapshot) or None
        Writes a snapshot; called every ``checkpoint_every`` snapshots and on a stop.
    resume : dict or None
        A snapshot to continue from.
    progress : bool
        tqdm bar over ``n_runs * max_iter`` steps (runs that stop early skip ahead).
    desc, unit : str
        The bar's label and unit; ``run_name`` names the run index in snapshots
        ("restart", "chain").

    Returns
    -------
    Fit
    """
    if select not in ("best", "all"):
        raise ValueError(f"select must be 'best' or 'all'; got {select!r}")
    out = Fit()
    r0 = 0
    if resume is not None:
        if rng is not None:
            rng.set_state(resume["rng"])
        out.runs = list(resume["runs"])
        r0 = int(resume["run"])
        if select == "best":
            kept = [r for r in out.runs if r.params is not None]
            out.best = kept[0] if kept else None
    watch = _Watch(callback, checkpoint, checkpoint_every, run_name)
    bar = _progress(progress, n_runs * max_iter, desc, unit)
    if bar is not None:
        bar.update(r0 * max_iter)
    try:
        for r in range(r0, n_runs):
            if bar is not None and n_runs > 1:
                bar.set_description(f"{desc} {run_name} {r + 1}/{n_runs}")
            run = _one_run(engine, r, max_iter, tol, rng, resume if r == r0 else None, watch,
                           out, bar)
            _keep(out, run, select, getattr(engine, "tie_rtol", 0.0))
            if run.stopped:
                out.stopped = True
                break
    finally:
        if bar is not None:
            bar.close()
    return out


class _Watch:
    """The callback and checkpoints of a fit: after each step, a snapshot for them."""

    def __init__(self, callback, checkpoint, every, run_name):
        self.callback, self.checkpoint, self.every = callback, checkpoint, every
        self.run_name = run_name
        self.active = callback is not None or checkpoint is not None
        self.calls = 0

    def after_step(self, engine, r, it, trace, converged, degenerate, state, out, rng):
        """Hand the snapshot to the callback (and every ``every`` calls, or on a stop, to
        the checkpoint); False: the callback asked to stop."""
        self.calls += 1
        snap = {"run": r, self.run_name: r, "iteration": it, "objective": trace[-1],
                "objectives": list(trace), "converged": converged,
                "degenerate": degenerate, "state": state, "runs": list(out.runs),
                "rng": None if rng is None else rng.get_state(), **engine.info(state)}
        keep_going = self.callback is None or self.callback(snap) is not False
        if self.checkpoint is not None and (self.calls % self.every == 0 or not keep_going):
            self.checkpoint(snap)
        return keep_going


def _one_run(engine, r, max_iter, tol, rng, resume, watch, out, bar) -> Run:
    """Run ``r``: from ``engine.init`` (or from the snapshot ``resume``) until it converges,
    degenerates, reaches ``max_iter`` steps or the callback stops it."""
    if resume is not None:
        state = copy.deepcopy(resume["state"])
        trace = list(resume["objectives"])
        it = int(resume["iteration"])
        converged, degenerate = bool(resume["converged"]), bool(resume["degenerate"])
        if bar is not None:
            bar.update(it)
    else:
        state = engine.init(rng, r)
        trace = [float(engine.objective(state))] if engine.initial_objective else []
        it = 0
        converged = degenerate = False
    stopped = False
    while it < max_iter and not (converged or degenerate):
        state = engine.step(state, rng)
        it += 1
        trace.append(float(engine.objective(state)))
        degenerate = bool(engine.degenerate(state))
        converged = (not degenerate and tol is not None
                     and bool(engine.converged(trace, tol, state)))
        if bar is not None:
            bar.update(1)
            bar.set_postfix(objective=f"{trace[-1]:.6g}", refresh=False)
        if watch.active and not watch.after_step(engine, r, it, trace, converged, degenerate,
                                                 state, out, rng):
            stopped = True
            break
    if bar is not None and not stopped:
        bar.update(max_iter - it)
    return Run(engine.result(state), trace, it, converged, degenerate, stopped)


def _keep(out: Fit, run: Run, select: str, tie_rtol: float) -> None:
    """Append ``run`` to ``out.runs``; with ``select="best"`` keep the parameters of the
    best run only (:meth:`Run.beats`), dropping the others' to free their memory."""
    out.runs.append(run)
    if select != "best":
        return
    if out.best is None or run.beats(out.best, tie_rtol):
        if out.best is not None:
            out.best.params = None
        out.best = run
    else:
        run.params = None
