"""Mixture-model consensus: EM engine against the Pyro model, EM properties, estimator."""

import numpy as np
import pyro
import pytest
import torch
from conftest import random_incomplete_labels
from scipy.optimize import linear_sum_assignment
from sklearn.exceptions import NotFittedError
from sklearn.metrics import adjusted_rand_score

from consensuskit.data.ensemble import Ensemble
from consensuskit.models.mm import em as mm_em
from consensuskit.models.mm import spec as mm_model
from consensuskit.models.mm.estimator import MM


def _theta_list(layout, log_theta):
    off = layout.offsets
    return [log_theta[:, off[j] : off[j + 1]].exp() for j in range(layout.n_partitions)]


def _model_kwargs(ens, K, a, b):
    return dict(n_labels=ens.n_labels.tolist(), n_clusters=K, label_prior=a, weight_prior=b)


def _planted(seed, n=3000, K=3, n_labels=(3, 4, 5, 4, 3, 5, 4, 3), conc=0.4):
    """Sample labels from the MM generative process (the Pyro model) with known pi, theta."""
    g = torch.Generator().manual_seed(seed)
    pi = torch.distributions.Dirichlet(torch.full((K,), 5.0, dtype=torch.float64)).sample()
    theta = []
    for kj in n_labels:
        e = torch.empty(K, kj, dtype=torch.float64).exponential_(generator=g) ** (1 / conc)
        theta.append(e / e.sum(1, keepdim=True))
    z, x = mm_model.sample(pi, theta, n, generator_seed=seed)
    return pi.numpy(), [t.numpy() for t in theta], z.numpy(), x.numpy()


def _true_theta_in_codes(theta, ens):
    """Columns of the true theta for the labels that occur (the ensemble's codes)."""
    return [t[:, ens.categories[j]] for j, t in enumerate(theta)]


def _match(labels, truth, K):
    """Permutation perm with perm[fitted cluster] = true cluster (Hungarian on overlaps)."""
    C = np.zeros((K, K))
    np.add.at(C, (labels, truth), 1)
    r, c = linear_sum_assignment(-C)
    perm = np.empty(K, dtype=int)
    perm[r] = c
    return perm


def _drop(X, frac, seed):
    """Drop a fraction ``frac`` of all labels at random, keeping one label in every row."""
    rng = np.random.default_rng(seed)
    X = X.copy()
    M = X.shape[1]
    drop = rng.random(X.shape) < frac * M / (M - 1)
    drop[np.arange(X.shape[0]), rng.integers(0, X.shape[1], X.shape[0])] = False
    X[drop] = -1
    return X


# -- (a) the EM objective is the Pyro model's enumerated log joint ---------------------
@pytest.mark.parametrize("a, b", [(1.0, 1.0), (1.3, 1.7), (2.5, 1.0)])
def test_em_objective_equals_pyro_enumerated_log_joint(rng, a, b):
    ens = Ensemble.from_labels(random_incomplete_labels(rng, n=15, m=5, k=(2, 4), missing=0.25))
    assert ens.has_missing
    K = 3
    for max_table in (1, 4096):  # one column per group, and grouped joint codes
        layout = mm_em.prepare(ens.codes, ens.n_labels, max_table=max_table)
        log_pi, log_theta = mm_em.init_params(
            layout, K, generator=torch.Generator().manual_seed(3)
        )
        log_pi = torch.log_softmax(torch.randn(K, dtype=torch.float64), 0)
        F, ll = mm_em.objective(layout, log_pi, log_theta, label_prior=a, weight_prior=b)
        lj, pll = mm_model.log_joint(
            torch.from_numpy(ens.codes),
            log_pi.exp(),
            _theta_list(layout, log_theta),
            **_model_kwargs(ens, K, a, b),
        )
        assert abs(ll - pll) < 1e-10
        assert abs(F - lj) < 1e-10


def test_fitted_estimator_matches_pyro_log_joint(rng):
    X = random_incomplete_labels(rng, n=30, m=6, k=(2, 4), missing=0.2)
    m = MM(3, n_init=2, label_prior=1.2, weight_prior=1.5, random_state=0).fit(X)
    ens = m.ensemble_
    lj, pll = mm_model.log_joint(
        torch.from_numpy(ens.codes),
        torch.from_numpy(m.weights_),
        [torch.from_numpy(t) for t in m.theta_],
        **_model_kwargs(ens, 3, 1.2, 1.5),
    )
    assert abs(m.lower_bound_ - lj) < 1e-10
    assert abs(m.log_likelihood_ - pll) < 1e-10
    total, se = m._log_likelihood(ens)
    assert abs(total - pll) < 1e-10 and se == 0.0


def test_em_fixed_point_is_stationary_for_pyro_map_objective(rng):
    """At EM convergence the gradient of TraceEnum_ELBO with the MAP guide vanishes."""
    X = random_incomplete_labels(rng, n=40, m=4, k=(2, 3), missing=0.15)
    a, b = 1.5, 1.2
    m = MM(2, n_init=1, max_iter=5000, tol=0.0, label_prior=a, weight_prior=b, random_state=1)
    m.fit(X)
    ens = m.ensemble_
    kw = _model_kwargs(ens, 2, a, b)
    codes = torch.from_numpy(ens.codes)
    pyro.clear_param_store()
    elbo = pyro.infer.TraceEnum_ELBO(max_plate_nesting=1)
    mm_model.set_map_params(m.weights_, m.theta_)
    loss = elbo.differentiable_loss(mm_model.model, mm_model.map_guide, codes, **kw)
    assert abs(-float(loss.detach()) - m.lower_bound_) < 1e-9
    params = [p.unconstrained() for p in pyro.get_param_store().values()]
    grads = torch.autograd.grad(loss, params)
    gmax = max(float(g.abs().max()) for g in grads)
    assert gmax < 1e-6
    # and a perturbed point is not stationary (the check can fail)
    pyro.clear_param_store()
    pert = [t * 0.5 + 0.5 / t.shape[1] for t in m.theta_]
    mm_model.set_map_params(m.weights_, pert)
    loss = elbo.differentiable_loss(mm_model.model, mm_model.map_guide, codes, **kw)
    params = [p.unconstrained() for p in pyro.get_param_store().values()]
    grads = torch.autograd.grad(loss, params)
    assert max(float(g.abs().max()) for g in grads) > 1e-2


def test_svi_with_map_guide_improves_objective(rng):
    X = random_incomplete_labels(rng, n=30, m=4, k=(2, 3), missing=0.1)
    ens = Ensemble.from_labels(X)
    kw = _model_kwargs(ens, 2, 1.5, 1.0)
    codes = torch.from_numpy(ens.codes)
    pyro.clear_param_store()
    svi = pyro.infer.SVI(
        mm_model.model,
        mm_model.map_guide,
        pyro.optim.Adam({"lr": 0.1}),
        pyro.infer.TraceEnum_ELBO(max_plate_nesting=1),
    )
    losses = [svi.step(codes, **kw) for _ in range(40)]
    assert np.mean(losses[-10:]) < losses[0] - 1.0


# -- engine pieces against brute force -------------------------------------------------
def test_e_and_m_steps_against_numpy(rng):
    ens = Ensemble.from_labels(random_incomplete_labels(rng, n=50, m=7, k=(2, 5), missing=0.3))
    K = 3
    layout = mm_em.prepare(ens.codes, ens.n_labels, max_table=30)
    assert 1 < len(layout.groups) < ens.n_partitions
    log_pi, log_theta = mm_em.init_params(layout, K, generator=torch.Generator().manual_seed(0))
    resp, ll = mm_em.e_step(layout, log_pi, log_theta)
    idx = ens.offset_index()
    lt = log_theta.numpy()
    L = np.tile(log_pi.numpy()[:, None], (1, ens.n_samples))
    for i in range(ens.n_samples):
        for j in range(ens.n_partitions):
            if idx[i, j] >= 0:
                L[:, i] += lt[:, idx[i, j]]
    lse = np.logaddexp.reduce(L, axis=0)
    np.testing.assert_allclose(resp.numpy(), np.exp(L - lse), rtol=0, atol=1e-12)
    assert abs(ll - lse.sum()) < 1e-10
    C = mm_em.label_counts(layout, resp).numpy()
    C_ref = np.zeros_like(C)
    for i in range(ens.n_samples):
        for j in range(ens.n_partitions):
            if idx[i, j] >= 0:
                C_ref[:, idx[i, j]] += resp.numpy()[:, i]
    np.testing.assert_allclose(C, C_ref, atol=1e-12)
    a, b = 1.4, 2.0
    new_log_pi, new_log_theta = mm_em.m_step(layout, resp, label_prior=a, weight_prior=b)
    Nk = resp.numpy().sum(1)
    np.testing.assert_allclose(new_log_pi.exp().numpy(), (Nk + b - 1) / (Nk.sum() + K * (b - 1)))
    off = ens.offsets
    for j in range(ens.n_partitions):
        blk = C_ref[:, off[j] : off[j + 1]] + a - 1
        np.testing.assert_allclose(
            new_log_theta[:, off[j] : off[j + 1]].exp().numpy(), blk / blk.sum(1, keepdims=True)
        )
    # the fused CPU path: joint counts from the same pass, M-step from them
    resp_f, ll_f, counts = mm_em.e_step_counts(layout, log_pi, log_theta)
    np.testing.assert_allclose(resp_f.numpy(), np.exp(L - lse), rtol=0, atol=1e-12)
    assert abs(ll_f - lse.sum()) < 1e-10
    lp_f, lt_f = mm_em.m_step_counts(layout, counts, label_prior=a, weight_prior=b)
    torch.testing.assert_close(lp_f, new_log_pi, rtol=0, atol=1e-12)
    torch.testing.assert_close(lt_f, new_log_theta, rtol=0, atol=1e-12)
    softmax = torch.softmax(mm_em.log_likelihood_matrix(layout, log_pi, log_theta), dim=0)
    torch.testing.assert_close(resp_f, softmax, rtol=0, atol=1e-12)  # the torch reference


def test_composed_steps_reproduce_run_em(rng):
    ens = Ensemble.from_labels(random_incomplete_labels(rng, n=60, m=5))
    layout = mm_em.prepare(ens.codes, ens.n_labels)
    log_pi, log_theta = mm_em.init_params(layout, 3, generator=torch.Generator().manual_seed(5))
    res = mm_em.run_em(layout, log_pi, log_theta, max_iter=7, tol=0.0, label_prior=1.2)
    lp, lt = log_pi, log_theta
    for _ in range(7):
        resp, _ = mm_em.e_step(layout, lp, lt)
        lp, lt = mm_em.m_step(layout, resp, label_prior=1.2)
    assert res.n_iter == 7 and len(res.objectives) == 8
    torch.testing.assert_close(res.params.log_theta, lt, rtol=0, atol=1e-12)
    F, _ = mm_em.objective(layout, lp, lt, label_prior=1.2)
    assert abs(res.objective - F) < 1e-9


# -- (b) the objective never decreases -------------------------------------------------
@pytest.mark.parametrize("missing", [0.0, 0.3])
@pytest.mark.parametrize("a", [1.0, 1.01, 2.0])
def test_objective_never_decreases(missing, a):
    _, _, _, X = _planted(7, n=800, conc=1.5)
    if missing:
        X = _drop(X, missing, 7)
    m = MM(4, n_init=3, max_iter=150, tol=0.0, label_prior=a, random_state=0).fit(X)
    F = m.lower_bounds_
    assert F.size == m.n_iter_ + 1 == 151
    assert np.all(np.diff(F) >= -1e-9 * np.abs(F[1:]))
    assert F[-1] > F[0]
    assert m.lower_bound_ == pytest.approx(F[-1], abs=0)


# -- (c) planted recovery ---------------------------------------------------------------
def test_planted_recovery():
    pi, theta, z, X = _planted(11)
    m = MM(3, n_init=5, random_state=0).fit(X)
    assert m.converged_
    perm = _match(m.labels_, z, 3)
    assert adjusted_rand_score(z, m.labels_) > 0.97
    inv = np.argsort(perm)  # inv[true] = fitted
    # 3000 rows, smallest weight ~0.2: sd of a theta entry <= sqrt(.25/600) ~ 0.02
    for j, t in enumerate(_true_theta_in_codes(theta, m.ensemble_)):
        assert np.abs(m.theta_[j][inv] - t).max() < 0.07
    assert np.abs(m.weights_[inv] - pi).max() < 0.03


# -- (g) missing labels -------------------------------------------------------------------
def test_planted_recovery_with_30_percent_missing():
    pi, theta, z, X = _planted(12)
    Xm = _drop(X, 0.3, 12)
    assert 0.28 < (Xm < 0).mean() < 0.32
    m = MM(3, n_init=5, random_state=0).fit(Xm)
    assert adjusted_rand_score(z, m.labels_) > 0.9
    inv = np.argsort(_match(m.labels_, z, 3))
    for j, t in enumerate(_true_theta_in_codes(theta, m.ensemble_)):
        assert np.abs(m.theta_[j][inv] - t).max() < 0.08
    # the consensus of the incomplete ensemble agrees with the complete one
    full = MM(3, n_init=5, random_state=0).fit(X)
    assert adjusted_rand_score(full.labels_, m.labels_) > 0.9


# -- (d) float32 and float64 agree ------------------------------------------------------------
def test_float32_matches_float64():
    _, _, z, X = _planted(13, n=1500)
    X = _drop(X, 0.1, 13)
    # one restart: the same random start in both precisions, so the same EM path
    m64 = MM(3, n_init=1, max_iter=50, tol=0.0, random_state=4, dtype="float64").fit(X)
    m32 = MM(3, n_init=1, max_iter=50, tol=0.0, random_state=4, dtype=torch.float32).fit(X)
    assert m32._log_theta.dtype == torch.float32
    np.testing.assert_array_equal(m32.labels_, m64.labels_)
    np.testing.assert_allclose(m32.membership_, m64.membership_, atol=2e-3)
    for t32, t64 in zip(m32.theta_, m64.theta_):
        np.testing.assert_allclose(t32, t64, atol=1e-4)
    assert m32.lower_bound_ == pytest.approx(m64.lower_bound_, rel=1e-5)
    assert m32.perplexity(X) == pytest.approx(m64.perplexity(X), rel=1e-5)


# -- (e) relabelling inside one base clustering ------------------------------------------
def test_relabelling_one_column_gives_same_consensus():
    _, _, z, X = _planted(14, n=1000, conc=0.3)
    X2 = X.copy()
    perm = np.array([3, 0, 2, 1])  # column 1 has 4 labels
    X2[:, 1] = 100 + 7 * perm[X[:, 1]]
    m1 = MM(3, n_init=5, random_state=0).fit(X)
    m2 = MM(3, n_init=5, random_state=0).fit(X2)
    assert adjusted_rand_score(m1.labels_, m2.labels_) == 1.0
    assert m2.lower_bound_ == pytest.approx(m1.lower_bound_, rel=1e-7)
    assert m2.perplexity(X2) == pytest.approx(m1.perplexity(X), rel=1e-7)


# -- (f) perplexity ------------------------------------------------------------------------
def _brute_loglik(m, X):
    codes = m.ensemble_.encode(X).codes
    total = 0.0
    for row in codes:
        lp = np.log(m.weights_).copy()
        for j, c in enumerate(row):
            if c >= 0:
                lp += np.log(m.theta_[j][:, c])
        total += np.logaddexp.reduce(lp)
    return total, int((codes >= 0).sum())


def test_perplexity_equals_brute_force_likelihood():
    _, _, _, X = _planted(15, n=600)
    X = _drop(X, 0.2, 15)
    m = MM(3, n_init=2, random_state=0).fit(X[:400])
    for part in (X[:400], X[400:]):
        total, n_obs = _brute_loglik(m, part)
        ppl = m.perplexity(part)
        assert ppl == pytest.approx(np.exp(-total / n_obs), rel=1e-10)
    expected = np.exp(-m.log_likelihood_ / m.ensemble_.n_observed)
    assert m.perplexity(m.ensemble_) == pytest.approx(expected, rel=1e-12)
    assert m.score(X[400:]) == pytest.approx(-np.log(m.perplexity(X[400:])), rel=1e-12)


def test_heldout_label_never_seen_by_a_component_has_finite_perplexity():
    # column 0: cluster A uses labels {0, 1}, cluster B uses {2, 3}; columns 1-3 agree
    n = 100
    z = np.repeat([0, 1], n // 2)
    X = np.column_stack([2 * z + np.arange(n) % 2, z, z, 1 - z])
    a = 1.01
    m = MM(2, n_init=3, label_prior=a, random_state=0).fit(X)
    B = m.labels_[-1]
    code = 0  # label 0 of column 0 only occurs in cluster A
    assert m.theta_[0][B, code] > 0
    assert m.theta_[0][B, code] == pytest.approx((a - 1) / (n / 2 + 4 * (a - 1)), rel=1e-6)
    heldout = np.array([[0, 1, 1, 0], [3, 1, 1, 0]])  # first row: A-only label with B's others
    ppl = m.perplexity(heldout)
    total, n_obs = _brute_loglik(m, heldout)
    assert ppl == pytest.approx(np.exp(-total / n_obs), rel=1e-10)
    # the pure-B row alone is much better explained
    assert m.perplexity(heldout[1:]) < ppl


# -- fold-in -------------------------------------------------------------------------------
def test_predict_proba_folds_in_rows():
    _, _, z, X = _planted(16, n=600)
    X = _drop(X, 0.1, 16)
    m = MM(3, n_init=2, random_state=0).fit(X[:500])
    np.testing.assert_allclose(m.predict_proba(X[:500]), m.membership_, atol=1e-12)
    P = m.predict_proba(X[500:])
    assert P.shape == (100, 3)
    np.testing.assert_allclose(P.sum(1), 1.0)
    np.testing.assert_array_equal(m.predict(X[500:]), P.argmax(1))
    # a row with every label missing gets the mixing weights
    np.testing.assert_allclose(m.predict_proba(-np.ones((1, X.shape[1]), int))[0], m.weights_)
    assert adjusted_rand_score(z[500:], m.predict(X[500:])) > 0.9


def test_kmeans_init_recovers_planted():
    _, _, z, X = _planted(17, n=1000)
    m = MM(3, n_init=2, init="kmeans", random_state=0).fit(X)
    assert adjusted_rand_score(z, m.labels_) > 0.95


# -- (h) bad parameters ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(n_clusters=50), ValueError, "n_clusters"),
        (dict(n_clusters=0), ValueError, "n_clusters"),
        (dict(n_clusters=2.5), TypeError, "n_clusters"),
        (dict(n_init=0), ValueError, "n_init"),
        (dict(max_iter=-1), ValueError, "max_iter"),
        (dict(tol=-1e-3), ValueError, "tol"),
        (dict(label_prior=0.5), ValueError, "label_prior"),
        (dict(label_prior=float("nan")), ValueError, "label_prior"),
        (dict(weight_prior=0.9), ValueError, "weight_prior"),
        (dict(init="spectral"), ValueError, "init"),
        (dict(dtype="int32"), ValueError, "dtype"),
        (dict(device="tpu"), (ValueError, RuntimeError), "device|tpu"),
        (dict(verbose="yes"), TypeError, "verbose"),
    ],
)
def test_bad_parameters_raise(rng, kwargs, exc, match):
    X = random_incomplete_labels(rng, n=20, m=3)
    params = dict(n_clusters=2)
    params.update(kwargs)
    with pytest.raises(exc, match=match):
        MM(**params).fit(X)


def test_bad_use_raises(rng):
    X = random_incomplete_labels(rng, n=20, m=3)
    with pytest.raises(NotFittedError):
        MM(2).predict(X)
    m = MM(2, n_init=1, random_state=0).fit(X)
    with pytest.raises(ValueError, match="base clusterings"):
        m.predict(X[:, :2])
    with pytest.raises(ValueError, match="not seen"):
        m.perplexity(np.array([[99, 0, 0]]))


# -- (i) GPU ---------------------------------------------------------------------------------------
@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu():
    _, _, z, X = _planted(18, n=2000)
    X = _drop(X, 0.1, 18)
    for dtype in ("float64", "float32"):
        cpu = MM(3, n_init=2, max_iter=50, tol=0.0, random_state=0, dtype=dtype).fit(X)
        gpu = MM(3, n_init=2, max_iter=50, tol=0.0, random_state=0, dtype=dtype, device="cuda")
        gpu.fit(X)
        assert gpu._log_theta.device.type == "cuda"
        np.testing.assert_array_equal(gpu.labels_, cpu.labels_)
        np.testing.assert_allclose(gpu.membership_, cpu.membership_, atol=1e-3)
        assert gpu.lower_bound_ == pytest.approx(cpu.lower_bound_, rel=1e-5)
        assert gpu.perplexity(X) == pytest.approx(cpu.perplexity(X), rel=1e-5)


# -- the paper's worked example (Topchy et al. 2004, Figure 1 / Table 1) --------------------
def test_paper_table1_example():
    """Four 2-cluster partitions of 12 points, label systems 1/2, A/B, X/Y, alpha/beta.

    Table 1 gives E[z_i1] after 6 EM iterations from an unreported start and
    the consensus y1..y6 -> 1, y7..y12 -> 2.  Our converged fit gives the same
    consensus; its memberships differ from the 6-iteration values by < 0.02.
    """
    p1 = [2, 2, 2, 2, 1, 2, 2, 1, 1, 1, 2, 1]
    p2 = list("BAABAABBBABB")
    p3 = list("XXYXXYYYYYYY")
    p4 = list("babbbbaabaaa")  # a = alpha, b = beta
    X = np.column_stack(
        [p1, [ord(c) for c in p2], [ord(c) for c in p3], [ord(c) for c in p4]]
    )
    table_ez1 = np.array(
        [0.999, 0.997, 0.943, 0.999, 0.999, 0.943, 0.124, 0.019, 0.260, 0.115, 0.124, 0.019]
    )
    m = MM(2, n_init=10, tol=1e-10, max_iter=1000, random_state=0).fit(X)
    first = m.labels_[0]
    np.testing.assert_array_equal(m.labels_ == first, np.arange(12) < 6)
    np.testing.assert_allclose(m.membership_[:, first], table_ez1, atol=0.02)


def test_pyro_model_minibatch_log_joint_is_unbiased(rng):
    """With ``subsample_size`` the rows plate rescales the minibatch: E[estimate] = log joint."""
    ens = Ensemble.from_labels(random_incomplete_labels(rng, n=24, m=3, k=(2, 3), missing=0.2))
    K, a, b = 2, 1.3, 1.0
    layout = mm_em.prepare(ens.codes, ens.n_labels)
    log_pi, log_theta = mm_em.init_params(layout, K, generator=torch.Generator().manual_seed(2))
    kw = _model_kwargs(ens, K, a, b)
    codes = torch.from_numpy(ens.codes)
    full, _ = mm_model.log_joint(codes, log_pi.exp(), _theta_list(layout, log_theta), **kw)
    est = np.array(
        [
            mm_model.log_joint(
                codes, log_pi.exp(), _theta_list(layout, log_theta), subsample_size=6, **kw
            )[0]
            for _ in range(150)
        ]
    )
    se = est.std(ddof=1) / np.sqrt(est.size)
    assert est.std() > 0  # minibatches differ
    assert abs(est.mean() - full) < 4 * se
