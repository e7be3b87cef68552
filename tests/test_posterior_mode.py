"""The default start of PyroConsensus's SVI: the mode of the posterior density in the
unconstrained space (:mod:`consensuskit.inference.posterior_mode`), and the ELBO-plateau
stop."""

import warnings

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch

import consensuskit as ck
from consensuskit.inference.posterior_mode import posterior_mode
from consensuskit.models.convention import float64_default
from consensuskit.models.mm import spec as mm


def beta_bernoulli(labels=None, *, n_labels, n_clusters, a=2.0, b=3.0):
    """p ~ Beta(a, b); x_i ~ Bernoulli(p) for the first column."""
    p = pyro.sample("p", dist.Beta(torch.tensor(a), torch.tensor(b)))
    with pyro.plate("rows", labels.shape[0], dim=-1):
        pyro.sample("x", dist.Bernoulli(p), obs=labels[:, 0].double())


def test_mode_is_the_unconstrained_mode_not_the_constrained_map():
    """Beta(a, b) prior, s successes in n: the density of logit(p) is proportional to
    p^(a+s) (1-p)^(b+n-s) (the Jacobian p(1-p) included), so its mode is
    p = (a+s)/(a+b+n); the constrained MAP (a+s-1)/(a+b+n-2) is another point."""
    x = torch.tensor([[1], [1], [1], [0], [1], [0], [1]])
    s, n = int(x.sum()), x.shape[0]
    with float64_default():
        res = posterior_mode(beta_bernoulli, x, model_kwargs=dict(n_labels=[2], n_clusters=1),
                             max_plate_nesting=1, n_init=3, seed=0)
    p = float(res.values["p"])
    assert p == pytest.approx((2 + s) / (5 + n), abs=1e-6)
    assert abs(p - (2 + s - 1) / (5 + n - 2)) > 1e-2
    assert res.converged and res.start_potentials.shape == (3,)
    assert res.potential <= res.start_potentials.min() + 1e-9


@pytest.fixture(scope="module")
def iris_labels():
    from consensuskit.data import datasets, generate

    F, _ = datasets.load("iris")
    rows = np.random.RandomState(0).choice(len(F), 60, replace=False)
    return generate.kmeans_partitions(F[rows], 4, n_clusters=3, random_state=0)


@pytest.mark.slow
def test_pyro_consensus_starts_svi_at_the_mode_and_stops_on_a_plateau(iris_labels):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        est = ck.PyroConsensus(mm.model, n_clusters=3, random_state=0, num_steps=2000,
                               min_steps=100, n_posterior_draws=5).fit(iris_labels)
    m = est.mode_
    assert m is not None and m.start_potentials.shape == (8,)
    assert m.potential <= np.min(m.start_potentials) + 1e-6
    # the guide's locations start at the mode: its loss at step 0 is close to the end's
    assert est.n_steps_ < 2000 and est.converged_
    assert len(est.losses_) == est.n_steps_ + 1
    # the old start (a prior draw) begins far higher: the mode is a real head start
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        old = ck.PyroConsensus(mm.model, n_clusters=3, random_state=0, init="prior",
                               n_init=1, num_steps=5, min_steps=None, polish_steps=0,
                               n_posterior_draws=1).fit(iris_labels)
    assert old.mode_ is None and old.n_steps_ == 5
    assert np.mean(est.losses_[:5]) < np.mean(old.losses_[:5])


def test_init_is_checked(iris_labels):
    with pytest.raises(ValueError, match="init must be"):
        ck.PyroConsensus(mm.model, n_clusters=3, init="kmeans").fit(iris_labels)


def test_integrated_rows_factor_is_the_exact_row_marginal_and_differentiable():
    """BCE: the factor of integrate_locals (likelihood weighting, fixed draws) against the
    exact log p(x | alpha, beta) of the collapsed spec, within its own Monte Carlo error;
    gradients reach alpha (through the reparametrised draws of theta_i)."""
    from pyro import poutine

    from consensuskit.inference import pointwise
    from consensuskit.inference.integrated_locals import integrate_locals
    from consensuskit.models.bce import spec as bce

    x = torch.tensor([[0, 1, 1], [1, 0, 0], [2, 1, 0], [0, 0, -1], [1, 1, 1]])
    kw = dict(n_labels=[3, 2, 2], n_clusters=2)
    with float64_default():
        roles = pointwise.site_roles(bce.model, x, kw, 2)
        g = {"alpha": torch.tensor([0.7, 1.3], requires_grad=True),
             "beta_0": torch.tensor([[0.6, 0.3, 0.1], [0.1, 0.2, 0.7]]),
             "beta_1": torch.tensor([[0.8, 0.2], [0.3, 0.7]]),
             "beta_2": torch.tensor([[0.5, 0.5], [0.9, 0.1]])}
        S = 4000
        fit = integrate_locals(bce.model, roles, num_particles=S, seed=3)
        tr = poutine.trace(poutine.condition(fit, data=g)).get_trace(x, **kw)
        node = tr.nodes["rows_integrated"]
        factor = node["fn"].log_prob(node["value"]).sum()
        exact = pointwise.score_rows(bce.model_collapsed, x, {k: v.detach() for k, v in
                                                              g.items()},
                                     model_kwargs=kw, roles=pointwise.site_roles(
                                         bce.model_collapsed, x, kw, 2)).log_lik.sum()
        lw = pointwise.row_log_weights(bce.model, x, g, kw, roles, S)
        se = float(torch.sqrt(pointwise.logmeanexp_rows(lw.detach())[1].sum()))
        assert abs(float(factor.detach()) - exact) < 4 * se + 1e-9
        assert "theta" not in tr.nodes and set(g) <= set(tr.nodes)
        factor.backward()
        assert torch.isfinite(g["alpha"].grad).all() and g["alpha"].grad.abs().sum() > 0


@pytest.mark.slow
def test_bce_spec_default_fit_integrates_theta(iris_labels):
    from consensuskit.models.bce import spec as bce

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        est = ck.PyroConsensus(bce.model, n_clusters=3, random_state=0, num_steps=60,
                               min_steps=None, polish_steps=0, n_init=2, fit_particles=20,
                               n_posterior_draws=2, n_perplexity_samples=50).fit(iris_labels)
    assert est.row_latents_ == "integrate"
    assert "theta" not in est.posterior_samples_ and "alpha" in est.posterior_samples_
    assert est.membership_.shape == (60, 3)


def test_nbce_gibbs_flags_chains_in_separate_modes():
    """split_rhat against arviz's on the same array, and the fit-time check: chains whose
    log joints sit at different levels are flagged (warning, chains_disagree_); chains
    drawn from one distribution are not."""
    import arviz as az

    from consensuskit.models.nbce.estimator import NBCE
    from consensuskit.models.nbce.gibbs import split_rhat

    rng = np.random.default_rng(0)
    same = rng.normal(size=(4, 200))
    assert split_rhat(same) == pytest.approx(float(az.rhat(same, method="split")), rel=1e-9)
    apart = same + np.array([0.0, 0.0, 5.0, 5.0])[:, None]
    est = NBCE.__new__(NBCE)
    with pytest.warns(RuntimeWarning, match="separate modes"):
        est._check_chains(apart)
    assert est.chains_disagree_ and est.rhat_lp_ > 1.05
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est._check_chains(same)
    assert not est.chains_disagree_ and est.rhat_lp_ < 1.05


def test_pyro_consensus_nuts_chain_check_with_one_chain_and_with_too_few_draws():
    """ArviZ's R-hat is NaN for one chain, which the check read as chains in separate
    modes.  Now: one stationary chain passes (R-hat of its halves, no warning); one
    drifting chain is reported as drifting, not as chains that disagree; too few draws
    say that convergence is unchecked; two chains apart are still chains apart; and
    ``compare`` counts a NUTS run that has not converged."""
    from consensuskit.evaluation.comparison import _fit_problems

    est = ck.PyroConsensus.__new__(ck.PyroConsensus)
    est.rhat_threshold, est.inference = 1.05, "nuts"
    rng = np.random.default_rng(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est._check_chains(rng.normal(size=(1, 400)))
    assert not est.chains_disagree_ and est.converged_ and est.rhat_lp_ < 1.05
    assert _fit_problems(est) == []
    with pytest.warns(RuntimeWarning, match="one chain drifts"):
        est._check_chains(rng.normal(size=(1, 400)) + np.linspace(0, 8, 400))
    assert not est.chains_disagree_ and not est.converged_ and est.rhat_lp_ > 1.05
    assert _fit_problems(est) == [f"NUTS not converged (R-hat of lp {est.rhat_lp_:.3g})"]
    with pytest.warns(RuntimeWarning, match="cannot be computed from 1 chain"):
        est._check_chains(rng.normal(size=(1, 3)))
    assert not est.converged_ and np.isnan(est.rhat_lp_)
    with pytest.warns(RuntimeWarning, match="separate modes"):
        est._check_chains(rng.normal(size=(2, 300)) + np.array([[0.0], [6.0]]))
    assert est.chains_disagree_ and not est.converged_
    assert _fit_problems(est)[0].startswith("chains in separate modes")
