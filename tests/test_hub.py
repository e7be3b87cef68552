"""PyroConsensus on a user's model, score_samples/inference_data_ on every generative
estimator, ck.compare, and the generic per-row scoring against exact values."""

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import consensuskit as ck
from consensuskit.inference import pointwise
from consensuskit.models.bce import spec as bce
from consensuskit.models.mm import spec as mm

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
import user_variants  # noqa: E402


@pytest.fixture(scope="module")
def split():
    """60 + 30 rows simulated from MM's spec (4 columns), 10% labels missing."""
    rs = np.random.default_rng(0)
    pi = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    theta = [torch.tensor(rs.dirichlet(np.full(k, 0.3), size=3)) for k in (3, 3, 4, 3)]
    _, x = mm.sample(pi, theta, 90, generator_seed=0)
    X = x.numpy().copy()
    X[rs.random(X.shape) < 0.1] = -1
    X[(X < 0).all(1), 0] = 0
    return X[:60], X[60:]


def test_generic_scores_equal_exact_mixture(split):
    """Enumeration gives MM's exact per-row log-likelihood and responsibilities."""
    X, _ = split
    m = ck.MM(3, random_state=0).fit(X)
    labels = torch.as_tensor(m.ensemble_.codes)
    kw = dict(n_labels=list(m.ensemble_.n_labels), n_clusters=3)
    g = {"pi": torch.tensor(m.weights_),
         **{f"theta_{j}": torch.tensor(t) for j, t in enumerate(m.theta_)}}
    roles = pointwise.site_roles(mm.model, labels, kw, 3)
    assert roles.membership == "z" and roles.locals == []
    sc = pointwise.score_rows(mm.model, labels, g, model_kwargs=kw, roles=roles, membership=True)
    np.testing.assert_allclose(sc.log_lik, m.score_samples(m.ensemble_), rtol=1e-10)
    np.testing.assert_allclose(sc.membership, m.membership_, atol=1e-10)
    assert np.all(sc.var == 0)


def test_likelihood_weighting_is_unbiased_for_a_known_row():
    """One row, one column, BCE: p(x) = sum_h E[theta_h] beta(h, x) exactly; the estimate
    is within 4 of its own SE."""
    alpha = torch.tensor([0.5, 1.5], dtype=torch.float64)
    beta = [torch.tensor([[0.9, 0.1], [0.2, 0.8]], dtype=torch.float64)]
    exact = np.log(float((alpha / alpha.sum()) @ beta[0][:, 1]))
    labels = torch.tensor([[1]])
    kw = dict(n_labels=[2], n_clusters=2)
    roles = pointwise.site_roles(bce.model, labels, kw, 2)
    sc = pointwise.score_rows(bce.model, labels, {"alpha": alpha, "beta_0": beta[0]},
                              model_kwargs=kw, roles=roles, num_particles=4000, seed=0)
    assert abs(sc.log_lik[0] - exact) < 4 * np.sqrt(sc.var[0])
    assert sc.var[0] > 0


def test_pyro_consensus_user_variant_full_surface(split, tmp_path):
    X, X_test = split
    est = ck.PyroConsensus(user_variants.bce_alpha_hyperprior, n_clusters=3, random_state=0,
                           num_steps=30, n_posterior_draws=4, n_perplexity_samples=200,
                           n_init=2, fit_particles=20)
    est.fit(X)
    assert est.membership_.shape == (60, 3) and est.labels_.shape == (60,)
    np.testing.assert_allclose(est.membership_.sum(1), 1.0)
    P = est.predict_proba(X_test)
    assert P.shape == (30, 3) and np.array_equal(est.predict(X_test), P.argmax(1))
    ppl, se = est.perplexity(X_test, return_se=True)
    ll = est.score_samples(X_test)
    n_obs = int((est._encode_new(X_test).codes >= 0).sum())
    assert ll.shape == (30,)
    assert ppl == pytest.approx(np.exp(-ll.sum() / n_obs), rel=1e-12)
    assert se > 0
    idata = est.inference_data_
    assert idata.log_likelihood["x"].shape == (1, 4, 60)
    assert "alpha_rate" in idata.posterior
    path = tmp_path / "hub.ck"
    # the user's model is not part of consensuskit: saving and loading name it explicitly
    with pytest.raises(ValueError, match="not part of consensuskit"):
        est.save(path)
    est.save(path, allowed=[user_variants.bce_alpha_hyperprior])
    with pytest.raises(ValueError, match="not part of consensuskit"):
        ck.PyroConsensus.load(path)
    back = ck.PyroConsensus.load(path, allowed=[user_variants.bce_alpha_hyperprior])
    np.testing.assert_allclose(back.score_samples(X_test), ll)


def test_a_user_variant_receives_labels_as_documented(split):
    """docs/extending.md promises a spec ``labels`` as a LongTensor; the ensemble stores its
    codes in int8, and PyroConsensus passed them on as int8 to the fit, the scores, the
    ArviZ log-likelihood and the partition draws (a variant that indexes or one-hot codes
    ``labels`` then fails: torch indexes with int64/int32 only, ``one_hot`` needs int64)."""
    X, X_test = split
    seen = set()

    def one_hot_variant(labels=None, *, n_labels, n_clusters, **kw):
        if labels is not None:
            seen.add(labels.dtype)
            torch.nn.functional.one_hot(labels.clamp(min=0))  # int64 only
        return mm.model(labels, n_labels=n_labels, n_clusters=n_clusters, **kw)

    est = ck.PyroConsensus(one_hot_variant, n_clusters=3, random_state=0, num_steps=20,
                           min_steps=10, polish_steps=5, n_init=1, n_posterior_draws=3,
                           n_perplexity_samples=20)
    est.fit(X)
    est.perplexity(X_test)
    assert "x" in est.inference_data_.log_likelihood
    assert est.partition_posterior_.draws.shape[1] == len(X)
    assert seen == {torch.int64}


@pytest.mark.parametrize("make", [
    lambda: ck.MM(3, random_state=0),
    lambda: ck.BCE(3, n_init=1, random_state=0),
    lambda: ck.NBCE(truncation=5, n_samples=10, burn_in=10, n_chains=2, random_state=0),
    lambda: ck.NBCE(truncation=5, prior="fsd", inference="vb", random_state=0),
], ids=["MM", "BCE", "NBCE-gibbs", "NBCE-vb"])
def test_score_samples_sums_to_perplexity(make, split):
    X, X_test = split
    est = make().fit(X)
    ll = est.score_samples(X_test, unknown="missing")
    ens = est._encode_new(X_test, unknown="missing")
    assert ll.shape == (30,)
    ppl = est.perplexity(X_test, unknown="missing")
    assert ppl == pytest.approx(np.exp(-ll.sum() / ens.n_observed), rel=1e-9)
    ld = est.inference_data_.log_likelihood["x"]
    assert ld.shape[-1] == 60


def test_nbce_gibbs_loo(split):
    """NBCE's Gibbs draws give az.loo a (chains, draws, rows) log-likelihood."""
    import arviz as az

    X, _ = split
    est = ck.NBCE(truncation=5, n_samples=20, burn_in=10, n_chains=2, random_state=0).fit(X)
    assert est.inference_data_.log_likelihood["x"].shape == (2, 20, 60)
    loo = az.loo(est.inference_data_)
    assert np.isfinite(loo.elpd_loo)


def test_compare_paired_difference(split):
    """compare: the best model has elpd_diff 0; the paired SE is smaller than the SE of
    the difference of two independent totals would be for identical models (here MM vs a
    copy with another seed gives a near-zero difference with a small SE)."""
    X, X_test = split
    table = ck.compare({"MM": ck.MM(3, random_state=0), "MM2": ck.MM(3, random_state=1),
                        "BCE": ck.BCE(3, n_init=1, random_state=0)}, X, X_test,
                       unknown="missing")
    for col in ("heldout_perplexity", "heldout_se_rows", "heldout_mcse", "train_perplexity",
                "n_clusters", "loo_draws", "pareto_k_max", "share_k_above_0.7", "reliable",
                "fit_seconds", "elpd_diff", "elpd_diff_se"):
        assert col in table.columns
    best = table.index[0]
    assert table.loc[best, "elpd_diff"] == 0
    assert table["heldout_perplexity"].is_monotonic_increasing
    per_row = {n: e.score_samples(X_test, unknown="missing")
               for n, e in table.attrs["estimators"].items()}
    d = per_row["BCE"] - per_row[best]
    assert table.loc["BCE", "elpd_diff"] == pytest.approx(d.sum())
    from consensuskit.evaluation.comparison import plot_comparison

    fig = plot_comparison(table)
    assert len(fig.axes) == 2


@pytest.mark.slow
def test_user_variants_ranked_by_compare_and_az_compare(split):
    """Both user variants (experiments/user_variants.py) ranked against MM, BCE and NBCE by
    ck.compare, and by az.compare among the fits with posterior draws."""
    import arviz as az

    X, X_test = split
    hub = dict(n_clusters=3, random_state=0, num_steps=40, n_posterior_draws=4, n_init=2,
               fit_particles=20, n_perplexity_samples=200)
    table = ck.compare({
        "MM": ck.MM(3, random_state=0),
        "BCE": ck.BCE(3, n_init=1, random_state=0),
        "NBCE": ck.NBCE(truncation=5, n_samples=10, burn_in=10, n_chains=2, random_state=0),
        "hyperprior": ck.PyroConsensus(user_variants.bce_alpha_hyperprior, **hub),
        "reliability": ck.PyroConsensus(user_variants.bce_reliability, **hub),
    }, X, X_test, unknown="missing")
    assert len(table) == 5 and np.isfinite(table["heldout_perplexity"]).all()
    assert (table["heldout_mcse"][["hyperprior", "reliability"]] > 0).all()
    assert np.isfinite(table.loc[["NBCE", "hyperprior", "reliability"], "elpd_loo"]).all()
    assert np.isnan(table.loc[["MM", "BCE"], "elpd_loo"]).all()  # point estimates: no LOO
    fits = table.attrs["estimators"]
    loo = az.compare({n: fits[n].inference_data_ for n in ("NBCE", "hyperprior",
                                                           "reliability")})
    assert set(loo.index) == {"NBCE", "hyperprior", "reliability"}


def _mm_learned_concentration(labels=None, *, n_labels, n_clusters, n_rows=None, **kw):
    """MM whose label concentration is itself a sample site (a variant's hyper-prior)."""
    import pyro
    import pyro.distributions as dist

    one = torch.ones((), dtype=torch.float64)
    a = pyro.sample("label_concentration", dist.Gamma(one, one))
    return mm.model(labels, n_labels=n_labels, n_clusters=n_clusters, n_rows=n_rows,
                    label_prior=a, **kw)


@pytest.mark.parametrize("model", [mm.model, bce.model, _mm_learned_concentration],
                         ids=["MM", "BCE", "MM-learned-concentration"])
def test_pyro_consensus_svi_with_several_particles(model, split):
    """``num_particles > 1`` on the built-in specs and a hyper-prior variant: each raised
    (shape errors of vectorised particles) before particles ran one after another."""
    X, X_test = split
    est = ck.PyroConsensus(model, n_clusters=3, random_state=0, num_particles=3, n_init=1,
                           num_steps=20, min_steps=10, polish_steps=5, fit_particles=20,
                           n_perplexity_samples=50, init_steps=10).fit(X)
    assert np.isfinite(est.losses_).all() and len(est.losses_) >= 10
    assert np.isfinite(est.perplexity(X_test, unknown="missing"))


def test_a_scaled_likelihood_is_flagged_at_fit_and_in_compare(split):
    """poutine.scale on the observations multiplies every per-row score: a tempered MM
    (scale 1/2) halves its log-likelihood, so its perplexity is the square root of the
    untempered one's and compare would rank it first.  The fit warns, says which sites
    (scaled_sites_), and compare marks the row unreliable; the spec itself is not flagged."""
    from pyro import poutine

    X, X_test = split

    def tempered(labels=None, **kw):
        with poutine.scale(scale=0.5):
            return mm.model(labels, **kw)

    quick = dict(n_clusters=3, random_state=0, num_steps=30, min_steps=10, polish_steps=5,
                 n_init=1, n_posterior_draws=3, n_perplexity_samples=20)
    plain = ck.PyroConsensus(mm.model, **quick).fit(X)
    assert plain.scaled_sites_ == []
    with pytest.warns(RuntimeWarning, match=r"scale other than 1 \(poutine.scale\)"):
        hot = ck.PyroConsensus(tempered, **quick).fit(X)
    assert sorted(hot.scaled_sites_) == [f"x_{j}" for j in range(X.shape[1])]
    assert hot.perplexity(X_test, unknown="missing") < plain.perplexity(X_test,
                                                                       unknown="missing")
    with pytest.warns(RuntimeWarning, match="scaled"):
        table = ck.compare({"plain": plain, "tempered": hot}, X, X_test, unknown="missing",
                           refit=False)
    assert table.index[0] == "tempered"  # ranked first by its scaled score ...
    assert not table.loc["tempered", "reliable"]  # ... and flagged
    assert "scaled" in " ".join(table.attrs["problems"]["tempered"])
    assert not any("scaled" in p for p in table.attrs["problems"]["plain"])
