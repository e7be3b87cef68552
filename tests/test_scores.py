"""Scores a researcher can rely on: PSIS-LOO against brute-force leave-one-out, the
cached and complete ``inference_data_``, ``compare``'s diagnostics, MM's spec with
parameter tensors.

The brute-force checks refit without row i and score row i (``experiments/
loo_vs_bruteforce.py``, which also runs the full-size comparison); the tolerance is the
difference's own standard error (paired over rows, plus the brute force's Monte Carlo
error), and a negative control -- the in-sample log-likelihood that keeps row i in the
counts -- must fail the same test.
"""

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import consensuskit as ck
from consensuskit.models.mm import spec as mm

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
import loo_vs_bruteforce as lbf  # noqa: E402
import user_variants  # noqa: E402


def _z(r):
    return lbf.z_score(r)


@pytest.fixture(scope="module")
def small():
    return lbf.small_ensemble("wine", 30, n_partitions=4, n_clusters=3, seed=0)


def _gibbs():
    return ck.NBCE(truncation=6, n_samples=150, burn_in=40, n_chains=2, random_state=1)


def test_nbce_gibbs_loo_matches_bruteforce_and_in_sample_counts_do_not():
    """NBCE (collapsed Gibbs): PSIS-LOO on the leave-own-row-out log-likelihood equals
    brute-force LOO within 3 SE; the old log-likelihood (row i in the counts) is more
    than 3 SE optimistic against the same refits."""
    from consensuskit.inference.arviz_adapter import to_inference_data

    small = lbf.small_ensemble("wine", 22, n_partitions=4, n_clusters=3, seed=0)
    rows = np.arange(small.n_samples)
    est = _gibbs().fit(small)
    C, S = est.samples_["log_joint"].shape
    in_sample = est._row_logliks_gibbs(est._train_index()).reshape(C, S, -1)
    bf, bf_var = lbf.bruteforce(_gibbs, "predictive", small, rows)
    z = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # ArviZ's Pareto-k notes
        for name, idata in (("loo", est.inference_data_),
                            ("in-sample", to_inference_data({"lp": in_sample.sum(-1)},
                                                            log_likelihood={"x": in_sample}))):
            loo_i, _ = lbf.psis_loo(idata)
            d = loo_i - bf
            z[name] = d.sum() / np.hypot(np.sqrt(d.size * d.var(ddof=1)), np.sqrt(bf_var.sum()))
    assert abs(z["loo"]) < 3, z
    assert z["in-sample"] > 3, z  # optimistic: LOO above brute force


def test_loo_check_counts_the_psis_side_spread_over_independent_fits():
    """With psis_fits=2 the check's PSIS side is the mean of two full fits (random_state
    seed and seed + 1), its Monte Carlo SE their spread / sqrt(2), and z counts it."""
    ens = lbf.small_ensemble("wine", 10, n_partitions=3, n_clusters=3, seed=0)
    rows = np.arange(0, 10, 2)

    def make(s=0):
        return ck.NBCE(truncation=4, n_samples=30, burn_in=10, n_chains=2, random_state=s)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = lbf.check(make, "predictive", ens, rows, psis_fits=2)
        sums = [lbf.psis_loo(make(s).fit(ens).inference_data_)[0][rows].sum() for s in (0, 1)]
    assert r["psis_fits"] == 2
    np.testing.assert_allclose(r["psis"], np.mean(sums), rtol=1e-12)
    np.testing.assert_allclose(r["psis_mcse"], abs(sums[0] - sums[1]) / 2, rtol=1e-10)
    assert r["psis_mcse"] > 0
    z = r["diff"] / np.sqrt(r["paired_se"] ** 2 + r["bruteforce_mcse"] ** 2 + r["psis_mcse"] ** 2)
    np.testing.assert_allclose(lbf.z_score(r), z, rtol=1e-12)
    one = dict(r, psis_mcse=np.nan)  # one fit: its spread unknown, not counted
    np.testing.assert_allclose(lbf.z_score(one), r["diff"] / np.hypot(r["paired_se"],
                                                                       r["bruteforce_mcse"]))


def test_nbce_loo_loglik_is_the_collapsed_predictive_without_the_row(small):
    """Per draw, the Gibbs log-likelihood equals a direct computation of
    log p(x_i | z_-i, x_-i): the predictive parameters of the counts without row i."""
    from scipy.special import logsumexp

    from consensuskit.models.nbce.gibbs import draw_counts
    from consensuskit.models.nbce.predictive import component_loglik, predictive_parameters

    est = ck.NBCE(truncation=5, n_samples=3, burn_in=5, n_chains=1, random_state=0,
                  prior="tsb").fit(small)
    ll = est.log_likelihood_draws()[0]
    o = est.samples_
    idx = est._train_index()
    for s in range(3):
        z = o["z"][0, s].astype(int)
        for i in (0, 7, 29):
            keep = np.arange(small.n_samples) != i
            Nk = np.bincount(z[keep], minlength=5)
            Nkl, Nkm = draw_counts(idx[keep], z[keep], 5, o["n_labels"])
            lp, lt = predictive_parameters(Nk, Nkl, Nkm, o["alpha0"][0, s], o["beta"][0, s],
                                           o["n_labels"], "tsb")
            ref = logsumexp(lp + component_loglik(idx[i:i + 1], lt)[0])
            assert ll[s, i] == pytest.approx(ref, rel=1e-10)


def test_inference_data_cached_and_complete(small):
    """inference_data_ is built once (the same object at the next access, a new one after
    a refit), holds every retained draw, sample_stats and observed_data."""
    est = _gibbs().fit(small)
    a = est.inference_data_
    assert est.inference_data_ is a
    assert a.log_likelihood["x"].shape == (2, 150, 30)
    assert {"lp", "n_clusters"} <= set(a.sample_stats.data_vars)
    assert "split_acceptance_rate_per_chain" in a.sample_stats.attrs
    assert np.array_equal(a.observed_data["x"].values, small.codes)
    assert "z_-i" in a.log_likelihood.attrs["kind"]
    est.fit(small)
    assert est.inference_data_ is not a


def test_nbce_vb_inference_data_from_variational_draws(small):
    est = ck.NBCE(truncation=6, prior="fsd", inference="vb", n_samples=50, n_chains=2,
                  random_state=0).fit(small)
    idata = est.inference_data_
    assert idata.log_likelihood["x"].shape == (1, 100, 30)
    assert idata.posterior["pi"].shape == (1, 100, 6)
    assert "variational" in idata.log_likelihood.attrs["kind"]
    np.testing.assert_allclose(idata.posterior["pi"].sum("pi_dim_0"), 1.0)


def test_mm_spec_takes_parameter_tensors():
    """mm.model(pi=, theta=) gives the same log density as conditioning its sample sites,
    accepts a packed theta, and keeps the gradient of a tensor it is given."""
    from pyro import poutine

    labels = torch.tensor([[0, 1, 2], [1, -1, 0], [0, 0, 1], [1, 1, -1]])
    kw = dict(n_labels=[2, 2, 3], n_clusters=2)
    torch.manual_seed(0)
    pi = torch.tensor([0.3, 0.7], requires_grad=True)
    theta = [torch.distributions.Dirichlet(torch.ones(k)).sample((2,)) for k in (2, 2, 3)]
    cond = poutine.condition(mm.model, data={"pi": pi, **{f"theta_{j}": t
                                                          for j, t in enumerate(theta)}})

    def rows_logp(model, **extra):
        tr = poutine.trace(poutine.enum(model, first_available_dim=-2)).get_trace(
            labels, **kw, **extra)
        tr.compute_log_prob()
        return sum(s["log_prob_sum"] for n, s in tr.nodes.items()
                   if s["type"] == "sample" and (n == "z" or n.startswith("x_")))

    given = rows_logp(mm.model, pi=pi, theta=theta)
    packed = rows_logp(mm.model, pi=pi, theta=torch.cat(theta, -1))
    assert float(given.detach()) == pytest.approx(float(rows_logp(cond).detach()))
    assert float(packed.detach()) == pytest.approx(float(given.detach()))
    tr = poutine.trace(mm.model).get_trace(labels, **kw, pi=pi, theta=theta)
    assert "pi" not in tr.nodes and "theta_0" not in tr.nodes
    given.backward()
    assert pi.grad is not None
    with pytest.raises(ValueError, match="theta"):
        mm.model(labels, **kw, theta=[theta[0]])


def test_compare_handles_point_fits_and_names_its_standard_errors(small):
    """A point fit (EM) gets NaN LOO with loo_draws saying why (no TypeError); the table
    has the two SEs apart and the diagnostics; an unreliable row warns."""
    X = small.decode()
    with pytest.warns(RuntimeWarning, match="compare: NBCE-VB"):
        table = ck.compare({"MM": ck.MM(3, random_state=0),
                            "NBCE": ck.NBCE(truncation=6, n_samples=20, burn_in=5,
                                            n_chains=2, random_state=0),
                            "NBCE-VB": ck.NBCE(truncation=6, prior="fsd", inference="vb",
                                               random_state=0)},
                           X[:22], X[22:], unknown="missing")
    assert table.loc["MM", "loo_draws"] == "none (point fit)"
    assert np.isnan(table.loc["MM", "elpd_loo"])
    assert table.loc["NBCE", "loo_draws"] == "posterior"
    assert np.isfinite(table.loc["NBCE", ["elpd_loo", "pareto_k_max", "rhat_loglik"]]
                       .astype(float)).all()
    for col in ("heldout_se_rows", "heldout_mcse", "elpd_loo_se_rows", "share_k_above_0.7"):
        assert col in table.columns and col in table.attrs["columns"]
    assert table.loc["MM", "heldout_mcse"] == 0.0 and table.loc["MM", "heldout_se_rows"] > 0
    # LOO from variational draws is always flagged: unreliable, with the reason named
    assert not table.loc["NBCE-VB", "reliable"]
    assert any("variational" in p for p in table.attrs["problems"]["NBCE-VB"])


def test_svi_unconverged_elbo_warns_and_flags():
    X = lbf.small_ensemble("iris", 20, n_partitions=3, n_clusters=2).decode()
    est = ck.PyroConsensus(mm.model, mm.map_guide, n_clusters=2, num_steps=20,
                           learning_rate=0.01, n_posterior_draws=1, random_state=0)
    with pytest.warns(RuntimeWarning, match="has not converged"):
        est.fit(X)
    assert est.converged_ is False


@pytest.fixture(scope="module")
def mm_nuts(small):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return ck.MM(3, inference="nuts", max_iter=40, n_init=2, random_state=0).fit(small)


@pytest.mark.slow
def test_nuts_inference_data_every_draw_sample_stats_relabelled(mm_nuts):
    """Every draw of every chain, sample_stats for az.plot_energy/az.summary, clusters
    relabelled (each draw's pi permuted by its own matching)."""
    from consensuskit.inference.pyro_mcmc import SAMPLE_STATS

    idata = mm_nuts.inference_data_
    assert idata.posterior["pi"].shape == (2, 40, 3)
    assert idata.log_likelihood["x"].shape == (2, 40, 30)
    assert set(SAMPLE_STATS) <= set(idata.sample_stats.data_vars)
    assert idata.sample_stats["tree_depth"].shape == (2, 40)
    assert idata.posterior["pi"].dims[-1] == "cluster"
    hub = mm_nuts.hub_
    raw = hub.all_samples_["pi"].reshape(80, 3)
    perms = hub._every_draw()["perms"]
    np.testing.assert_allclose(idata.posterior["pi"].values.reshape(80, 3),
                               np.take_along_axis(raw, perms, 1))
    assert mm_nuts.inference_data_ is idata


@pytest.mark.slow
@pytest.mark.parametrize("model", ["MM(NUTS)", "BCE(NUTS)", "NBCE(VB)",
                                   "MM-hierarchical(NUTS)", "BCE-alpha-hyperprior(NUTS)"])
def test_loo_matches_bruteforce_every_engine(model):
    """PSIS-LOO of each engine with draws against brute force on 8 rows of 24 (wine)."""
    ens = lbf.small_ensemble("wine", 24, n_partitions=4, n_clusters=3, seed=0)
    make, how = lbf.models(quick=True)[model]
    rows = np.arange(0, 24, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = lbf.check(make, how, ens, rows)
    assert abs(_z(r)) < 3, r


def test_user_variant_mm_hierarchical_runs_through_the_spec():
    """The MM variant built on pi=/label_prior= tensors (5 lines) fits by SVI."""
    X = lbf.small_ensemble("iris", 20, n_partitions=3, n_clusters=2).decode()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        est = ck.PyroConsensus(user_variants.mm_hierarchical, n_clusters=2, num_steps=30,
                               n_posterior_draws=3, random_state=0).fit(X)
    assert np.isfinite(est.score(X))
    assert "pi_logits:0" in est.inference_data_.posterior.attrs["relabelled_sites"]


def test_posterior_predictive_on_request(small):
    """add_posterior_predictive: one replicate of the training rows per draw, the missing
    pattern kept, label frequencies per column those of the data within sampling error;
    a point fit says it has no draws."""
    X = small.decode().copy()
    X[0, 1] = -1
    est = ck.NBCE(truncation=6, n_samples=60, burn_in=40, n_chains=2, random_state=0).fit(X)
    idata = est.add_posterior_predictive(random_state=0)
    assert est.add_posterior_predictive() is idata
    x = idata.posterior_predictive["x"].values
    assert x.shape == (2, 60, 30, 4) and (x[:, :, 0, 1] == -1).all()
    codes = est.ensemble_.codes
    for j in range(4):
        obs = codes[:, j] >= 0
        for lab in range(est.ensemble_.n_labels[j]):
            p = np.mean(codes[obs, j] == lab)
            rep = np.mean(x[:, :, obs, j] == lab)
            assert abs(rep - p) < 4 * np.sqrt(max(p * (1 - p), 0.02) / obs.sum()), (j, lab)
    mmfit = ck.MM(3, random_state=0).fit(X)
    with pytest.raises(NotImplementedError, match="no posterior draws"):
        mmfit.add_posterior_predictive()
    hub = ck.PyroConsensus(mm.model, mm.map_guide, n_clusters=3, num_steps=30, n_init=1,
                           n_posterior_draws=1, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        hub.fit(X)
    xp = hub.add_posterior_predictive(random_state=0).posterior_predictive["x"].values
    assert xp.shape == (1, 1, 30, 4) and xp[0, 0, 0, 1] == -1
    assert ((xp[0, 0][codes >= 0] >= 0) & (xp[0, 0][codes >= 0] < 3)).all()
