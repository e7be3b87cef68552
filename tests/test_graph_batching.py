"""Batching a recorded graph's repeated operations keeps every output and runs fewer calls."""

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from consensuskit.inference.compiled_potential import traced_potential
from consensuskit.inference.graph_batching import batch_graph
from consensuskit.inference.graph_simplify import functional_graph, simplify_graph
from consensuskit.models.bce import spec as bce


def _record(fn, inputs):
    graph = functional_graph(make_fx(fn)(*inputs), inputs)
    return simplify_graph(graph)[0]


def _calls(graph, target):
    return sum(1 for n in graph.graph.nodes if n.op == "call_function" and n.target is target)


aten = torch.ops.aten


def _value_and_grad(weights):
    """A per-site loop as a model writes it: softplus, log-sum-exp and a weighted sum per
    input, then the total and its gradient (the same few operations, once per site)."""
    def fn(*xs):
        leaves = [x.detach().requires_grad_(True) for x in xs]
        total = sum(((torch.nn.functional.softplus(x) * w).logsumexp(-1).sum()
                     - x.square().sum()) for x, w in zip(leaves, weights))
        return (total.detach(), *torch.autograd.grad(total, leaves))
    return fn


def _assert_same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y, rtol=1e-12, atol=1e-12)


def test_repeated_sites_run_as_batches_with_the_same_outputs():
    gen = torch.Generator().manual_seed(0)
    shapes = [(3, 4)] * 6 + [(5,)] * 4  # two kinds of site, as columns with k_j = 4 and 5
    weights = [torch.rand(s, generator=gen, dtype=torch.float64) for s in shapes]
    inputs = [torch.randn(s, generator=gen, dtype=torch.float64) for s in shapes]
    fn = _value_and_grad(weights)
    graph = _record(fn, inputs)
    batched, stats = batch_graph(graph, inputs)
    assert stats["unbatched_waves"] == 0
    assert stats["calls_after"] < stats["calls_before"] / 2, stats
    for seed in range(3):
        g = torch.Generator().manual_seed(10 + seed)
        point = [torch.randn(s, generator=g, dtype=torch.float64) for s in shapes]
        _assert_same(batched(*point), fn(*point))



def test_views_that_change_nothing_are_dropped_and_the_others_kept():
    def fn(x, y):
        a = x.permute(0, 1) * 2.0          # identity permutation: dropped
        b = y.view(4) + a.sum()            # view to its own shape: dropped
        c = x.permute(1, 0).exp()          # a real transpose: kept
        d = x.reshape(6).expand(6) - 1.0   # reshape changes the shape (kept), expand not
        e = x.sum().view(()) * 3.0         # a 0-d view of a 0-d value: dropped
        return a, b, c, d, e, y.view(4)    # a view that is an output: kept
    inputs = [torch.randn(2, 3, dtype=torch.float64), torch.randn(4, dtype=torch.float64)]
    graph = functional_graph(make_fx(fn)(*inputs), inputs)
    n_permute, n_view = _calls(graph, aten.permute.default), _calls(graph, aten.view.default)
    simplified, stats = simplify_graph(graph)
    assert stats["shape_identities"] == 4
    assert _calls(simplified, aten.permute.default) == n_permute - 1 == 1
    assert _calls(simplified, aten.view.default) == n_view - 2
    assert _calls(simplified, aten.expand.default) == 0
    point = [torch.randn(2, 3, dtype=torch.float64), torch.randn(4, dtype=torch.float64)]
    for got, want in zip(simplified(*point), fn(*point)):
        assert got.shape == want.shape and got.stride() == want.stride()
        torch.testing.assert_close(got, want, rtol=0, atol=0)

def test_sites_of_one_shape_each_are_not_batched_and_stay_exact():
    """Every site a different shape: nothing to batch with, the graph computes the same."""
    shapes = [(2,), (3,), (4,), (5,)]
    weights = [torch.ones(s, dtype=torch.float64) for s in shapes]
    inputs = [torch.randn(s, dtype=torch.float64) for s in shapes]
    fn = _value_and_grad(weights)
    batched, stats = batch_graph(_record(fn, inputs), inputs)
    _assert_same(batched(*inputs), fn(*inputs))


def test_indexing_one_tensor_per_site_becomes_one_index():
    """``rho[j]`` per column (select with a different index per site), as in notebook 03."""
    def fn(rho, *betas):
        return (sum(rho[j] * b.exp() + (1 - rho[j]) * b.sigmoid()
                    for j, b in enumerate(betas)).sum(),)
    inputs = [torch.rand(5, dtype=torch.float64)] + [torch.randn(3, 2, dtype=torch.float64)
                                                     for _ in range(5)]
    graph = _record(fn, inputs)
    batched, stats = batch_graph(graph, inputs)
    for op in (aten.exp.default, aten.sigmoid.default):  # once per site before, now once
        assert (_calls(graph, op), _calls(batched, op)) == (5, 1)
    _assert_same(batched(*inputs), fn(*inputs))


def _reliability(labels=None, *, n_labels, n_clusters, **kw):
    """A per-column variant of BCE (notebook 03's shape): one Dirichlet and one mixing
    weight per base clustering, looped over in Python."""
    alpha = pyro.sample("alpha", dist.Gamma(torch.full((n_clusters,), 2.0,
                                                       dtype=torch.float64), 2.0).to_event(1))
    with pyro.plate("columns", len(n_labels)):
        rho = pyro.sample("rho", dist.Beta(torch.tensor(2.0, dtype=torch.float64),
                                           torch.tensor(1.0, dtype=torch.float64)))
    betas = []
    for j, k in enumerate(n_labels):
        with pyro.plate(f"clusters_{j}", n_clusters):
            b = pyro.sample(f"beta_{j}", dist.Dirichlet(torch.full((k,), 0.5,
                                                                   dtype=torch.float64)))
        betas.append(rho[j] * b + (1 - rho[j]) / k)
    return bce.model(labels, n_labels=n_labels, n_clusters=n_clusters, alpha=alpha,
                     beta=betas, **kw)


def _labels(n=30, kj=(3, 3, 3, 4, 4, 3), seed=0):
    rng = np.random.default_rng(seed)
    x = np.stack([rng.integers(k, size=n) for k in kj], axis=1)
    x[rng.random(x.shape) < 0.1] = -1
    return torch.as_tensor(x), dict(n_labels=list(kj), n_clusters=3)


def test_traced_potential_batches_a_per_column_variant(monkeypatch, capfd):
    from consensuskit.inference import graph_batching

    graphs = {}
    real = graph_batching.batch_graph

    def recorded(graph, example):
        graphs["before"] = graph
        graphs["after"], stats = real(graph, example)
        return graphs["after"], stats
    monkeypatch.setattr(graph_batching, "batch_graph", recorded)
    lab, kw = _labels()
    plain = traced_potential(_reliability, (lab,), kw, max_plate_nesting=2, batch=False)
    batched = traced_potential(_reliability, (lab,), kw, max_plate_nesting=2)
    assert batched.fallbacks == [] and batched.method == "traced"
    assert batched.build["batched"], batched.build
    assert batched.build["calls_after"] < batched.build["calls_before"], batched.build
    # the stick-breaking transform of the six simplex sites (k = 3 and 4) runs per shape
    before, after = (_calls(graphs[k], aten.cumprod.default) for k in ("before", "after"))
    assert after <= before / 2, (before, after)
    # ATen prints (not warns) when vmap's rule resizes an output: log_sigmoid_backward with
    # an unbatched gradient did, at every call, until its inputs were all batched
    assert "resized" not in capfd.readouterr().err
    for seed in range(3):
        p = plain.init(np.random.default_rng(seed))
        parts = [p[k] for k in plain.names]
        u0, g0 = plain.value_and_grad(*parts)
        u1, g1 = batched.value_and_grad(*parts)
        torch.testing.assert_close(u1, u0, rtol=1e-10, atol=1e-10)
        for a, b in zip(g0, g1):
            torch.testing.assert_close(b, a, rtol=1e-10, atol=1e-10)


def test_a_wrong_batched_graph_is_caught_and_not_used(monkeypatch):
    """Negative control: a batching that changes the gradient fails the check against
    Pyro's potential, is reported in ``fallbacks`` with a warning, and the unbatched graph
    is used."""
    from consensuskit.inference import graph_batching

    real = graph_batching.batch_graph

    def wrong(graph, example):
        new, stats = real(graph, example)

        def scaled(*inputs):
            out = new(*inputs)
            return (out[0], *(1.01 * g for g in out[1:]))
        return _record(scaled, list(example)), stats
    monkeypatch.setattr(graph_batching, "batch_graph", wrong)
    lab, kw = _labels(seed=1)
    with pytest.warns(RuntimeWarning, match="batching the graph's repeated operations failed"):
        pot = traced_potential(_reliability, (lab,), kw, max_plate_nesting=2)
    assert any("batching" in f for f in pot.fallbacks)
    assert pot.method == "traced" and "calls_after" not in pot.build


def _mixed_dtypes(labels=None, *, n_labels, n_clusters, **kw):
    """MM with float32 mixing logits (torch's default dtype, as a user writes them) beside
    the spec's float64 label distributions."""
    from consensuskit.models.mm import spec as mm

    logits = pyro.sample("pi_logits", dist.Normal(torch.zeros(n_clusters), 1.0).to_event(1))
    return mm.model(labels, n_labels=n_labels, n_clusters=n_clusters,
                    pi=torch.softmax(logits, -1), **kw)


def test_packed_potential_keeps_each_sites_dtype():
    """The packed vector is float64 when any site is (torch.cat promotes); each site is
    converted back to its own dtype inside the graph, so the packed potential is the
    per-site one (it failed its check, warned, before the conversion)."""
    lab, kw = _labels(seed=2)
    pot = traced_potential(_mixed_dtypes, (lab,), kw, max_plate_nesting=1)
    params = pot.init(np.random.default_rng(0))
    assert {v.dtype for v in params.values()} == {torch.float32, torch.float64}
    assert pot.fallbacks == [] and pot.packed_value_and_grad is not None
    u = pot.pack(params)
    value, grad = pot.packed_value_and_grad(u)
    v0, g0 = pot.value_and_grad(*(params[k] for k in pot.names))
    torch.testing.assert_close(value, v0, rtol=0, atol=0)
    torch.testing.assert_close(grad, torch.cat([g.reshape(-1).to(grad.dtype) for g in g0]),
                               rtol=0, atol=0)


@pytest.mark.slow
@pytest.mark.parametrize("family", ["kmeans", "mixed"])
def test_every_traced_spec_batches_and_passes_the_check(family):
    """The breadth experiment's cases as a regression test (graph_batching_breadth.py): MM's,
    BCE's collapsed and NBCE's specs and the users' variants, on an ensemble with one k for
    every column (k-means) and one with k drawn per column (mixed algorithms), M = 12:
    the batched graph passes the check against Pyro's potential, runs fewer calls, and
    the packed potential is built."""
    breadth = pytest.importorskip("experiments.graph_batching_breadth")
    lbf = pytest.importorskip("experiments.loo_vs_bruteforce")
    ens = lbf.small_ensemble("iris", 40, n_partitions=12, n_clusters=3, seed=3, family=family)
    lab = torch.as_tensor(ens.codes.astype(np.int64))
    for name, (model, extra, nesting) in breadth.specs().items():
        kw = dict(n_labels=[int(k) for k in ens.n_labels], n_clusters=3, **extra)
        pot = traced_potential(model, (lab,), kw, max_plate_nesting=nesting, compile="jit")
        assert pot.fallbacks == [] and pot.method == "traced+jit", (name, pot.fallbacks)
        assert pot.build["batched"], (name, pot.build)
        # every M = 12 case of the breadth table saved at least 20% of the calls
        assert pot.build["calls_after"] < 0.9 * pot.build["calls_before"], (name, pot.build)
        assert pot.packed_value_and_grad is not None, name
