"""The untruncated stick-breaking sampler (``unbounded=True``) keeps the posterior of the
*untruncated* model, by exact draws.

The target is p(z | x) under stick-breaking with infinitely many labelled components.
On N = 6 rows it has infinitely many states, so the check bins them: every labelled z
with all labels below ``B`` is its own bin, the rest is one bin.  Exact posterior draws
come from rejection sampling (z from the stick-breaking prior, accepted with probability
``p(x | z) / max_partition p(x | z)``); the bin probabilities from the prior of each
labelled z and the normaliser summed over the 203 set partitions with the Dirichlet
process's partition probabilities (EPPF).  A move is applied to each exact draw and
the binned result must follow the same probabilities (chi-square, as
``tests/test_nbce_moves.py``).  Controls: the truncated kernels (tables of size
``last + 2`` whose last stick is 1) fail the same check, and so does a split-merge
whose new-label count ignores ``last + 1``.
"""

import functools
import itertools

import numpy as np
import pytest
from scipy.special import gammaln, logsumexp

from consensuskit.data.ensemble import Ensemble
from consensuskit.models.nbce.gibbs import GibbsState
from consensuskit.models.nbce.gibbs.kernels import _seed
from tests._exact_checks import chi2_pvalue, scanned_split_merge, stick_breaking_labels

A0, BETA, BINS = 0.8, 0.3, 5
X_SMALL = np.array([[0, 1, 0], [0, 1, 0], [0, 1, 0], [1, 0, -1], [1, 0, 2], [0, 0, 2]])
ENS = Ensemble.from_labels(X_SMALL)
IDX = ENS.offset_index()
N = X_SMALL.shape[0]


def _state(z, unbounded=True, size=None):
    size = int(z.max()) + 2 if size is None else size
    return GibbsState(IDX, ENS.n_labels, z, size, A0, BETA, "tsb", unbounded=unbounded)


def _counts(Z):
    """Label and column counts of labelled states ``Z`` (S, N): (S, K, L), (S, K, M)."""
    Z = np.atleast_2d(Z)
    K = int(Z.max()) + 1
    onehot = (Z[:, :, None] == np.arange(K)).astype(float)  # (S, N, K)
    obs = IDX >= 0
    lab = np.zeros((N, ENS.n_labels.sum()))
    rows, cols = np.nonzero(obs)
    lab[rows, IDX[rows, cols]] = 1.0
    return np.einsum("snk,nl->skl", onehot, lab), np.einsum("snk,nm->skm", onehot, obs * 1.0)


def _loglik_batch(Z):
    """Collapsed ``log p(x | z, beta)`` of each row of ``Z``."""
    nkl, nkm = _counts(Z)
    jb = ENS.n_labels * BETA
    return ((gammaln(BETA + nkl) - gammaln(BETA)).sum((1, 2))
            + (gammaln(jb) - gammaln(jb + nkm)).sum((1, 2)))


def _log_prior_batch(Z):
    """Untruncated stick-breaking ``log p(z | alpha0)`` of each row of ``Z``; sticks after
    the last occupied one contribute exactly 0."""
    Z = np.atleast_2d(Z)
    sizes = (Z[:, :, None] == np.arange(int(Z.max()) + 1)).sum(1)
    after = sizes[:, ::-1].cumsum(1)[:, ::-1] - sizes  # N_{>k}
    return (np.log(A0) + gammaln(1 + sizes) + gammaln(A0 + after)
            - gammaln(1 + A0 + sizes + after)).sum(1)


def _loglik(z):
    return float(_loglik_batch(np.asarray(z))[0])


@functools.cache
def _partitions():
    """Canonical labelings (restricted growth strings) of the set partitions of N."""
    out = []
    for z in itertools.product(range(N), repeat=N):
        if z[0] == 0 and all(z[i] <= max(z[:i]) + 1 for i in range(1, N)):
            out.append(np.array(z))
    return out


@functools.cache
def _log_evidence_and_max():
    """``log p(x)`` under the untruncated prior and ``max_partition log p(x | z)``."""
    terms, lls = [], []
    for z in _partitions():
        sizes = np.bincount(z)
        eppf = sizes.size * np.log(A0) + gammaln(A0) - gammaln(A0 + N) + gammaln(sizes).sum()
        ll = _loglik(z)
        terms.append(eppf + ll)
        lls.append(ll)
    return logsumexp(terms), max(lls)


@functools.cache
def _bin_probs():
    """Posterior probability of each labelled z with labels < BINS, then of the rest."""
    log_px, _ = _log_evidence_and_max()
    states = np.array(list(itertools.product(range(BINS), repeat=N)))
    lp = _log_prior_batch(states) + _loglik_batch(states) - log_px
    p = np.exp(lp)
    return np.append(p, 1.0 - p.sum())


def _prior_draw(rng):
    """Labelled z from the untruncated stick-breaking prior (sticks drawn as needed)."""
    return stick_breaking_labels(rng, N, A0)


def _posterior_draws(reps, rng):
    _, ll_max = _log_evidence_and_max()
    out = []
    while len(out) < reps:
        Z = np.array([_prior_draw(rng) for _ in range(4 * reps)])
        keep = np.log(rng.random(len(Z))) < _loglik_batch(Z) - ll_max
        out.extend(Z[keep])
    return out[:reps]


def _bin(z):
    if z.max() >= BINS:
        return BINS**N
    return int(z @ BINS ** np.arange(N)[::-1])


def _after_move(move, reps=2500, seed=0, unbounded=True):
    rng = np.random.default_rng(seed)
    out = np.empty(reps, dtype=np.int64)
    occupied = np.empty(reps, dtype=np.int64)
    for r, z in enumerate(_posterior_draws(reps, rng)):
        st = _state(z, unbounded=unbounded)
        _seed(seed * 100_003 + r)
        move(st)
        assert st.cnt[-1] == 0 or not unbounded
        out[r] = _bin(st.z)
        occupied[r] = np.unique(st.z).size
    return out, occupied


def _pvalue(move, **kw):
    draws, occupied = _after_move(move, **kw)
    p = _bin_probs()
    # occupied-cluster counts against their exact posterior (EPPF-weighted partitions)
    log_px, _ = _log_evidence_and_max()
    pk = np.zeros(N + 1)
    for z in _partitions():
        sizes = np.bincount(z)
        pk[sizes.size] += np.exp(sizes.size * np.log(A0) + gammaln(A0) - gammaln(A0 + N)
                                 + gammaln(sizes).sum() + _loglik(z) - log_px)
    return min(chi2_pvalue(draws, p), chi2_pvalue(occupied, pk))


def test_reference_log_prior_and_loglik_equal_the_samplers():
    rng = np.random.default_rng(5)
    for _ in range(20):
        z = _prior_draw(rng)
        st = _state(z)
        assert np.isclose(st.log_prior(), _log_prior_batch(z)[0])
        assert np.isclose(st.log_lik(), _loglik(z))


def test_bin_probabilities_sum_to_one_and_rest_is_small_but_positive():
    p = _bin_probs()
    assert np.all(p >= 0) and 0 < p[-1] < 0.2
    assert abs(p.sum() - 1.0) < 1e-12


def test_exact_draws_follow_the_bins():
    """The reference itself: unmoved exact draws pass."""
    assert _pvalue(lambda st: None, reps=2000, seed=7) > 1e-4


@pytest.mark.parametrize("move", ["sweep", "split_merge", "group_moves", "label_swaps",
                                  "iterate"])
def test_untruncated_moves_keep_the_untruncated_posterior(move):
    moves = {
        "sweep": lambda st: st.sweep(1),
        "split_merge": lambda st: st.split_merge(20),
        "group_moves": lambda st: st.group_moves(),
        "label_swaps": lambda st: st.label_swaps(),
        "iterate": lambda st: st.iterate(n_split_merge=2),
    }
    assert _pvalue(moves[move]) > 1e-4


def _local_split_merge(st):
    st.split_merge_local_share = 1.0
    st.split_merge(20)


def test_split_merge_with_near_pairs_keeps_the_untruncated_posterior():
    assert _pvalue(_local_split_merge) > 1e-4


def test_split_merge_with_a_wrong_acceptance_ratio_fails():
    """Control: log acceptance ratios off by 1 (splits favoured) are caught."""
    def wrong(st):
        st.split_merge_log_ratio_error = 1.0
        st.split_merge(20)

    assert _pvalue(wrong) < 1e-6


def test_split_merge_with_restricted_scans_keeps_the_untruncated_posterior():
    """Jain & Neal's restricted Gibbs scans after a sequential launch, near pairs half the
    time (the default's split-merge)."""
    assert _pvalue(scanned_split_merge()) > 1e-4


def test_split_merge_with_restricted_scans_and_a_wrong_ratio_fails():
    assert _pvalue(scanned_split_merge(1.0)) < 1e-6


@pytest.mark.parametrize("move", ["sweep", "label_swaps"])
def test_truncated_kernels_fail_the_untruncated_check(move):
    """Control: the same kernels with the tables' last stick set to 1 (a truncation at
    ``last + 2`` components) do not keep the untruncated posterior."""
    moves = {"sweep": lambda st: st.sweep(1), "label_swaps": lambda st: st.label_swaps()}
    assert _pvalue(moves[move], unbounded=False) < 1e-6


def test_tables_grow_and_never_fill():
    rng = np.random.default_rng(3)
    X = rng.integers(0, 5, size=(400, 6))
    ens = Ensemble.from_labels(X)
    st = GibbsState(ens.offset_index(), ens.n_labels, np.zeros(400, dtype=np.int64), 3, 5.0,
                    2.0, "tsb", unbounded=True)
    _seed(4)
    sizes = set()
    for _ in range(15):
        st.iterate(n_split_merge=20, update_hyper=False)
        assert st.cnt[-1] == 0
        sizes.add(st.T)
    assert max(sizes) > 3
    ref = GibbsState(ens.offset_index(), ens.n_labels, st.z, st.T, st.alpha0, st.beta, "tsb")
    assert np.array_equal(ref.nlk, st.nlk) and np.array_equal(ref.ckm, st.ckm)
    assert np.allclose(ref.num, st.num) and np.allclose(ref.invden, st.invden)


def _many_cluster_data(n=240, m=6, seed=0):
    """Rows from 12 well-separated groups: more clusters than a truncation of 6."""
    rng = np.random.default_rng(seed)
    centres = rng.integers(0, 6, size=(12, m))
    X = centres[rng.integers(0, 12, size=n)]
    noise = rng.random(X.shape) < 0.05
    X[noise] = rng.integers(0, 6, size=noise.sum())
    return X


def test_estimator_default_is_untruncated_and_never_fills():
    import consensuskit as ck

    X = _many_cluster_data()
    m = ck.NBCE(n_samples=20, burn_in=20, random_state=0).fit(X)
    assert m.n_chains == 4 and not m.truncated_
    assert m.truncation_filled_ == 0.0
    assert m.max_occupied_ < m.truncation_
    counts = m.samples_["counts"]
    assert counts.shape[-1] == m.truncation_ and np.all(counts[..., -1] == 0)
    assert np.all(counts.sum(-1) == X.shape[0])
    # the padded draws' counts agree with their z
    z = m.samples_["z"].reshape(-1, X.shape[0])
    assert np.array_equal(np.stack([np.bincount(r, minlength=counts.shape[-1]) for r in z]),
                          counts.reshape(-1, counts.shape[-1]))
    assert m.perplexity(X) >= 1.0


@pytest.mark.parametrize("prior", ["tsb", "fsd"])
def test_fixed_truncation_that_fills_warns_and_says_how_often(prior):
    import consensuskit as ck

    X = _many_cluster_data()
    with pytest.warns(RuntimeWarning, match="truncation_filled_"):
        m = ck.NBCE(truncation=4, prior=prior, n_samples=20, burn_in=20, n_chains=2,
                    random_state=0).fit(X)
    assert m.truncated_ and m.truncation_ == 4
    assert m.truncation_filled_ == np.mean(m.samples_["n_occupied"] == 4) > 0.5


def test_fsd_without_truncation_uses_the_default_and_gibbs_refuses_none_for_fsd():
    import consensuskit as ck
    from consensuskit.models.nbce.gibbs import gibbs_nbce
    from consensuskit.models.nbce.truncation import default_fsd_truncation

    X = _many_cluster_data(n=60)
    m = ck.NBCE(prior="fsd", n_samples=5, burn_in=5, n_chains=2, random_state=0).fit(X)
    assert m.truncation_ == default_fsd_truncation(60) and m.truncated_
    assert m.max_occupied_ < m.truncation_ and m.truncation_filled_ == 0.0
    with pytest.raises(ValueError, match="tsb"):
        gibbs_nbce(IDX, ENS.n_labels, None, prior="fsd", n_samples=2, burn_in=1)


def test_default_fsd_truncation_is_twice_the_dirichlet_process_expected_clusters():
    """The rule, against the expected number of clusters of N draws from a DP(alpha0)
    summed term by term (the i-th point opens a cluster with probability
    alpha0 / (alpha0 + i)); at least DEFAULT_TRUNCATION, never smaller for more rows."""
    from consensuskit.models.nbce.truncation import (
        DEFAULT_TRUNCATION,
        FSD_TRUNCATION_ALPHA0,
        default_fsd_truncation,
    )

    a = FSD_TRUNCATION_ALPHA0
    values = []
    for n in (1, 16, 17, 27, 60, 150, 2000, 10**4, 10**5):
        expected = float(np.sum(a / (a + np.arange(n))))
        t = default_fsd_truncation(n)
        assert t == max(DEFAULT_TRUNCATION, int(np.ceil(2 * expected - 1e-9))), n
        values.append(t)
    assert values[0] == values[1] == DEFAULT_TRUNCATION < values[2]
    assert values == sorted(values) and values[-3] == 108  # the N = 2,000 of the docs


def test_user_truncation_is_kept_and_variational_engines_keep_twenty():
    import consensuskit as ck
    from consensuskit.data.ensemble import as_ensemble
    from consensuskit.models.nbce.truncation import DEFAULT_TRUNCATION, default_fsd_truncation

    X = _many_cluster_data(n=60)
    ens = as_ensemble(X)
    for T in (2, 20, 25, 100):  # below, at and above the default (37 at 60 rows)
        for inference, prior in (("gibbs", "fsd"), ("gibbs", "tsb"), ("vb", "fsd"),
                                 ("cvb", "tsb")):
            est = ck.NBCE(truncation=T, prior=prior, inference=inference)
            assert est._validate(ens) == T
    assert ck.NBCE(prior="fsd")._validate(ens) == default_fsd_truncation(60) != 20
    assert ck.NBCE(prior="tsb")._validate(ens) is None
    for inference, prior in (("vb", "fsd"), ("cvb", "fsd"), ("cvb", "tsb")):
        assert ck.NBCE(prior=prior, inference=inference)._validate(ens) == DEFAULT_TRUNCATION
    m = ck.NBCE(truncation=25, prior="fsd", n_samples=5, burn_in=5, n_chains=2,
                random_state=0).fit(X)
    assert m.truncation_ == 25 and m.truncated_
    assert m.samples_["counts"].shape[-1] == 25


@pytest.mark.parametrize("inference,prior", [("vb", "fsd"), ("cvb", "tsb")])
def test_variational_single_cluster_is_reported(inference, prior):
    import consensuskit as ck

    X = np.tile([[0, 1, 2]], (30, 1))  # every row the same: one cluster is right here
    with pytest.warns(RuntimeWarning, match="one cluster"):
        m = ck.NBCE(truncation=5, inference=inference, prior=prior, random_state=0).fit(X)
    assert m.n_clusters_ == 1
