"""Seeded fixtures shared by the test-suite."""

import numpy as np
import pytest
import torch

from tests.seeding import reset_rngs

torch.set_num_threads(1)


@pytest.fixture
def rng():
    """A numpy Generator with a fixed seed; each test gets a fresh one."""
    return np.random.default_rng(12345)


@pytest.fixture(autouse=True)
def _seed_torch():
    reset_rngs(0)
    yield


def random_incomplete_labels(rng, n=40, m=6, k=(2, 5), missing=0.2):
    """Random label matrix with ~``missing`` entries set to -1, no empty row/column."""
    X = np.column_stack([rng.integers(0, rng.integers(k[0], k[1] + 1), size=n) for _ in range(m)])
    drop = rng.random((n, m)) < missing
    drop[np.arange(n), rng.integers(0, m, size=n)] = False  # each row keeps a label
    X[drop] = -1
    return X


@pytest.fixture
def incomplete_labels(rng):
    return random_incomplete_labels(rng)
