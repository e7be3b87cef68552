"""BCE's default estimate (collapsed Gibbs + Monte Carlo EM) and its honest perplexity SE.

References are independent of the code under test: the Dirichlet-multinomial MLE by a
generic optimiser, the collapsed posterior of ``z`` by enumeration, the exact
count-vector marginal for the log-likelihood.
"""

import itertools
import warnings

import numpy as np
import pytest
import torch
from scipy.optimize import minimize
from scipy.special import gammaln, polygamma

from consensuskit.data.ensemble import Ensemble
from consensuskit.models.bce import cavi
from consensuskit.models.bce import gibbs_kernels as gk
from consensuskit.models.bce.alpha import exact_log_marginal, row_log_marginals
from consensuskit.models.bce.collapsed_gibbs import minka_alpha, minka_eta
from consensuskit.models.bce.estimator import BCE
from experiments.bce_alpha import simulate
from experiments.bce_perplexity_se import case_point, one_case


def test_minka_alpha_is_the_dirichlet_multinomial_mle():
    rng = np.random.default_rng(0)
    a_true = np.array([0.2, 0.5, 1.5])
    V = rng.integers(1, 9, size=3000)
    counts = np.stack([rng.multinomial(v, rng.dirichlet(a_true)) for v in V])
    hist = np.zeros((3, 9))
    for h in range(3):
        np.add.at(hist[h], counts[:, h], 1)
    a_fp, clipped = minka_alpha(hist, np.bincount(V, minlength=9).astype(float), np.ones(3),
                                n_iter=5000, rtol=1e-12)

    def nll(log_a):
        a = np.exp(log_a)
        return -(gammaln(a.sum()) - gammaln(a.sum() + V)
                 + (gammaln(a + counts) - gammaln(a)).sum(1)).sum()

    ref = np.exp(minimize(nll, np.zeros(3), method="Nelder-Mead",
                          options={"xatol": 1e-9, "fatol": 1e-10, "maxiter": 20000}).x)
    assert clipped == 0
    np.testing.assert_allclose(a_fp, ref, rtol=1e-4)


def test_minka_alpha_step_is_the_digamma_update_on_weighted_histograms():
    """One update of the tail-count kernel equals Minka's digamma form, pooled (non-integer)
    histograms and rows with no labels included."""
    from scipy.special import digamma

    rng = np.random.default_rng(3)
    K, C = 4, 12
    hist = rng.random((K, C + 1)) * 50
    v_hist = rng.random(C + 1) * 80
    a = rng.gamma(1.0, 0.5, K) + 0.01
    c, v = np.arange(C + 1.0), np.arange(C + 1.0)
    want = a * (hist * (digamma(c + a[:, None]) - digamma(a[:, None]))).sum(1) / (
        v_hist * (digamma(v + a.sum()) - digamma(a.sum()))).sum()
    got, _ = minka_alpha(hist, v_hist, a, n_iter=1)
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_minka_eta_is_the_symmetric_dirichlet_mle():
    rng = np.random.default_rng(1)
    kj = np.array([3, 5])
    offsets = np.concatenate([[0], np.cumsum(kj)])
    col = np.repeat(np.arange(2), kj)
    K = 4
    clab = np.zeros((offsets[-1], K))
    for j, k in enumerate(kj):
        for h in range(K):
            clab[offsets[j]:offsets[j + 1], h] = rng.multinomial(
                int(rng.integers(20, 200)), rng.dirichlet(np.full(k, 0.7)))
    ccol = np.stack([clab[col == j].sum(0) for j in range(2)])
    e_fp, clipped = minka_eta(clab, ccol, col, kj, 1.0, n_iter=5000, rtol=1e-12)

    def nll(log_e):
        e = np.exp(log_e[0])
        out = (gammaln(clab + e) - gammaln(e)).sum()
        out += (gammaln(kj[:, None] * e) - gammaln(ccol + kj[:, None] * e)).sum()
        return -out

    ref = np.exp(minimize(nll, [0.0], method="Nelder-Mead",
                          options={"xatol": 1e-10, "fatol": 1e-12}).x[0])
    assert not clipped
    assert e_fp == pytest.approx(ref, rel=1e-4)
    # Newton's method: from a start 5x off, six steps reach the fixed point's limit to
    # 1e-10 (Minka's linear iteration, which it replaced, needs 30-100 steps to 1e-6)
    e_few, _ = minka_eta(clab, ccol, col, kj, 5.0 * e_fp, n_iter=6, rtol=0.0)
    assert e_few == pytest.approx(e_fp, rel=1e-10)


def test_trigamma_kernel_matches_scipy():
    x = np.concatenate([np.geomspace(1e-6, 1e6, 500), np.linspace(0.01, 30, 500)])
    got = np.array([gk.trigamma(v) for v in x])
    want = polygamma(1, x)
    assert np.max(np.abs(got - want) / want) < 1e-14


def _collapsed_log_joint(z, codes, alpha, eta, kj, offsets, K):
    """log p(x, z | alpha, eta) with theta and beta integrated out (any z, by formula)."""
    out = 0.0
    for i in range(codes.shape[0]):
        obs = codes[i] >= 0
        n = np.bincount(z[i][obs], minlength=K)
        out += (gammaln(alpha.sum()) - gammaln(alpha.sum() + n.sum())
                + (gammaln(alpha + n) - gammaln(alpha)).sum())
    for j, k in enumerate(kj):
        for h in range(K):
            sel = (codes[:, j] >= 0) & (z[:, j] == h)
            c = np.bincount(codes[sel, j] - offsets[j], minlength=k)
            out += gammaln(k * eta) - gammaln(c.sum() + k * eta) + (gammaln(c + eta)
                                                                    - gammaln(eta)).sum()
    return out


@pytest.mark.parametrize("wrong", [False, True])
def test_sweep_samples_the_collapsed_posterior(wrong):
    """Visit frequencies of z (3 rows x 2 columns, one label missing, K = 2: 32 states)
    match the enumerated posterior; with the sampler run at the wrong eta (negative
    control) they do not."""
    K, kj = 2, np.array([2, 3])
    offsets = np.array([0, 2, 5])
    local = np.array([[0, 2], [1, -1], [0, 1]])
    codes = np.where(local >= 0, local + offsets[:-1], -1).astype(np.int32)
    alpha, eta = np.array([0.4, 0.9]), 0.6
    obs = np.argwhere(codes >= 0)
    states = list(itertools.product(range(K), repeat=len(obs)))
    logp = []
    for s in states:
        z = np.full(codes.shape, -1)
        z[obs[:, 0], obs[:, 1]] = s
        logp.append(_collapsed_log_joint(z, codes, alpha, eta, kj, offsets, K))
    p = np.exp(np.array(logp) - np.logaddexp.reduce(logp))
    z = np.full(codes.shape, -1, dtype=np.int32)
    z[obs[:, 0], obs[:, 1]] = 0
    nrow = np.zeros((3, K), np.int32)
    clab = np.zeros((5, K), np.int32)
    ccol = np.zeros((2, K), np.int32)
    for i, j in obs:
        nrow[i, 0] += 1
        clab[codes[i, j], 0] += 1
        ccol[j, 0] += 1
    index = {s: t for t, s in enumerate(states)}
    n_draws = 40000
    seen = np.zeros(len(states))
    for t in range(n_draws):
        gk.sweep(local, offsets, z, nrow, clab, ccol, alpha, 3.0 if wrong else eta,
                 kj.astype(float), t + 1)
        seen[index[tuple(z[obs[:, 0], obs[:, 1]])]] += 1
    # chi-square on the visit counts; successive sweeps are correlated, so the statistic
    # is compared with a bound for an effective sample of n_draws / 5 (estimated
    # integrated autocorrelation of this chain ~ 2)
    n_eff = n_draws / 5
    chi2 = (((seen / n_draws - p) ** 2) / p).sum() * n_eff
    df = len(states) - 1
    bound = df + 6 * np.sqrt(2 * df)
    if wrong:
        assert chi2 > bound
    else:
        assert chi2 < bound


def _oracle_ratio(fit, X_held, alpha, betas):
    held = fit.ensemble_.encode(X_held, unknown="missing")
    cats = fit.ensemble_.categories
    data = cavi.prepare_data(held)
    tb = cavi.pack_beta([b[:, cats[j]] / b[:, cats[j]].sum(1, keepdims=True)
                         for j, b in enumerate(betas)])
    truth = exact_log_marginal(torch.as_tensor(alpha), tb, data).sum()
    est = exact_log_marginal(torch.as_tensor(fit.alpha_), cavi.pack_beta(fit.beta_), data).sum()
    return float(np.exp(-(est - truth) / held.n_observed))


def test_default_estimate_is_near_the_truth_where_meanfield_is_not():
    rng = np.random.default_rng(3)
    X, a, betas = simulate(rng, 3500, 6, n_clusters=3, n_labels=4, alpha=0.3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        d = BCE(3, random_state=0).fit(X[:3000])
        mf = BCE(3, alpha_estimate="meanfield", random_state=0).fit(X[:3000])
    assert d.alpha_estimate_ == "gibbs" and mf.alpha_estimate_ == "meanfield"
    r_d, r_mf = _oracle_ratio(d, X[3000:], a, betas), _oracle_ratio(mf, X[3000:], a, betas)
    assert r_d < 1.01  # the goal
    assert r_d < r_mf
    assert 0.5 < d.alpha_.sum() / a.sum() < 2.0
    assert mf.alpha_.sum() / a.sum() > 2.0  # the bias the default removes
    # the kept chain is the audition's best, and its final score is on record
    assert d.kept_chain_ == int(np.argmax(d.chain_log_marginals_))
    assert np.isfinite(d.log_marginal_)
    np.testing.assert_allclose(d.membership_.sum(1), 1.0)


def test_gibbs_resume_ends_where_the_uninterrupted_fit_ends(tmp_path):
    rng = np.random.default_rng(4)
    X, _, _ = simulate(rng, 300, 5, n_clusters=3, n_labels=3, alpha=0.5)
    kw = dict(n_sweeps=30, n_init=2, random_state=7)
    full = BCE(3, **kw).fit(X)
    path = tmp_path / "ck.pkl"
    calls = []

    def stop(state):
        calls.append(state["iteration"])
        return state["iteration"] < 17

    BCE(3, callback=stop, checkpoint_path=path, **kw).fit(X)
    resumed = BCE(3, **kw).fit(X, resume_from=path)
    np.testing.assert_array_equal(resumed.alpha_, full.alpha_)
    np.testing.assert_array_equal(resumed.gamma_, full.gamma_)


def test_gibbs_needs_cavi_and_rejects_bad_values():
    X = np.array([[0, 1], [1, 0], [0, 0]])
    with pytest.raises(ValueError, match="inference='cavi'"):
        BCE(2, alpha_estimate="gibbs", inference="svi").fit(X)
    with pytest.raises(ValueError, match="n_sweeps"):
        BCE(2, n_sweeps=0).fit(X)
    with pytest.raises(ValueError, match="log_likelihood_method"):
        BCE(2, log_likelihood_method="exactly").fit(X)
    assert BCE(2, inference="svi")._alpha_estimate() == "meanfield"


def test_importance_sampler_is_exact_in_expectation_near_alpha_zero():
    """Issue 24's case: alpha ~ 2e-8 with 10% missing; the plain sequential proposal
    missed by 30 SE.  The defensive mixture's total is within 4 SE of the exact one
    (after the known -SE^2/2 Jensen shift)."""
    rng = np.random.default_rng(5)
    X, _, _ = simulate(rng, 45, 4, n_clusters=3, n_labels=4, alpha=1.0, missing=0.1)
    ens = Ensemble.from_labels(X)
    data = cavi.prepare_data(ens)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        m = BCE(3, alpha_estimate="meanfield", random_state=0).fit(X)
    a = torch.as_tensor(m.alpha_ / m.alpha_.sum() * 2e-8)
    b = cavi.pack_beta(m.beta_)
    exact = exact_log_marginal(a, b, data).sum()
    ll, var = row_log_marginals(a, b, data, 200, torch.Generator().manual_seed(0), method="is")
    se = float(var.sum().sqrt())
    assert abs(float(ll.sum()) + se**2 / 2 - float(exact)) < 4 * se + 1e-9


def test_importance_sampler_se_where_every_particle_takes_one_path():
    """Seed 2's case 52 of ``experiments/bce_perplexity_se.py``: beta near 0 (the 1e-6
    smoothing) off each label's own cluster, so all 200 particles of every row take one
    path and their sample variance is 0, while the weight of that path is off by the
    proposal mass of the paths not drawn.  The SE then comes from that mass
    (``delta (1 - delta) / S`` per row) and covers the error; where the weights vary the
    sample variance is kept as it was."""
    from consensuskit.inference.pointwise import logmeanexp_rows
    from consensuskit.models.bce.alpha import mixture_log_weights

    z, _, info = one_case(52, 2)
    assert info["se"] > 0 and abs(z) < 3, (z, info)
    # the same rows by hand: one weight per row, the sample variance 0
    _, a, b, data, _, _ = case_point(52, 2)
    lw, lq = mixture_log_weights(a, b, data, 200, torch.Generator().manual_seed(3),
                                 return_log_q=True)
    assert torch.equal(lw.max(0).values, lw.min(0).values)
    assert float(logmeanexp_rows(lw)[1].sum()) == 0.0  # what the SE was before
    delta = -torch.expm1(lq.max(0).values)
    _, var = row_log_marginals(a, b, data, 200, torch.Generator().manual_seed(3), method="is")
    torch.testing.assert_close(var, delta * (1 - delta) / 200, rtol=1e-12, atol=0)
    # weights that vary: the sample variance, unchanged
    rng = np.random.default_rng(5)
    X, _, _ = simulate(rng, 60, 6, n_clusters=3, n_labels=4, alpha=1.0, missing=0.1)
    data = cavi.prepare_data(Ensemble.from_labels(X))
    b = cavi.pack_beta([(np.full((3, 4), 0.25) + 0.1 * np.eye(3, 4)) / 1.1 for _ in range(6)])
    a = torch.full((3,), 0.7, dtype=torch.float64)
    lw = mixture_log_weights(a, b, data, 50, torch.Generator().manual_seed(4))
    _, var = row_log_marginals(a, b, data, 50, torch.Generator().manual_seed(4), method="is")
    assert bool((lw.max(0).values > lw.min(0).values).all())
    torch.testing.assert_close(var, logmeanexp_rows(lw.double())[1], rtol=1e-12, atol=0)


@pytest.mark.slow
def test_perplexity_se_is_calibrated():
    """z = (IS total - exact total) / SE over 48 (data, fit) cases spanning the regimes
    (the experiment's first 48; ``experiments/bce_perplexity_se.py`` runs 200).  If the
    SE is honest, z ~ N(0, 1): the sample SD of 48 z's has a standard error of
    1 / sqrt(2 * 47) = 0.103, so it must lie within 3 of those of 1, and no |z| > 5."""
    zs = np.array([one_case(c)[0] for c in range(48)])
    half = 3 / np.sqrt(2 * (zs.size - 1))
    assert abs(zs.std(ddof=1) - 1) < half
    assert np.abs(zs).max() < 5


def test_bound_by_row_blocks_equals_one_pass():
    """``bound_at`` on an Ensemble, scored a block of rows at a time (how the collapsed
    sampler's fit reports its bound without laying out every label), equals the one-pass
    bound on the LabelData to rounding, with missing labels and a ragged last block."""
    from consensuskit import BCE

    rng = np.random.default_rng(5)
    X = rng.integers(4, size=(2500, 6))
    X[rng.random(X.shape) < 0.1] = -1
    X[:, 0] = rng.integers(4, size=2500)
    ens = Ensemble.from_labels(X)
    m = BCE(n_clusters=3, n_sweeps=20, n_init=1, random_state=0).fit(ens)
    gamma = torch.tensor(m.gamma_.T).contiguous() * 1.1  # off the fitted state on purpose
    one = cavi.bound_at(m._alpha_t, m._beta_t, gamma, ens.label_data())
    blocks = cavi.bound_at(m._alpha_t, m._beta_t, gamma, ens, block_rows=700)
    assert blocks == pytest.approx(one, rel=1e-12)
    assert blocks != pytest.approx(cavi.bound_at(m._alpha_t, m._beta_t, gamma * 1.1, ens),
                                   rel=1e-6)
