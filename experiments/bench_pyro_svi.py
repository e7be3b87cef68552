"""SVI step time of a BCE variant: the old notebook's hand-written loop vs the hub.

Same data as ``notebooks/03_extending_a_model`` (wine, 12 base clusterings, 133 training
rows).  Times one SVI step (median of repeats, CPU and wall) for

* ``notebook (before)``: the reliability model and guide as the old notebook wrote them
  (``pyro.param`` alpha and rho, Dirichlet guides), ``TraceEnum_ELBO``;
* the same with ``JitTraceEnum_ELBO``;
* ``hub``: ``experiments/user_variants.bce_reliability`` with PyroConsensus's automatic
  guide, ``TraceEnum_ELBO`` and ``JitTraceEnum_ELBO``;
* BCE's empirical-Bayes spec (``bce_svi.empirical_bayes_model`` + ``guide_enumerated``).

    PYTHONPATH=. python experiments/bench_pyro_svi.py [--repeats 30]
"""

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pyro
import pyro.distributions as dist
import torch
from pyro import poutine
from pyro.distributions import constraints
from pyro.ops.indexing import Vindex

import consensuskit as ck
from consensuskit.inference.pyro_consensus import default_guide
from consensuskit.inference.pyro_svi import SVIEngine, make_elbo
from consensuskit.models.bce import spec as bce
from consensuskit.models.bce.svi import empirical_bayes_model

sys.path.insert(0, str(Path(__file__).parent))
import user_variants  # noqa: E402
from hub_variants import corrupted_wine  # noqa: E402

torch.set_num_threads(1)
torch.set_default_dtype(torch.float64)


def notebook_model(labels, *, n_labels, n_clusters, c_beta=0.2, c_back=1.0):
    """The old notebook's reliability model (codes transposed inside), k_j = K."""
    codes = labels.T
    M, N = codes.shape
    k = int(n_labels[0])
    alpha = pyro.param("alpha", lambda: torch.ones(n_clusters), constraint=constraints.positive)
    rho = pyro.param("rho", lambda: torch.full((M,), 0.5), constraint=constraints.unit_interval)
    with pyro.plate("clusterings_g", M, dim=-2), pyro.plate("clusters_g", n_clusters, dim=-1):
        beta = pyro.sample("beta", dist.Dirichlet(torch.full((k,), c_beta)))
    with pyro.plate("clusterings_b", M, dim=-1):
        back = pyro.sample("background", dist.Dirichlet(torch.full((k,), c_back)))
    mix = rho[:, None, None] * beta + (1 - rho)[:, None, None] * back[:, None, :]
    j_index = torch.arange(M)[:, None]
    with pyro.plate("rows", N, dim=-1):
        theta = pyro.sample("theta", dist.Dirichlet(alpha))
        with pyro.plate("clusterings", M, dim=-2):
            z = pyro.sample("z", dist.Categorical(theta), infer={"enumerate": "parallel"})
            probs = Vindex(mix)[j_index, z, :]
            with poutine.mask(mask=codes >= 0):
                pyro.sample("x", dist.Categorical(probs), obs=codes.clamp(min=0))


def notebook_guide(labels, *, n_labels, n_clusters, **kw):
    M, k = labels.shape[1], int(n_labels[0])
    lam = pyro.param("lambda", lambda: 1.0 + 5.0 * torch.rand(M, n_clusters, k),
                     constraint=constraints.positive)
    mu = pyro.param("mu", lambda: torch.full((M, k), 10.0), constraint=constraints.positive)
    with pyro.plate("clusterings_g", M, dim=-2), pyro.plate("clusters_g", n_clusters, dim=-1):
        pyro.sample("beta", dist.Dirichlet(lam))
    with pyro.plate("clusterings_b", M, dim=-1):
        pyro.sample("background", dist.Dirichlet(mu))
    bce.guide_enumerated(labels, n_labels=n_labels, n_clusters=n_clusters)


def time_steps(model, guide, labels, kw, jit, repeats, P=2):
    pyro.clear_param_store()
    pyro.set_rng_seed(0)
    elbo = make_elbo(model, (labels,), kw, max_plate_nesting=P, jit=jit)
    eng = SVIEngine(model, guide, elbo, learning_rate=0.02)
    for _ in range(5):  # warm-up (JIT compilation)
        eng.step(labels, **kw)
    cpu, wall = [], []
    for _ in range(repeats):
        c, w = time.process_time(), time.perf_counter()
        eng.step(labels, **kw)
        cpu.append(time.process_time() - c)
        wall.append(time.perf_counter() - w)
    return np.median(cpu) * 1e3, np.median(wall) * 1e3


def main(repeats):
    X_train, _ = corrupted_wine(0)
    ens = ck.Ensemble.from_labels(X_train)
    labels = torch.as_tensor(ens.codes)
    kw = dict(n_labels=[int(k) for k in ens.n_labels], n_clusters=3)
    hub_guide = default_guide(user_variants.bce_reliability)
    cases = [
        ("notebook variant (before), TraceEnum_ELBO", notebook_model, notebook_guide, False),
        ("notebook variant, JitTraceEnum_ELBO", notebook_model, notebook_guide, True),
        ("hub variant + AutoNormal, TraceEnum_ELBO", user_variants.bce_reliability,
         hub_guide, False),
        ("hub variant + AutoNormal, JitTraceEnum_ELBO", user_variants.bce_reliability,
         hub_guide, True),
        ("BCE EB spec + guide_enumerated, TraceEnum_ELBO", empirical_bayes_model,
         bce.guide_enumerated, False),
        ("BCE EB spec + guide_enumerated, JitTraceEnum_ELBO", empirical_bayes_model,
         bce.guide_enumerated, True),
    ]
    print(f"SVI step time, wine ensemble N={labels.shape[0]}, M={labels.shape[1]}, K=3; "
          f"median of {repeats} steps")
    base = None
    for name, model, guide, jit in cases:
        cpu, wall = time_steps(model, guide, labels, kw, jit, repeats)
        base = base or cpu
        print(f"  {name:<52} CPU {cpu:7.1f} ms  wall {wall:7.1f} ms  "
              f"(CPU ratio to the first {base / cpu:4.1f}x)")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=30)
    main(ap.parse_args().repeats)
