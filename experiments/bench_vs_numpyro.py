"""NUTS and SVI on the MM spec beside NumPyro: CPU per effective sample, one potential +
gradient, SVI steps per second.

Same model (the MM spec with ``z`` summed out: ``pi ~ Dir(b)``, ``theta_jk ~ Dir(a)``,
``x_ij ~ Cat(theta_j[z_i])``), same data (a planted ensemble drawn here, written to a
temporary ``.npz`` both sides read), same settings (chains one after another, ``warmup`` +
``samples`` draws each, target acceptance 0.8, max tree depth 8, diagonal mass; SVI: MAP
point masses, Adam lr 0.05, full batch).  One process per side: ours runs in this process,
NumPyro in the peer venv (``experiments/peers/setup_numpyro.sh``) as a subprocess running
this same file with ``--peer-side``.  NumPyro has no enumeration without funsor, so its model
sums ``z`` out with ``logsumexp`` in a ``numpyro.factor`` -- the collapsed form its users write;
ours uses the spec's hand-written collapsed potential (``consensuskit.models.mm.potential``,
equal to Pyro's potential of the spec, tests/test_compiled_potential.py).

CPU per effective sample = the side's CPU seconds for the whole NUTS run (model build, JIT
compile and every chain included: "first run") / the smallest bulk ESS over all scalars of
``pi`` and ``theta`` after relabelling every draw to the first chain's mean (best of the K!
permutations, computed here for both sides with the same code, ArviZ's ESS).

One thread on both sides (OMP/MKL/NUMBA threads 1, XLA single-threaded).  Medians over
``--repeats`` for the per-call timings.

Usage::

    python experiments/bench_vs_numpyro.py [--n 300 --m 10 --k 3 --warmup 200 --samples 200]
        [--peer-python /work/peers/numpyro-venv/bin/python] [--pyro] [--traced]

``--pyro`` adds Pyro's own NUTS on the spec (the old path, minutes); ``--traced`` adds NUTS
on the generic traced potential on TorchScript (the path PyroConsensus takes for a user's
variant); the one-gradient timing of the traced potential uses the same executor.

``--variant [--compile fx|jit|inductor]``: notebook 03's BCE-with-reliability variant
(``user_variants.bce_reliability``, c_beta=0.2, on its wine ensemble, training rows),
2 x (300 + 300): ours on the traced potential (no hand-written one exists for a user's
variant; ``--compile`` picks its executor, default TorchScript), started as
``PyroConsensus(inference="nuts")`` starts a variant's chains (``init="uniform"``, Pyro's
and NumPyro's default), NumPyro on the same model
with each ``z_ij`` summed out by hand (``theta_i`` sampled on both sides).  ESS: minimum over
``alpha`` and ``beta`` (relabelled) and ``rho`` (label-free).  Also: leapfrog steps on both
sides and our CPU per step (where the time goes), Pyro's own JIT potential+gradient, and
MAP-SVI steps/s (ours on the traced MAP loss, NumPyro AutoDelta; both Adam 0.05).
``--variant --svi-only``: the same without NUTS on either side (the SVI ratio in minutes).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1",
              "OPENBLAS_NUM_THREADS": "1",
              "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"}


def planted(n, m, k, seed=0, agree=0.7, missing=0.1):
    """(n, m) codes: each column copies the planted z with prob ``agree``, else uniform."""
    rng = np.random.default_rng(seed)
    z = rng.integers(k, size=n)
    x = np.where(rng.random((n, m)) < agree, z[:, None], rng.integers(k, size=(n, m)))
    x[rng.random((n, m)) < missing] = -1
    return x.astype(np.int64)


def median_cpu(fn, repeats, inner):
    fn()
    out = []
    for _ in range(repeats):
        c = time.process_time()
        for _ in range(inner):
            fn()
        out.append((time.process_time() - c) / inner)
    return float(np.median(out))


# ------------------------------------------------------------------ peer side (NumPyro)
def peer_side(data_path, out_path):
    import jax
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from jax.scipy.special import logsumexp
    from numpyro.infer import MCMC, NUTS
    from numpyro.infer.util import initialize_model

    jax.config.update("jax_enable_x64", True)
    d = np.load(data_path)
    x, K, a, b = d["x"], int(d["k"]), float(d["a"]), float(d["b"])
    warmup, samples, chains = int(d["warmup"]), int(d["samples"]), int(d["chains"])
    repeats, seed = int(d["repeats"]), int(d["seed"])
    N, M = x.shape
    obs = jnp.asarray(x >= 0)
    xc = jnp.asarray(np.where(x >= 0, x, 0))
    kk = int(x.max()) + 1 if d["n_labels"].size == 0 else int(d["n_labels"].max())
    assert (d["n_labels"] == kk).all(), "peer side written for equal k_j"

    def model(xc, obs):
        pi = numpyro.sample("pi", dist.Dirichlet(jnp.full(K, b)))
        with numpyro.plate("cols", M, dim=-2), numpyro.plate("comp", K, dim=-1):
            theta = numpyro.sample("theta", dist.Dirichlet(jnp.full(kk, a)))  # (M, K, kk)
        lt = jnp.log(theta)  # (M, K, kk)
        # (N, M, K): log theta_j[k, x_ij], 0 where missing
        g = jnp.take_along_axis(lt[None], xc[:, :, None, None], axis=-1)[..., 0]
        g = jnp.where(obs[:, :, None], g, 0.0)
        ll = logsumexp(jnp.log(pi) + g.sum(1), axis=-1)
        numpyro.factor("loglik", ll.sum())

    out = {}
    c0 = time.process_time()
    draws_pi, draws_th, div = [], [], []
    rng = np.random.default_rng(seed)
    for _ in range(chains):
        mcmc = MCMC(NUTS(model, target_accept_prob=0.8, max_tree_depth=8), num_warmup=warmup,
                    num_samples=samples, num_chains=1, progress_bar=False)
        mcmc.run(jax.random.PRNGKey(int(rng.integers(2**31 - 1))), xc, obs,
                 extra_fields=("diverging",))
        s = mcmc.get_samples()
        draws_pi.append(np.asarray(s["pi"]))
        draws_th.append(np.asarray(s["theta"]).transpose(0, 2, 1, 3))  # (S, K, M, kk)
        div.append(int(np.asarray(mcmc.get_extra_fields()["diverging"]).sum()))
    out["nuts_cpu"] = time.process_time() - c0
    np.savez(out_path + ".draws.npz", pi=np.stack(draws_pi), theta=np.stack(draws_th))
    out["divergences"] = div

    # one potential + gradient
    info = initialize_model(jax.random.PRNGKey(0), model, model_args=(xc, obs))
    pot = info.potential_fn
    params = info.param_info.z
    vg = jax.jit(jax.value_and_grad(pot))
    c = time.process_time()
    jax.block_until_ready(vg(params))
    out["grad_compile_cpu"] = time.process_time() - c
    out["grad_cpu"] = median_cpu(lambda: jax.block_until_ready(vg(params)), repeats, 200)

    svi_steps(out, model, (xc, obs), int(d["svi_steps"]), repeats)
    out["versions"] = {"numpyro": numpyro.__version__, "jax": jax.__version__}
    with open(out_path, "w") as f:
        json.dump(out, f)


def svi_steps(out, model, args, steps, repeats):
    """NumPyro's MAP by SVI (AutoDelta, Adam 0.05, full batch): steps/s of ``svi.run``
    (first run, JIT included, and the median of ``repeats`` later runs) and of a loop of
    one jitted update per Python call."""
    import jax
    import numpyro
    from numpyro.infer import SVI, Trace_ELBO
    from numpyro.infer.autoguide import AutoDelta

    svi = SVI(model, AutoDelta(model), numpyro.optim.Adam(0.05), Trace_ELBO())
    c = time.process_time()
    res = svi.run(jax.random.PRNGKey(1), steps, *args, progress_bar=False)
    jax.block_until_ready(res.losses)
    first = time.process_time() - c
    runs = []
    for r in range(repeats):
        c = time.process_time()
        res = svi.run(jax.random.PRNGKey(2 + r), steps, *args, progress_bar=False)
        jax.block_until_ready(res.losses)
        runs.append(time.process_time() - c)
    out["svi_steps_per_s_first"] = steps / first
    out["svi_steps_per_s"] = steps / float(np.median(runs))
    out["svi_final_loss"] = float(np.asarray(res.losses)[-1])
    state = svi.init(jax.random.PRNGKey(3), *args)
    upd = jax.jit(svi.update)
    state, _ = upd(state, *args)
    c = time.process_time()
    for _ in range(steps):
        state, loss = upd(state, *args)
    jax.block_until_ready(loss)
    out["svi_steps_per_s_stepwise"] = steps / (time.process_time() - c)


def peer_variant(data_path, out_path):
    """NumPyro side of the BCE-with-reliability variant (notebook 03), z summed out.

    float32 on both sides: the variant is written with torch's default float32 tensors.
    """
    import jax
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from numpyro.infer import MCMC, NUTS
    from numpyro.infer.util import initialize_model

    d = np.load(data_path)
    x, K = d["x"], int(d["k"])
    warmup, samples, chains = int(d["warmup"]), int(d["samples"]), int(d["chains"])
    repeats, seed = int(d["repeats"]), int(d["seed"])
    N, M = x.shape
    kk = int(d["n_labels"].max())
    assert (d["n_labels"] == kk).all(), "peer side written for equal k_j"
    obs = jnp.asarray(x >= 0)
    xc = jnp.asarray(np.where(x >= 0, x, 0))

    def model(xc, obs):
        alpha = numpyro.sample("alpha", dist.Gamma(jnp.full(K, 2.0), 2.0).to_event(1))
        with numpyro.plate("cols", M):
            rho = numpyro.sample("rho", dist.Beta(2.0, 1.0))
            bg = numpyro.sample("background", dist.Dirichlet(jnp.ones(kk)))  # (M, kk)
        with numpyro.plate("cols2", M, dim=-2), numpyro.plate("comp", K, dim=-1):
            beta = numpyro.sample("beta", dist.Dirichlet(jnp.full(kk, 0.2)))  # (M, K, kk)
        mix = rho[:, None, None] * beta + (1 - rho)[:, None, None] * bg[:, None, :]
        with numpyro.plate("rows", N):
            theta = numpyro.sample("theta", dist.Dirichlet(alpha))  # (N, K)
        # p(x_ij | theta_i) = sum_k theta_ik mix_jk(x_ij)
        px = jnp.take_along_axis(mix[None], xc[:, :, None, None], axis=-1)[..., 0]  # N,M,K
        lik = jnp.log((theta[:, None, :] * px).sum(-1))
        numpyro.factor("loglik", jnp.where(obs, lik, 0.0).sum())

    out = {}
    c0 = time.process_time()
    draws_a, draws_b, draws_r, div, steps = [], [], [], [], []
    rng = np.random.default_rng(seed)
    for _ in range(chains):  # none with --svi-only
        mcmc = MCMC(NUTS(model, target_accept_prob=0.8, max_tree_depth=8), num_warmup=warmup,
                    num_samples=samples, num_chains=1, progress_bar=False)
        mcmc.run(jax.random.PRNGKey(int(rng.integers(2**31 - 1))), xc, obs,
                 extra_fields=("diverging", "num_steps"))
        s = mcmc.get_samples()
        steps.append(int(np.asarray(mcmc.get_extra_fields()["num_steps"]).sum()))
        draws_a.append(np.asarray(s["alpha"]))
        draws_b.append(np.asarray(s["beta"]).transpose(0, 2, 1, 3))  # (S, K, M, kk)
        draws_r.append(np.asarray(s["rho"]))
        div.append(int(np.asarray(mcmc.get_extra_fields()["diverging"]).sum()))
    out["nuts_cpu"] = time.process_time() - c0
    if chains:
        np.savez(out_path + ".draws.npz", pi=np.stack(draws_a), theta=np.stack(draws_b),
                 extra=np.stack(draws_r))
    out["divergences"] = div
    out["sampling_steps"] = steps  # leapfrog steps per chain, sampling phase
    info = initialize_model(jax.random.PRNGKey(0), model, model_args=(xc, obs))
    vg = jax.jit(jax.value_and_grad(info.potential_fn))
    params = info.param_info.z
    c = time.process_time()
    jax.block_until_ready(vg(params))
    out["grad_compile_cpu"] = time.process_time() - c
    out["grad_cpu"] = median_cpu(lambda: jax.block_until_ready(vg(params)), repeats, 200)
    svi_steps(out, model, (xc, obs), int(d["svi_steps"]), repeats)
    out["versions"] = {"numpyro": numpyro.__version__, "jax": jax.__version__}
    with open(out_path, "w") as f:
        json.dump(out, f)


def bce_reliability(labels=None, *, n_labels, n_clusters, **kw):
    """Notebook 03's variant: :func:`user_variants.bce_reliability` with ``c_beta=0.2``."""
    from user_variants import bce_reliability as variant

    return variant(labels, n_labels=n_labels, n_clusters=n_clusters, c_beta=0.2, **kw)


def wine_ensemble():
    """Notebook 03's ensemble: 6 clean + 6 corrupted k-means clusterings of wine, the
    training three quarters of the rows, as codes."""
    from consensuskit import datasets, generate
    from consensuskit.data.ensemble import Ensemble

    K, noise = 3, [0.2, 0.4, 0.6, 0.8, 1.0, 1.0]
    features, truth = datasets.load("wine")
    F = (features - features.mean(0)) / features.std(0)
    rs = np.random.RandomState(0)
    clean = generate.random_feature_partitions(F, 6, n_clusters=K, random_state=0)
    corrupted = generate.kmeans_partitions(F, len(noise), n_clusters=K, random_state=1)
    for j, eta in enumerate(noise):
        flip = rs.rand(len(truth)) < eta
        corrupted[flip, j] = rs.randint(0, K, flip.sum())
    X = np.column_stack([clean, corrupted])
    perm = rs.permutation(len(truth))
    train = X[np.sort(perm[len(truth) // 4:])]
    ens = Ensemble.from_labels(train)
    return ens.codes.astype(np.int64), [int(k) for k in ens.n_labels]


def our_variant(x, n_labels, args):
    """NUTS, one potential + gradient and MAP-SVI on the traced potential of the variant.

    The potential is built once (``args.compile``: its executor) and used by NUTS; its build
    CPU is counted in NUTS' CPU (first run).  SVI builds the MAP loss's graph on its first
    step (counted in its first run, reported apart from the median of later runs).
    """
    import torch
    from pyro.infer.mcmc.util import initialize_model
    from pyro.ops.integrator import potential_grad

    from consensuskit.inference.compiled_mcmc import fit_nuts_compiled
    from consensuskit.inference.compiled_potential import traced_potential

    torch.set_num_threads(1)
    lab = torch.as_tensor(x)
    kw = dict(n_labels=n_labels, n_clusters=args.k)
    c = time.process_time()
    tp = traced_potential(bce_reliability, (lab,), kw, max_plate_nesting=2,
                          compile=args.compile)
    if not args.chains:  # --svi-only: the potential's build, then SVI
        out = {"build": tp.build, "method": tp.method, "fallbacks": tp.fallbacks}
        return _our_variant_svi(out, tp, lab, kw, args)
    s, info = fit_nuts_compiled(bce_reliability, lab, model_kwargs=kw,
                                num_samples=args.samples, warmup_steps=args.warmup,
                                num_chains=args.chains, seed=args.seed, potential=tp,
                                init="uniform")
    cpu = time.process_time() - c
    M = x.shape[1]
    beta = torch.stack([s[f"beta_{j}"] for j in range(M)], dim=3).numpy()  # C,S,K,M,k
    mn, md = relabelled_min_ess(s["alpha"].numpy(), beta, s["rho"].numpy())
    p = tp.init(np.random.default_rng(0))
    parts = [p[k] for k in tp.names]
    grad = median_cpu(lambda: tp.value_and_grad(*parts), args.repeats, 50)
    out = {"cpu": cpu, "ess_min": mn, "ess_median": md, "divergences": info["divergences"],
           "build": tp.build, "grad": grad, "method": tp.method, "fallbacks": tp.fallbacks,
           "sampling_steps": info["sample_stats"]["n_steps"].sum(1).tolist(),
           "all_steps": int(info["sample_stats"]["n_steps"].sum()
                            + info["warmup_stats"]["n_steps"].sum())}
    _, pot, _, _ = initialize_model(bce_reliability, (lab,), kw, max_plate_nesting=2,
                                    jit_compile=True, skip_jit_warnings=True)
    q = {k: v.clone() for k, v in p.items()}
    out["grad pyro (jit)"] = median_cpu(lambda: potential_grad(pot, q), args.repeats, 10)
    return _our_variant_svi(out, tp, lab, kw, args)


def _our_variant_svi(out, tp, lab, kw, args):
    """MAP-SVI steps/s on the traced potential's MAP loss (first run, with its graph's
    build, apart from the median of the later runs) and one MAP loss + gradient."""
    from consensuskit.inference.compiled_svi import fit_map_svi_compiled

    steps = args.svi_steps
    runs = []
    for r in range(args.repeats + 1):
        fit = fit_map_svi_compiled(bce_reliability, lab, model_kwargs=kw, num_steps=steps,
                                   learning_rate=0.05, seed=r, potential=tp)
        runs.append(fit.seconds)
    out["svi_first"] = steps / runs[0]
    out["svi"] = steps / float(np.median(runs[1:]))
    out["svi_final_loss"] = float(fit.losses[-1])
    p = tp.init(np.random.default_rng(0))
    parts = [p[k] for k in tp.names]
    out["map_grad"] = median_cpu(lambda: tp.map_value_and_grad(*parts), args.repeats, 50)
    return out


# ------------------------------------------------------------------ shared: ESS
def relabelled_min_ess(pi, theta, extra=None):
    """Smallest bulk ESS over the scalars of pi (C, S, K) and theta (C, S, K, M, k).

    Every draw's components are permuted to match the first chain's mean theta best.
    ``extra`` (C, S, ...): label-free sites (no relabelling), included in the minimum.
    """
    import arviz as az

    C, S, K = pi.shape
    flat = theta.reshape(C, S, K, -1)
    ref = flat[0].mean(0)  # (K, M*k)
    perms = np.array(list(itertools.permutations(range(K))))
    cost = np.stack([((flat[:, :, p, :] - ref) ** 2).sum((-1, -2)) for p in perms])
    best = perms[cost.argmin(0)]  # (C, S, K)
    pi_r = np.take_along_axis(pi, best, axis=2)
    th_r = np.take_along_axis(flat, best[..., None], axis=2)
    sites = {"pi": pi_r, "theta": th_r}
    if extra is not None:
        sites["extra"] = np.asarray(extra)
    ds = az.convert_to_dataset(sites)
    ess = az.ess(ds, method="bulk")
    allv = np.concatenate([np.ravel(ess[v].values) for v in ess.data_vars])
    return float(np.nanmin(allv)), float(np.nanmedian(allv))


# ------------------------------------------------------------------ our side
def our_side(x, args, kw):
    import pyro
    import torch

    from consensuskit.inference.compiled_mcmc import fit_nuts_compiled
    from consensuskit.inference.compiled_potential import build_potential, traced_potential
    from consensuskit.inference.compiled_svi import fit_map_svi_compiled
    from consensuskit.models.mm import spec

    torch.set_num_threads(1)
    lab = torch.as_tensor(x)
    res = {}

    def nuts(method, compile=False, init="potential"):
        c = time.process_time()
        s, info = fit_nuts_compiled(spec.model, lab, model_kwargs=kw, num_samples=args.samples,
                                    warmup_steps=args.warmup, num_chains=args.chains,
                                    seed=args.seed, max_plate_nesting=1, method=method,
                                    compile=compile, init=init)
        cpu = time.process_time() - c
        M = x.shape[1]
        th = torch.stack([s[f"theta_{j}"] for j in range(M)], dim=3).numpy()  # C,S,K,M,k
        mn, md = relabelled_min_ess(s["pi"].numpy(), th)
        return {"cpu": cpu, "ess_min": mn, "ess_median": md, "divergences": info["divergences"]}

    res["nuts hand-written"] = nuts("hand-written")
    if args.traced:
        # as PyroConsensus runs a spec it traces: TorchScript, chains started uniform
        res["nuts traced"] = nuts("traced", compile="jit", init="uniform")
    if args.pyro:
        from consensuskit.inference.pyro_mcmc import fit_nuts

        c = time.process_time()
        s, info = fit_nuts(spec.model, lab, model_kwargs=kw, num_samples=args.samples,
                           warmup_steps=args.warmup, num_chains=args.chains, seed=args.seed,
                           max_plate_nesting=1, jit=True)
        cpu = time.process_time() - c
        th = torch.stack([s[f"theta_{j}"] for j in range(x.shape[1])], dim=3).numpy()
        mn, md = relabelled_min_ess(s["pi"].numpy(), th)
        res["nuts pyro (jit)"] = {"cpu": cpu, "ess_min": mn, "ess_median": md,
                                  "divergences": info["divergences"]}

    # one potential + gradient
    hp = build_potential(spec.model, lab, kw, max_plate_nesting=1, method="hand-written")
    p = hp.init(np.random.default_rng(0))
    parts = [p[k] for k in hp.names]
    res["grad hand-written"] = median_cpu(lambda: hp.value_and_grad(*parts), args.repeats, 200)
    c = time.process_time()
    tp = traced_potential(spec.model, (lab,), kw, max_plate_nesting=1, compile="jit")
    res["grad traced build"] = time.process_time() - c
    traced_parts = [p[k] for k in tp.names]  # sorted by name: not the hand-written order
    res["grad traced"] = median_cpu(lambda: tp.value_and_grad(*traced_parts), args.repeats,
                                    20)
    from pyro.infer.mcmc.util import initialize_model
    from pyro.ops.integrator import potential_grad

    _, pot, _, _ = initialize_model(spec.model, (lab,), kw, max_plate_nesting=1,
                                    jit_compile=True, skip_jit_warnings=True)
    q = {k: v.clone() for k, v in p.items()}
    res["grad pyro (jit)"] = median_cpu(lambda: potential_grad(pot, q), args.repeats, 20)

    # SVI, MAP, Adam 0.05, full batch
    steps = args.svi_steps
    runs = []
    for r in range(args.repeats):
        fit = fit_map_svi_compiled(spec.model, lab, model_kwargs=kw, num_steps=steps,
                                   learning_rate=0.05, seed=r, max_plate_nesting=1,
                                   method="hand-written")
        runs.append(fit.seconds)
    res["svi hand-written steps/s"] = steps / float(np.median(runs))
    res["svi hand-written final loss"] = float(fit.losses[-1])
    from consensuskit.inference.pyro_svi import fit_svi

    pyro.clear_param_store()
    n_pyro = max(50, steps // 20)
    c = time.process_time()
    fit_svi(spec.model, spec.map_guide, lab, model_kwargs=kw, num_steps=n_pyro,
            learning_rate=0.05, max_plate_nesting=1, jit=True, seed=0)
    res["svi pyro (jit) steps/s"] = n_pyro / (time.process_time() - c)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--m", type=int, default=10)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--chains", type=int, default=2)
    ap.add_argument("--svi-steps", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pyro", action="store_true")
    ap.add_argument("--traced", action="store_true")
    ap.add_argument("--variant", action="store_true",
                    help="notebook 03's BCE-with-reliability variant on its wine ensemble "
                         "(traced potential; defaults 2 x (300 + 300))")
    ap.add_argument("--svi-only", action="store_true",
                    help="--variant: MAP-SVI and the gradients only, no NUTS on either side")
    ap.add_argument("--compile", default="jit", choices=["fx", "jit", "inductor"],
                    help="executor of the traced potential (--variant): see "
                         "compiled_potential.traced_potential")
    ap.add_argument("--peer-python", default="/work/peers/numpyro-venv/bin/python")
    ap.add_argument("--peer-side", nargs=2, metavar=("DATA", "OUT"), help=argparse.SUPPRESS)
    ap.add_argument("--peer-variant", nargs=2, metavar=("DATA", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.peer_side:
        peer_side(*args.peer_side)
        return
    if args.peer_variant:
        peer_variant(*args.peer_variant)
        return
    if args.svi_only and not args.variant:
        raise SystemExit("--svi-only is an option of --variant")
    if args.variant:
        return main_variant(args)
    x = planted(args.n, args.m, args.k, seed=args.seed)
    kw = dict(n_labels=[args.k] * args.m, n_clusters=args.k, label_prior=1.0,
              weight_prior=1.0)
    env = dict(os.environ, **ONE_THREAD)
    peer = None
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "data.npz")
        out = os.path.join(tmp, "peer.json")
        np.savez(data, x=x, k=args.k, a=1.0, b=1.0, warmup=args.warmup, samples=args.samples,
                 chains=args.chains, repeats=args.repeats, seed=args.seed,
                 svi_steps=args.svi_steps, n_labels=np.array(kw["n_labels"]))
        if os.path.exists(args.peer_python):
            proc = subprocess.run([args.peer_python, __file__, "--peer-side", data, out],
                                  env=env, capture_output=True, text=True)
            if proc.returncode != 0:
                print(proc.stderr[-3000:], file=sys.stderr)
                raise SystemExit("NumPyro side failed")
            with open(out) as f:
                peer = json.load(f)
            d = np.load(out + ".draws.npz")
            peer["ess_min"], peer["ess_median"] = relabelled_min_ess(d["pi"], d["theta"])
        else:
            print(f"no NumPyro venv at {args.peer_python}: run experiments/peers/"
                  "setup_numpyro.sh; peer columns left empty")
    for k, v in ONE_THREAD.items():
        os.environ.setdefault(k, v)
    ours = our_side(x, args, kw)
    print(f"MM spec, N={args.n}, M={args.m}, K={args.k}, {args.chains} x ({args.warmup} + "
          f"{args.samples}); CPU seconds, one thread")
    if peer:
        print(f"NumPyro {peer['versions']}")
    print(f"{'what':44s} {'ours':>12s} {'NumPyro':>12s} {'ratio':>8s}")

    def row(name, us, them, fmt="{:.4g}"):
        r = "" if them is None or not them else f"{us / them:.3g}"
        print(f"{name:44s} {fmt.format(us):>12s} "
              f"{(fmt.format(them) if them is not None else '-'):>12s} {r:>8s}")

    pe = (peer["nuts_cpu"] / peer["ess_min"]) if peer else None
    for name, r in ours.items():
        if name.startswith("nuts"):
            row(f"{name}: CPU s per ESS (min)", r["cpu"] / r["ess_min"], pe)
            print(f"    ours: {r['cpu']:.1f} s CPU, min/median ESS {r['ess_min']:.0f}/"
                  f"{r['ess_median']:.0f}, divergences {r['divergences']}")
    if peer:
        print(f"    NumPyro: {peer['nuts_cpu']:.1f} s CPU, min/median ESS "
              f"{peer['ess_min']:.0f}/{peer['ess_median']:.0f}, divergences "
              f"{peer['divergences']}; its grad JIT compile {peer['grad_compile_cpu']:.2f} s")
    g = peer["grad_cpu"] * 1e6 if peer else None
    row("one potential+gradient, hand-written (us)", ours["grad hand-written"] * 1e6, g)
    row("one potential+gradient, traced (us)", ours["grad traced"] * 1e6, g)
    row("one potential+gradient, Pyro jit (us)", ours["grad pyro (jit)"] * 1e6, g)
    print(f"    traced potential built in {ours['grad traced build']:.1f} s CPU")
    s_peer = peer["svi_steps_per_s"] if peer else None
    row("SVI MAP steps/s, hand-written (ours/theirs)", ours["svi hand-written steps/s"], s_peer,
        "{:.0f}")
    row("SVI MAP steps/s, Pyro jit (ours/theirs)", ours["svi pyro (jit) steps/s"], s_peer,
        "{:.0f}")
    if peer:
        print(f"    NumPyro svi.run: {peer['svi_steps_per_s']:.0f} steps/s (first run, JIT "
              f"included: {peer['svi_steps_per_s_first']:.0f}); stepwise jitted update: "
              f"{peer['svi_steps_per_s_stepwise']:.0f} steps/s")


def run_peer(args, flag, x, n_labels):
    env = dict(os.environ, **ONE_THREAD)
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "data.npz")
        out = os.path.join(tmp, "peer.json")
        np.savez(data, x=x, k=args.k, a=1.0, b=1.0, warmup=args.warmup, samples=args.samples,
                 chains=args.chains, repeats=args.repeats, seed=args.seed,
                 svi_steps=args.svi_steps, n_labels=np.array(n_labels))
        if not os.path.exists(args.peer_python):
            print(f"no NumPyro venv at {args.peer_python}: run experiments/peers/"
                  "setup_numpyro.sh; peer columns left empty")
            return None
        proc = subprocess.run([args.peer_python, __file__, flag, data, out], env=env,
                              capture_output=True, text=True)
        if proc.returncode != 0:
            print(proc.stderr[-3000:], file=sys.stderr)
            raise SystemExit("NumPyro side failed")
        with open(out) as f:
            peer = json.load(f)
        if not args.chains:  # --svi-only
            return peer
        d = np.load(out + ".draws.npz")
        peer["ess_min"], peer["ess_median"] = relabelled_min_ess(
            d["pi"], d["theta"], d["extra"] if "extra" in d else None)
    return peer


def main_variant(args):
    for k, v in ONE_THREAD.items():
        os.environ.setdefault(k, v)
    if args.warmup == 200 and args.samples == 200:
        args.warmup = args.samples = 300  # the 2 x (300 + 300)
    x, n_labels = wine_ensemble()
    args.k = 3
    if args.svi_only:
        args.chains = 0
    peer = run_peer(args, "--peer-variant", x, n_labels)
    ours = our_variant(x, n_labels, args)
    if args.svi_only:
        print(f"BCE-with-reliability (notebook 03), wine ensemble N={x.shape[0]}, "
              f"M={x.shape[1]}, K=3; MAP-SVI only (Adam 0.05, full batch, {args.svi_steps} "
              f"steps, median of {args.repeats} runs after a first); CPU, one thread; ours: "
              f"{ours['method']} MAP loss")
        _print_variant_svi(ours, peer)
        peer_grad = f"{peer['grad_cpu'] * 1e6:.0f} us" if peer else "(no peer)"
        print(f"    one MAP loss + gradient: ours {ours['map_grad'] * 1e6:.0f} us; "
              f"one potential + gradient (NUTS'): NumPyro {peer_grad}")
        return
    print(f"BCE-with-reliability (notebook 03), wine ensemble N={x.shape[0]}, M={x.shape[1]}, "
          f"K=3, {args.chains} x ({args.warmup} + {args.samples}); CPU s, one thread; "
          f"ours: {ours['method']} potential")
    pe = peer["nuts_cpu"] / peer["ess_min"] if peer else float("nan")
    oe = ours["cpu"] / ours["ess_min"]
    print(f"CPU s per ESS (min over alpha, beta relabelled, rho): ours {oe:.4g}, NumPyro "
          f"{pe:.4g}, ratio {oe / pe:.3g}")
    print(f"    ours: {ours['cpu']:.1f} s CPU (build included), "
          f"min/median ESS {ours['ess_min']:.0f}/{ours['ess_median']:.0f}, divergences "
          f"{ours['divergences']}")
    if peer:
        print(f"    NumPyro: {peer['nuts_cpu']:.1f} s CPU, min/median ESS {peer['ess_min']:.0f}/"
              f"{peer['ess_median']:.0f}, divergences {peer['divergences']}")
        print(f"one potential+gradient: ours {ours['grad'] * 1e6:.0f} us, NumPyro "
              f"{peer['grad_cpu'] * 1e6:.0f} us, ratio {ours['grad'] / peer['grad_cpu']:.3g}"
              f"; Pyro's own JIT (jit_compile=True) {ours['grad pyro (jit)'] * 1e6:.0f} us")
        ours_steps, peer_steps = sum(ours["sampling_steps"]), sum(peer["sampling_steps"])
        print(f"leapfrog steps, sampling phase: ours {ours_steps}, NumPyro {peer_steps}; "
              f"ours all phases {ours['all_steps']}: {ours['cpu'] / ours['all_steps'] * 1e6:.0f}"
              f" us CPU per step, of which the potential+gradient {ours['grad'] * 1e6:.0f} us")
        _print_variant_svi(ours, peer)
    print(f"    potential build: {ours['build']}; fallbacks: {ours['fallbacks'] or 'none'}")


def _print_variant_svi(ours, peer):
    if peer:
        print(f"SVI MAP steps/s: ours {ours['svi']:.0f} (first run, MAP graph built: "
              f"{ours['svi_first']:.0f}), NumPyro svi.run {peer['svi_steps_per_s']:.0f} "
              f"(first run {peer['svi_steps_per_s_first']:.0f}, stepwise jitted update "
              f"{peer['svi_steps_per_s_stepwise']:.0f}); ratio "
              f"{ours['svi'] / peer['svi_steps_per_s']:.3g}"
              f" (first runs {ours['svi_first'] / peer['svi_steps_per_s_first']:.3g}); final loss "
              f"ours {ours['svi_final_loss']:.2f}, NumPyro {peer['svi_final_loss']:.2f}")


if __name__ == "__main__":
    main()
