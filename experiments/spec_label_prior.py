"""Where the built-in specs' held-out gap to their fast paths comes from: the prior on the
label distributions, not the inference (issue 25, must-show 4).

``spec_defaults_vs_fast_paths.py`` found the MM and BCE specs, fitted through
``ck.PyroConsensus`` with its defaults, 4-6% behind EM/CAVI in held-out perplexity on
k-means ensembles, and NUTS on the same spec just as far behind: the fit reaches the
spec's posterior, and the spec's posterior predictive is worse than the fast path's plug-in.
The spec puts ``theta_jk ~ Dirichlet(1)`` on every label distribution; EM's estimate
under ``label_prior=1.01`` is about the maximum likelihood.  On k-means ensembles almost
every component gives one label per column, and one pseudo-count per label costs about
``(k_j - 1) / n_k`` nats per label.

This script tests that reading with two variants a user would write on ``mm.model``:

* ``learned``: one concentration ``a ~ Gamma(1, 1)`` shared by every ``theta_jk``
  (``label_prior=a``, the spec's tensor argument);
* ``per-column``: ``a_j ~ Gamma(1, 1)`` per base clustering, ``theta=`` handed over.

Each is fitted with PyroConsensus's defaults (SVI) and, with ``--nuts``, by NUTS (its
exact posterior; slow: the hierarchical prior's funnel needs deep trees).  Printed per fit:
held-out perplexity, the paired difference of held-out log-likelihood against the fast
path (summed over rows) with its SE over rows and the Monte Carlo SE, the posterior mean
of the concentration(s), CPU seconds.  Data as in ``spec_defaults_vs_fast_paths.py``
(k-means, M = 10, k = 3, 30% of rows held out, seed 0).

Run: ``OMP_NUM_THREADS=1 PYTHONPATH=. python experiments/spec_label_prior.py
[--datasets wine iris ecoli] [--fits flat learned per-column] [--nuts learned]
[--num-particles 8] [--min-steps 2000]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import numpy as np
import pyro
import pyro.distributions as dist
import torch

import consensuskit as ck
from consensuskit.models.mm import spec as mm

sys.path.insert(0, os.path.dirname(__file__))
from spec_defaults_vs_fast_paths import DATASETS, ensemble, paired  # noqa: E402

HYPER = (1.0, 1.0)  # Gamma(shape, rate) on the label concentration


def _gamma():
    shape, rate = (torch.tensor(v, dtype=torch.float64) for v in HYPER)
    return dist.Gamma(shape, rate)


def mm_learned(labels=None, *, n_labels, n_clusters, n_rows=None, **kw):
    """MM with one learned concentration: ``theta_jk ~ Dirichlet(a)``, ``a ~ Gamma(1, 1)``."""
    a = pyro.sample("label_concentration", _gamma())
    return mm.model(labels, n_labels=n_labels, n_clusters=n_clusters, n_rows=n_rows,
                    label_prior=a, **kw)


def mm_per_column(labels=None, *, n_labels, n_clusters, n_rows=None, **kw):
    """MM with a concentration per base clustering: ``theta_jk ~ Dirichlet(a_j)``."""
    with pyro.plate("columns", len(n_labels), dim=-1):
        a = pyro.sample("label_concentration", _gamma())
    thetas = []
    with pyro.plate("components", n_clusters, dim=-1):
        for j, kj in enumerate(n_labels):
            thetas.append(pyro.sample(f"theta_{j}", dist.Dirichlet(a[..., j, None].expand(
                *a.shape[:-1], int(kj)))))
    return mm.model(labels, n_labels=n_labels, n_clusters=n_clusters, n_rows=n_rows,
                    theta=thetas, **kw)


VARIANTS = {"flat": mm.model, "learned": mm_learned, "per-column": mm_per_column}


def concentration(est):
    """Posterior mean of the concentration site(s), or None when the fit keeps no draws."""
    draws = getattr(est, "posterior_samples_", None) or {}
    if "label_concentration" not in draws:
        return None
    v = np.asarray(draws["label_concentration"], dtype=float)
    return np.round(v.reshape(-1, *v.shape[-1:]).mean(0) if v.ndim > 2 else v.mean(), 3)


def main(datasets_=DATASETS, fits=("learned", "per-column"), nuts=(), nuts_samples=200,
         seed=0, num_particles=1, min_steps=None):
    for name in datasets_:
        X, X_test = ensemble(name, seed=seed)
        t0 = time.process_time()
        fast = ck.MM(3, random_state=seed).fit(X)
        fast_cpu = time.process_time() - t0
        ll_fast = fast.score_samples(X_test, unknown="missing")
        n_obs = int((fast.encode(X_test, unknown="missing").codes >= 0).sum())
        print(f"{name:6s} MM(EM) perplexity {np.exp(-ll_fast.sum() / n_obs):.4f} "
              f"cpu {fast_cpu:.1f} s", flush=True)
        svi = dict(num_particles=num_particles)
        if min_steps is not None:  # a longer run than the default plateau stop allows
            svi.update(min_steps=min_steps, num_steps=2 * min_steps, svi_tol=1e-5)
        runs = [(v, "svi", svi) for v in fits] + [
            (v, "nuts", dict(inference="nuts", num_samples=nuts_samples,
                             warmup_steps=nuts_samples)) for v in nuts]
        for variant, how, opts in runs:
            t0 = time.process_time()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                est = ck.PyroConsensus(VARIANTS[variant], n_clusters=3, random_state=seed,
                                       **opts).fit(X)
            cpu = time.process_time() - t0
            ll, se = est.score_samples_se(X_test, unknown="missing")
            diff, se_rows = paired(ll, ll_fast)
            mcse = float(np.sqrt(np.sum(se**2)))
            z = diff / np.hypot(se_rows, mcse)
            print(f"{name:6s} {variant:10s} {how:4s} perplexity {np.exp(-ll.sum() / n_obs):.4f}"
                  f"  vs EM {diff:+7.2f} ± {se_rows:.2f} (rows) ± {mcse:.2f} (MC)  z {z:+6.1f}"
                  f"  cpu {cpu:6.1f} s  concentration {concentration(est)}", flush=True)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", nargs="*", default=list(DATASETS))
    p.add_argument("--fits", nargs="*", default=["learned", "per-column"],
                   choices=sorted(VARIANTS), help="variants fitted with SVI (the defaults)")
    p.add_argument("--nuts", nargs="*", default=[], choices=sorted(VARIANTS),
                   help="variants also fitted by NUTS (slow)")
    p.add_argument("--nuts-samples", type=int, default=200)
    p.add_argument("--num-particles", type=int, default=1, help="SVI's ELBO particles")
    p.add_argument("--min-steps", type=int, default=None,
                   help="SVI: at least this many steps (num_steps twice it, svi_tol 1e-5)")
    a = p.parse_args()
    main(a.datasets, a.fits, a.nuts, a.nuts_samples, num_particles=a.num_particles,
         min_steps=a.min_steps)
