"""The one fit driver (consensuskit.inference.driver) on a toy engine.

The toy engine's state is a number ``x`` that each step moves halfway to a target and
shakes by a draw from the generator (so a resumed run is only equal to the
uninterrupted one if the generator's state travels with the snapshot); its objective
is ``-(x - target)^2`` and it is degenerate when the target is negative.
"""

import math
from dataclasses import dataclass

import numpy as np
import pytest

from consensuskit.inference.driver import Engine, fit


@dataclass
class Toy:
    x: float
    target: float


class ToyEngine(Engine):
    def __init__(self, targets, noise=0.0):
        self.targets, self.noise = targets, noise

    def init(self, rng, run=0):
        return Toy(float(rng.uniform(-1, 1)), self.targets[run])

    def step(self, state, rng):
        x = state.x + 0.5 * (state.target - state.x) + self.noise * rng.normal()
        return Toy(x, state.target)

    def objective(self, state):
        return -((state.x - state.target) ** 2) - abs(state.target)

    def degenerate(self, state):
        return state.target < 0


def test_best_run_is_highest_objective_non_degenerate_first():
    # run 0 is degenerate (negative target) though its objective (about 0) is the highest;
    # run 1 (target 3) ends near -3, run 2 (target 1) near -1: run 2 is kept
    out = fit(ToyEngine([-0.0001, 3.0, 1.0]), max_iter=60, n_runs=3, tol=0.0,
              rng=np.random.RandomState(0))
    assert [r.degenerate for r in out.runs] == [True, False, False]
    assert out.runs[0].n_iter == 1  # a degenerate run stops at once
    assert out.best is out.runs[2] and out.best.params.target == 1.0
    assert out.runs[1].params is None and out.runs[0].params is None  # losers dropped
    assert out.n_degenerate == 1 and not out.all_degenerate
    # all degenerate: the best objective among them is kept
    out = fit(ToyEngine([-2.0, -1.0]), max_iter=5, n_runs=2, rng=np.random.RandomState(0))
    assert out.all_degenerate and out.best is out.runs[1]


def test_convergence_on_relative_change():
    out = fit(ToyEngine([2.0]), max_iter=500, tol=1e-6, rng=np.random.RandomState(1))
    f = out.best.objectives
    assert out.best.converged and len(f) == out.best.n_iter < 500
    assert abs(f[-1] - f[-2]) <= 1e-6 * abs(f[-1])
    assert abs(f[-2] - f[-3]) > 1e-6 * abs(f[-2])  # and not one step earlier
    # tol=None (samplers) never tests convergence
    out = fit(ToyEngine([2.0]), max_iter=50, tol=None, rng=np.random.RandomState(1))
    assert out.best.n_iter == 50 and not out.best.converged


def test_callback_stop_keeps_the_partial_run_and_resume_ends_where_the_full_fit_ends():
    full = fit(ToyEngine([1.0, 2.0, 0.5], noise=0.1), max_iter=20, n_runs=3, tol=None,
               rng=np.random.RandomState(5), select="all")
    snaps = []

    def stop_at_27(snap):
        snaps.append(snap)
        return len(snaps) < 27  # stop in the second run, at its 7th step

    part = fit(ToyEngine([1.0, 2.0, 0.5], noise=0.1), max_iter=20, n_runs=3, tol=None,
               rng=np.random.RandomState(5), select="all", callback=stop_at_27)
    assert part.stopped and len(part.runs) == 2 and part.runs[-1].stopped
    assert part.runs[-1].n_iter == 7 and snaps[-1]["run"] == 1
    assert snaps[-1]["iteration"] == 7 and snaps[-1]["objectives"] == part.runs[-1].objectives
    rng = np.random.RandomState(123)  # any generator: the snapshot restores its state
    resumed = fit(ToyEngine([1.0, 2.0, 0.5], noise=0.1), max_iter=20, n_runs=3, tol=None,
                  rng=rng, select="all", resume=snaps[-1])
    assert not resumed.stopped and len(resumed.runs) == 3
    for a, b in zip(resumed.runs, full.runs):
        assert a.objectives == b.objectives and a.params == b.params


def test_checkpoints_every_k_snapshots_and_when_stopped():
    written = []
    fit(ToyEngine([1.0, 2.0]), max_iter=10, n_runs=2, tol=None, rng=np.random.RandomState(0),
        checkpoint=written.append, checkpoint_every=4,
        callback=lambda s: not (s["run"] == 1 and s["iteration"] == 3))
    # 13 snapshots (10 + 3): written at 4, 8, 12 and at the stop (13)
    assert [(s["run"], s["iteration"]) for s in written] == [(0, 4), (0, 8), (1, 2), (1, 3)]


def test_initial_objective_is_recorded_first():
    class WithStart(ToyEngine):
        initial_objective = True

    out = fit(WithStart([1.0]), max_iter=3, tol=None, rng=np.random.RandomState(0))
    assert len(out.best.objectives) == out.best.n_iter + 1 == 4
    assert out.best.objectives[0] < out.best.objectives[-1]


def test_bad_select_is_refused():
    with pytest.raises(ValueError, match="select"):
        fit(ToyEngine([1.0]), max_iter=1, select="first")
    assert math.isinf(fit(ToyEngine([1.0]), max_iter=0,
                          rng=np.random.RandomState(0)).best.objective)
