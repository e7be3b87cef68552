"""The compiled potentials equal Pyro's potential of the spec, value and gradient."""

import numpy as np
import pyro
import pytest
import torch
from pyro.infer.mcmc.util import initialize_model

from consensuskit.inference.compiled_potential import build_potential, traced_potential
from consensuskit.inference.compiled_svi import fit_map_svi_compiled
from consensuskit.models.mm import spec
from consensuskit.models.mm.potential import mm_potential


def _data(seed, N=60, M=5, K=3, missing=0.15):
    rng = np.random.default_rng(seed)
    kj = rng.integers(2, 6, size=M)
    z = rng.integers(K, size=N)
    x = np.stack([np.where(rng.random(N) < 0.6, z % k, rng.integers(k, size=N))
                  for k in kj], axis=1)
    x[rng.random((N, M)) < missing] = -1
    return x, dict(n_labels=[int(k) for k in kj], n_clusters=K,
                   label_prior=float(rng.uniform(0.5, 2)),
                   weight_prior=float(rng.uniform(0.5, 2)))


def _pyro_reference(x, kw, params):
    _, pot, _, _ = initialize_model(spec.model, (torch.as_tensor(x),), kw,
                                    max_plate_nesting=1)
    leaves = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    u = pot(leaves)
    names = sorted(leaves)
    grads = torch.autograd.grad(u, [leaves[k] for k in names])
    return float(u), dict(zip(names, grads))


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int64])
def test_mm_hand_written_equals_pyro(seed, dtype):
    x, kw = _data(seed)
    pot = mm_potential(x.astype(dtype), **kw)
    params = pot.init(np.random.default_rng(seed + 10))
    ref, gref = _pyro_reference(x, kw, params)
    value, grads = pot(params)
    assert float(value) == pytest.approx(ref, rel=1e-12, abs=1e-9)
    for k in pot.names:
        torch.testing.assert_close(grads[k], gref[k], rtol=1e-9, atol=1e-9)


def test_mm_hand_written_gradient_negative_control():
    """A perturbed label changes value and gradient (the check can fail)."""
    x, kw = _data(5)
    pot = mm_potential(x, **kw)
    params = pot.init(np.random.default_rng(0))
    y = x.copy()
    y[0, 0] = (y[0, 0] + 1) % kw["n_labels"][0]
    ref, _ = _pyro_reference(y, kw, params)
    assert abs(float(pot(params)[0]) - ref) > 1e-6


def test_traced_equals_pyro_and_map_loss_is_log_joint():
    x, kw = _data(3)
    tp = traced_potential(spec.model, (torch.as_tensor(x),), kw, max_plate_nesting=1)
    params = tp.init(np.random.default_rng(4))
    ref, gref = _pyro_reference(x, kw, params)
    value, grads = tp(params)
    assert float(value) == pytest.approx(ref, rel=1e-12)
    for k in tp.names:
        torch.testing.assert_close(grads[k], gref[k], rtol=1e-9, atol=1e-9)
    # MAP loss: -log p(X, pi, theta) without the Jacobian, hand-written and traced alike
    hp = mm_potential(x, **kw)
    parts = [params[k] for k in hp.names]
    pi = hp.transforms["pi"].inv(params["pi"])
    theta = [hp.transforms[f"theta_{j}"].inv(params[f"theta_{j}"])
             for j in range(x.shape[1])]
    lj, _ = spec.log_joint(torch.as_tensor(x), pi, theta, **kw)
    hv, hg = hp.map_value_and_grad(*parts)
    tv, tg = tp.map_value_and_grad(*[params[k] for k in tp.names])
    assert float(hv) == pytest.approx(-lj, rel=1e-12)
    assert float(tv) == pytest.approx(-lj, rel=1e-12)
    for k, a in zip(hp.names, hg):
        torch.testing.assert_close(a, tg[tp.names.index(k)], rtol=1e-9, atol=1e-9)


def test_build_potential_picks_hand_written_for_mm_and_traces_variants():
    x, kw = _data(1, N=20, M=3)

    def variant(labels=None, **k):  # a user's wrapper: not registered, so traced
        return spec.model(labels, **k)

    assert build_potential(spec.model, torch.as_tensor(x), kw).method == "hand-written"
    assert build_potential(variant, torch.as_tensor(x), kw,
                           max_plate_nesting=1).method == "traced"


def test_build_potential_traces_the_spec_when_a_sampled_site_is_given():
    """The MM spec called with a fixed ``pi`` is another model: the hand-written potential
    (which samples pi and theta) must not be used for it, nor silently ignore ``pi``."""
    x, kw = _data(2, N=20, M=3)
    pi = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    fixed = dict(kw, pi=pi)
    got = build_potential(spec.model, torch.as_tensor(x), fixed, max_plate_nesting=1)
    assert got.method == "traced"
    with pytest.raises(ValueError, match="pi"):
        build_potential(spec.model, torch.as_tensor(x), fixed, method="hand-written")
    with pytest.raises(ValueError, match="pi"):
        mm_potential(torch.as_tensor(x), **fixed)


def test_compiled_map_svi_reaches_em_optimum():
    """Adam on the compiled MAP loss ends at the MAP point EM finds (the same objective)."""
    import consensuskit as ck

    x, kw = _data(7, N=200, M=6, K=2, missing=0.0)
    kw.update(label_prior=1.5, weight_prior=1.5)
    fit = fit_map_svi_compiled(spec.model, torch.as_tensor(x), model_kwargs=kw,
                               num_steps=3000, learning_rate=0.05, seed=0,
                               max_plate_nesting=1)
    pi = fit.params["pi"]
    theta = [fit.params[f"theta_{j}"] for j in range(x.shape[1])]
    lj_svi, _ = spec.log_joint(torch.as_tensor(x), pi, theta, **kw)
    assert fit.losses[-1] == pytest.approx(-lj_svi, rel=1e-6, abs=1e-3)
    em = ck.MM(n_clusters=2, label_prior=1.5, weight_prior=1.5, n_init=5, tol=1e-10,
               random_state=0).fit(x)
    lj_em, _ = spec.log_joint(torch.as_tensor(x), torch.as_tensor(em.weights_),
                              [torch.as_tensor(t) for t in em.theta_], **kw)
    # Adam's last steps jitter around the optimum by about lr^2 * curvature: 1e-3 relative
    assert lj_svi == pytest.approx(lj_em, rel=1e-3)
    pyro.clear_param_store()


def test_pyro_consensus_nuts_uses_the_hand_written_potential_of_the_mm_spec():
    """NUTS through PyroConsensus on the built-in MM spec runs on its hand-written potential
    and records the same sample statistics; a variant that fixes ``pi`` runs on its traced
    potential by default, on Pyro's with ``nuts_potential="pyro"``."""
    import consensuskit as ck

    x, _ = _data(3, N=40, M=4)
    common = dict(n_clusters=3, inference="nuts", num_samples=30, warmup_steps=30,
                  num_chains=2, random_state=0)
    est = ck.PyroConsensus(spec.model, **common).fit(x)
    assert est.potential_ == "hand-written"
    stats = est.mcmc_info_["sample_stats"]
    assert stats["lp"].shape == (2, 30) and np.isfinite(stats["lp"]).all()
    assert est.mcmc_info_["warmup_stats"]["step_size"].shape == (2, 30)

    pi = torch.tensor([0.4, 0.3, 0.3], dtype=torch.float64)
    fixed = ck.PyroConsensus(spec.model, model_kwargs={"pi": pi}, **common).fit(x)
    assert fixed.potential_ == "traced+jit"
    assert fixed.mcmc_info_["sample_stats"]["lp"].shape == (2, 30)
    assert set(fixed.posterior_samples_) == {f"theta_{j}" for j in range(4)}
    by_pyro = ck.PyroConsensus(spec.model, model_kwargs={"pi": pi}, nuts_potential="pyro",
                               **common).fit(x)
    assert by_pyro.potential_ == "pyro"
    assert set(by_pyro.posterior_samples_) == set(fixed.posterior_samples_)
    traced = ck.PyroConsensus(spec.model, nuts_potential="traced", **common).fit(x)
    assert traced.potential_ == "traced+jit"
    with pytest.raises(ValueError, match="nuts_potential"):
        ck.PyroConsensus(spec.model, nuts_potential="fast", **common).fit(x)


# ------------------------------------------------- traced graph of any spec: exactness
def _pyro_value_and_grad(model, x, kw, P, params):
    """Pyro's own potential (initialize_model, no JIT) and its gradient at ``params``."""
    _, pot, _, _ = initialize_model(model, (torch.as_tensor(x),), kw, max_plate_nesting=P)
    leaves = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    u = pot(leaves)
    names = sorted(leaves)
    grads = torch.autograd.grad(u, [leaves[k] for k in names])
    return float(u.detach()), dict(zip(names, grads))


def _reliability(labels=None, **kw):
    """Notebook 03's variant (c_beta = 0.2), float64 (the test sets the default dtype)."""
    from experiments.user_variants import bce_reliability

    return bce_reliability(labels, c_beta=0.2, **kw)


def _specs():
    from consensuskit.models.bce import spec as bce
    from consensuskit.models.nbce import spec as nbce

    mm_hier = pytest.importorskip("experiments.user_variants").mm_hierarchical
    more = pytest.importorskip("experiments.traced_variants_check")
    return {
        "mm_stick_breaking": (more.mm_stick_breaking, 1, {}),  # pyro.deterministic, cumprod
        "mm_tempered": (more.mm_tempered, 1, {}),  # poutine.scale
        "mm": (spec.model, 1, {}),
        "bce": (bce.model, 2, {}),
        "bce_collapsed": (bce.model_collapsed, 2, {}),
        "nbce_tsb": (nbce.model, 1, {"prior": "tsb"}),
        "nbce_fsd": (nbce.model, 1, {"prior": "fsd"}),
        "mm_hierarchical": (mm_hier, 1, {}),
        "bce_reliability": (_reliability, 2, {}),
    }


@pytest.fixture
def float64_default():
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


_SLOW = pytest.mark.slow
_EXACT_CASES = [  # (spec, executor); the default suite runs one case per spec
    ("mm", "jit"), ("bce", "fx"), ("bce_collapsed", "jit"), ("nbce_tsb", "jit"),
    ("nbce_fsd", "fx"), ("mm_hierarchical", "fx"), ("bce_reliability", "jit"),
    ("mm_stick_breaking", "jit"), ("mm_tempered", "jit"),
    pytest.param("mm", "fx", marks=_SLOW), pytest.param("bce", "jit", marks=_SLOW),
    pytest.param("bce_collapsed", "fx", marks=_SLOW),
    pytest.param("nbce_tsb", "fx", marks=_SLOW), pytest.param("nbce_fsd", "jit", marks=_SLOW),
    pytest.param("mm_hierarchical", "jit", marks=_SLOW),
    pytest.param("bce_reliability", "fx", marks=_SLOW)]


@pytest.mark.parametrize("name, executor", _EXACT_CASES)
def test_traced_graph_equals_pyro_potential_at_random_points(name, executor,
                                                             float64_default):
    """The simplified traced graph (run as Python or TorchScript) gives Pyro's potential and
    gradient, float64, at prior draws it was not traced at (value to 1e-10 relative)."""
    model, P, extra = _specs()[name]
    x, kw = _data(11, N=25, M=3)
    kw = {"n_labels": kw["n_labels"], "n_clusters": 3, **extra}
    tp = traced_potential(model, (torch.as_tensor(x),), kw, max_plate_nesting=P,
                          compile=executor)
    assert tp.fallbacks == [] and tp.method == ("traced" if executor == "fx"
                                                else "traced+jit")
    assert tp.build["nodes_after"] < tp.build["nodes_before"]
    for seed in (101, 102, 103):
        params = tp.init(np.random.default_rng(seed))
        assert all(v.dtype == torch.float64 for v in params.values())
        ref, gref = _pyro_value_and_grad(model, x, kw, P, params)
        value, grads = tp(params)
        assert float(value) == pytest.approx(ref, rel=1e-10, abs=1e-10)
        for k in tp.names:
            torch.testing.assert_close(grads[k], gref[k], rtol=1e-10, atol=1e-10)


def test_traced_graph_negative_control_other_labels():
    """The check can fail: the graph traced on other labels gives another value."""
    model, P, _ = _specs()["bce"]
    x, kw = _data(12, N=25, M=3)
    kw = {"n_labels": kw["n_labels"], "n_clusters": 3}
    y = x.copy()
    y[0, 0] = (y[0, 0] + 1) % kw["n_labels"][0]
    tp = traced_potential(model, (torch.as_tensor(y),), kw, max_plate_nesting=P)
    params = tp.init(np.random.default_rng(0))
    ref, _ = _pyro_value_and_grad(model, x, kw, P, params)
    assert abs(float(tp(params)[0]) - ref) > 1e-6


def _branching(labels=None, *, n_labels, n_clusters, **kw):
    """A model whose Python branches on a parameter's value (``float(pi[0])``): the
    recorder refuses to read a traced value."""
    import pyro.distributions as dist

    pi = pyro.sample("pi", dist.Dirichlet(torch.ones(n_clusters, dtype=torch.float64)))
    prior = 2.0 if float(pi[0].detach()) > 1.0 / n_clusters else 0.5
    return spec.model(labels, n_labels=n_labels, n_clusters=n_clusters, pi=pi,
                      label_prior=prior, **kw)


def _leaves_torch(labels=None, *, n_labels, n_clusters, **kw):
    """A model that reads a parameter through numpy: the recorder cannot see it and bakes
    the traced point's value into the graph, which is then wrong everywhere else."""
    import pyro.distributions as dist

    pi = pyro.sample("pi", dist.Dirichlet(torch.ones(n_clusters, dtype=torch.float64)))
    prior = 0.5 + float(np.max(pi.detach().numpy()))
    return spec.model(labels, n_labels=n_labels, n_clusters=n_clusters, pi=pi,
                      label_prior=prior, **kw)


@pytest.mark.slow
def test_traced_potential_falls_back_with_a_reason_when_the_graph_disagrees():
    """A value baked in at the trace point is caught by the check at other points: each
    executor tried is listed with its reason, a warning is raised, and Pyro's potential
    (exact) is used."""
    x, kw = _data(13, N=25, M=3)
    kw = {"n_labels": kw["n_labels"], "n_clusters": 3}
    with pytest.warns(RuntimeWarning, match="disagrees with Pyro's potential"):
        tp = traced_potential(_leaves_torch, (torch.as_tensor(x),), kw,
                              max_plate_nesting=1, compile="jit")
    assert tp.method == "pyro"
    assert len(tp.fallbacks) == 2 and all("disagrees" in r for r in tp.fallbacks)
    params = tp.init(np.random.default_rng(5))
    ref, _ = _pyro_value_and_grad(_leaves_torch, x, kw, 1, params)
    assert float(tp(params)[0]) == pytest.approx(ref, rel=1e-12)
    # negative control: without the check the wrong graph is kept
    unchecked = traced_potential(_leaves_torch, (torch.as_tensor(x),), kw,
                                 max_plate_nesting=1, verify=0)
    assert unchecked.method == "traced"
    assert abs(float(unchecked(params)[0]) - ref) > 1e-3


def test_traced_potential_falls_back_when_tracing_fails():
    x, kw = _data(14, N=25, M=3)
    kw = {"n_labels": kw["n_labels"], "n_clusters": 3}
    with pytest.warns(RuntimeWarning, match="tracing failed"):
        tp = traced_potential(_branching, (torch.as_tensor(x),), kw, max_plate_nesting=1)
    assert tp.method == "pyro" and len(tp.fallbacks) == 1
    params = tp.init(np.random.default_rng(6))
    ref, _ = _pyro_value_and_grad(_branching, x, kw, 1, params)
    assert float(tp(params)[0]) == pytest.approx(ref, rel=1e-12)



def test_traced_potential_progress_names_each_step(capsys):
    x, kw = _data(15, N=20, M=3)
    traced_potential(spec.model, (torch.as_tensor(x),), kw, max_plate_nesting=1,
                     compile="fx", progress=True)
    err = capsys.readouterr().err
    for step in ("tracing the potential", "recording", "batching repeated operations",
                 "compiling (fx) and checking", "packing"):
        assert step in err
    traced_potential(spec.model, (torch.as_tensor(x),), kw, max_plate_nesting=1,
                     compile="fx")
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("model", [pytest.param(_branching, marks=pytest.mark.slow),
                                   _leaves_torch])
def test_nuts_runs_on_pyros_potential_when_the_trace_falls_back(model):
    """A model that cannot be traced (or whose graph fails the check) still samples: NUTS
    calls the fallback inside an autograd Function, where grad mode is off."""
    from consensuskit.inference.compiled_mcmc import fit_nuts_compiled

    x, kw = _data(17, N=20, M=3)
    kw = {"n_labels": kw["n_labels"], "n_clusters": 3}
    with pytest.warns(RuntimeWarning, match="tracing failed|disagrees"):
        samples, info = fit_nuts_compiled(model, torch.as_tensor(x), model_kwargs=kw,
                                          num_samples=15, warmup_steps=15, num_chains=1,
                                          max_plate_nesting=1, method="traced",
                                          compile="jit", init="uniform", seed=0)
    assert info["potential"] == "pyro"
    assert samples["pi"].shape == (1, 15, 3) and torch.isfinite(samples["pi"]).all()
    assert not torch.allclose(samples["pi"][0, 0], samples["pi"][0, -1])

# ------------------------------------------------- NUTS on the packed vector
def _nuts_one_site_per_model_site(potential, chain_seed, n):
    """The reference: Pyro's NUTS on the potential with one NUTS site per model site and
    Pyro's own transforms (how fit_nuts_compiled ran before it packed the sites)."""
    from pyro.infer import MCMC

    from consensuskit.inference.pyro_mcmc import RecordingNUTS, collect_chains

    pyro.set_rng_seed(chain_seed)
    init = potential.init(np.random.default_rng(chain_seed))
    kernel = RecordingNUTS(potential_fn=potential.potential_fn, max_tree_depth=8)
    mcmc = MCMC(kernel, num_samples=n, warmup_steps=n, num_chains=1, initial_params=init,
                transforms=potential.transforms, disable_progbar=True)
    mcmc.run()
    return collect_chains([(mcmc, kernel)])[0]


@pytest.mark.parametrize("method", ["hand-written", "traced"])
def test_nuts_on_the_packed_vector_gives_the_per_site_draws(method):
    """fit_nuts_compiled hands NUTS one packed vector (Pyro's per-site Python loops cost
    about 30 us a site per leapfrog step); its draws, mapped back to the sites, are the
    draws of Pyro's NUTS on the same potential with one NUTS site per model site, number
    for number.  M = 12 columns: the traced potential's names are sorted ("theta_10" before
    "theta_2"), so a packing that mixed up the order or the transforms would differ."""
    from consensuskit.inference.compiled_mcmc import fit_nuts_compiled

    x, kw = _data(4, N=40, M=12)
    lab = torch.as_tensor(x)
    potential = build_potential(spec.model, lab, kw, max_plate_nesting=1, method=method)
    # both take the packed vector directly (the traced one: split and concatenation recorded
    # into its graph), so the draws below come from that function, not from unpacking
    assert potential.packed_value_and_grad is not None and not potential.fallbacks
    n, seed = 12, 5
    chain_seed = int(np.random.default_rng(seed).integers(2**31 - 1))
    packed, info = fit_nuts_compiled(spec.model, lab, model_kwargs=kw, num_samples=n,
                                     warmup_steps=n, num_chains=1, seed=seed,
                                     potential=potential)
    reference = _nuts_one_site_per_model_site(potential, chain_seed, n)
    assert set(packed) == set(reference) == set(potential.names)
    for k in potential.names:
        assert packed[k].shape == reference[k].shape
        torch.testing.assert_close(packed[k], reference[k], rtol=1e-12, atol=1e-12)
    assert info["sample_stats"]["n_steps"].shape == (1, n)
    with pytest.raises(ValueError, match="init must be"):
        fit_nuts_compiled(spec.model, lab, model_kwargs=kw, num_samples=n, warmup_steps=n,
                          num_chains=1, potential=potential, init="prior")


def test_pack_unpack_constrain_round_trip():
    """M = 12: the packed order (sorted names) is not the hand-written layout's order."""
    x, kw = _data(5, N=30, M=12)
    potential = build_potential(spec.model, torch.as_tensor(x), kw, method="hand-written")
    assert potential.packed_names != potential.names
    params = potential.init(np.random.default_rng(0))
    u = potential.pack(params)
    assert u.shape == (sum(int(torch.Size(s).numel()) for s in potential.unconstrained_shapes),)
    back = potential.unpack(torch.stack([u, u]))
    for k in potential.names:
        torch.testing.assert_close(back[k][1], params[k], rtol=0, atol=0)
    constrained = potential.constrain(u)
    for k in potential.names:
        torch.testing.assert_close(constrained[k], potential.transforms[k].inv(params[k]))
    with pytest.raises(ValueError, match="packed vector has"):
        potential.unpack(u[:-1])
    value, grads = potential(params)
    pv, pg = potential.packed_value_and_grad(u)
    torch.testing.assert_close(pv, value)
    torch.testing.assert_close(pg, torch.cat([grads[k].reshape(-1)
                                              for k in potential.packed_names]))


def _mixed_precision(labels=None, *, n_labels, n_clusters, **kw):
    """MM with a float32 site (a learned label concentration) beside float64 ones."""
    import pyro.distributions as dist

    a = pyro.sample("label_concentration", dist.Gamma(torch.tensor(2.0), torch.tensor(2.0)))
    return spec.model(labels, n_labels=n_labels, n_clusters=n_clusters,
                      label_prior=a.double(), **kw)


def test_unpack_returns_each_site_in_its_own_dtype():
    x, kw = _data(16, N=20, M=3)
    kw = {"n_labels": kw["n_labels"], "n_clusters": 3}
    tp = traced_potential(_mixed_precision, (torch.as_tensor(x),), kw, max_plate_nesting=1)
    params = tp.init(np.random.default_rng(1))
    assert params["label_concentration"].dtype == torch.float32
    assert tp.packed_dtype == torch.float64
    assert tp.packed_size == sum(int(v.numel()) for v in params.values())
    u = tp.pack(params)
    assert u.dtype == tp.packed_dtype and u.shape == (tp.packed_size,)
    back = tp.unpack(u)
    for k in tp.names:
        assert back[k].dtype == params[k].dtype
        torch.testing.assert_close(back[k], params[k], rtol=0, atol=0)
    # without the packed graph, NUTS unpacks and calls the per-site graph: same value
    value, _ = tp(params)
    tp.packed_value_and_grad = None
    unpacked_value, _ = tp._vector_value_and_grad(u)
    assert float(unpacked_value) == pytest.approx(float(value), rel=1e-12)
    # a hand-written potential records no dtypes: read from one draw of its init
    hp = build_potential(spec.model, torch.as_tensor(x), dict(kw, label_prior=1.0),
                         method="hand-written")
    assert hp.dtypes is None and hp.packed_dtype == torch.float64
    assert hp.packed_size == hp.pack(hp.init(np.random.default_rng(0))).shape[0]
