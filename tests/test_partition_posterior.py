"""consensuskit.posterior: expected losses, SALSO search, credible balls, PSM, consensus.

The references here are written independently of the package: expected losses from the
pairwise (O(N^2)) and per-item (mcclust.ext-style) formulas, ARI from scikit-learn, and every
set partition of N <= 8 items enumerated (Bell numbers) to find exact optima.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

from consensuskit.posterior import (
    PartitionConsensus,
    PartitionPosterior,
    binder_loss,
    expected_loss,
    nvi_loss,
    omari_loss,
    vi_loss,
)

# --------------------------------------------------------------------------- references


def all_partitions(n):
    """Every set partition of n items as restricted growth strings, (Bell(n), n) int array."""
    out = []

    def rec(prefix, m):
        if len(prefix) == n:
            out.append(list(prefix))
            return
        for v in range(m + 1):
            rec(prefix + [v], max(m, v + 1) if v == m else m)

    rec([0], 1)
    return np.array(out, dtype=np.int64)


def coclust(z):
    z = np.asarray(z)
    return z[..., :, None] == z[..., None, :]


def ref_binder(parts, draws, a=1.0):
    """Expected Binder loss by pairs: a * P(joined by the draw, split by the estimate) +
    (2 - a) * P(split by the draw, joined by the estimate), summed over ordered pairs / N^2."""
    n = draws.shape[1]
    P = coclust(draws).mean(0)
    A = coclust(parts).astype(float)
    return (a * (P * (1 - A)) + (2 - a) * ((1 - P) * A)).sum((-1, -2)) / n**2


def ref_vi(parts, draws):
    """Expected VI (bits), mcclust.ext's per-item formula:
    (1/N) sum_i log2|C(i)| + log2|C'(i)| - 2 log2|C(i) & C'(i)|."""
    A = coclust(parts)
    out = np.zeros(len(parts))
    for d in draws:
        B = coclust(d)
        a = A.sum(-1)
        b = B.sum(-1)
        ab = (A & B).sum(-1)
        out += (np.log2(a) + np.log2(b) - 2 * np.log2(ab)).mean(-1)
    return out / len(draws)


def entropy(*labels):
    _, counts = np.unique(np.stack(labels, 1), axis=0, return_counts=True)
    p = counts / counts.sum()
    return float(-(p * np.log2(p)).sum())


def ref_nvi(z, draws):
    vals = []
    for d in draws:
        hj = entropy(z, d)
        vi = 2 * hj - entropy(z) - entropy(d)
        vals.append(0.0 if hj == 0 else vi / hj)
    return float(np.mean(vals))


def ref_omari(z, draws):
    return float(np.mean([1 - adjusted_rand_score(d, z) for d in draws]))


def concentrated(rng, n, s, k=3, noise=0.15):
    truth = rng.integers(0, k, n)
    return np.array([np.where(rng.random(n) < noise, rng.integers(0, k + 1, n), truth)
                     for _ in range(s)])


def diffuse(rng, n, s, k=4):
    return rng.integers(0, k, size=(s, n))


PARTS8 = all_partitions(8)


def test_bell_numbers():
    assert [len(all_partitions(n)) for n in range(1, 8)] == [1, 2, 5, 15, 52, 203, 877]
    assert len(PARTS8) == 4140


# --------------------------------------------------------------------------- losses


@pytest.mark.parametrize("seed", [0, 1])
def test_expected_losses_match_independent_formulas(seed):
    rng = np.random.default_rng(seed)
    draws = concentrated(rng, 9, 40) if seed == 0 else diffuse(rng, 9, 40)
    pp = PartitionPosterior(draws)
    parts = all_partitions(9)[rng.choice(21147, 25, replace=False)]
    vi = ref_vi(parts, draws)
    for a in (1.0, 0.4, 1.7):
        bi = ref_binder(parts, draws, a)
        got = [pp.expected_loss(p, "binder", a=a) for p in parts]
        np.testing.assert_allclose(got, bi, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose([pp.expected_loss(p, "vi") for p in parts], vi, rtol=1e-10,
                               atol=1e-12)
    for p in parts[:8]:
        assert nvi_loss(p, draws) == pytest.approx(ref_nvi(p, draws), rel=1e-10, abs=1e-12)
        assert omari_loss(p, draws) == pytest.approx(ref_omari(p, draws), rel=1e-10, abs=1e-12)
        assert vi_loss(p, draws) == pytest.approx(expected_loss(p, draws, "vi"))
        assert binder_loss(p, draws) == pytest.approx(expected_loss(p, draws, "binder"))


def test_generalised_vi_a_weights_the_two_conditional_entropies():
    # VI(a) = a H(est | draw) + (2 - a) H(draw | est): a weighs splitting what the draw joins,
    # as in Binder(a); checked against entropies directly
    rng = np.random.default_rng(3)
    draws = diffuse(rng, 30, 20)
    z = rng.integers(0, 3, 30)
    for a in (0.5, 1.5):
        want = np.mean([a * (entropy(z, d) - entropy(d))
                        + (2 - a) * (entropy(z, d) - entropy(z)) for d in draws])
        assert vi_loss(z, draws, a=a) == pytest.approx(want, rel=1e-10)


def test_losses_of_identical_partitions_are_zero_and_labels_do_not_matter():
    rng = np.random.default_rng(4)
    z = rng.integers(0, 5, 50)
    draws = np.stack([z, (z * 7 + 3) % 11])  # the same partition under two labellings
    for loss in ("vi", "binder", "nvi", "omari"):
        assert expected_loss(z, draws, loss) == pytest.approx(0.0, abs=1e-12)
        assert expected_loss(z + 100, draws, loss) == pytest.approx(0.0, abs=1e-12)


# --------------------------------------------------------------------------- search


def exact_min(draws, loss, a=1.0):
    vals = ref_vi(PARTS8, draws) if loss == "vi" else ref_binder(PARTS8, draws, a)
    return float(vals.min())


CASES = [("concentrated", 0), ("concentrated", 1), ("diffuse", 2), ("diffuse", 3),
         ("diffuse", 4)]


@pytest.mark.parametrize("kind,seed", CASES)
@pytest.mark.parametrize("loss,a", [("vi", 1.0), ("binder", 1.0), ("binder", 0.6)])
def test_search_reaches_the_exact_optimum(kind, seed, loss, a):
    rng = np.random.default_rng(seed)
    draws = concentrated(rng, 8, 30) if kind == "concentrated" else diffuse(rng, 8, 30)
    best = exact_min(draws, loss, a)
    pp = PartitionPosterior(draws)
    est, info = pp.point_estimate(loss=loss, a=a, max_n_clusters=8, n_runs=8, n_jobs=1,
                                  random_state=seed)
    got = expected_loss(est, draws, loss, a)
    assert got == pytest.approx(info.expected_loss, rel=1e-12)
    # the tolerance is float round-off of sums of N^2 or N log N terms
    assert got <= best + 1e-12 * (1 + abs(best))


def test_negative_control_without_sweetening_misses_the_optimum():
    """On the same noisy draw sets, the full search reaches the exact optimum every time, while
    one run of sequential allocation alone (no sweetening, no zealous updates: greedy in one
    random order) misses it at least once, so the optimum test can fail."""
    from consensuskit.posterior.losses import prepare_draws
    from consensuskit.posterior.search import salso_search

    misses = 0
    for seed in range(10):
        rng = np.random.default_rng(100 + seed)
        draws = concentrated(rng, 8, 30, noise=0.4)
        best = exact_min(draws, "vi")
        lab, k = prepare_draws(draws)
        full, _ = salso_search(lab, k, "vi", max_n_clusters=8, n_runs=4, n_jobs=1,
                               random_state=seed)
        assert expected_loss(full, draws, "vi") <= best + 1e-12 * (1 + best)
        greedy, _ = salso_search(lab, k, "vi", max_n_clusters=8, n_runs=1, max_zealous=0,
                                 prob_sequential_allocation=1.0, sweeten=False, n_jobs=1,
                                 random_state=seed)
        misses += expected_loss(greedy, draws, "vi") > best + 1e-9
    assert misses >= 1


def test_search_is_reproducible_and_threads_give_the_same_answer():
    rng = np.random.default_rng(7)
    draws = concentrated(rng, 200, 100, k=5, noise=0.3)
    pp = PartitionPosterior(draws)
    e1, i1 = pp.point_estimate(n_runs=4, n_jobs=1, random_state=11)
    e2, i2 = pp.point_estimate(n_runs=4, n_jobs=2, random_state=11)
    np.testing.assert_array_equal(e1, e2)
    np.testing.assert_array_equal(i1.run_losses, i2.run_losses)
    assert i1.n_clusters <= i1.max_n_clusters


def test_search_on_spaced_draws():
    """``max_draws`` searches the evenly spaced subset: the same as searching those draws
    directly, its ``expected_loss`` over all draws and ``run_losses`` over the subset;
    ``max_draws`` >= S is the full search."""
    rng = np.random.default_rng(8)
    draws = concentrated(rng, 60, 41, k=4, noise=0.3)
    pp = PartitionPosterior(draws)
    kw = dict(n_runs=3, n_jobs=1, random_state=5)
    full, info_full = pp.point_estimate(**kw)
    same, info_same = pp.point_estimate(max_draws=41, **kw)
    np.testing.assert_array_equal(full, same)
    assert info_full.n_draws == info_same.n_draws == 41
    est, info = pp.point_estimate(max_draws=5, **kw)
    keep = [0, 10, 20, 30, 40]
    sub, info_sub = PartitionPosterior(draws[keep]).point_estimate(
        max_n_clusters=int(pp.n_clusters_draws.max()), **kw)
    np.testing.assert_array_equal(est, sub)
    assert info.n_draws == 5
    assert info.run_losses.min() == pytest.approx(info_sub.expected_loss, rel=1e-12)
    assert info.expected_loss == pytest.approx(pp.expected_loss(est), rel=1e-12)
    assert info.expected_loss != pytest.approx(info_sub.expected_loss, rel=1e-6)
    for bad in (0, 2.5, True):
        with pytest.raises(ValueError, match="max_draws"):
            pp.point_estimate(max_draws=bad)


# --------------------------------------------------------------------------- credible ball


def brute_ball(est, draws, level, loss):
    """Wade & Ghahramani's definitions evaluated directly on the draws."""
    n = draws.shape[1]
    if loss == "vi":
        d = ref_vi(draws, est[None, :].repeat(1, 0))
    else:
        d = np.array([np.abs(coclust(est).astype(int) - coclust(x)).sum() / n**2
                      for x in draws])
    S = len(draws)
    radius = np.sort(d)[math.ceil(level * S) - 1]
    inside = [s for s in range(S) if d[s] <= radius + 1e-12]
    k = {s: len(set(draws[s])) for s in inside}
    far = max(d[s] for s in inside)
    horiz = {s for s in inside if abs(d[s] - far) < 1e-12}
    kmin, kmax = min(k.values()), max(k.values())
    low = [s for s in inside if k[s] == kmin]
    high = [s for s in inside if k[s] == kmax]
    up = {s for s in low if abs(d[s] - max(d[t] for t in low)) < 1e-12}
    lo = {s for s in high if abs(d[s] - max(d[t] for t in high)) < 1e-12}
    return radius, set(inside), horiz, up, lo


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("loss", ["vi", "binder"])
@pytest.mark.parametrize("level", [0.5, 0.9, 0.95])
def test_credible_ball_equals_brute_force(seed, loss, level):
    rng = np.random.default_rng(seed)
    draws = concentrated(rng, 8, 60, noise=0.2)  # many repeated partitions: ties at the radius
    pp = PartitionPosterior(draws)
    est, _ = pp.point_estimate(loss=loss, max_n_clusters=8, n_runs=4, n_jobs=1, random_state=0)
    ball = pp.credible_ball(est, level=level, loss=loss)
    radius, inside, horiz, up, lo = brute_ball(est, draws, level, loss)
    assert ball.radius == pytest.approx(radius, rel=1e-12, abs=1e-14)
    assert set(np.flatnonzero(ball.in_ball)) == inside
    assert set(ball.horizontal_draws) == horiz
    assert set(ball.upper_vertical_draws) == up
    assert set(ball.lower_vertical_draws) == lo
    assert ball.in_ball.mean() >= level
    # each distinct bound partition is one of the bound draws
    for parts, idx in ((ball.horizontal, horiz), (ball.upper_vertical, up)):
        for p in parts:
            assert any(np.array_equal(coclust(p), coclust(draws[s])) for s in idx)


# --------------------------------------------------------------------------- PSM & summaries


def test_psm_dense_block_pairs_and_item_confidence():
    rng = np.random.default_rng(5)
    draws = concentrated(rng, 40, 70, k=4, noise=0.3)
    pp = PartitionPosterior(draws)
    want = coclust(draws).mean(0)
    np.testing.assert_allclose(pp.psm(), want)
    rows, cols = np.array([3, 0, 39]), np.array([5, 5, 1, 2])
    np.testing.assert_allclose(pp.psm(block=(rows, cols)), want[np.ix_(rows, cols)])
    ii, jj = rng.integers(0, 40, 30), rng.integers(0, 40, 30)
    np.testing.assert_allclose(pp.psm(pairs=(ii, jj)), want[ii, jj])
    est = rng.integers(0, 4, 40)
    conf = pp.item_confidence(est)
    np.testing.assert_allclose(conf, [want[i, est == est[i]].mean() for i in range(40)])
    vals, probs = pp.n_clusters_distribution()
    k = np.array([len(set(d)) for d in draws])
    np.testing.assert_allclose(probs, [np.mean(k == v) for v in vals])
    assert probs.sum() == pytest.approx(1.0)


def test_plots_return_matplotlib_objects():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rng = np.random.default_rng(6)
    draws = concentrated(rng, 30, 50)
    pp = PartitionPosterior(draws)
    est, _ = pp.point_estimate(n_runs=2, n_jobs=1, random_state=0)
    ax = pp.plot_psm(est)
    assert ax.images and len(ax.lines) == 2 * (len(set(est)) - 1)
    fig = pp.plot_credible_ball(pp.credible_ball(est))
    assert len(fig.axes) >= 4
    assert len(pp.plot_n_clusters().patches) == len(pp.n_clusters_distribution()[0])
    plt.close("all")


# --------------------------------------------------------------------------- consensus


def test_partition_consensus_and_missing_labels():
    rng = np.random.default_rng(8)
    draws = concentrated(rng, 8, 25)
    X = draws.T.copy()  # ensemble: items x base clusterings
    pc = PartitionConsensus(loss="binder", max_n_clusters=8, random_state=0).fit(X)
    assert expected_loss(pc.labels_, draws, "binder") == pytest.approx(exact_min(draws, "binder"))
    assert pc.expected_loss_ == pytest.approx(exact_min(draws, "binder"))
    X[2, 3] = -1
    with pytest.raises(ValueError, match="missing labels"):
        PartitionConsensus().fit(X)
    pc2 = PartitionConsensus(missing="singletons", random_state=0).fit(X)
    col = pc2.posterior_.draw(3)
    assert np.sum(col == col[2]) == 1  # the missing entry is its own class in that column
    assert pc2.labels_.shape == (8,)


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("draws,match", [
    (np.zeros(5, int), "2-d"),
    (np.zeros((2, 3, 4), int), "2-d"),
    (np.array([[0, 1, -1]]), "negative"),
    (np.array([[0.0, 1.0, np.nan]]), "NaN"),
    (np.array([[0.0, 1.5, 1.0]]), "integer"),
    (np.array([[True, False]]), "integer"),
    (np.zeros((0, 3), int), "at least one"),
    (np.array([["a", "b"]]), "integer"),
])
def test_bad_draws(draws, match):
    with pytest.raises(ValueError, match=match):
        PartitionPosterior(draws)


def test_bad_arguments():
    pp = PartitionPosterior(np.array([[0, 0, 1], [0, 1, 1]]))
    with pytest.raises(ValueError, match="shape"):
        pp.expected_loss([0, 1])
    with pytest.raises(ValueError, match="loss must be"):
        pp.expected_loss([0, 1, 1], loss="rand")
    with pytest.raises(ValueError, match="a must be in"):
        pp.expected_loss([0, 1, 1], loss="binder", a=3)
    with pytest.raises(ValueError, match="no cost parameter"):
        pp.expected_loss([0, 1, 1], loss="nvi", a=0.5)
    with pytest.raises(ValueError, match="level"):
        pp.credible_ball([0, 1, 1], level=1.5)
    with pytest.raises(ValueError, match="vi' or 'binder"):
        pp.credible_ball([0, 1, 1], loss="omari")
    with pytest.raises(ValueError, match="dense PSM"):
        pp.psm(max_dense=2)
    with pytest.raises(ValueError, match="item indices"):
        pp.psm(pairs=([0], [3]))
    with pytest.raises(ValueError, match="n_runs"):
        pp.point_estimate(n_runs=0)
    with pytest.raises(ValueError, match="max_n_clusters"):
        pp.point_estimate(max_n_clusters=0)
