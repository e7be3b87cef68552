"""BCE's amortised guide: trains on data simulated from the spec, memory independent of N."""

import numpy as np
import pyro
import pytest
import torch
from sklearn.metrics import adjusted_rand_score

from consensuskit.inference.pyro_svi import fit_svi, stream_svi
from consensuskit.models.bce import spec as bce
from consensuskit.models.bce.guides import AmortizedGuide, onehot_rows

N_LABELS = [3, 4, 5, 4, 3, 5, 4, 3]
K = 3


def _planted(n, seed=0):
    """Rows simulated from BCE's spec with planted alpha = 0.3 and sparse beta_j."""
    pyro.set_rng_seed(seed)
    alpha = torch.full((K,), 0.3)
    betas = [torch.distributions.Dirichlet(torch.full((k,), 0.3)).sample((K,))
             for k in N_LABELS]
    data = {"alpha": alpha, **{f"beta_{j}": b for j, b in enumerate(betas)}}
    tr = pyro.poutine.trace(pyro.poutine.condition(bce.model, data=data)).get_trace(
        None, n_labels=N_LABELS, n_clusters=K, n_rows=n)
    return tr.nodes["_RETURN"]["value"], tr.nodes["theta"]["value"]


def _param_numel(state):
    return sum(v.numel() for v in state["params"].values())


def test_onehot_rows_drops_missing_labels():
    x = torch.tensor([[0, 2], [-1, 1]])
    off = torch.tensor([0, 2, 5])
    np.testing.assert_array_equal(onehot_rows(x, off).numpy(),
                                  [[1, 0, 0, 0, 1], [0, 0, 0, 1, 0]])


def _elbo(guide, X, kw, n_eval=20):
    """Mean and standard error of ``n_eval`` single-sample ELBO estimates (current store)."""
    elbo = pyro.infer.TraceEnum_ELBO(max_plate_nesting=bce.MAX_PLATE_NESTING)
    vals = np.array([-elbo.loss(bce.model, guide, X, **kw) for _ in range(n_eval)])
    return vals.mean(), vals.std(ddof=1) / np.sqrt(n_eval)


@pytest.mark.parametrize("globals_, steps", [("map", 150), ("meanfield", 80)])
def test_trains_on_planted_bce(globals_, steps):
    X, theta = _planted(150)
    X[torch.rand(X.shape) < 0.1] = -1  # missing labels go through the guide too
    kw = dict(n_labels=N_LABELS, n_clusters=K)
    guide = AmortizedGuide(N_LABELS, K, hidden=8, globals=globals_)
    pyro.set_rng_seed(0)
    with pyro.get_param_store().scope():  # the ELBO at the guide's initial parameters
        before, se_before = _elbo(guide, X, kw)
    fit = fit_svi(bce.model, guide, X, model_kwargs=kw, num_steps=steps, learning_rate=0.1,
                  seed=0)
    with pyro.get_param_store().scope(fit.param_state):
        after, se_after = _elbo(guide, X, kw)
        gamma = guide.concentration(X)
        alpha, betas = guide.global_means()
    assert after - before > 5 * np.hypot(se_before, se_after)
    assert gamma.shape == (150, K) and alpha.shape == (K,)
    assert [b.shape for b in betas] == [(K, k) for k in N_LABELS]
    if globals_ == "map":  # (mean-field globals separate the clusters more slowly)
        # rows grouped by their dominant planted component: a random grouping of these
        # 150 rows has ARI 0 +- about 0.01, so 0.15 is far outside chance (this run:
        # 0.24; other seeds of the same setting 0.40-0.46)
        assert adjusted_rand_score(theta.argmax(1).numpy(), gamma.argmax(1).numpy()) > 0.15


def test_parameter_count_does_not_depend_on_n():
    counts = []
    for n in (50, 500):
        X, _ = _planted(n)
        guide = AmortizedGuide(N_LABELS, K, hidden=8)
        with pyro.get_param_store().scope() as state:
            pyro.poutine.trace(guide).get_trace(X, n_labels=N_LABELS, n_clusters=K)
        counts.append(_param_numel(state))
        assert counts[-1] == guide.n_parameters()
    assert counts[0] == counts[1]


def test_stream_svi_over_memmaps_of_two_sizes(tmp_path):
    states = []
    for n in (1000, 4000):
        X, _ = _planted(n, seed=1)
        path = tmp_path / f"labels_{n}.npy"
        np.save(path, X.numpy().astype(np.int8))
        labels = np.load(path, mmap_mode="r")
        guide = AmortizedGuide(N_LABELS, K, hidden=8)
        fit = stream_svi(bce.model, guide, labels, n_rows=n, seed=0,
                         model_kwargs=dict(n_labels=N_LABELS, n_clusters=K))
        assert np.isfinite(fit.losses).all()
        states.append(fit.param_state)
    assert _param_numel(states[0]) == _param_numel(states[1])
    assert {k: v.shape for k, v in states[0]["params"].items()} == {
        k: v.shape for k, v in states[1]["params"].items()}


def test_rejects_mismatched_arguments():
    X, _ = _planted(10)
    guide = AmortizedGuide(N_LABELS, K)
    with pytest.raises(ValueError, match="n_clusters"):
        guide(X, n_labels=N_LABELS, n_clusters=K + 1)
    with pytest.raises(ValueError, match="needs labels"):
        guide(None, n_labels=N_LABELS, n_clusters=K, n_rows=10)
    with pytest.raises(ValueError, match="globals"):
        AmortizedGuide(N_LABELS, K, globals="full")
