"""The built-in MM and BCE specs fitted through ``ck.PyroConsensus`` with its defaults,
against their fast paths (MM's EM, BCE's CAVI), on held-out rows of bundled data sets.

A user's variant is fitted the way the built-in specs are fitted here, so this says
whether a comparison of variants ranks models or optimisers.  Per data set: k-means base
clusterings (M = 10, k = 3) of the whole data set, 30% of the rows held out
(``split_rows``, seed 0); for each spec, the held-out perplexity of the fast path and of
PyroConsensus (defaults: AutoNormal guide, one start, constant rate, 1,000 steps; with
``--baseline`` also the opt-in restarts + learning-rate decay, ``n_init=4,
lr_decay="auto"``),
the paired difference of held-out log-likelihood (PyroConsensus minus fast path, summed
over rows) with its SE over rows, ``sqrt(n var(d_i))``, plus the Monte Carlo SE, and CPU
seconds of each fit.

Run: ``PYTHONPATH=. python experiments/spec_defaults_vs_fast_paths.py [--baseline]``.
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


def main(baseline=False, datasets_=DATASETS, seed=0):
    import pandas as pd

    rows = []
    specs = {"MM": (mm.model, lambda: ck.MM(3, random_state=seed)),
             "BCE": (bce.model, lambda: ck.BCE(3, random_state=seed))}
    variants = {"defaults": {}}
    if baseline:
        variants["restarts+decay"] = dict(n_init=4, lr_decay="auto")
    for name in datasets_:
        X, X_test = ensemble(name, seed=seed)
        for spec_name, (model, fast) in specs.items():
            ref, ref_cpu, _ = fitted(fast(), X)
            ll_ref = ref.score_samples(X_test, unknown="missing")
            n_obs = int((ref.encode(X_test, unknown="missing").codes >= 0).sum())
            for label, opts in variants.items():
                est, cpu, notes = fitted(ck.PyroConsensus(model, n_clusters=3,
                                                          random_state=seed, **opts), X)
                ll, se = est.score_samples_se(X_test, unknown="missing")
                d = ll - ll_ref
                r = {"dataset": name, "spec": spec_name, "pyro_fit": label,
                     "fast_perplexity": float(np.exp(-ll_ref.sum() / n_obs)),
                     "pyro_perplexity": float(np.exp(-ll.sum() / n_obs)),
                     "diff": float(d.sum()),
                     "paired_se": float(np.sqrt(d.size * d.var(ddof=1))),
                     "mcse": float(np.sqrt(np.sum(se**2))),
                     "fast_cpu_s": ref_cpu, "pyro_cpu_s": cpu,
                     "converged": bool(getattr(est, "converged_", True)),
                     "warnings": "; ".join(notes)}
                r["within_2se"] = bool(r["diff"] > -2 * np.hypot(r["paired_se"], r["mcse"]))
                rows.append(r)
                print(f"{name:6s} {spec_name:3s} {label:18s} fast {r['fast_perplexity']:.4f} "
                      f"pyro {r['pyro_perplexity']:.4f}  diff {r['diff']:+8.2f} ± "
                      f"{r['paired_se']:.2f} (rows) ± {r['mcse']:.2f} (MC)  cpu fast "
                      f"{ref_cpu:.1f} s pyro {cpu:.1f} s  converged {r['converged']}",
                      flush=True)
    df = pd.DataFrame(rows).set_index(["dataset", "spec", "pyro_fit"])
    print(df.drop(columns="warnings").round(4).to_string())
    return df


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--baseline", action="store_true")
    p.add_argument("--datasets", nargs="*", default=list(DATASETS))
    a = p.parse_args()
    main(a.baseline, a.datasets)
