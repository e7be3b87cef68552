"""Fuzzed label inputs on every estimator (issue 28): no silent misreading, no
unhelpful exception, no hang.  See ``tests/_fuzz_inputs.py`` for the inputs and the
oracle; ``experiments/fuzz_inputs.py`` prints the outcome table for many more inputs."""

import numpy as np
import pytest
from _factories import ESTIMATORS, make_fast
from _fuzz_inputs import judge, random_input
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

GOOD_OUTCOMES = {"correct", "clear error"}


def _check(name, seed):
    X, expected, what = random_input(np.random.default_rng(seed))
    outcome, detail = judge(lambda: make_fast(name), X, expected)
    assert outcome in GOOD_OUTCOMES, f"{name} on {what} (seed {seed}): {outcome}: {detail}"


_FAST = settings(max_examples=6, deadline=None, derandomize=True,
                 suppress_health_check=[HealthCheck.too_slow])
_SLOW = settings(max_examples=150, deadline=None, derandomize=True,
                 suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("name", ESTIMATORS)
@_FAST
@given(seed=st.integers(0, 2**32 - 1))
def test_fuzzed_inputs(name, seed):
    _check(name, seed)


@pytest.mark.slow
@pytest.mark.parametrize("name", ESTIMATORS)
@_SLOW
@given(seed=st.integers(0, 2**32 - 1))
def test_fuzzed_inputs_many(name, seed):
    _check(name, seed)


def test_the_oracle_is_not_trivial():
    """The generator yields both readable inputs and inputs to refuse, of every kind."""
    kinds, verdicts = set(), set()
    for seed in range(400):
        X, expected, what = random_input(np.random.default_rng(seed))
        kinds.add(what.split()[0])
        verdicts.add("codes" if not isinstance(expected, str) else expected.split(" (")[0])
    assert len(kinds) == 15
    assert {"codes", "bad label", "empty", "not 2-D", "a row without labels"} <= verdicts
