"""Every spec simulates (labels=None), and refitting its own simulated data recovers its
parameters; the generic estimator and comparison work on them."""

import numpy as np
import pyro
import pytest
import torch
from pyro import poutine
from pyro.infer import Predictive
from scipy.optimize import linear_sum_assignment

import consensuskit as ck
from consensuskit.models import bce, mm, nbce

N_LABELS = [3, 4, 3, 2, 3, 4]


def _simulate(model, truth, n_rows, seed=0, **kw):
    pyro.set_rng_seed(seed)
    X = poutine.condition(model, data=truth)(None, n_labels=N_LABELS, n_rows=n_rows, **kw)
    return X.numpy()


def _match(true_rows, est_rows):
    """Permutation of est's K rows that best matches true's (both (K, d))."""
    cost = ((true_rows[:, None, :] - est_rows[None, :, :]) ** 2).sum(-1)
    return linear_sum_assignment(cost)[1]


@pytest.mark.parametrize("spec, kw", [
    (mm.model, dict(n_clusters=3)),
    (bce.model, dict(n_clusters=3)),
    (nbce.model, dict(n_clusters=5, prior="tsb")),
    (nbce.model, dict(n_clusters=5, prior="fsd")),
], ids=["mm", "bce", "nbce-tsb", "nbce-fsd"])
def test_predictive_simulates_data_and_parameters(spec, kw):
    """``Predictive`` on a spec with no labels draws an ensemble and its parameters."""
    draws = Predictive(spec, num_samples=3)(None, n_labels=N_LABELS, n_rows=40, **kw)
    X = draws["_RETURN"] if "_RETURN" in draws else None
    tr = poutine.trace(spec).get_trace(None, n_labels=N_LABELS, n_rows=40, **kw)
    X = tr.nodes["_RETURN"]["value"]
    assert X.shape == (40, len(N_LABELS))
    for j, k in enumerate(N_LABELS):
        assert 0 <= int(X[:, j].min()) and int(X[:, j].max()) < k
    assert all(v.shape[0] == 3 for v in draws.values())
    assert len(draws) >= 2  # parameters and labels


def test_mm_refit_recovers_parameters():
    """EM on 3000 rows simulated from MM's spec: every theta_jk(r) within 4 binomial SE."""
    rs = np.random.default_rng(0)
    pi = np.array([0.5, 0.3, 0.2])
    truth = {"pi": torch.tensor(pi)}
    truth.update({f"theta_{j}": torch.tensor(rs.dirichlet(np.full(k, 0.4), size=3))
                  for j, k in enumerate(N_LABELS)})
    X = _simulate(mm.model, truth, 3000, n_clusters=3)
    m = ck.MM(3, n_init=3, random_state=0).fit(X)
    true_cat = np.concatenate([truth[f"theta_{j}"].numpy() for j in range(len(N_LABELS))], 1)
    est_cat = np.concatenate(m.theta_, 1)
    perm = _match(true_cat, est_cat)
    se = np.sqrt(true_cat * (1 - true_cat) / (3000 * pi[:, None])) + 1e-3
    assert np.all(np.abs(est_cat[perm] - true_cat) < 4 * se + 0.02)
    assert np.allclose(m.weights_[perm], pi, atol=4 * np.sqrt(pi * (1 - pi) / 3000) + 0.02)


def _bce_planted():
    rs = np.random.default_rng(1)
    truth = {"alpha": torch.full((3,), 0.3, dtype=torch.float64)}
    truth.update({f"beta_{j}": torch.tensor(rs.dirichlet(np.full(k, 0.3), size=3))
                  for j, k in enumerate(N_LABELS)})
    X = _simulate(bce.model, truth, 3000, n_clusters=3)
    true_cat = np.concatenate([truth[f"beta_{j}"].numpy() for j in range(len(N_LABELS))], 1)
    return X, true_cat


def _beta_error(est, true_cat):
    est_cat = np.concatenate(est.beta_, 1)
    return np.abs(est_cat[_match(true_cat, est_cat)] - true_cat)


def test_bce_svi_refit_recovers_beta():
    """SVI of the spec (EB alpha, beta; q(theta) Dirichlet; z enumerated) on 3000 rows
    simulated from BCE's spec (alpha = 0.3 each): mean |beta error| < 0.08 (measured
    0.061; CAVI's is 0.125, see the xfail below)."""
    X, true_cat = _bce_planted()
    b = ck.BCE(3, inference="svi", max_iter=100, n_init=1, random_state=0).fit(X)
    assert _beta_error(b, true_cat).mean() < 0.08


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason="CAVI's mean-field bound biases alpha upward on "
                   "BCE's own data (fitted sum(alpha) ~ 10.7 against 0.9), issue [3 of 5]")
def test_bce_cavi_refit_recovers_beta():
    X, true_cat = _bce_planted()
    b = ck.BCE(3, n_init=5, random_state=0).fit(X)
    assert _beta_error(b, true_cat).mean() < 0.08


def test_nbce_refit_recovers_clusters_and_theta():
    """NBCE (VB, FSD, truncation 8) on 2000 rows simulated from its spec with 3 occupied
    components: its 3 largest clusters hold >= 97% of the rows, with the true label
    distributions within 0.05."""
    rs = np.random.default_rng(2)
    T = 8
    pi = np.r_[0.5, 0.3, 0.2, np.zeros(T - 3)]
    truth = {"pi": torch.tensor(pi)}
    truth.update({f"theta_{j}": torch.tensor(rs.dirichlet(np.full(k, 0.3), size=T))
                  for j, k in enumerate(N_LABELS)})
    X = _simulate(nbce.model, truth, 2000, n_clusters=T, prior="fsd")
    m = ck.NBCE(truncation=T, prior="fsd", inference="vb", random_state=0).fit(X)
    sizes = np.bincount(m.labels_, minlength=m.n_clusters_)
    top = np.argsort(sizes)[::-1][:3]
    assert sizes[top].sum() >= 0.97 * len(X)
    true_cat = np.concatenate([truth[f"theta_{j}"].numpy()[:3] for j in range(len(N_LABELS))],
                              1)
    est = np.exp(m._log_theta[m._components[top]])
    perm = _match(true_cat, est)
    assert np.abs(est[perm] - true_cat).max() < 0.05
