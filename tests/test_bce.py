"""BCE: Pyro model vs hand-written bound, EM monotonicity, recovery, invariances, SVI."""

import numpy as np
import pyro
import pytest
import torch
from pyro.infer import Trace_ELBO, TraceEnum_ELBO, config_enumerate
from scipy.optimize import linear_sum_assignment

from consensuskit.data.ensemble import Ensemble
from consensuskit.models.bce import cavi, initialise
from consensuskit.models.bce import spec as bce_model
from consensuskit.models.bce.estimator import BCE
from consensuskit.models.bce.svi import empirical_bayes_model
from experiments.bce_alpha import simulate as simulate_bce


def planted(rng, N=600, M=8, K=3, k=4, a=0.3, beta_conc=0.3):
    """Rows simulated from BCE's spec (alpha = a, beta_j ~ Dirichlet(beta_conc));
    returns X, alpha, betas."""
    return simulate_bce(rng, N, M, n_clusters=K, n_labels=k, alpha=a,
                        beta_concentration=beta_conc)


TINY = np.array([[0, 1, 0], [1, 2, -1], [0, 0, 1], [1, 1, 0], [-1, 2, 1]])


def _tiny_params(rng, ens, K=2):
    M, N = ens.n_partitions, ens.n_samples
    alpha = torch.tensor([0.7, 1.6], dtype=torch.float64)
    betas = [torch.tensor(rng.dirichlet(np.ones(k), size=K)) for k in ens.n_labels]
    gamma = torch.tensor(rng.uniform(0.5, 3.0, size=(N, K)))
    phi = torch.tensor(rng.dirichlet(np.ones(K), size=(M, N)))
    return alpha, betas, gamma, phi


def _hand_bound(ens, alpha, betas, gamma, phi):
    data = ens.label_data()
    mask = torch.tensor(ens.codes.T >= 0, dtype=torch.float64)
    phik = (phi * mask[..., None]).permute(0, 2, 1)  # (M, K, N), zero where missing
    stats = cavi.beta_statistics(phik, data.idx, data.n_total_labels)
    return cavi.lower_bound(alpha, cavi.pack_beta(betas), gamma.T, phik.sum(0), stats,
                            cavi.phi_log_phi(phik))


def _pyro_elbo(loss, guide, ens, alpha, betas, reps=4, **guide_kw):
    codes = torch.tensor(ens.codes)
    vals = [-loss.loss(bce_model.model, guide, codes, n_labels=ens.n_labels, n_clusters=2,
                       alpha=alpha,
                       beta=bce_model.pad_beta(betas), **guide_kw) for _ in range(reps)]
    return float(np.mean(vals)), float(np.std(vals, ddof=1) / np.sqrt(reps))


def test_bound_equals_pyro_elbo_meanfield(rng):
    """(a) Hand-written bound == Pyro ELBO of guide_meanfield (same gamma, phi), with a
    missing label.  Pyro's TraceEnum_ELBO sums z out of the guide exactly, so the only
    Monte-Carlo error is over theta (10^4 draws x 4 repeats); tolerance 4 standard errors
    (SE ~ 0.006 on a bound of ~ -25).  A wrong bound (gamma perturbed) is > 40 SE away."""
    ens = Ensemble.from_labels(TINY)
    alpha, betas, gamma, phi = _tiny_params(rng, ens)
    lb = _hand_bound(ens, alpha, betas, gamma, phi)
    loss = TraceEnum_ELBO(num_particles=10000, vectorize_particles=True, max_plate_nesting=2)
    guide = config_enumerate(bce_model.guide_meanfield, "parallel")
    mean, se = _pyro_elbo(loss, guide, ens, alpha, betas, gamma=gamma, phi=phi)
    assert se < 0.02
    assert abs(lb - mean) < 4 * se + 1e-9
    wrong = _hand_bound(ens, alpha, betas, gamma * 1.3, phi)
    assert abs(wrong - mean) > 40 * se


def test_bound_equals_pyro_trace_elbo_sampled_z(rng):
    """(a') Same with plain Trace_ELBO (z sampled too): agreement within 4 SE."""
    ens = Ensemble.from_labels(TINY)
    alpha, betas, gamma, phi = _tiny_params(rng, ens)
    lb = _hand_bound(ens, alpha, betas, gamma, phi)
    loss = Trace_ELBO(num_particles=10000, vectorize_particles=True, max_plate_nesting=2)
    mean, se = _pyro_elbo(loss, bce_model.guide_meanfield, ens, alpha, betas,
                          gamma=gamma, phi=phi)
    assert se < 0.05
    assert abs(lb - mean) < 4 * se


def test_enumerated_guide_dominates_meanfield(rng):
    """The z-enumerated guide's ELBO >= the mean-field bound at the same gamma (Jensen)."""
    ens = Ensemble.from_labels(TINY)
    alpha, betas, gamma, _ = _tiny_params(rng, ens)
    data = ens.label_data()
    phik = cavi.update_phi(cavi.elog_dirichlet(gamma.T), cavi.pack_beta(betas), data.idx,
                           data.mask)
    lb = _hand_bound(ens, alpha, betas, gamma, phik.permute(0, 2, 1))
    loss = TraceEnum_ELBO(num_particles=10000, vectorize_particles=True, max_plate_nesting=2)
    mean, se = _pyro_elbo(loss, bce_model.guide_enumerated, ens, alpha, betas, gamma=gamma)
    assert mean > lb - 4 * se


@pytest.mark.filterwarnings("ignore:every BCE restart:RuntimeWarning")
@pytest.mark.parametrize("missing", [0.0, 0.25])
def test_bound_never_decreases(rng, missing):
    """(b) The EM objective never decreases (float64, relative 1e-9), with missing labels."""
    X, _, _ = planted(rng, N=300, M=6)
    if missing:
        drop = rng.random(X.shape) < missing
        drop[np.arange(X.shape[0]), rng.integers(0, X.shape[1], X.shape[0])] = False
        X = np.where(drop, -1, X)
    for init in ("kmeans", "random"):
        m = BCE(3, alpha_estimate="meanfield", init=init, n_init=1, max_iter=60, tol=0,
                random_state=1).fit(X)
        lb = np.asarray(m.lower_bounds_)
        assert len(lb) == 60 or m.degenerate_
        assert np.all(np.diff(lb) >= -1e-9 * np.abs(lb[1:])), np.diff(lb).min()


def _full_beta(m, k):
    """Fitted beta_ as (K, M*k) in the original label space (labels never seen -> 0)."""
    out = []
    for j, b in enumerate(m.beta_):
        z = np.zeros((b.shape[0], k))
        z[:, m.ensemble_.categories[j]] = b
        out.append(z)
    return np.concatenate(out, axis=1)


def test_planted_recovery(rng):
    """(c) beta recovered after Hungarian label matching: mean |beta - beta_true| < 0.025,
    max < 0.1 (N = 2000 rows, M = 30, K = 3, k_j = 4; seen: 0.012 / 0.060).  The
    mean-field estimator is biased (even started at the truth it moves away), so the
    tolerance is not that of an exact MLE."""
    X, alpha, betas = planted(rng, N=2000, M=30, K=3, k=4, a=0.2)
    m = BCE(3, alpha_estimate="meanfield", random_state=0).fit(X)
    est = _full_beta(m, 4)
    true = np.concatenate(betas, axis=1)
    cost = np.abs(est[:, None, :] - true[None, :, :]).sum(-1)
    r, c = linear_sum_assignment(cost)
    err = np.abs(est[r] - true[c])
    assert err.mean() < 0.025 and err.max() < 0.1, (err.mean(), err.max())
    assert m.converged_ and not m.degenerate_


def test_float32_matches_float64(rng):
    """(d) float32 and float64 fits agree (memberships to 1e-3, bound to 1e-5 rel.)."""
    X, _, _ = planted(rng, N=400, M=8)
    a = BCE(3, random_state=0, dtype="float64", max_iter=40, tol=0).fit(X)
    b = BCE(3, random_state=0, dtype="float32", max_iter=40, tol=0).fit(X)
    np.testing.assert_allclose(b.membership_, a.membership_, atol=1e-3)
    np.testing.assert_allclose(b.lower_bound_, a.lower_bound_, rtol=1e-5)
    assert np.array_equal(a.labels_, b.labels_)


def test_relabelling_invariance(rng):
    """(e) Permuting the label ids inside one base clustering gives the same consensus
    up to a permutation of the consensus clusters (memberships to 1e-8, same bound)."""
    X, _, _ = planted(rng, N=400, M=8)
    Y = X.copy()
    perm = np.array([2, 0, 3, 1])
    Y[:, 3] = perm[X[:, 3]] + 10
    a = BCE(3, random_state=0).fit(X)
    b = BCE(3, random_state=0).fit(Y)
    cost = -a.membership_.T @ b.membership_
    r, c = linear_sum_assignment(cost)
    np.testing.assert_allclose(a.membership_[:, r], b.membership_[:, c], atol=1e-8)
    np.testing.assert_allclose(a.lower_bound_, b.lower_bound_, rtol=1e-10)


def test_svi_and_cavi_perplexity_agree(rng):
    """(f) Held-out and train perplexities of SVI and CAVI fits agree within 2%."""
    X, _, _ = planted(rng, N=800, M=10, K=3, k=4, a=0.3)
    tr, te = X[:600], X[600:]
    c = BCE(3, random_state=0).fit(tr)
    s = BCE(3, inference="svi", max_iter=40, batch_size=128, random_state=0).fit(tr)
    for D in (tr, te):
        pc, ps = c.perplexity(D), s.perplexity(D)
        assert abs(pc - ps) / pc < 0.02, (pc, ps)
    assert np.isfinite(s.lower_bounds_).all() and s.lower_bounds_[-1] > s.lower_bounds_[0]


def test_predict_fold_in_matches_training(rng):
    """Fold-in of the training rows reproduces the fitted consensus."""
    X, _, _ = planted(rng, N=300, M=8)
    m = BCE(3, random_state=0, n_init=1).fit(X)
    assert (m.predict(X) == m.labels_).mean() > 0.98
    P = m.predict_proba(X[:5])
    np.testing.assert_allclose(P.sum(1), 1.0)


def test_degenerate_detection_restart():
    """A run whose alpha explodes is flagged; the estimator prefers a non-degenerate restart."""
    # labels independent across columns: no shared structure, the bound favours alpha -> inf
    rng = np.random.default_rng(3)
    X = rng.integers(0, 3, size=(400, 6))
    with pytest.warns(RuntimeWarning, match="degenerate"):
        m = BCE(3, alpha_estimate="meanfield", n_init=2, init="random", random_state=0,
                max_iter=200).fit(X)
    assert m.degenerate_ and m.n_degenerate_ == 2
    assert m.alpha_.sum() > 10 * X.shape[1]


def test_bad_parameters():
    X = TINY
    with pytest.raises(ValueError, match="inference"):
        BCE(2, inference="mcmc").fit(X)
    with pytest.raises(ValueError, match="init"):
        BCE(2, init="spectral").fit(X)
    with pytest.raises(ValueError, match="n_clusters"):
        BCE(10).fit(X)
    with pytest.raises(TypeError, match="max_iter"):
        BCE(2, max_iter=1.5).fit(X)


def test_model_minibatch_runs():
    """The Pyro model/guide accept a row subsample (and a streamed chunk)."""
    ens = Ensemble.from_labels(TINY)
    codes = torch.tensor(ens.codes)
    elbo = TraceEnum_ELBO(max_plate_nesting=2)
    pyro.clear_param_store()
    kw = dict(n_labels=ens.n_labels, n_clusters=2)
    v = elbo.loss(empirical_bayes_model, bce_model.guide_enumerated, codes, subsample_size=2,
                  **kw)
    assert np.isfinite(v)
    sub = torch.tensor([1, 4])
    v2 = elbo.loss(empirical_bayes_model, bce_model.guide_enumerated, codes[sub], n_rows=5,
                   subsample=sub, **kw)
    assert np.isfinite(v2)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu(rng):
    X, _, _ = planted(rng, N=2000, M=10)
    a = BCE(3, random_state=0, max_iter=30, tol=0).fit(X)
    b = BCE(3, random_state=0, max_iter=30, tol=0, device="cuda").fit(X)
    np.testing.assert_allclose(b.membership_, a.membership_, atol=1e-8)
    np.testing.assert_allclose(b.lower_bounds_, a.lower_bounds_, rtol=1e-10)


@pytest.mark.parametrize("missing", [0.0, 0.3])
def test_numba_estep_matches_torch(rng, missing):
    """The fused CPU kernel computes the same E-step as the torch reference (float64, 1e-11)."""
    X, _, _ = planted(rng, N=500, M=7)
    if missing:
        drop = rng.random(X.shape) < missing
        drop[:, 0] = False
        X = np.where(drop, -1, X)
    ens = Ensemble.from_labels(X)
    data = ens.label_data()
    beta = torch.tensor(initialise.init_beta_random(ens, 3, 0))
    alpha = torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64)
    g = cavi.initial_gamma(alpha, data)
    a = cavi.e_step(alpha, beta, data, g, 4, backend="torch")
    b = cavi.e_step(alpha, beta, data, g, 4, backend="numba")
    for x, y in zip(a[:3], b[:3]):
        np.testing.assert_allclose(y.numpy(), x.numpy(), rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(b[3], a[3], rtol=1e-11)


def test_variational_em_torch_and_numba_backends_agree(rng):
    """The whole EM loop gives the same bounds and parameters on both CPU backends."""
    X, _, _ = planted(rng, N=300, M=6)
    X[rng.random(X.shape) < 0.1] = -1
    X[:, 0] = np.abs(X[:, 0])
    ens = Ensemble.from_labels(X)
    data = ens.label_data()
    beta0 = initialise.init_beta_kmeans(ens, 3, 0)
    a = cavi.variational_em(data, 3, beta0, max_iter=15, tol=0, backend="torch")
    b = cavi.variational_em(data, 3, beta0, max_iter=15, tol=0, backend="numba")
    np.testing.assert_allclose(b.objectives, a.objectives, rtol=1e-10)
    np.testing.assert_allclose(b.params.beta.numpy(), a.params.beta.numpy(), atol=1e-10)
    # alpha is weakly identified (flat bound in its direction): 1e-13 differences in
    # sum_i E[log theta_i] move it ~3e-9 after 15 iterations
    np.testing.assert_allclose(b.params.alpha.numpy(), a.params.alpha.numpy(), rtol=1e-7)


def test_degenerate_restarts_are_discarded():
    """Random-Dirichlet starts hit the degenerate optimum on planted data (alpha explodes,
    held-out perplexity worse); the estimator discards those restarts, and k-means starts
    avoid it.

    Whether a draw has both kinds of restart is a property of the draw: on 8 draws of
    this size from BCE's spec, all 6 random starts were degenerate in 5 (then there is
    nothing to prefer and ``degenerate_`` is rightly True) and k-means too in one.  This
    draw (seed 12345) has both, which is what the selection needs to be tested on; a
    hand-written generator that happened to give such a draw was replaced by the spec."""
    rng = np.random.default_rng(12345)
    X, _, _ = planted(rng, N=400, M=6)
    tr, te = X[:300], X[300:]
    r = BCE(3, alpha_estimate="meanfield", init="random", n_init=6, random_state=0,
            max_iter=200).fit(tr)
    k = BCE(3, alpha_estimate="meanfield", init="kmeans", n_init=3, random_state=0,
            max_iter=200).fit(tr)
    assert r.n_degenerate_ >= 1 and not r.degenerate_
    assert k.n_degenerate_ == 0
    assert r.alpha_.sum() < 10 * X.shape[1]
    assert abs(r.perplexity(te) - k.perplexity(te)) / k.perplexity(te) < 0.01
    # a degenerate run on its own is clearly worse held-out
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        d = BCE(3, alpha_estimate="meanfield", init="random", n_init=1, random_state=2,
                max_iter=200).fit(tr)
    assert d.degenerate_
    assert d.perplexity(te) > 1.03 * k.perplexity(te)


def test_seeded_init_is_a_label_distribution_and_recovers_planted_beta(rng):
    """init="seeded": beta rows are distributions per column, and the fit from it reaches
    the planted beta as closely as test_planted_recovery asks of the default init."""
    X, alpha, betas = planted(rng, N=2000, M=30, K=3, k=4, a=0.2)
    ens = Ensemble.from_labels(X)
    b0 = initialise.init_beta_seeded(ens, 3, np.random.RandomState(0))
    assert b0.shape == (3, ens.n_total_labels) and (b0 > 0).all()
    for j in range(ens.n_partitions):
        np.testing.assert_allclose(b0[:, ens.offsets[j]:ens.offsets[j + 1]].sum(1), 1.0)
    m = BCE(3, init="seeded", alpha_estimate="meanfield", random_state=0).fit(X)
    est = _full_beta(m, 4)
    true = np.concatenate(betas, axis=1)
    cost = np.abs(est[:, None, :] - true[None, :, :]).sum(-1)
    r, c = linear_sum_assignment(cost)
    err = np.abs(est[r] - true[c])
    assert err.mean() < 0.025 and err.max() < 0.1, (err.mean(), err.max())
    assert m.converged_ and not m.degenerate_
