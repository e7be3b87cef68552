"""Every spec simulates (labels=None), and refitting its own simulated data recovers its
parameters; the generic estimator and comparison work on them.

Recovery tolerances come from the estimate's own covariance, never from a constant.  The
covariance is the inverse information of the *spec's* observed-data likelihood at the true
parameters, in free coordinates (each simplex without its last entry; BCE's alpha on the
log scale): MM's and NBCE's by autograd through Pyro's enumerated ``TraceEnum_ELBO`` of
``mm.model`` (NBCE's likelihood on its occupied components is that mixture); BCE's by the
outer product of the per-row scores of its exact marginal
(:func:`consensuskit.models.bce.alpha.exact_log_marginal`, central differences);
GBCE's likewise from its exact marginal of labels and features
(:func:`consensuskit.models.gbce.spec.exact_log_marginal`), coordinates (log alpha, free beta,
mu, log sigma2).  A fit passes when the Mahalanobis distance ``d' Cov^-1 d`` of its error
``d`` is below the 0.999 quantile of chi-square with dim(d) degrees of freedom AND every
coordinate is within ``z* = Phi^-1(1 - 0.0005 / dim(d))`` standard errors (family-wise
0.1%): the joint test catches a spread-out bias, the per-coordinate one a bias
concentrated on one entry.
"""

import functools
import warnings

import numpy as np
import pyro
import pytest
import torch
from pyro import poutine
from pyro.infer import Predictive
from scipy.optimize import linear_sum_assignment
from scipy.stats import chi2, norm

import consensuskit as ck
from consensuskit.data.ensemble import Ensemble
from consensuskit.inference.pyro_map import fit_map
from consensuskit.models import simulate
from consensuskit.models.bce import cavi as bce_cavi
from consensuskit.models.bce import spec as bce
from consensuskit.models.bce.alpha import exact_log_marginal
from consensuskit.models.gbce import spec as gbce
from consensuskit.models.mm import spec as mm
from consensuskit.models.nbce import spec as nbce

N_LABELS = [3, 4, 3, 2, 3, 4]
PI = np.array([0.5, 0.3, 0.2])


@pytest.mark.parametrize("spec, kw", [
    (mm.model, dict(n_clusters=3)),
    (bce.model, dict(n_clusters=3)),
    (nbce.model, dict(n_clusters=5, prior="tsb")),
    (gbce.model, dict(n_clusters=3, features=torch.zeros(40, 2, dtype=torch.float64))),
], ids=["mm", "bce", "nbce", "gbce"])
def test_label_sites_keep_their_logits_unexpanded(spec, kw):
    """Scored the way PyroConsensus scores rows (the clusters enumerated, a plate of 30
    particles outside the rows), a label site's distribution is expanded to (clusters,
    particles, columns, rows); its log-probabilities must be formed on the unexpanded
    table, not on that whole batch times the labels (torch's lazy logits of an expanded
    Categorical did: 15 million elements a call for BCE on 240 rows, half the fit's CPU).
    The logits' storage is then smaller than the tensor it backs."""
    from consensuskit.inference import pointwise

    labels = torch.as_tensor(np.random.default_rng(0).integers(0, 3, size=(40, 6)))
    kw = dict(kw, n_labels=[3] * 6)
    pyro.set_rng_seed(0)
    roles = pointwise.site_roles(spec, labels, kw, kw["n_clusters"])
    prior = poutine.trace(spec).get_trace(labels, **kw)
    fixed = poutine.condition(spec, data={g: prior.nodes[g]["value"] for g in roles.globals})
    P = roles.max_plate_nesting

    def particles():
        with pyro.plate("particles", 30, dim=-(P + 1)):
            return fixed(labels, **kw)

    with pyro.poutine.trace() as tr, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        poutine.enum(particles, first_available_dim=-(P + 2))()
    label_sites = [s for s in tr.trace.nodes.values()
                   if s["type"] == "sample" and s["is_observed"]
                   and isinstance(s["fn"], pyro.distributions.Categorical)]
    assert label_sites
    for site in label_sites:
        site["fn"].log_prob(site["value"])
        logits = site["fn"].logits
        assert logits.untyped_storage().nbytes() < logits.numel() * logits.element_size()


@pytest.mark.parametrize("spec, kw", [
    (mm.model, dict(n_clusters=3)),
    (bce.model, dict(n_clusters=3)),
    (nbce.model, dict(n_clusters=5, prior="tsb")),
    (nbce.model, dict(n_clusters=5, prior="fsd")),
    (gbce.model, dict(n_clusters=3, n_features=2)),
], ids=["mm", "bce", "nbce-tsb", "nbce-fsd", "gbce"])
def test_predictive_simulates_data_and_parameters(spec, kw):
    """``Predictive`` on a spec with no labels draws an ensemble and its parameters
    (GBCE: and its features, site ``"o"`` (D, N), with their ``mu`` and ``sigma2``)."""
    draws = Predictive(spec, num_samples=3)(None, n_labels=N_LABELS, n_rows=40, **kw)
    tr = poutine.trace(spec).get_trace(None, n_labels=N_LABELS, n_rows=40, **kw)
    X = tr.nodes["_RETURN"]["value"]
    assert X.shape == (40, len(N_LABELS))
    for j, k in enumerate(N_LABELS):
        assert 0 <= int(X[:, j].min()) and int(X[:, j].max()) < k
    assert all(v.shape[0] == 3 for v in draws.values())
    assert len(draws) >= 2  # parameters and labels
    if spec is gbce.model:
        assert draws["o"].shape == (3, 2, 40) and torch.isfinite(draws["o"]).all()
        # Predictive keeps the plate dims as 1s: (samples, 1, 1, K, D)
        assert draws["mu"].shape[-2:] == draws["sigma2"].shape[-2:] == (3, 2)
        assert (draws["sigma2"] > 0).all() and draws["z_feature"].shape == (3, 2, 40)
        # three draws of the parameters, not one repeated
        assert not torch.allclose(draws["mu"][0], draws["mu"][1])


def test_simulate_returns_labels_and_latents_and_keeps_the_global_rng():
    """``simulate``: (N, M) int labels in range, the latents with their shapes, given
    parameters returned as given, the same draw for the same seed, and the global torch
    stream untouched."""
    state = torch.get_rng_state()
    beta = [np.eye(k)[:3] if k >= 3 else np.eye(2)[[0, 1, 0]] for k in N_LABELS]
    params = {"alpha": [0.3, 0.3, 0.3], **{f"beta_{j}": b for j, b in enumerate(beta)}}
    X, lat = simulate(bce, n_rows=50, n_labels=N_LABELS, n_clusters=3, params=params, seed=4)
    assert torch.equal(torch.get_rng_state(), state)
    assert X.dtype == np.int64 and X.shape == (50, 6)
    assert set(lat) == {"theta", "z", *params}
    assert lat["theta"].shape == (50, 3) and lat["z"].shape == (6, 50)
    np.testing.assert_array_equal(lat["beta_1"], beta[1])
    # beta one-hot: every label is the image of its column's z
    for j, b in enumerate(beta):
        np.testing.assert_array_equal(X[:, j], b.argmax(1)[lat["z"][j]])
    X2, _ = simulate(bce.model, n_rows=50, n_labels=N_LABELS, n_clusters=3, params=params,
                     seed=4)
    np.testing.assert_array_equal(X, X2)
    X3, _ = simulate(bce, n_rows=50, n_labels=N_LABELS, n_clusters=3, params=params, seed=5)
    assert not np.array_equal(X, X3)
    with pytest.raises(ValueError, match="labels"):
        simulate(lambda labels=None, **kw: None, n_rows=5, n_labels=[2], n_clusters=2)


# ------------------------------------------------------------------ recovery machinery
def _label_dists(rs, K, floor, conc):
    """True label distributions: ``(1 - floor) Dirichlet(conc) + floor / k_j``, so no
    probability is so small that its estimate is a handful of counts."""
    return [(1 - floor) * rs.dirichlet(np.full(k, conc), size=K) + floor / k
            for k in N_LABELS]


def _free(blocks):
    """Free coordinates of simplex rows: each row without its last entry."""
    return np.concatenate([np.asarray(b)[:, :-1].ravel() for b in blocks])


def _mixture_information(X, pi, thetas):
    """Observed information of MM's likelihood at (pi, thetas), free coordinates.

    ``-log p(X | pi, theta)`` is Pyro's ``TraceEnum_ELBO`` loss of ``mm.model`` conditioned
    on them (z summed out; the flat Dirichlet(1) priors add a constant)."""
    blocks = [np.asarray(pi)[None, :]] + [np.asarray(t) for t in thetas]
    shapes = [b.shape for b in blocks]
    codes = torch.as_tensor(X)
    elbo = pyro.infer.TraceEnum_ELBO(max_plate_nesting=mm.MAX_PLATE_NESTING)

    def nll(f):
        full, o = [], 0
        for r, c in shapes:
            part = f[o:o + r * (c - 1)].reshape(r, c - 1)
            o += r * (c - 1)
            full.append(torch.cat([part, 1 - part.sum(1, keepdim=True)], 1))
        data = {"pi": full[0][0], **{f"theta_{j}": t for j, t in enumerate(full[1:])}}
        return elbo.differentiable_loss(poutine.condition(mm.model, data=data),
                                        lambda *a, **k: None, codes,
                                        n_labels=[c for _, c in shapes[1:]],
                                        n_clusters=len(pi))

    return torch.autograd.functional.hessian(nll, torch.tensor(_free(blocks))).numpy()


def _unfree(f, shapes):
    """Simplex rows of the given (rows, cols) shapes from their free coordinates ``f``."""
    blocks, o = [], 0
    for r, c in shapes:
        part = f[o:o + r * (c - 1)].reshape(r, c - 1)
        o += r * (c - 1)
        blocks.append(np.concatenate([part, 1 - part.sum(1, keepdims=True)], 1))
    return blocks


def _score_information(rows, f0):
    """Outer product of the per-row scores of ``rows(f)`` (n,) at ``f0``, by central
    differences."""
    h = 1e-6
    S = np.column_stack([(rows(f0 + h * e) - rows(f0 - h * e)) / (2 * h)
                         for e in np.eye(f0.size)])
    return S.T @ S


def _bce_information(X, alpha, betas):
    """Outer product of BCE's per-row scores at (alpha, betas), coordinates
    (log alpha, free beta), from the exact marginal by central differences."""
    data = bce_cavi.prepare_data(Ensemble.from_labels(X))
    K = len(alpha)

    def rows(f):
        bs = _unfree(f[K:], [b.shape for b in betas])
        return exact_log_marginal(torch.tensor(np.exp(f[:K])), bce_cavi.pack_beta(bs),
                                  data).numpy()

    return _score_information(rows, np.concatenate([np.log(alpha), _free(betas)]))


def _assert_within_se(d, cov, what):
    """``d`` (estimate - truth) against its covariance: joint chi-square and per-entry z."""
    q = float(d @ np.linalg.solve(cov, d))
    z = np.abs(d) / np.sqrt(np.diag(cov))
    q_max, z_max = chi2.ppf(0.999, d.size), norm.isf(0.0005 / d.size)
    assert q < q_max and z.max() < z_max, (
        f"{what}: Mahalanobis {q:.1f} (limit {q_max:.1f}, df {d.size}), "
        f"max |z| {z.max():.2f} (limit {z_max:.2f})")
    return q, z.max()


def _match(true_rows, est_rows):
    """Permutation of est's K rows that best matches true's (both (K, d))."""
    cost = ((true_rows[:, None, :] - est_rows[None, :, :]) ** 2).sum(-1)
    return linear_sum_assignment(cost)[1]


# ------------------------------------------------------------------ MM
def test_mm_em_recovers_its_parameters():
    """EM on 3000 rows simulated from MM's spec: (pi, theta) within their SEs (measured:
    Mahalanobis 27.2 against 74.7 with 41 df, max |z| 1.72 against 4.28)."""
    rs = np.random.default_rng(1)
    thetas = _label_dists(rs, 3, floor=0.15, conc=0.5)
    params = {"pi": PI, **{f"theta_{j}": t for j, t in enumerate(thetas)}}
    X, _ = simulate(mm, n_rows=3000, n_labels=N_LABELS, n_clusters=3, params=params, seed=1)
    m = ck.MM(3, n_init=3, random_state=0).fit(X)
    perm = _match(np.concatenate(thetas, 1), np.concatenate(m.theta_, 1))
    est = [m.weights_[perm][None]] + [t[perm] for t in m.theta_]
    d = _free(est) - _free([PI[None]] + thetas)
    cov = np.linalg.inv(_mixture_information(X, PI, thetas))
    _assert_within_se(d, cov, "MM")
    # power: the same test rejects the truth of another draw of theta
    other = _label_dists(np.random.default_rng(2), 3, floor=0.15, conc=0.5)
    with pytest.raises(AssertionError, match="Mahalanobis"):
        _assert_within_se(_free(est) - _free([PI[None]] + other), cov, "MM")


# ------------------------------------------------------------------ NBCE
def _nbce_estimates(m, X):
    """Weights and label distributions of the fitted NBCE's 3 largest clusters."""
    sizes = np.bincount(m.labels_, minlength=m.n_clusters_)
    top = np.argsort(sizes)[::-1][:3]
    if m.inference == "gibbs":  # posterior means of pi and theta given the Dahl partition
        w = sizes[top] / sizes[top].sum()
        thetas = [np.stack([(np.bincount(X[m.labels_ == h, j], minlength=k) + m.beta_)
                            / (sizes[h] + k * m.beta_) for h in top])
                  for j, k in enumerate(N_LABELS)]
        return w, thetas, sizes[top].sum()
    comp = m._components[top]
    w = np.exp(m._log_pi[comp])
    off = np.r_[0, np.cumsum(N_LABELS)]
    lt = np.exp(m._log_theta[comp])
    return w / w.sum(), [lt[:, off[j]:off[j + 1]] for j in range(len(N_LABELS))], \
        sizes[top].sum()


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("prior, inference", [("fsd", "vb"), ("tsb", "gibbs")])
def test_nbce_recovers_its_parameters(prior, inference):
    """NBCE (truncation 8) on 2000 rows simulated from its spec with 3 occupied components
    (FSD: pi fixed; TSB: sticks v = (0.5, 0.6, 1, ...)): the 3 largest clusters hold
    >= 99% of the rows and their weights and label distributions are within their SEs
    (measured: FSD-VB Mahalanobis 35.6, max |z| 1.82; TSB-Gibbs 46.5, max |z| 2.55;
    limits 74.7 and 4.28)."""
    T = 8
    rs = np.random.default_rng(1)
    thetas = _label_dists(rs, T, floor=0.05, conc=0.3)
    weights = ({"v": np.r_[0.5, 0.6, 1.0, np.full(T - 4, 0.5)]} if prior == "tsb"
               else {"pi": np.r_[PI, np.zeros(T - 3)]})
    params = {**weights, **{f"theta_{j}": t for j, t in enumerate(thetas)}}
    X, lat = simulate(nbce, n_rows=2000, n_labels=N_LABELS, n_clusters=T, params=params,
                      seed=1, prior=prior)
    assert set(np.unique(lat["z"])) == {0, 1, 2}
    m = ck.NBCE(truncation=T, prior=prior, inference=inference, n_samples=40, burn_in=40,
                n_chains=1, random_state=0).fit(X)
    w, est, top_rows = _nbce_estimates(m, X)
    assert top_rows >= 0.99 * len(X)
    true = [t[:3] for t in thetas]
    perm = _match(np.concatenate(true, 1), np.concatenate(est, 1))
    d = _free([w[perm][None]] + [t[perm] for t in est]) - _free([PI[None]] + true)
    _assert_within_se(d, np.linalg.inv(_mixture_information(X, PI, true)), f"NBCE-{prior}")


# ------------------------------------------------------------------ BCE
@functools.lru_cache(maxsize=2)
def _bce_planted(n_rows):
    """Rows from BCE's spec (alpha = 0.3 each, M = 6 small-k columns) and the covariance
    of (log alpha, free beta) at the truth."""
    rs = np.random.default_rng(0)
    alpha = np.full(3, 0.3)
    betas = _label_dists(rs, 3, floor=0.15, conc=0.5)
    params = {"alpha": alpha, **{f"beta_{j}": b for j, b in enumerate(betas)}}
    X, _ = simulate(bce, n_rows=n_rows, n_labels=N_LABELS, n_clusters=3, params=params,
                    seed=0)
    cov = np.linalg.inv(_bce_information(X, alpha, betas))
    return X, alpha, betas, cov


def _bce_error(fit, alpha, betas):
    perm = _match(np.concatenate(betas, 1), np.concatenate(fit.beta_, 1))
    est = np.concatenate([np.log(fit.alpha_[perm]), _free([b[perm] for b in fit.beta_])])
    return est - np.concatenate([np.log(alpha), _free(betas)])


def _fit_bce(X, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        # the variational fits these tests measure ("meanfield" unless named)
        return ck.BCE(3, random_state=0, **{"alpha_estimate": "meanfield", **kw}).fit(X)


def test_bce_iw_recovers_alpha_and_beta():
    """CAVI with the importance-weighted alpha (issue [3 of 5]) on 1200 rows of BCE's own
    data: (log alpha, beta) within their SEs (measured: Mahalanobis 34.2 against 76.1
    with 42 df, max |z| 1.66; alpha (0.17, 0.16, 0.20) against 0.3 is 0.4 SE on the log
    scale).  The same tolerance rejects the mean-field fit (power)."""
    X, alpha, betas, cov = _bce_planted(1200)
    _assert_within_se(_bce_error(_fit_bce(X, n_init=1, alpha_estimate="iw"), alpha, betas),
                      cov, "BCE-iw")
    with pytest.raises(AssertionError, match="Mahalanobis"):
        _assert_within_se(_bce_error(_fit_bce(X, n_init=1), alpha, betas), cov, "BCE-mf")


MEANFIELD_BIAS = pytest.mark.xfail(strict=True, reason=(
    "mean-field CAVI biases alpha upward and beta with it on BCE's own data: alpha "
    "(21.8, 22.1, 16.6) against 0.3, mean |beta error| 0.125, Mahalanobis 1359 against "
    "76.1, beta max |z| 9.2"))
SVI_BIAS = pytest.mark.xfail(strict=True, reason=(
    "SVI (q(theta_i) Dirichlet, z enumerated, alpha and beta point estimates) keeps a "
    "mean-field bias: alpha (1.01, 0.98, 0.83) against 0.3, Mahalanobis 118 against 76.1, "
    "beta max |z| 3.3"))


@pytest.mark.slow
@pytest.mark.parametrize("options", [
    dict(n_init=3, alpha_estimate="iw"),
    pytest.param(dict(n_init=3), marks=MEANFIELD_BIAS, id="meanfield"),
    pytest.param(dict(inference="svi", max_iter=300, n_init=1), marks=SVI_BIAS, id="svi"),
], ids=["iw", "meanfield", "svi"])
def test_bce_recovers_alpha_and_beta_3000_rows(options):
    """3000 rows of BCE's own data; "iw" with 3 restarts recovers (measured: Mahalanobis
    41.7 against 76.1, max |z| 1.6; alpha 0.16 against 0.3 is 0.8 SE on the log scale),
    mean-field CAVI and SVI do not (xfail reasons).  Minutes, hence slow."""
    X, alpha, betas, cov = _bce_planted(3000)
    _assert_within_se(_bce_error(_fit_bce(X, **options), alpha, betas), cov, "BCE")


# ------------------------------------------------------------------ GBCE
GBCE_D = 3


def _gbce_coords(est):
    """(log alpha, free beta, mu, log sigma2) of ``est`` (keys alpha, betas, mu, sigma2)."""
    return np.concatenate([np.log(est["alpha"]), _free(est["betas"]),
                           np.ravel(est["mu"]), np.log(est["sigma2"]).ravel()])


def _gbce_information(X, F, truth):
    """Outer product of GBCE's per-row scores at ``truth`` in the coordinates of
    :func:`_gbce_coords`, from its exact marginal ``log p(x_i, o_i | ...)``."""
    K, D = truth["mu"].shape
    shapes = [b.shape for b in truth["betas"]]
    n_beta = sum(r * (c - 1) for r, c in shapes)
    labels, feats = torch.as_tensor(X), torch.as_tensor(F)

    def rows(f):
        mu = f[K + n_beta:K + n_beta + K * D].reshape(K, D)
        s2 = np.exp(f[K + n_beta + K * D:]).reshape(K, D)
        bs = [torch.tensor(b) for b in _unfree(f[K:K + n_beta], shapes)]
        return gbce.exact_log_marginal(labels, feats, n_labels=N_LABELS,
                                       alpha=torch.tensor(np.exp(f[:K])), beta=bs,
                                       mu=torch.tensor(mu), sigma2=torch.tensor(s2)).numpy()

    return _score_information(rows, _gbce_coords(truth))


@functools.lru_cache(maxsize=2)
def _gbce_planted(n_rows):
    """Labels and features from GBCE's spec (alpha = 0.3 each, the file's M = 6 columns,
    D = 3 features with cluster means drawn N(0, 3^2) and variances U(0.5, 1.5)) and the
    covariance of :func:`_gbce_coords` at the truth."""
    rs = np.random.default_rng(0)
    betas = _label_dists(rs, 3, floor=0.15, conc=0.5)
    truth = dict(alpha=np.full(3, 0.3), betas=betas, mu=rs.normal(0.0, 3.0, (3, GBCE_D)),
                 sigma2=rs.uniform(0.5, 1.5, (3, GBCE_D)))
    params = {"alpha": truth["alpha"], "mu": truth["mu"], "sigma2": truth["sigma2"],
              **{f"beta_{j}": b for j, b in enumerate(betas)}}
    X, F, _ = gbce.simulate(n_rows=n_rows, n_labels=N_LABELS, n_clusters=3,
                            n_features=GBCE_D, params=params, seed=0)
    return X, F, truth, np.linalg.inv(_gbce_information(X, F, truth))


def _gbce_error(est, truth):
    perm = _match(np.concatenate(truth["betas"], 1), np.concatenate(est["betas"], 1))
    est = dict(alpha=est["alpha"][perm], betas=[b[perm] for b in est["betas"]],
               mu=est["mu"][perm], sigma2=est["sigma2"][perm])
    return _gbce_coords(est) - _gbce_coords(truth)


def _fit_gbce_meanfield(X, F, n_init):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        m = ck.GBCE(3, alpha_estimate="meanfield", n_init=n_init, random_state=0).fit(
            X, features=F)
    return dict(alpha=m.alpha_, betas=m.beta_, mu=m.mu_, sigma2=m.sigma2_)


def _fit_gbce_exact(X, F, start):
    """MAP of ``gbce.model_collapsed`` (the exact marginal; weak priors) by L-BFGS from
    ``start`` (a mean-field fit, which also fixes the labelling; its beta mixed 10% with
    uniform, since entries near 0 sit where the simplex's free coordinates have no
    gradient)."""
    init = {"alpha": start["alpha"], "mu": start["mu"], "sigma2": start["sigma2"],
            **{f"beta_{j}": 0.9 * b + 0.1 / b.shape[1] for j, b in enumerate(start["betas"])}}
    values, run = fit_map(gbce.model_collapsed, torch.as_tensor(X), init_values=init,
                          model_kwargs=dict(n_labels=N_LABELS, n_clusters=3,
                                            features=torch.as_tensor(F)))
    assert run.converged and np.all(np.diff(run.objectives) >= -1e-9 * abs(run.objective))
    return dict(alpha=values["alpha"].numpy(), mu=values["mu"].numpy(),
                sigma2=values["sigma2"].numpy(),
                betas=[values[f"beta_{j}"].numpy() for j in range(len(N_LABELS))])


def test_gbce_exact_marginal_map_recovers_its_parameters():
    """1000 rows (labels and features) of GBCE's own data: the MAP of its collapsed spec
    (exact marginal), started from the mean-field fit, has (log alpha, beta, mu,
    log sigma2) within their SEs (measured: Mahalanobis 59.5 against 99.6 with 60 df,
    max |z| 2.24 against 4.31).  The same tolerance rejects the mean-field fit itself
    (``ck.GBCE``: Mahalanobis 895, max |z| 15.7; see the xfail below) and the truth of
    another draw of beta (Mahalanobis 21797): power."""
    X, F, truth, cov = _gbce_planted(1000)
    meanfield = _fit_gbce_meanfield(X, F, n_init=3)
    est = _fit_gbce_exact(X, F, meanfield)
    _assert_within_se(_gbce_error(est, truth), cov, "GBCE-MAP")
    with pytest.raises(AssertionError, match="Mahalanobis"):
        _assert_within_se(_gbce_error(meanfield, truth), cov, "GBCE-mf")
    other = dict(truth, betas=_label_dists(np.random.default_rng(1), 3, floor=0.15, conc=0.5))
    with pytest.raises(AssertionError, match="Mahalanobis"):
        _assert_within_se(_gbce_error(est, other), cov, "GBCE-MAP vs another beta")


@pytest.mark.slow
@pytest.mark.parametrize("fit", ["exact", pytest.param("meanfield", marks=pytest.mark.xfail(
    strict=True, reason="mean-field CAVI (ck.GBCE) biases alpha upward on GBCE's own data, "
    "as for BCE, and the feature Gaussians with it: alpha (2.09, 2.09, 1.89) against 0.3, "
    "Mahalanobis 3584 against 99.6 (60 df), max |z| 32.9 (log alpha), features' max |z| "
    "10.4"))])
def test_gbce_recovers_its_parameters_3000_rows(fit):
    """3000 rows of GBCE's own data: the exact-marginal MAP recovers (measured:
    Mahalanobis 68.2 against 99.6, max |z| 3.55 against 4.31), the mean-field fit does not
    (xfail reason).  Minutes under load, hence slow."""
    X, F, truth, cov = _gbce_planted(3000)
    est = _fit_gbce_meanfield(X, F, n_init=3)
    if fit == "exact":
        est = _fit_gbce_exact(X, F, est)
    _assert_within_se(_gbce_error(est, truth), cov, f"GBCE-{fit}")
