"""Every hand-written engine agrees with its Pyro spec at the engine's fitted state.

One parametrised test over :func:`consensuskit.models.family.fast_paths`: the
estimator's per-row held-out and training log-likelihood equals the spec's (exact
enumeration; likelihood weighting for BCE's theta) within 4 combined Monte-Carlo standard
errors (1e-8 relative where both are exact), and a reported objective (MM's log joint,
BCE's CAVI bound) equals the spec's within 4 SE of the spec's Monte-Carlo
estimate (GBCE's bound at its fitted state: ``tests/test_gbce.py``).  An engine that
needs more than labels (GBCE: features) brings its own data.
"""

import numpy as np
import pytest
import torch

from consensuskit.inference import pointwise
from consensuskit.inference.registry import spec_values
from consensuskit.models.family import fast_paths

PATHS = fast_paths()


@pytest.fixture(scope="module")
def planted():
    """Simulated from MM's spec (not from a hand-written generator): 90 rows, 5 columns."""
    from consensuskit.models.mm import spec as mm

    n_labels = [3, 3, 4, 2, 3]
    rs = np.random.default_rng(0)
    pi = torch.tensor([0.4, 0.35, 0.25], dtype=torch.float64)
    theta = [torch.tensor(rs.dirichlet(np.full(k, 0.3), size=3)) for k in n_labels]
    _, x = mm.sample(pi, theta, 120, generator_seed=1)
    X = x.numpy().copy()
    X[rs.random(X.shape) < 0.1] = -1
    X[(X < 0).all(1), 0] = 0
    return X[:90], X[90:]


def _spec_scores(fp, est, labels):
    kw, draws = spec_values(fp, est)
    roles = pointwise.site_roles(fp.spec.model, labels, kw, kw["n_clusters"])
    L, V, _ = pointwise.score_rows_draws(fp.spec.model, labels, draws, model_kwargs=kw,
                                         roles=roles, num_particles=4000, seed=0)
    return pointwise.combine_draws(L, V)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("fp", PATHS, ids=[f"{p.family}-{p.engine}" for p in PATHS])
def test_fast_path_agrees_with_spec(fp, planted):
    X_train, X_test, fit_kw = fp.data() if fp.data is not None else (*planted, {})
    est = fp.make_estimator().fit(X_train, **fit_kw)
    for X in (est.ensemble_, est._encode_new(X_test, unknown="missing")):
        labels = torch.as_tensor(X.codes)
        ll_spec, var_spec = _spec_scores(fp, est, labels)
        ll_est, se_est = est.score_samples_se(X)
        diff = ll_est.sum() - ll_spec.sum()
        se = np.sqrt(var_spec.sum() + (se_est**2).sum())
        assert abs(diff) <= 4 * se + 1e-8 * abs(ll_spec.sum()), (diff, se)
    if fp.objective is not None:
        engine_value, spec_value, spec_se = fp.objective(est)
        assert abs(engine_value - spec_value) <= 4 * spec_se + 1e-8 * abs(spec_value), (
            engine_value, spec_value, spec_se)


def test_fast_path_check_has_power(planted):
    """The same check rejects a wrong state: BCE's beta moved 20% towards uniform."""
    fp = next(p for p in PATHS if (p.family, p.engine) == ("bce", "cavi"))
    X_train, _ = planted
    est = fp.make_estimator().fit(X_train)
    labels = torch.as_tensor(est.ensemble_.codes)
    ll_spec, var_spec = _spec_scores(fp, est, labels)
    est.beta_ = [0.8 * b + 0.2 / b.shape[1] for b in est.beta_]  # 20% towards uniform
    ll_wrong, var_wrong = _spec_scores(fp, est, labels)
    ll_est, se_est = est.score_samples_se(est.ensemble_)
    se = np.sqrt(var_wrong.sum() + (se_est**2).sum())
    assert abs(ll_est.sum() - ll_wrong.sum()) > 4 * se
