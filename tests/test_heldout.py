"""The held-out split and the SE over rows of a held-out perplexity
(consensuskit.evaluation.heldout)."""

import numpy as np
import pytest

from consensuskit import MM
from consensuskit.data.generate import noisy_copies
from consensuskit.evaluation.heldout import heldout_perplexity, split_rows


def test_split_rows_is_seeded_disjoint_and_refuses_empty_parts():
    train, test = split_rows(40, 0.25, random_state=3)
    assert test.size == 10 and np.intersect1d(train, test).size == 0
    assert np.array_equal(np.union1d(train, test), np.arange(40))
    again = split_rows(40, 0.25, random_state=3)
    assert np.array_equal(again[1], test)
    with pytest.raises(ValueError, match="at least one row"):
        split_rows(3, 0.1)
    with pytest.raises(ValueError, match="between 0 and 1"):
        split_rows(10, 1.0)


def _planted(rng, n, m=6, k=3, flip=0.3):
    X = noisy_copies(rng.integers(0, k, n), m, noise=flip, random_state=int(rng.integers(2**31)))
    X[rng.random(X.shape) < 0.1] = -1  # some missing labels
    X[X.max(1) < 0, 0] = 0
    return X


@pytest.mark.slow
def test_se_over_rows_matches_the_spread_over_fresh_heldout_sets():
    """The SE predicts how much the perplexity moves when other held-out rows are drawn.

    MM's perplexity is exact (no Monte Carlo error), so all of the spread of the
    perplexity over R fresh held-out sets of n rows is row sampling.  The
    tolerance is three standard errors of the ratio (empirical SD over R sets:
    relative SE 1/sqrt(2(R-1)); mean of R batch-means SEs with G = 20 groups:
    about 1/sqrt(2(G-1)) / sqrt(R)).  Measured: ratio 0.912, tolerance 0.18; a few
    seconds of CPU.
    """
    rng = np.random.default_rng(0)
    R, n = 150, 120
    # one draw of the data-generating distribution (each noisy_copies call maps the
    # clusters to labels at random), so the held-out sets differ by their rows only
    pool = _planted(rng, 400 + R * n)
    model = MM(3, random_state=0).fit(pool[:400])
    ppl, se = [], []
    for r in range(R):
        rows = pool[400 + r * n:400 + (r + 1) * n]
        held = heldout_perplexity(model, rows, random_state=int(rng.integers(1e6)))
        assert held.se_monte_carlo == 0.0 and held.n_rows == n
        ppl.append(held.perplexity)
        se.append(held.se)
    ratio = np.mean(se) / np.std(ppl, ddof=1)
    tol = 3 * np.hypot(1 / np.sqrt(2 * (R - 1)), 1 / np.sqrt(2 * 19 * R))
    assert abs(ratio - 1) < tol, (ratio, tol)
