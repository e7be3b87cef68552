"""NBCE: Pyro model, collapsed Gibbs (numba), VB, CVB and the estimator."""

import math
import warnings

import numpy as np
import pyro
import pytest
import torch
from pyro import poutine
from scipy import stats

from consensuskit.data.ensemble import Ensemble
from consensuskit.models.nbce.cvb import CVB, cvb_approx_bound, cvb_expected_counts, leave_one_out
from consensuskit.models.nbce.estimator import NBCE
from consensuskit.models.nbce.gibbs import (
    GibbsState,
    conditional_probs,
    gibbs_nbce,
    point_consensus,
    sample_conditional,
)
from consensuskit.models.nbce.gibbs.kernels import _seed, _tsb_stick_pair
from consensuskit.models.nbce.spec import (
    collapsed_log_joint,
    guide_fsd,
    log_prior_partition,
    model,
)
from consensuskit.models.nbce.vb import VB, onehot_tensor, vb_bound

PRIORS = ["tsb", "fsd"]


def _tiny(rng, n=7, m=4, k=3, missing=0.15):
    X = rng.integers(0, k, size=(n, m))
    drop = rng.random((n, m)) < missing
    drop[:, 0] = False
    X[drop] = -1
    return Ensemble.from_labels(X)


def _brute_conditional(ens, z, n, T, a0, b, prior):
    lj = []
    for k in range(T):
        zz = z.copy()
        zz[n] = k
        lj.append(collapsed_log_joint(ens.codes, ens.n_labels, zz, T, a0, b, prior))
    lj = np.array(lj)
    p = np.exp(lj - lj.max())
    return p / p.sum()


# ---------------------------------------------------------------------------
# (a) the collapsed joint is the Pyro model's; the Gibbs conditional is its ratio
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("prior", PRIORS)
def test_collapsed_joint_matches_pyro_model_monte_carlo(prior):
    """log p(x, z) with pi, theta integrated out == log E_prior[p(x, z | pi, theta)],
    the expectation estimated from 100k prior draws of the Pyro model (within 4 s.e.)."""
    codes = np.array([[0, 1], [1, 2], [0, -1], [1, 0]])
    n_labels = [2, 3]
    T, a0, b = 3, 0.8, 0.6
    z = np.array([0, 0, 2, 1])
    S = 100_000
    with torch.random.fork_rng():
        torch.manual_seed(1)
        with pyro.plate("particles", S, dim=-2):
            tr = poutine.trace(
                poutine.condition(model, data={"z": torch.tensor(z)})
            ).get_trace(torch.tensor(codes), n_labels=n_labels, n_clusters=T, alpha0=a0,
                        beta=b, prior=prior)
    lp = torch.zeros(S, dtype=torch.float64)
    for name, site in tr.nodes.items():
        if site["type"] == "sample" and (name == "z" or name.startswith("x_")):
            lpi = site["fn"].log_prob(site["value"]).double()
            if site.get("mask") is not None:
                lpi = lpi * site["mask"]
            lp = lp + lpi.reshape(S, -1).sum(-1)
    est = float(torch.logsumexp(lp, 0) - math.log(S))
    w = torch.exp(lp - lp.max())
    se = float(w.std() / w.mean()) / math.sqrt(S)
    exact = collapsed_log_joint(codes, n_labels, z, T, a0, b, prior)
    assert abs(est - exact) < 4 * se, (est, exact, se)


@pytest.mark.parametrize("prior", PRIORS)
def test_gibbs_conditional_equals_bruteforce_ratio(prior, rng):
    ens = _tiny(rng)
    T, a0, b = 5, 0.7, 0.4
    z = rng.integers(0, T, size=ens.n_samples)
    z[:2] = T - 1  # use the last (stick = 1) component too
    st = GibbsState(ens.offset_index(), ens.n_labels, z, T, a0, b, prior)
    for n in range(ens.n_samples):
        p = conditional_probs(st, n)
        q = _brute_conditional(ens, z, n, T, a0, b, prior)
        np.testing.assert_allclose(p, q, rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("prior", PRIORS)
def test_gibbs_conditional_safe_for_1000_columns(prior, rng):
    """M = 1000 base clusterings: the rescaled linear-space weights still match the
    log-space collapsed joint (no underflow)."""
    X = rng.integers(0, 4, size=(6, 1000))
    X[rng.random(X.shape) < 0.1] = -1
    X[:, 0] = 0
    ens = Ensemble.from_labels(X)
    T = 4
    z = np.array([0, 0, 1, 1, 2, 3])
    st = GibbsState(ens.offset_index(), ens.n_labels, z, T, 1.0, 0.05, prior)
    for n in range(6):
        p = conditional_probs(st, n)
        q = _brute_conditional(ens, z, n, T, 1.0, 0.05, prior)
        assert np.all(np.isfinite(p))
        np.testing.assert_allclose(p, q, rtol=1e-8, atol=1e-300)


@pytest.mark.parametrize("prior", PRIORS)
def test_compact_kernel_equals_bruteforce_and_samples_it(prior, rng):
    """The compact path (few occupied components, empty ones scored once, TSB tail
    sampled as a truncated geometric) gives the brute-force conditional, and its
    sampler draws from it (chi-square on 100k draws per point)."""
    ens = _tiny(rng)
    T = 12
    z = np.array([0, 0, 3, 3, 5, 1, 1])
    st = GibbsState(ens.offset_index(), ens.n_labels, z, T, 0.7, 0.4, prior)
    _seed(7)
    for n in range(ens.n_samples):
        q = _brute_conditional(ens, z, n, T, 0.7, 0.4, prior)
        np.testing.assert_allclose(conditional_probs(st, n), q, rtol=1e-10,
                                   atol=1e-14)
        draws = sample_conditional(st, n, 100_000)
        f = np.bincount(draws, minlength=T)
        keep = q * draws.size > 5
        exp = q[keep] * draws.size
        obs = f[keep]
        chi2 = np.sum((obs - exp) ** 2 / exp) + 0.0
        assert f[~keep].sum() <= max(30, 3 * q[~keep].sum() * draws.size)
        assert stats.chi2.sf(chi2, keep.sum() - 1) > 1e-3


def test_tsb_label_swap_acceptance_is_prior_ratio(rng):
    """The swap move's log acceptance ratio is the change of log p(z | alpha0)."""
    for _ in range(20):
        cnt = rng.integers(0, 6, size=5)
        for k in range(4):
            a, b = cnt[k], cnt[k + 1]
            r = cnt[k + 2:].sum()
            last = k + 1 == 4
            sw = cnt.copy()
            sw[k], sw[k + 1] = b, a
            d = _tsb_stick_pair(b, a, r, 1.3, last) - _tsb_stick_pair(a, b, r, 1.3, last)
            ref = log_prior_partition(sw, 1.3, "tsb") - log_prior_partition(cnt, 1.3, "tsb")
            assert d == pytest.approx(ref, abs=1e-10)


def test_gibbs_counts_stay_consistent_after_sweeps_and_swaps(rng):
    ens = _tiny(rng, n=30)
    from consensuskit.models.nbce.spec import log_likelihood_collapsed

    st = GibbsState(ens.offset_index(), ens.n_labels, rng.integers(0, 6, 30), 6, 0.7, 0.4, "tsb")
    for _ in range(10):
        st.sweep(1)
        st.label_swaps()
    ref = GibbsState(ens.offset_index(), ens.n_labels, st.z, 6, 0.7, 0.4, "tsb")
    np.testing.assert_array_equal(ref.cnt, st.cnt)
    np.testing.assert_array_equal(ref.nlk, st.nlk)
    np.testing.assert_array_equal(ref.ckm, st.ckm)
    np.testing.assert_allclose(ref.num, st.num)
    np.testing.assert_allclose(ref.invden, st.invden)
    col_of = np.repeat(np.arange(ens.n_partitions), ens.n_labels)
    assert st.log_lik() == pytest.approx(
        log_likelihood_collapsed(st.nlk.T, col_of, ens.n_labels, st.beta), abs=1e-9
    )


@pytest.mark.parametrize("prior", PRIORS)
def test_cvb_update_at_onehot_q_is_the_gibbs_conditional(prior, rng):
    """With q(z) one-hot the expected counts are exact, so one parallel CVB update
    (block = all rows) gives every row its exact collapsed conditional, and the
    approximate CVB bound equals the collapsed log joint."""
    ens = _tiny(rng, n=9)
    T, a0, b = 4, 0.9, 0.5
    z = rng.integers(0, T, size=ens.n_samples)
    G = np.eye(T)[z]
    idx = ens.offset_index()
    X, Xt = onehot_tensor(idx, ens.n_total_labels, torch.float64, "cpu")
    O = torch.as_tensor(idx >= 0, dtype=torch.float64)
    Nk, Nkl, Nkm = cvb_expected_counts(X, Xt, O, torch.tensor(G))
    approx = cvb_approx_bound(Nk, Nkl, Nkm, torch.tensor(G), a0, b, prior,
                              torch.as_tensor(ens.n_labels))
    assert approx == pytest.approx(
        collapsed_log_joint(ens.codes, ens.n_labels, z, T, a0, b, prior), abs=1e-9
    )
    out = CVB(idx, ens.n_labels, T, prior=prior, alpha0=a0, beta=b, block_size=ens.n_samples,
              init_gamma=G).run(max_iter=1, tol=1e-5).best
    gam = out.params.gamma.numpy()
    for n in range(ens.n_samples):
        np.testing.assert_allclose(gam[n], _brute_conditional(ens, z, n, T, a0, b, prior),
                                   rtol=1e-9, atol=1e-12)


# ---------------------------------------------------------------------------
# (b) simulation-based calibration of the sampler: tests/test_sbc_nbce.py
# ---------------------------------------------------------------------------


# ---------------------------------------------------------------------------
# (c) VB: the bound never decreases, and it is the Pyro model/guide ELBO
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("update", [True, False])
def test_vb_bound_never_decreases(update, incomplete_labels):
    ens = Ensemble.from_labels(incomplete_labels)
    g = torch.Generator().manual_seed(3)
    out = VB(ens.offset_index(), ens.n_labels, 8, alpha0=2.0, beta=0.3,
             update_hyperparameters=update, generator=g).run(max_iter=300, tol=1e-12).best
    lb = np.asarray(out.objectives)
    assert lb.size > 5
    assert np.all(np.diff(lb) >= -1e-9 * np.abs(lb[1:])), np.diff(lb).min()
    if update:
        assert out.params.alpha0 != 2.0 and out.params.beta != 0.3


def test_vb_bound_equals_pyro_elbo(rng):
    """vb_bound at the engine's variational parameters == -TraceEnum_ELBO of the Pyro
    model with guide_fsd at the same parameters (z enumerated, pi/theta by 10 x 2000
    vectorised particles), within 5 standard errors of the Monte Carlo estimate."""
    ens = _tiny(rng, n=6, m=3)
    T, a0, b = 3, 1.2, 0.7
    g = torch.Generator().manual_seed(0)
    out = VB(ens.offset_index(), ens.n_labels, T, alpha0=a0, beta=b,
             update_hyperparameters=False, generator=g).run(max_iter=5, tol=1e-7).best
    idx = ens.offset_index()
    X, Xt = onehot_tensor(idx, ens.n_total_labels, torch.float64, "cpu")
    gamma, xi, rho = out.params.gamma, out.params.xi, out.params.rho
    col_of = torch.as_tensor(np.repeat(np.arange(ens.n_partitions), ens.n_labels))
    ours = vb_bound(torch.sparse.mm(Xt, gamma), xi, rho, gamma, a0, b,
                    torch.as_tensor(ens.n_labels), col_of)
    pyro.clear_param_store()
    pyro.param("xi", xi.clone())
    pyro.param("gamma", gamma.clone())
    off = ens.offsets
    for j in range(ens.n_partitions):
        pyro.param(f"rho_{j}", rho[:, off[j]:off[j + 1]].clone())
    elbo = pyro.infer.TraceEnum_ELBO(max_plate_nesting=1, num_particles=2_000,
                                     vectorize_particles=True)
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # ten independent estimates: their spread gives the standard error
            ests = [-elbo.loss(model, guide_fsd, torch.as_tensor(ens.codes),
                               n_labels=ens.n_labels.tolist(), n_clusters=T, alpha0=a0,
                               beta=b, prior="fsd") for _ in range(10)]
    finally:
        torch.set_default_dtype(old)
    est, se = np.mean(ests), np.std(ests, ddof=1) / np.sqrt(len(ests))
    assert abs(est - ours) < 5 * se, (est, ours, se)  # t with 9 d.o.f.: p ~ 7e-4


def test_cvb_runs_both_priors_and_converges(rng):
    ens = _tiny(rng, n=60, m=6)
    for prior in PRIORS:
        out = CVB(ens.offset_index(), ens.n_labels, 6, prior=prior,
                  generator=torch.Generator().manual_seed(0)).run(max_iter=300, tol=1e-6).best
        assert out.converged
        np.testing.assert_allclose(out.params.gamma.sum(1).numpy(), 1.0)


def test_leave_one_out_counts_only_clamps_beyond_roundoff():
    total = torch.tensor([[3.0, 0.5, 1e-20, 2.0]], dtype=torch.float64)
    own = torch.tensor([[1.0, 0.8, 1e-20 + 1e-13, 2.5]], dtype=torch.float64)
    out, n, amount = leave_one_out(total, own, roundoff=1e-12)
    np.testing.assert_array_equal(out.numpy(), [[2.0, 0.0, 0.0, 0.0]])
    assert n == 2 and amount == pytest.approx(0.5)  # -1e-13 is within round-off
    out, n, amount = leave_one_out(total[:, :1], own[:, :1], roundoff=1e-12)
    assert n == 0 and amount == 0.0 and float(out) == 2.0


def _cvb_fit(X, **kw):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = NBCE(truncation=6, inference="cvb", max_iter=20, random_state=0, **kw).fit(X)
    return est, [w for w in caught if "NBCE CVB" in str(w.message)
                 and "beyond round-off" in str(w.message)]


def test_cvb_counts_and_warns_once_when_running_counts_drift(rng, monkeypatch):
    """Running label counts that drifted 2 below the exact ones: clamps are counted."""
    ens = _tiny(rng, n=60, m=6)
    est, warned = _cvb_fit(ens.codes)
    assert est.n_clamped_ == 0 and est.max_clamped_ == 0.0 and not warned
    init = CVB.init

    def drifted(self, rng=None, run=0):
        state = init(self, rng, run)
        state.Nkl = state.Nkl - 2.0
        return state

    monkeypatch.setattr(CVB, "init", drifted)
    est, warned = _cvb_fit(ens.codes)
    assert est.n_clamped_ > 0 and len(warned) == 1
    assert str(est.n_clamped_) in str(warned[0].message)
    # the exact leave-one-out count is >= 0, so the drifted one is >= -2
    assert 0.0 < est.max_clamped_ <= 2.0 + 1e-12


# ---------------------------------------------------------------------------
# (d), (e) planted clusters with outliers
# ---------------------------------------------------------------------------
def planted_with_outliers(rng, n_in=380, n_out=20, n_clusters=5, m=10, noise=0.15,
                          fresh=0.7):
    """5 consensus clusters seen through m noisy base clusterings, plus outlier rows.

    Inliers: each base clustering gives the (column-permuted) true label with prob
    1-noise, else a uniformly random one of the 5.  Outliers: in each column, with
    prob ``fresh`` a label of their own (a base clustering isolating them), else a
    random one of the 5.  Returns labels (n_in + n_out, m), truth (-1 = outlier).
    """
    z = rng.integers(0, n_clusters, size=n_in)
    cols = []
    for _ in range(m):
        perm = rng.permutation(n_clusters)
        lab = np.where(rng.random(n_in) < noise, rng.integers(0, n_clusters, n_in), perm[z])
        out = np.where(rng.random(n_out) < fresh, n_clusters + np.arange(n_out),
                       rng.integers(0, n_clusters, n_out))
        cols.append(np.concatenate([lab, out]))
    X = np.column_stack(cols)
    truth = np.concatenate([z, np.full(n_out, -1)])
    order = rng.permutation(X.shape[0])
    return X[order], truth[order]


def test_planted_five_clusters_and_outliers_in_small_clusters():
    rng = np.random.default_rng(2024)
    X, truth = planted_with_outliers(rng)
    m = NBCE(20, prior="tsb", n_samples=40, burn_in=40, n_chains=2, random_state=0).fit(X)
    N = X.shape[0]
    sizes = np.bincount(m.labels_)
    big = np.flatnonzero(sizes >= 0.02 * N)
    assert big.size == 5
    # each big cluster is (almost) one planted cluster
    for c in big:
        t = truth[(m.labels_ == c) & (truth >= 0)]
        assert np.bincount(t).max() >= 0.95 * t.size
    outl = truth < 0
    in_small = sizes[m.labels_[outl]] < 0.02 * N
    assert in_small.mean() >= 0.9


def _singleton_points(labels_draws):
    out = []
    for z in labels_draws:
        cnt = np.bincount(z)
        out.append(np.sum(cnt[z] == 1))
    return np.array(out)


def test_tsb_fewer_singletons_than_fsd_when_truncation_binds():
    """Paper Table 6 direction, where it holds: with a binding truncation (T=10,
    alpha0=5, N=340) the TSB prior of the Pyro model puts the leftover stick on its
    last component (v_T = 1), a catch-all that absorbs would-be singletons, so TSB
    leaves fewer points in singleton clusters than FSD (2000 prior draws each)."""
    N, T, a0 = 340, 10, 5.0
    codes = torch.zeros(N, 1, dtype=torch.long)
    res = {}
    for prior in PRIORS:
        with torch.random.fork_rng():
            torch.manual_seed(0)
            with pyro.plate("particles", 2000, dim=-2):
                tr = poutine.trace(model).get_trace(codes, n_labels=[1], n_clusters=T, alpha0=a0,
                                                    beta=0.5, prior=prior)
        z = tr.nodes["z"]["value"].reshape(2000, N).numpy()
        sing = _singleton_points(z)
        res[prior] = (sing.mean(), sing.std() / np.sqrt(sing.size))
    diff = res["fsd"][0] - res["tsb"][0]
    assert diff > 5 * np.hypot(res["fsd"][1], res["tsb"][1]), res


def test_tsb_vs_fsd_singletons_posterior_at_large_truncation():
    """At the paper's large truncation (T=100) and equal, fixed alpha0=1, a correct
    sampler gives TSB *more* singleton points than FSD, i.e. the opposite of the
    paper's Table 6: FSD's total mass for a new cluster is alpha0 (T-K)/T, below the
    DP's alpha0, which TSB matches as T grows.  Posterior mean over 2 x 150 draws,
    two data sets with 40 outlier rows out of 340."""
    tot = {"tsb": 0.0, "fsd": 0.0}
    for seed in (7, 8):
        rng = np.random.default_rng(seed)
        X, _ = planted_with_outliers(rng, n_in=300, n_out=40, fresh=0.4)
        ens = Ensemble.from_labels(X)
        for prior in PRIORS:
            out = gibbs_nbce(ens.offset_index(), ens.n_labels, 100, prior=prior, alpha0=1.0,
                             beta=0.5, update_hyperparameters=False, n_samples=150,
                             burn_in=100, n_chains=2, random_state=seed)
            tot[prior] += _singleton_points(out["z"].reshape(-1, ens.n_samples)).mean()
    assert tot["tsb"] > tot["fsd"], tot


# ---------------------------------------------------------------------------
# (f) estimator: perplexity, ArviZ traces, predict, validation
# ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def split_data():
    rng = np.random.default_rng(99)
    X, truth = planted_with_outliers(rng, n_in=190, n_out=10, m=6)
    return X[:150], X[150:], truth


def _dense_perplexity(m, X):
    """Perplexity and its SE of ``X`` under fitted ``m``, from the formulas of the
    docstrings: per row ``log (1/S) sum_s sum_k pi_k^s prod_j theta^s_{k x_ij}`` with
    ``(pi^s, theta^s)`` the posterior means given draw s (all T components, plain
    loops); VB/CVB: one set of parameters.  SE: delta method over the S draws."""
    from consensuskit.models.nbce.predictive import predictive_parameters

    e = m.ensemble_.encode(X, unknown="missing")
    codes, off = e.codes, m.ensemble_.offsets
    if m.inference == "gibbs":
        o = m.samples_
        C, S = o["log_joint"].shape
        params = [predictive_parameters(o["counts"][c, d], o["label_counts"][c, d],
                                        o["col_counts"][c, d], o["alpha0"][c, d],
                                        o["beta"][c, d], o["n_labels"], o["prior"])
                  for c in range(C) for d in range(S)]
    else:
        params = [(m._log_pi, m._log_theta)]
    P = np.empty((len(params), codes.shape[0]))  # p(x_i | draw s)
    for s, (lp, lt) in enumerate(params):
        for i, row in enumerate(codes):
            comp = np.exp(lp).copy()
            for j, x in enumerate(row):
                if x >= 0:
                    comp = comp * np.exp(lt[:, off[j] + x])
            P[s, i] = comp.sum()
    pbar = P.mean(0)
    total = np.log(pbar).sum()
    S = P.shape[0]
    se_ll = np.sqrt(np.sum((P / pbar).var(axis=0) / S)) if S > 1 else 0.0
    ppl = np.exp(-total / e.n_observed)
    return ppl, ppl * se_ll / e.n_observed


@pytest.mark.parametrize(
    "inference,prior", [("gibbs", "tsb"), ("gibbs", "fsd"), ("vb", "fsd"), ("cvb", "tsb"),
                        ("cvb", "fsd")]
)
def test_perplexity_beats_uniform_equals_its_formula_and_predict(inference, prior, split_data):
    tr, te, _ = split_data
    m = NBCE(12, prior=prior, inference=inference, n_samples=30, burn_in=20,
             random_state=0, max_iter=200).fit(tr)
    p_tr = m.perplexity(tr)
    p_te, se = m.perplexity(te, return_se=True, unknown="missing")
    # the uniform model x_ij ~ U{1..k_j} is the baseline a fitted model must beat
    def uniform_ppl(X):
        e = Ensemble.from_labels(tr).encode(X, unknown="missing")
        return np.exp(np.sum(e.mask * np.log(e.n_labels)[None, :]) / e.n_observed)

    assert p_tr < 0.8 * uniform_ppl(tr)
    assert p_te < 0.8 * uniform_ppl(te)
    assert (se > 0) == (inference == "gibbs")
    # the held-out perplexity is the one written out from the fitted parameters:
    # every component scored densely (no occupied-component shortcut), draws averaged
    ref, ref_se = _dense_perplexity(m, te)
    assert p_te == pytest.approx(ref, rel=1e-10)
    assert se == pytest.approx(ref_se, rel=1e-8)
    P = m.predict_proba(te, unknown="missing")
    assert P.shape == (te.shape[0], m.n_clusters_)
    np.testing.assert_allclose(P.sum(1), 1.0)
    np.testing.assert_array_equal(m.predict(te, unknown="missing"), P.argmax(1))
    assert m.membership_.shape == (tr.shape[0], m.n_clusters_)
    assert m.labels_.max() + 1 == m.n_clusters_
    if inference != "gibbs":
        assert m.lower_bounds_.size == m.n_iter_
        assert m.lower_bound_ == m.lower_bounds_[-1]


def test_inference_data_has_chain_draw_and_summary(split_data):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        import arviz as az
    tr, _, _ = split_data
    m = NBCE(10, n_samples=40, burn_in=20, n_chains=3, random_state=1).fit(tr)
    post = m.inference_data_.posterior
    for v in ("log_joint", "n_clusters", "alpha0", "beta"):
        assert post[v].dims == ("chain", "draw")
        assert post[v].shape == (3, 40)
    summ = az.summary(m.inference_data_)
    assert {"r_hat", "ess_bulk"} <= set(summ.columns)
    assert np.isfinite(summ.loc["log_joint", "r_hat"])
    assert np.isfinite(summ.loc["alpha0", "ess_bulk"])
    # co-clustering: dense and by pairs agree; consensus is a retained draw
    P = m.co_clustering()
    pairs = np.array([[0, 1], [2, 5], [7, 3]])
    np.testing.assert_allclose(m.co_clustering(pairs), P[pairs[:, 0], pairs[:, 1]])
    np.testing.assert_allclose(np.diag(P), 1.0)


def test_counts_recomputed_from_z_match_stored(split_data):
    """Without stored per-draw counts the estimator recomputes them from z: same
    perplexity and predictions."""
    tr, te, _ = split_data
    a = NBCE(10, n_samples=8, burn_in=5, random_state=2).fit(tr)
    b = NBCE(10, n_samples=8, burn_in=5, random_state=2).fit(tr)
    for key in ("label_counts", "col_counts"):
        del b.samples_[key]
    assert b.perplexity(te, unknown="missing") == pytest.approx(
        a.perplexity(te, unknown="missing"), rel=1e-12)
    np.testing.assert_allclose(b.predict_proba(te, unknown="missing"),
                               a.predict_proba(te, unknown="missing"))


def test_point_consensus_picks_the_draw_matching_co_clustering():
    # three draws, two identical up to relabelling: the consensus is that partition
    Z = np.array([[0, 0, 1, 1, 2], [1, 1, 0, 0, 2], [0, 1, 0, 1, 0]])
    lab, best = point_consensus(Z)
    assert best in (0, 1)
    assert lab[0] == lab[1] and lab[2] == lab[3] and lab[0] != lab[2] != lab[4]


def test_reproducible_with_random_state(split_data):
    tr, _, _ = split_data
    a = NBCE(8, n_samples=10, burn_in=5, random_state=4).fit(tr)
    b = NBCE(8, n_samples=10, burn_in=5, random_state=4).fit(tr)
    np.testing.assert_array_equal(a.samples_["z"], b.samples_["z"])


@pytest.mark.parametrize(
    "kwargs,err",
    [
        (dict(prior="dp"), ValueError),
        (dict(inference="mcmc"), ValueError),
        (dict(inference="vb", prior="tsb"), ValueError),
        (dict(truncation=1), ValueError),
        (dict(alpha0=-1.0), ValueError),
        (dict(beta=0.0), ValueError),
        (dict(n_samples=2.5), TypeError),
        (dict(update_hyper="yes"), TypeError),
    ],
)
def test_bad_parameters_raise(kwargs, err, split_data):
    tr, _, _ = split_data
    with pytest.raises(err):
        NBCE(**kwargs).fit(tr)


@pytest.mark.parametrize("inference,prior", [("vb", "fsd"), ("cvb", "tsb")])
def test_float32_variational_agrees_with_float64(inference, prior, split_data):
    from sklearn.base import clone
    from sklearn.metrics import adjusted_rand_score

    tr, _, _ = split_data
    m64 = NBCE(10, prior=prior, inference=inference, random_state=0, max_iter=100)
    m32 = clone(m64).set_params(dtype=torch.float32)
    m64.fit(tr)
    m32.fit(tr)
    assert adjusted_rand_score(m64.labels_, m32.labels_) > 0.9
    assert m32.perplexity(tr) == pytest.approx(m64.perplexity(tr), rel=1e-2)


def test_gibbs_row_loglik_occupied_shortcut_equals_full_sum(split_data):
    """Scoring the empty components once with their summed weight gives the same
    row log-likelihood as the plain sum over all T components."""
    from scipy.special import logsumexp

    from consensuskit.models.nbce.predictive import component_loglik, predictive_parameters

    tr, te, _ = split_data
    m = NBCE(30, n_samples=5, burn_in=5, n_chains=1, random_state=0).fit(tr)
    idx = m.ensemble_.encode(te, unknown="missing").offset_index()
    o = m.samples_
    for s in range(5):
        assert np.any(o["counts"][0, s] == 0)
        lp, lt = predictive_parameters(o["counts"][0, s], o["label_counts"][0, s],
                                       o["col_counts"][0, s], o["alpha0"][0, s],
                                       o["beta"][0, s], o["n_labels"], o["prior"])
        full = logsumexp(lp[None, :] + component_loglik(idx, lt), axis=1)
        np.testing.assert_allclose(m._row_logliks_gibbs(idx)[s], full, rtol=1e-12)
        # and the posterior-mean parameters are normalised
        np.testing.assert_allclose(np.exp(lp).sum(), 1.0)
        col_of = np.repeat(np.arange(m.ensemble_.n_partitions), m.ensemble_.n_labels)
        sums = np.zeros((30, m.ensemble_.n_partitions))
        np.add.at(sums.T, col_of, np.exp(lt).T)
        np.testing.assert_allclose(sums, 1.0)


@pytest.mark.parametrize("prior", PRIORS)
def test_pyro_guides_run_with_svi(prior, incomplete_labels):
    """Both custom guides work with SVI + TraceEnum_ELBO on data with missing labels,
    and a few Adam steps lower the loss."""
    from consensuskit.models.nbce.spec import guide_tsb

    ens = Ensemble.from_labels(incomplete_labels)
    guide = guide_fsd if prior == "fsd" else guide_tsb
    args = (torch.as_tensor(ens.codes),)
    kw = dict(n_labels=ens.n_labels.tolist(), n_clusters=4, alpha0=1.0, beta=0.5, prior=prior)
    pyro.clear_param_store()
    svi = pyro.infer.SVI(model, guide, pyro.optim.Adam({"lr": 0.05}),
                         pyro.infer.TraceEnum_ELBO(max_plate_nesting=1, num_particles=4,
                                                   vectorize_particles=True))
    losses = [svi.step(*args, **kw) for _ in range(20)]
    assert np.all(np.isfinite(losses))
    assert np.mean(losses[-5:]) < np.mean(losses[:5])


@pytest.mark.parametrize("prior", ["tsb", "fsd"])
def test_gibbs_row_logliks_equal_sum_over_components_from_stored_or_recounted_tables(
        split_data, prior):
    """The held-out row log-likelihoods of every draw (the compiled pass,
    :func:`draw_row_logliks`, and the per-component terms ``predict_proba`` reads) equal
    the plain numpy sum over all T components, from the stored count tables and from
    counts recomputed from z."""
    from scipy.special import logsumexp

    from consensuskit.models.nbce.predictive import component_loglik, predictive_parameters
    from consensuskit.models.nbce.row_scores import draw_component_logliks

    tr, te, _ = split_data
    m = NBCE(30, prior=prior, n_samples=6, burn_in=5, n_chains=2, random_state=0).fit(tr)
    idx = m.ensemble_.encode(te, unknown="missing").offset_index()
    assert (idx < 0).any()  # missing labels are in play
    o = m.samples_
    args = [o[k].reshape(12, *o[k].shape[2:]) for k in ("counts", "label_counts",
                                                           "col_counts", "alpha0", "beta")]
    want = np.stack([logsumexp(lp[None] + component_loglik(idx, lt), axis=1) for lp, lt in (
        predictive_parameters(*a, o["n_labels"], prior) for a in zip(*args))])
    np.testing.assert_allclose(m._row_logliks_gibbs(idx), want, rtol=1e-12)
    for s, a in enumerate(zip(*args)):
        lj, occ, total = draw_component_logliks(idx, *a, o["n_labels"], prior)
        np.testing.assert_array_equal(occ, np.flatnonzero(a[0]))
        lp, lt = predictive_parameters(*a, o["n_labels"], prior)
        np.testing.assert_allclose(lj, lp[occ] + component_loglik(idx, lt[occ]), rtol=1e-12)
        np.testing.assert_allclose(total, want[s], rtol=1e-12)
    for key in ("label_counts", "col_counts"):
        del m.samples_[key]
    np.testing.assert_allclose(m._row_logliks_gibbs(idx), want, rtol=1e-12)
