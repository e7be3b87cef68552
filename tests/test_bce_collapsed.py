"""BCE's exact row marginal (theta and z summed out) and the collapsed spec built on it.

The forward recursion of :class:`~consensuskit.models.bce.marginal.BCERowMarginal` is
checked against an explicit sum over every assignment sequence, against the uncollapsed
spec's likelihood-weighting estimate, by its gradients, and by its sampler; the collapsed
spec drives ``BCE(inference="nuts")``.
"""

import itertools

import numpy as np
import pytest
import torch
from scipy import stats

from consensuskit.inference import pointwise
from consensuskit.models.bce import spec as bce
from consensuskit.models.bce.marginal import BCERowMarginal, n_count_states


def _tiny(seed=0, K=3, n_labels=(2, 3, 2, 3)):
    g = torch.Generator().manual_seed(seed)
    alpha = (torch.rand(K, generator=g, dtype=torch.float64) + 0.2)
    betas = [torch.distributions.Dirichlet(torch.ones(k, dtype=torch.float64)).sample((K,))
             for k in n_labels]
    return alpha, betas


def _brute(alpha, betas, row):
    """``p(x)`` and ``E[theta | x]`` by summing over all K^V assignment sequences of the
    observed labels, each with its Polya-urn (Dirichlet-multinomial sequence) probability."""
    K = len(alpha)
    A = float(alpha.sum())
    obs = [j for j, v in enumerate(row) if v >= 0]
    total, mean = 0.0, np.zeros(K)
    for z in itertools.product(range(K), repeat=len(obs)):
        n, p = np.zeros(K), 1.0
        for t, (j, k) in enumerate(zip(obs, z)):
            p *= (float(alpha[k]) + n[k]) / (A + t) * float(betas[j][k, row[j]])
            n[k] += 1
        total += p
        mean += p * (alpha.numpy() + n) / (A + len(obs))
    return total, mean / total


ROWS = torch.tensor([[0, 2, 1, -1], [1, 0, -1, -1], [-1, -1, -1, -1], [1, 1, 1, 2],
                     [-1, 0, 0, 0], [0, 0, 0, 0]])


def test_recursion_equals_brute_force_sum_with_missing_labels():
    alpha, betas = _tiny()
    d = BCERowMarginal(alpha, bce.pad_beta(betas))
    lp = d.log_prob(ROWS)
    mem = d.membership(ROWS)
    for i, row in enumerate(ROWS.tolist()):
        p, m = _brute(alpha, betas, row)
        assert abs(float(lp[i]) - np.log(p)) < 1e-10
        np.testing.assert_allclose(mem[i].numpy(), m, rtol=0, atol=1e-10)


def test_blocks_of_rows_give_the_same_values(monkeypatch):
    from consensuskit.models.bce import marginal as bce_marginal

    alpha, betas = _tiny()
    d = BCERowMarginal(alpha, bce.pad_beta(betas))
    whole = d.log_prob(ROWS), d.membership(ROWS)
    S = n_count_states(len(betas), len(alpha))
    monkeypatch.setattr(bce_marginal, "_BLOCK_ELEMENTS", 2 * S)  # blocks of 2 rows
    np.testing.assert_allclose(d.log_prob(ROWS), whole[0], rtol=1e-14)
    np.testing.assert_allclose(d.membership(ROWS), whole[1], rtol=1e-14)


def test_recursion_matches_uncollapsed_spec_likelihood_weighting():
    """Exact per-row log p(x_i) within 4 SE of the uncollapsed spec's pointwise estimate."""
    n_labels = [3, 4, 3, 5, 3, 4]
    kw = dict(n_labels=n_labels, n_clusters=3)
    torch.manual_seed(0)
    from pyro import poutine

    tr = poutine.trace(bce.model).get_trace(None, n_rows=40, **kw)
    X = tr.nodes["x"]["value"].T.clone()  # (n, M)
    X[::3, 1] = -1
    glob = {k: tr.nodes[k]["value"].double() for k in bce.site_names(len(n_labels))}
    exact = BCERowMarginal(glob["alpha"], bce.pad_beta(
        [glob[f"beta_{j}"] for j in range(len(n_labels))])).log_prob(X).numpy()
    roles = pointwise.site_roles(bce.model, X, kw, 3)
    sc = pointwise.score_rows(bce.model, X, glob, model_kwargs=kw, roles=roles,
                              num_particles=3000, seed=1)
    se = np.sqrt(sc.var.sum())
    assert se > 0
    assert abs(exact.sum() - sc.log_lik.sum()) <= 4 * se, (exact.sum(), sc.log_lik.sum(), se)
    # the generic scorer on the collapsed spec is exact (zero variance) and equals it
    roles_c = pointwise.site_roles(bce.model_collapsed, X, kw, 3)
    assert roles_c.membership == "x" and roles_c.locals == []
    sc_c = pointwise.score_rows(bce.model_collapsed, X, glob, model_kwargs=kw, roles=roles_c,
                                membership=True)
    np.testing.assert_allclose(sc_c.log_lik, exact, rtol=1e-12)
    assert np.all(sc_c.var == 0)
    np.testing.assert_allclose(sc_c.membership.sum(1), 1.0, rtol=1e-12)


def _chi2_pvalue(alpha_sample, alpha, betas, n=20000, seed=3):
    """Chi-square test of ``sample()`` (from ``alpha_sample``) against exp(log_prob) at alpha."""
    torch.manual_seed(seed)
    beta = bce.pad_beta(betas)
    rows = BCERowMarginal(alpha_sample, beta).sample((n,))
    outcomes = torch.tensor(list(itertools.product(*[range(b.shape[1]) for b in betas])))
    p = BCERowMarginal(alpha, beta).log_prob(outcomes).exp().numpy()
    assert abs(p.sum() - 1) < 1e-12
    code = {tuple(o): i for i, o in enumerate(outcomes.tolist())}
    counts = np.bincount([code[tuple(r)] for r in rows.tolist()], minlength=len(p))
    return stats.chisquare(counts, n * p).pvalue


def test_sampler_frequencies_match_log_prob_and_wrong_alpha_fails():
    alpha, betas = _tiny(seed=1, K=2, n_labels=(2, 3, 2))
    alpha = torch.tensor([0.3, 0.8], dtype=torch.float64)
    assert _chi2_pvalue(alpha, alpha, betas) > 1e-3
    # negative control: rows simulated with a wrong alpha are rejected
    wrong = torch.tensor([3.0, 8.0], dtype=torch.float64)
    assert _chi2_pvalue(wrong, alpha, betas) < 1e-3


def test_gradients_by_gradcheck():
    alpha, betas = _tiny(seed=2, K=2, n_labels=(2, 3, 2))
    beta = bce.pad_beta(betas).requires_grad_()
    alpha = alpha.clone().requires_grad_()
    x = torch.tensor([[0, 2, 1], [1, -1, 0], [1, 1, -1]])
    assert torch.autograd.gradcheck(lambda a, b: BCERowMarginal(a, b).log_prob(x),
                                    (alpha, beta))
    assert torch.autograd.gradcheck(lambda a, b: BCERowMarginal(a, b).membership(x),
                                    (alpha, beta))


def test_size_limit_is_a_clear_error():
    assert n_count_states(8, 3) == 165
    alpha = torch.ones(10, dtype=torch.float64)
    beta = torch.full((12, 10, 3), 1 / 3, dtype=torch.float64)
    with pytest.raises(ValueError, match="count states"):
        BCERowMarginal(alpha, beta)


def test_collapsed_spec_simulates_through_predictive():
    from pyro.infer import Predictive

    kw = dict(n_labels=[2, 3, 4], n_clusters=2)
    out = Predictive(bce.model_collapsed, num_samples=3)(None, n_rows=5, **kw)
    assert out["x"].shape == (3, 5, 3) and out["alpha"].shape[-1] == 2
    assert int(out["x"][..., 2].max()) <= 3 and int(out["x"].min()) >= 0


@pytest.mark.slow  # NUTS with jit: a few s CPU, but 680 s wall on the loaded 2-core box
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_bce_nuts_uses_collapsed_spec_with_exact_scores():
    import consensuskit as ck

    torch.manual_seed(0)
    X = bce.model_collapsed(None, n_labels=[3, 3, 2, 3], n_clusters=2, n_rows=20).numpy()
    est = ck.BCE(2, inference="nuts", max_iter=10, n_init=1, random_state=0).fit(X)
    assert est.nuts_form_ == "collapsed" and est.n_count_states_ == 15
    assert est.membership_.shape == (20, 2)
    np.testing.assert_allclose(est.membership_.sum(1), 1.0)
    ll, se = est.score_samples_se(X)
    # the per-row scores are the exact marginal averaged over the kept draws
    draws, _ = est.hub_._thinned()
    ens = est.ensemble_
    per_draw = np.stack([
        BCERowMarginal(draws["alpha"][d], bce.pad_beta(
            [draws[f"beta_{j}"][d] for j in range(4)])).log_prob(
            torch.as_tensor(ens.codes)).numpy() for d in range(len(draws["alpha"]))])
    expect = np.log(np.exp(per_draw).mean(0))
    np.testing.assert_allclose(ll, expect, rtol=1e-10)
    L = est._log_likelihood_draws()
    np.testing.assert_allclose(L.reshape(-1, 20), per_draw, rtol=1e-10)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_cavi_importance_sampling_loglik_within_se_of_exact_marginal():
    """BCE-CAVI's per-row log-likelihood (importance sampling, bce_alpha.log_marginal) is
    within 4 of its SEs of the collapsed spec's exact value at the fitted (alpha, beta)."""
    import consensuskit as ck

    torch.manual_seed(1)
    X = bce.model_collapsed(None, n_labels=[3, 4, 3, 3, 2], n_clusters=3, n_rows=60).numpy()
    X[::4, 2] = -1
    est = ck.BCE(3, alpha_estimate="meanfield", log_likelihood_method="is", n_init=1,
                 random_state=0).fit(X)
    kw, draws = est.to_spec()
    roles = pointwise.site_roles(bce.model_collapsed, torch.as_tensor(X), kw, 3)
    exact = pointwise.score_rows(bce.model_collapsed, torch.as_tensor(X),
                                 {k: v[0] for k, v in draws.items()}, model_kwargs=kw,
                                 roles=roles).log_lik
    ll, se = est.score_samples_se(est.ensemble_)
    assert se.sum() > 0
    assert abs(ll.sum() - exact.sum()) <= 4 * np.sqrt((se**2).sum()), (
        ll.sum(), exact.sum(), np.sqrt((se**2).sum()))
