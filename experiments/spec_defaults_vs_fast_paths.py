"""The built-in MM and BCE specs fitted through ``ck.PyroConsensus`` with its defaults,
against their fast paths (MM's EM, BCE's CAVI) and against the spec's exact posterior
(NUTS), on held-out rows of bundled data sets.

A user's variant is fitted the way the built-in specs are fitted here, so this says
whether a comparison of variants ranks models or optimisers.  Two questions, kept apart:

* **inference**: does the default fit reach what the *spec* predicts?  The reference is
  NUTS on the same spec (MM: ``mm.model`` on its hand-written potential; BCE:
  ``bce.model_collapsed``, the same program with ``theta_i`` and ``z`` summed out exactly,
  so the same posterior of ``alpha``, ``beta`` and the same predictive), 2 chains.
* **estimand**: the fast paths are point estimates of the globals (EM: the MAP with
  ``label_prior=1.01``, i.e. about the maximum likelihood; CAVI: empirical-Bayes ``alpha``,
  ``beta`` with smoothing 1e-6), not the spec's posterior predictive under its Dirichlet(1)
  priors (posterior mean ``(n + 1) / (N + k)``: one pseudo-count per label).  ``--point``
  fits those point estimates through PyroConsensus (a point-mass guide on the same spec
  with the fast path's prior) to show PyroConsensus reaches the fast path when asked for
  the same thing.

Per data set: k-means base clusterings (M = 10, k = 3) of the whole data set, 30% of the
rows held out (``split_rows``, seed 0).  Per fit: held-out perplexity, the paired
difference of held-out log-likelihood against the fast path and against NUTS (summed over
rows) with its SE over rows ``sqrt(n var(d_i))`` and the Monte Carlo SE, CPU seconds.
``--baseline`` adds the first session's defaults (one prior-draw start, 1,000 steps).

Run: ``OMP_NUM_THREADS=1 PYTHONPATH=. python experiments/spec_defaults_vs_fast_paths.py
[--baseline] [--point] [--no-reference] [--nuts-for MM BCE] [--nuts-samples 300]
[--datasets wine iris ecoli]``.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

import consensuskit as ck
from consensuskit.data import datasets, generate
from consensuskit.evaluation.heldout import split_rows
from consensuskit.models.bce import spec as bce
from consensuskit.models.mm import spec as mm

DATASETS = ("wine", "iris", "ecoli")
#: the first session's defaults (before the posterior-mode start and the plateau stop)
OLD_DEFAULTS = dict(init="prior", n_init=1, num_steps=1000, min_steps=None)


def ensemble(name, n_partitions=10, n_clusters=3, seed=0):
    F, _ = datasets.load(name)
    X = generate.kmeans_partitions(F, n_partitions, n_clusters=n_clusters, random_state=seed)
    train, test = split_rows(len(X), 0.3, random_state=seed)
    return X[train], X[test]


def fitted(est, X):
    t0 = time.process_time()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est.fit(X)
    notes = sorted({str(w.message)[:80] for w in caught if issubclass(w.category,
                                                                        RuntimeWarning)})
    return est, time.process_time() - t0, notes


def point_guide(spec_name):
    """A point-mass guide on the globals for the ``--point`` fits (the fast path's estimand)."""
    from pyro.infer.autoguide import AutoDelta, init_to_sample

    if spec_name == "MM":
        return mm.model, mm.map_guide, {"label_prior": 1.01}
    return (bce.model_collapsed, AutoDelta(bce.model_collapsed, init_loc_fn=init_to_sample),
            {"label_prior": 1.0 + 1e-6})


def paired(ll, ref):
    d = ll - ref
    return float(d.sum()), float(np.sqrt(d.size * d.var(ddof=1)))


def main(baseline=False, point=False, reference=True, datasets_=DATASETS, seed=0,
         nuts_samples=300, nuts_for=("MM", "BCE"), save_ll=None):
    import pandas as pd

    rows = []
    specs = {"MM": (mm.model, mm.model, lambda: ck.MM(3, random_state=seed)),
             "BCE": (bce.model, bce.model_collapsed, lambda: ck.BCE(3, random_state=seed))}
    for name in datasets_:
        X, X_test = ensemble(name, seed=seed)
        for spec_name, (model, ref_model, fast) in specs.items():
            ref, ref_cpu, _ = fitted(fast(), X)
            ll_fast = ref.score_samples(X_test, unknown="missing")
            n_obs = int((ref.encode(X_test, unknown="missing").codes >= 0).sum())
            fits = {"defaults": (model, None, {}, {})}
            if baseline:
                fits["first-session defaults"] = (model, None, {}, OLD_DEFAULTS)
            if reference and spec_name in nuts_for:
                fits["NUTS (exact posterior)"] = (ref_model, None, {}, dict(
                    inference="nuts", num_samples=nuts_samples, warmup_steps=nuts_samples,
                    n_posterior_draws=100))
            if point:
                pm, pg, pkw = point_guide(spec_name)
                fits["point (fast path's estimand)"] = (pm, pg, pkw, {})
            cell = []
            for label, (m, g, mkw, opts) in fits.items():
                est, cpu, notes = fitted(ck.PyroConsensus(m, g, n_clusters=3, random_state=seed,
                                                          model_kwargs=mkw or None, **opts), X)
                ll, se = est.score_samples_se(X_test, unknown="missing")
                r = {"dataset": name, "spec": spec_name, "fit": label,
                     "fast_perplexity": float(np.exp(-ll_fast.sum() / n_obs)),
                     "perplexity": float(np.exp(-ll.sum() / n_obs)),
                     "mcse": float(np.sqrt(np.sum(se**2))), "fast_cpu_s": ref_cpu,
                     "cpu_s": cpu, "converged": bool(getattr(est, "converged_", True)),
                     "steps": getattr(est, "n_steps_", np.nan), "warnings": "; ".join(notes)}
                r["diff_fast"], r["se_fast"] = paired(ll, ll_fast)
                cell.append((r, ll))
                if save_ll:
                    np.save(f"{save_ll}/ll_{name}_{spec_name}_{label.split()[0]}.npy", ll)
                print(f"{name:6s} {spec_name:3s} {label:29s} fast {r['fast_perplexity']:.4f} "
                      f"fit {r['perplexity']:.4f}  vs fast {r['diff_fast']:+8.2f} ± "
                      f"{r['se_fast']:.2f} (rows) ± {r['mcse']:.2f} (MC)  cpu fast "
                      f"{ref_cpu:.1f} s fit {cpu:.1f} s  steps {r['steps']} converged "
                      f"{r['converged']}", flush=True)
            ll_nuts = dict((r["fit"], ll) for r, ll in cell).get("NUTS (exact posterior)")
            for r, ll in cell:  # every fit of this cell against the spec's exact posterior
                r["diff_nuts"], r["se_nuts"] = (paired(ll, ll_nuts) if ll_nuts is not None
                                                else (np.nan, np.nan))
                r["within_2se_nuts"] = bool(r["diff_nuts"] > -2 * np.hypot(r["se_nuts"],
                                                                           r["mcse"]))
                r["within_2se_fast"] = bool(r["diff_fast"] > -2 * np.hypot(r["se_fast"],
                                                                           r["mcse"]))
                rows.append(r)
                if ll_nuts is not None:
                    print(f"{name:6s} {spec_name:3s} {r['fit']:29s} vs NUTS "
                          f"{r['diff_nuts']:+8.2f} ± {r['se_nuts']:.2f} (rows)", flush=True)
    df = pd.DataFrame(rows).set_index(["dataset", "spec", "fit"])
    print(df.drop(columns="warnings").round(4).to_string())
    return df


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--baseline", action="store_true")
    p.add_argument("--point", action="store_true")
    p.add_argument("--no-reference", dest="reference", action="store_false")
    p.add_argument("--nuts-samples", type=int, default=300)
    p.add_argument("--nuts-for", nargs="*", default=["MM", "BCE"],
                   help="specs that get the NUTS reference (BCE's costs minutes)")
    p.add_argument("--datasets", nargs="*", default=list(DATASETS))
    p.add_argument("--save-ll", default=None, help="folder for each fit's held-out "
                   "log-likelihoods (ll_<data>_<spec>_<fit>.npy)")
    a = p.parse_args()
    main(a.baseline, a.point, a.reference, a.datasets, nuts_samples=a.nuts_samples,
         nuts_for=a.nuts_for, save_ll=a.save_ll)
