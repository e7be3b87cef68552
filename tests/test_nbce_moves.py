"""NBCE Gibbs group moves keep the posterior; chains in parallel; the priors module.

Invariance tests: on a data set small enough to enumerate every labelled partition
(N = 6, T = 4: 4096 states), z is drawn *exactly* from the collapsed posterior, one
move is applied, and the result must again follow the posterior (chi-square over
the states, independent replicates).  A kernel that ignores the posterior fails this
check at the same size (:func:`test_invariance_check_has_power`), and so does the
split-merge kernel with its 1/E term dropped (p < 1e-20 at this size, checked by hand).  Each check
passes above p = 1e-4: 18 p-values in the file, a false alarm about once in 550 runs.
"""

import functools
import itertools
import os

import numba
import numpy as np
import pytest
import torch
from scipy.special import gammaln

from consensuskit.data.ensemble import Ensemble
from consensuskit.models.nbce.gibbs import GibbsState, gibbs_nbce
from consensuskit.models.nbce.gibbs.kernels import _seed
from consensuskit.models.nbce.gibbs.moves import (
    _ROW_BETA,
    _ROW_CLASS,
    _copies_loglik,
    identical_row_groups,
)
from consensuskit.models.nbce.priors import FSD, TSB, get_prior
from consensuskit.models.nbce.spec import collapsed_log_joint, log_prior_partition
from tests._exact_checks import chi2_pvalue, scanned_split_merge

PRIORS = ["tsb", "fsd"]
T, A0, B = 4, 0.8, 0.3
X_SMALL = np.array([[0, 1, 0], [0, 1, 0], [0, 1, 0], [1, 0, -1], [1, 0, 2], [0, 0, 2]])


@functools.cache
def _exact_posterior(prior):
    ens = Ensemble.from_labels(X_SMALL)
    states = np.array(list(itertools.product(range(T), repeat=ens.n_samples)))
    lj = np.array([collapsed_log_joint(ens.codes, ens.n_labels, z, T, A0, B, prior)
                   for z in states])
    p = np.exp(lj - lj.max())
    return states, p / p.sum()


def _after_move(prior, move, reps=2500, seed=0):
    """State index after one application of ``move(state)`` to exact posterior draws."""
    ens = Ensemble.from_labels(X_SMALL)
    states, p = _exact_posterior(prior)
    rng = np.random.default_rng(seed)
    start = rng.choice(len(states), size=reps, p=p)
    idx = ens.offset_index()
    powers = T ** np.arange(ens.n_samples)[::-1]
    out = np.empty(reps, dtype=np.int64)
    for r, s in enumerate(start):
        st = GibbsState(idx, ens.n_labels, states[s], T, A0, B, prior)
        _seed(seed * 100_003 + r)
        move(st)
        out[r] = st.z @ powers
    return out, p, st


def _chi2_pvalue(draws, p):
    """Smaller of two chi-square p-values: over the states (bins with fewer than 5
    expected draws pooled), and over the number of occupied components."""
    return min(chi2_pvalue(draws, p), chi2_pvalue(_n_occupied[draws], np.bincount(
        _n_occupied, weights=p, minlength=T + 1)))


_n_occupied = np.array([len(set(z)) for z in itertools.product(range(T), repeat=6)])


@pytest.mark.parametrize("prior", PRIORS)
def test_split_merge_keeps_the_posterior(prior):
    draws, p, _ = _after_move(prior, lambda s: s.split_merge(20))
    assert _chi2_pvalue(draws, p) > 1e-4


@pytest.mark.parametrize("prior", PRIORS)
def test_split_merge_with_near_pairs_keeps_the_posterior(prior):
    """Pairs drawn near each other (a function of the data only) keep it too."""
    def near(st):
        st.split_merge_local_share = 1.0
        st.split_merge(20)

    draws, p, _ = _after_move(prior, near)
    assert _chi2_pvalue(draws, p) > 1e-4


@pytest.mark.parametrize("prior", PRIORS)
def test_split_merge_with_a_wrong_acceptance_ratio_fails(prior):
    """Control: the split-merge kernel with its log acceptance ratios off by 1."""
    def wrong(st):
        st.split_merge_log_ratio_error = 1.0
        st.split_merge(20)

    draws, p, _ = _after_move(prior, wrong)
    assert _chi2_pvalue(draws, p) < 1e-6


@pytest.mark.parametrize("prior", PRIORS)
def test_split_merge_with_restricted_scans_keeps_the_posterior(prior):
    draws, p, _ = _after_move(prior, scanned_split_merge())
    assert _chi2_pvalue(draws, p) > 1e-4


@pytest.mark.parametrize("prior", PRIORS)
def test_split_merge_with_restricted_scans_and_a_wrong_ratio_fails(prior):
    """Control: the same move with its log acceptance ratios off by 1."""
    draws, p, _ = _after_move(prior, scanned_split_merge(1.0))
    assert _chi2_pvalue(draws, p) < 1e-6


@pytest.mark.parametrize("prior", PRIORS)
def test_split_merge_moves_are_accepted(prior):
    """The moves do something: over many proposals both splits and merges are accepted."""
    ens = Ensemble.from_labels(X_SMALL)
    st = GibbsState(ens.offset_index(), ens.n_labels, np.zeros(6, dtype=np.int64), T, A0, B,
                    prior)
    _seed(1)
    st.split_merge(2000)
    accepted_splits, accepted_merges, proposed_splits, proposed_merges = st.stats[:4]
    assert accepted_splits > 20 and accepted_merges > 20
    assert proposed_splits + proposed_merges + st.stats[4] == 2000


@pytest.mark.parametrize("prior", PRIORS)
def test_identical_row_group_moves_keep_the_posterior(prior):
    draws, p, _ = _after_move(prior, lambda s: s.group_moves())
    assert _chi2_pvalue(draws, p) > 1e-4


@pytest.mark.parametrize("prior", PRIORS)
def test_full_iteration_keeps_the_posterior(prior):
    """Sweep + split-merge + group moves + label swaps, hyper-parameters fixed."""
    draws, p, _ = _after_move(prior, lambda s: s.iterate(n_split_merge=2))
    assert _chi2_pvalue(draws, p) > 1e-4


# a group of identical rows beside rows that share most of its labels, spread over all
# T components, so that the group's conditional is spread too
_GROUP_ROW = [0, 1, -1, 2, 1]
_NEIGHBOURS = [[0, 1, 0, 2, 1], [0, 1, 1, 2, 0], [0, 0, 0, 2, 1], [0, 1, 0, 1, 1],
               [0, 1, 1, 2, 1], [1, 1, 0, 2, 1], [0, 2, 0, 2, 1], [0, 1, 0, 0, 1],
               [2, 1, 1, 2, 1], [0, 1, -1, 1, 1], [1, 0, 1, 0, 0]]
_NEIGHBOURS_Z = [0, 0, 0, 1, 2, 2, 2, 3, 3, 3, 1]


def _group_conditional(ens, z0, size, alpha0, beta, prior):
    """p(all ``size`` group rows in k | the rest) for every k, from the collapsed joint."""
    lj = []
    for k in range(T):
        z = z0.copy()
        z[:size] = k
        lj.append(collapsed_log_joint(ens.codes, ens.n_labels, z, T, alpha0, beta, prior))
    p = np.exp(np.array(lj) - max(lj))
    return p / p.sum()


@pytest.mark.parametrize("prior", PRIORS)
@pytest.mark.parametrize("size", [5, 12])
def test_group_move_draws_the_group_conditional(prior, size):
    """One group move of ``size`` identical rows (a missing label among them) draws the
    group's component from its exact conditional, computed from the collapsed joint.
    Control: the same draws fail against the conditional at beta 40% off."""
    a0, beta, reps = 2.0, 4.0, 6000
    ens = Ensemble.from_labels(np.array([_GROUP_ROW] * size + _NEIGHBOURS))
    z0 = np.array([1] * size + _NEIGHBOURS_Z)
    seeds = np.random.default_rng(size).integers(0, 2**31 - 1, size=reps)
    drawn = np.empty(reps, dtype=np.int64)
    for r in range(reps):
        st = GibbsState(ens.offset_index(), ens.n_labels, z0, T, a0, beta, prior)
        _seed(int(seeds[r]))
        st.group_moves()
        assert np.all(st.z[:size] == st.z[0]) and np.array_equal(st.z[size:], z0[size:])
        drawn[r] = st.z[0]
    assert chi2_pvalue(drawn, _group_conditional(ens, z0, size, a0, beta, prior)) > 1e-4
    assert chi2_pvalue(drawn, _group_conditional(ens, z0, size, a0, 0.6 * beta, prior)) < 1e-6


@numba.njit
def _call_copies_loglik(rows, r0, k, a, nlk, ckm, cls, table, shifts):
    """The inner kernel has no Python entry point: called from a compiled function."""
    return _copies_loglik(rows, r0, k, a, nlk, ckm, cls, table, shifts)


@pytest.mark.parametrize("table_size", [3, 10_000])
def test_group_likelihood_kernels_equal_the_log_gamma_sum(table_size):
    """The group likelihood from log-gamma tables equals the sum of four log-gammas per
    observed column, for every component, rows with missing labels, columns of repeated
    and distinct k_j (one table row per class), and counts inside and past the table's
    end (``table_size`` 3); the table is reused across calls, as in a pass of group
    moves."""
    rng = np.random.default_rng(3)
    n_labels = [2, 3, 3, 4, 2, 3]
    X = np.column_stack([rng.integers(0, k, size=40) for k in n_labels])
    X[rng.random(X.shape) < 0.15] = -1
    ens = Ensemble.from_labels(X)
    T5 = 5
    st = GibbsState(ens.offset_index(), ens.n_labels, rng.integers(0, T5, size=40), T5,
                    A0, 0.7, "fsd")
    classes, cls = np.unique(st.Jbeta, return_inverse=True)
    shifts = np.concatenate([np.full(_ROW_CLASS, np.nan), classes])
    shifts[_ROW_BETA] = st.beta
    table = np.full((shifts.size, table_size), np.nan)
    codes = ens.codes
    for r0 in range(6):
        for a in range(1, 31, 4):
            for k in range(T5):
                want = 0.0
                for m in range(codes.shape[1]):
                    if codes[r0, m] >= 0:
                        n = st.nlk[ens.offsets[m] + codes[r0, m], k]
                        c = st.ckm[m, k]
                        want += (gammaln(st.beta + n + a) - gammaln(st.beta + n)
                                 - gammaln(st.Jbeta[m] + c + a) + gammaln(st.Jbeta[m] + c))
                got = _call_copies_loglik(st.rows, r0, k, a, st.nlk, st.ckm,
                                         cls.astype(np.int64), table, shifts)
                assert got == pytest.approx(want, rel=1e-12, abs=1e-12)


def test_invariance_check_has_power():
    """Control: moving every group of identical rows to a uniformly random component
    (ignoring the posterior) is caught by the same check."""
    def wrong(st):
        for g in range(st.group_ptr.size - 1):
            rows = st.group_rows[st.group_ptr[g]:st.group_ptr[g + 1]]
            k = np.random.default_rng(int(st.z.sum()) + g).integers(0, T)
            z = st.z.copy()
            z[rows] = k
            st.__init__(st.rows, st.n_labels, z, T, A0, B, st.prior)

    draws, p, _ = _after_move("fsd", wrong, reps=1000)
    assert _chi2_pvalue(draws, p) < 1e-6


def test_identical_row_groups():
    ptr, rows = identical_row_groups(X_SMALL)
    groups = [sorted(rows[ptr[g]:ptr[g + 1]]) for g in range(ptr.size - 1)]
    assert groups == [[0, 1, 2]]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_identical_row_groups_by_hash_equal_the_exact_grouping(seed, monkeypatch):
    """The hashed grouping returns exactly np.unique's groups, in its order (rows with
    missing labels, negative and large codes); a forced hash collision falls back to it."""
    from consensuskit.models.nbce.gibbs import moves as nbce_gibbs

    rs = np.random.default_rng(seed)
    idx = rs.integers(-1, 4, size=(3000, 6)) * np.array([1, 5, 7, 11, 13, 1000])
    want = nbce_gibbs._identical_row_groups_exact(idx)
    got = identical_row_groups(idx)
    assert want[1].size > 100  # many groups of identical rows
    for a, b in zip(want, got):
        np.testing.assert_array_equal(a, b)
    # every row hashes alike: the check against each group's first row must catch it
    monkeypatch.setattr(nbce_gibbs, "_ROW_HASH_WEIGHTS", np.zeros(4096, dtype=np.int64))
    for a, b in zip(want, identical_row_groups(idx)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("prior", PRIORS)
def test_chains_do_not_depend_on_threads(prior, rng):
    X = rng.integers(0, 3, size=(40, 5))
    ens = Ensemble.from_labels(X)
    kw = dict(prior=prior, n_samples=15, burn_in=5, n_chains=3, random_state=4)
    one = gibbs_nbce(ens.offset_index(), ens.n_labels, 8, n_jobs=1, **kw)
    two = gibbs_nbce(ens.offset_index(), ens.n_labels, 8, n_jobs=2, **kw)
    for key in ("z", "log_joint", "alpha0", "beta", "move_stats"):
        np.testing.assert_array_equal(one[key], two[key])
    # the recorded log joint is the collapsed joint of the recorded draw
    z, a0, b = one["z"][1, -1], one["alpha0"][1, -1], one["beta"][1, -1]
    assert one["log_joint"][1, -1] == pytest.approx(
        collapsed_log_joint(ens.codes, ens.n_labels, z, 8, a0, b, prior), abs=1e-8)


def test_bad_n_jobs_and_split_merge_raise(rng):
    ens = Ensemble.from_labels(rng.integers(0, 3, size=(10, 3)))
    with pytest.raises(ValueError, match="n_jobs"):
        gibbs_nbce(ens.offset_index(), ens.n_labels, 4, n_jobs=0, n_samples=2, burn_in=0)
    with pytest.raises(ValueError, match="n_split_merge"):
        gibbs_nbce(ens.offset_index(), ens.n_labels, 4, n_split_merge=-1, n_samples=2,
                   burn_in=0)


# ---------------------------------------------------------------------------
# the priors module
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("prior", PRIORS)
def test_prior_log_prior_is_the_sum_of_sequential_conditionals(prior, rng):
    """p(z) = prod_i p(z_i | z_<i): adding the points one at a time with
    conditional_log_weights reproduces log_prior (chain rule)."""
    P = get_prior(prior)
    z = rng.integers(0, 5, size=12)
    counts = np.zeros(5)
    total = 0.0
    for k in z:
        total += P.conditional_log_weights(counts, 1.3)[k]
        counts[k] += 1
    assert total == pytest.approx(P.log_prior(counts, 1.3), abs=1e-10)
    assert log_prior_partition(counts, 1.3, prior) == pytest.approx(total, abs=1e-10)
    np.testing.assert_allclose(P.mixing_means(counts, 1.3).sum(), 1.0)


@pytest.mark.parametrize("prior", PRIORS)
def test_prior_numpy_and_torch_agree(prior):
    P = get_prior(prior)
    n = np.array([3.5, 0.0, 2.25, 1.0])
    t = torch.tensor(n)
    assert float(P.log_prior(t, 0.7)) == pytest.approx(P.log_prior(n, 0.7), rel=1e-14)
    np.testing.assert_allclose(P.conditional_log_weights(t, 0.7).numpy(),
                               P.conditional_log_weights(n, 0.7), rtol=1e-14)


@pytest.mark.parametrize("prior", PRIORS)
def test_prior_simulate_matches_its_mean(prior):
    """E[pi] under the prior is the conditional of the first point (counts all zero);
    the simulated weights' mean agrees within 4 standard errors."""
    P = get_prior(prior)
    rng = np.random.default_rng(0)
    pis = np.array([P.simulate(rng, 6, 1.5) for _ in range(4000)])
    mean, se = pis.mean(0), pis.std(0) / np.sqrt(len(pis))
    expected = P.mixing_means(np.zeros(6), 1.5)
    assert np.all(np.abs(mean - expected) < 4 * se + 1e-12), (mean, expected)
    np.testing.assert_allclose(pis.sum(1), 1.0)


def test_get_prior():
    assert isinstance(get_prior("tsb"), TSB) and isinstance(get_prior("fsd"), FSD)
    assert get_prior(get_prior("fsd")) is get_prior("fsd")
    with pytest.raises(ValueError, match="tsb"):
        get_prior("dp")


def test_estimator_reports_moves_and_honours_n_jobs(rng):
    import consensuskit as ck

    X = np.repeat(rng.integers(0, 3, size=(12, 6)), 5, axis=0)  # groups of identical rows
    kw = dict(truncation=8, n_samples=10, burn_in=10, n_chains=2, random_state=3)
    a = ck.NBCE(n_jobs=1, **kw).fit(X)
    b = ck.NBCE(n_jobs=2, **kw).fit(X)
    np.testing.assert_array_equal(a.samples_["z"], b.samples_["z"])
    st = a.split_merge_stats_
    assert st["splits_proposed"] + st["merges_proposed"] + \
        st["splits_without_empty_component"] == 2 * a.n_iter_ * 100  # chains x sweeps
    assert a.thin_ == 5 and a.n_iter_ == 10 + 10 * 5  # default thin of a small ensemble
    assert st["group_moves_changed"] > 0
    assert a.n_slice_kept_ == 0
    off = ck.NBCE(n_split_merge=0, **kw).fit(X)
    assert sum(off.split_merge_stats_.values()) == 0
    for bad in (dict(n_jobs=0), dict(n_split_merge=-1), dict(n_split_merge="many"),
                dict(thin=0)):
        with pytest.raises((ValueError, TypeError)):
            ck.NBCE(**bad).fit(X)


def test_fit_leaves_torch_thread_setting_alone():
    """An NBCE fit must not change ``torch.get_num_threads()``: starting numba's OpenMP
    layer resets the thread count torch shares.  Run in a fresh process (the layer
    starts once per process); the last line is the control that starting it does."""
    import subprocess
    import sys

    code = (
        "import torch, numpy as np, numba\n"
        "import consensuskit as ck\n"
        "torch.set_num_threads(1)\n"
        "X = np.random.default_rng(0).integers(0, 3, size=(40, 4))\n"
        "ck.NBCE(truncation=4, n_samples=3, burn_in=2, n_chains=2, random_state=0).fit(X)\n"
        "print(torch.get_num_threads())\n"
        "numba.get_num_threads()\n"
        "print(torch.get_num_threads())\n"
    )
    env = dict(os.environ, NUMBA_NUM_THREADS="2", OMP_NUM_THREADS="2")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    after_fit, after_layer = out.stdout.split()[-2:]
    assert after_fit == "1"
    assert after_layer == "2"  # the control: numba's layer does reset torch's setting


# ---------------------------------------------------------------------------
# the default split-merge schedule
# ---------------------------------------------------------------------------
def test_default_schedule_does_not_depend_on_n():
    """The same number of proposals per sweep at every N, so a sweep's cost is linear in N
    (``experiments/bench_bce.py --only scaling`` measures it)."""
    from consensuskit.models.nbce.gibbs.chains import _default_split_merge

    assert {_default_split_merge(n) for n in (10, 150, 10**4, 10**5, 10**7)} == {100}
    assert _default_split_merge(1) == 0


def _sweeps_to_planted(n_split_merge, n_chains=4, n_sweeps=10):
    """First sweep (1-based; inf if none) at which each chain started from a merged start
    has the planted partition of 1000 points in 5 clusters (ARI >= 0.95)."""
    from sklearn.metrics import adjusted_rand_score

    from consensuskit.data.generate import noisy_copies

    truth = np.random.default_rng(0).permutation(np.arange(1000) % 5)
    ens = Ensemble.from_labels(noisy_copies(truth, 10, noise=0.3, n_labels=7, random_state=0))
    out = gibbs_nbce(ens.offset_index(), ens.n_labels, 20, n_chains=n_chains, n_jobs=1,
                     n_samples=n_sweeps, burn_in=0, n_split_merge=n_split_merge,
                     init=np.zeros(1000, dtype=np.int64), random_state=0)
    first = []
    for z in out["z"]:
        hit = np.flatnonzero([adjusted_rand_score(truth, zs) >= 0.95 for zs in z])
        first.append(hit[0] + 1 if hit.size else np.inf)
    return np.asarray(first)


def test_default_schedule_leaves_a_merged_start():
    """All points start in one component: with the default schedule every chain finds the
    5 planted clusters within 10 sweeps (the previous schedule, 20 proposals at this N,
    took at most 5 in ``experiments/nbce_schedule.py``); the control without split-merge
    moves finds them in none (single-site Gibbs needed 27 sweeps or more there)."""
    assert np.all(_sweeps_to_planted(None) <= 10)
    assert np.all(np.isinf(_sweeps_to_planted(0)))
