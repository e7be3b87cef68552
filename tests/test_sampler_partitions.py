"""Every sampler hands its draws over as ``partition_posterior_``; NBCE's ``labels_`` is the
expected-loss optimum of them.

References: NBCE's stored draws ``samples_["z"]`` themselves (the hand-over must keep each
draw's partition), the exact conditional memberships of MM's ``z_i`` computed by enumeration
(:func:`consensuskit.inference.pointwise.score_rows`) for the conditional sampling, and
a chi-square test with a negative control (argmax instead of a draw) that fails it.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import chi2
from sklearn.metrics import adjusted_rand_score

import consensuskit as ck
from consensuskit.data.ensemble import Ensemble
from consensuskit.inference import pointwise
from consensuskit.inference.partition_draws import sample_partitions, sample_rows
from consensuskit.posterior import PartitionPosterior


@pytest.fixture(scope="module")
def X():
    """Three planted clusters, 6 noisy base clusterings, 10% labels missing, 50 rows."""
    rng = np.random.default_rng(3)
    z = rng.integers(0, 3, size=50)
    X = np.where(rng.random((50, 6)) < 0.25, rng.integers(0, 4, size=(50, 6)), z[:, None])
    X[rng.random((50, 6)) < 0.1] = -1
    X[:, 0] = np.where(X[:, 0] < 0, 0, X[:, 0])  # every row keeps a label
    return X


@pytest.fixture(scope="module")
def nbce_fits(X):
    kw = dict(truncation=8, n_samples=30, burn_in=20, n_chains=2, random_state=1)
    return {pe: ck.NBCE(point_estimate=pe, **kw).fit(X) for pe in ("vi", "binder", "dahl")}


def test_nbce_partition_posterior_holds_every_draw_of_every_chain(nbce_fits):
    est = nbce_fits["dahl"]
    z = est.samples_["z"]
    C, S, N = z.shape
    assert "_partition_posterior" in est.__dict__ and est._partition_posterior is None  # lazy
    pp = est.partition_posterior_
    assert isinstance(pp, PartitionPosterior) and est.partition_posterior_ is pp
    assert (pp.n_draws, pp.n_items) == (C * S, N)
    flat = z.reshape(C * S, N)
    for s in range(C * S):  # same partition (labels renumbered)
        assert adjusted_rand_score(flat[s], pp.draw(s)) == 1.0
    with pytest.raises(AttributeError, match="gibbs"):
        _ = ck.NBCE(truncation=5, inference="cvb", max_iter=5, random_state=0).fit(
            est.ensemble_).partition_posterior_


@pytest.mark.parametrize("loss", ["vi", "binder"])
def test_nbce_labels_minimise_the_expected_loss(nbce_fits, loss):
    """labels_ is at least as good as every draw and as Dahl's draw under its loss."""
    est = nbce_fits[loss]
    pp = est.partition_posterior_
    ours = pp.expected_loss(est.labels_, loss)
    assert ours == pytest.approx(est.point_estimate_info_.expected_loss, abs=1e-9)
    draws = np.array([pp.expected_loss(pp.draw(s), loss) for s in range(pp.n_draws)])
    assert ours <= draws.min() + 1e-12
    assert ours <= pp.expected_loss(nbce_fits["dahl"].labels_, loss) + 1e-12
    # labels_ numbered by decreasing size, membership_ a distribution per row over them
    sizes = np.bincount(est.labels_)
    assert np.all(np.diff(sizes) <= 0) and est.n_clusters_ == sizes.size
    m = est.membership_
    assert m.shape == (pp.n_items, est.n_clusters_)
    np.testing.assert_allclose(m.sum(1), 1.0)
    assert nbce_fits["dahl"].point_estimate_info_ is None


def test_nbce_searches_on_500_draws_and_scores_on_all(X):
    """With more than 500 retained draws the default search scores its moves on 500 of
    them (``n_draws``) and reports the expected loss of ``labels_`` over all of them."""
    est = ck.NBCE(truncation=8, n_samples=300, burn_in=10, n_chains=2, random_state=2).fit(X)
    pp = est.partition_posterior_
    info = est.point_estimate_info_
    assert pp.n_draws == 600 and info.n_draws == 500
    assert info.expected_loss == pytest.approx(pp.expected_loss(est.labels_), abs=1e-12)


def test_nbce_membership_votes_for_the_cluster_each_draw_maps_to(nbce_fits):
    """membership_ by hand: each draw's cluster goes to the consensus cluster it overlaps
    most; the share of draws voting each cluster."""
    est = nbce_fits["vi"]
    Z = est.samples_["z"].reshape(-1, est.labels_.size)
    ref = np.zeros_like(est.membership_)
    for z in Z:
        for c in np.unique(z):
            rows = z == c
            target = np.bincount(est.labels_[rows], minlength=est.n_clusters_).argmax()
            ref[rows, target] += 1
    np.testing.assert_allclose(est.membership_, ref / len(Z))


def _chi2_pvalue(samples, probs):
    """Pearson chi-square of per-row categorical samples (R, N) against probs (N, K)."""
    R = samples.shape[0]
    K = probs.shape[1]
    obs = np.stack([np.bincount(samples[:, i], minlength=K) for i in range(probs.shape[0])])
    exp = R * probs
    keep = exp > 5  # cells with enough expected counts
    stat = ((obs - exp)[keep] ** 2 / exp[keep]).sum()
    dof = keep.sum() - keep.any(1).sum()
    return chi2.sf(stat, dof)


def test_sample_rows_draws_from_the_rows():
    rng = np.random.default_rng(0)
    m = rng.dirichlet(np.ones(4), size=30)
    draws = np.stack([sample_rows(m, rng) for _ in range(2000)])
    assert _chi2_pvalue(draws, m) > 1e-3
    # negative control: the argmax is no draw
    assert _chi2_pvalue(np.tile(m.argmax(1), (2000, 1)), m) < 1e-6


def test_mm_partition_draws_follow_the_exact_conditional(X):
    """Given fixed globals of the MM spec, each row's drawn cluster follows p(z_i | x_i,
    globals) computed by enumeration; the argmax of it fails the same test."""
    from consensuskit.models.mm import spec

    ens = Ensemble.from_labels(X)
    codes = torch.as_tensor(ens.codes)
    n_labels = [int(k) for k in ens.n_labels]
    kw = dict(n_labels=n_labels, n_clusters=3)
    roles = pointwise.site_roles(spec.model, codes, kw, 3)
    g = torch.Generator().manual_seed(0)
    one = {"pi": torch.distributions.Dirichlet(torch.ones(3, dtype=torch.float64)).sample()}
    for j, k in enumerate(n_labels):  # flat thetas: ambiguous rows
        a = torch.full((3, k), 2.0, dtype=torch.float64)
        one[f"theta_{j}"] = torch._standard_gamma(a, generator=g)
        one[f"theta_{j}"] /= one[f"theta_{j}"].sum(-1, keepdim=True)
    R = 200
    draws = {k: v.expand(R, *v.shape) for k, v in one.items()}
    Z = sample_partitions(spec.model, codes, draws, model_kwargs=kw, roles=roles, seed=1)
    exact = pointwise.score_rows(spec.model, codes, one, model_kwargs=kw, roles=roles,
                                 membership=True).membership
    assert exact.min() < 0.9 and (exact.max(1) < 0.95).sum() >= 5  # the test has power
    assert _chi2_pvalue(Z, exact) > 1e-3
    assert _chi2_pvalue(np.tile(exact.argmax(1), (R, 1)), exact) < 1e-6
    # a sampled row-local membership (NUTS' theta_i) is drawn from directly
    theta = np.broadcast_to(exact, (R,) + exact.shape)
    Zt = sample_partitions(spec.model, codes, draws, model_kwargs=kw, roles=roles,
                           local_draws={roles.membership: theta}, seed=2)
    assert _chi2_pvalue(Zt, exact) > 1e-3


@pytest.mark.slow
@pytest.mark.parametrize("make", [
    lambda: ck.MM(n_clusters=3, inference="nuts", max_iter=30, n_init=2, random_state=0),
    lambda: ck.BCE(n_clusters=3, inference="nuts", max_iter=30, n_init=2, random_state=0),
], ids=["MM", "BCE-collapsed"])
def test_nuts_fits_hand_over_one_partition_per_draw(X, make):
    est = make().fit(X[:40])
    pp = est.partition_posterior_
    C, D = next(iter(est.hub_.posterior_samples_.values())).shape[:2]
    assert (pp.n_draws, pp.n_items) == (C * D, 40)
    assert est.partition_posterior_ is pp
    # the draws' co-clustering of row pairs agrees with the mean over draws of the exact
    # conditional co-clustering sum_k m_dik m_djk, within its Monte-Carlo error
    hub = est.hub_
    flat = {k: v.reshape(-1, *v.shape[2:]) for k, v in hub._draws.items()}
    _, _, Mb = pointwise.score_rows_draws(hub.model, torch.as_tensor(hub.ensemble_.codes),
                                          flat, model_kwargs=hub._kwargs(hub.ensemble_),
                                          roles=hub.roles_, membership=True)
    i, j = np.triu_indices(40, 1)
    q = np.einsum("dik,dik->di", Mb[:, i], Mb[:, j])  # (D, pairs)
    se = np.sqrt((q * (1 - q)).sum(0)) / q.shape[0]
    got = pp.psm(pairs=(i, j))
    z = np.abs(got - q.mean(0)) / np.maximum(se, 1e-12)
    informative = se > 0.01
    assert informative.sum() >= 5
    assert np.quantile(z[informative], 0.99) < 4.0


@pytest.mark.parametrize("make", [
    lambda: ck.MM(n_clusters=3, random_state=0),
    lambda: ck.MM(n_clusters=3, inference="svi", max_iter=20, random_state=0),
    lambda: ck.BCE(n_clusters=3, inference="svi", max_iter=5, random_state=0),
], ids=["MM-em", "MM-svi", "BCE-svi"])
def test_hub_estimators_without_draws_say_so(X, make):
    """Point estimates have no partition draws; the message names the engine that has
    them, and not SVI, which for MM and BCE is a point estimate too (it did say "or
    'svi'", to an SVI fit)."""
    est = make().fit(X)
    with pytest.raises(AttributeError, match="needs inference='nuts'") as err:
        _ = est.partition_posterior_
    assert "or 'svi'" not in str(err.value)
    assert f"inference={est.inference!r} gives a point estimate" in str(err.value)
