"""A NUTS fit's ``inference_data_`` as a researcher uses it: ``az.summary``, ESS before and
after relabelling, ``sample_stats``, ``az.plot_energy``, and the cost of repeated access.

MM(inference="nuts") on a k-means ensemble of N rows of a bundled data set.  Prints: draws
per chain in ``inference_data_`` against the draws sampled; ``az.summary`` of ``pi``; the
minimum bulk ESS of ``pi`` over its components on the raw draws (as sampled, label
switching included) and on the relabelled draws of ``inference_data_``; the sample_stats
variables and their per-chain means (the acceptance statistic against the target); the wall
and CPU time of the first access to ``inference_data_`` and the median of 20 repeated
accesses; ``az.plot_energy`` is drawn to ``--figure``.

Run: ``PYTHONPATH=. python experiments/nuts_inference_data.py [--draws 300 --rows 60]``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import consensuskit as ck
from consensuskit.inference.arviz_adapter import import_arviz, to_inference_data


def main(dataset="wine", rows=60, draws=300, seed=0, figure=None):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from loo_vs_bruteforce import small_ensemble

    az = import_arviz()
    ens = small_ensemble(dataset, rows, n_partitions=6, n_clusters=3, seed=seed)
    t0 = time.process_time()
    est = ck.MM(3, inference="nuts", max_iter=draws, n_init=2, random_state=seed).fit(ens)
    print(f"MM(NUTS) on {dataset}, N={rows}: {draws} warm-up + {draws} draws x 2 chains, "
          f"fit {time.process_time() - t0:.1f} s CPU")
    w, c = time.perf_counter(), time.process_time()
    idata = est.inference_data_
    first = (time.perf_counter() - w, time.process_time() - c)
    again = []
    for _ in range(20):
        w, c = time.perf_counter(), time.process_time()
        assert est.inference_data_ is idata
        again.append((time.perf_counter() - w, time.process_time() - c))
    again = np.median(np.asarray(again), axis=0)
    print(f"inference_data_: first access {first[0]:.2f} s wall / {first[1]:.2f} s CPU; "
          f"repeated (median of 20) {again[0] * 1e6:.1f} us wall / {again[1] * 1e6:.1f} us CPU")
    print("groups:", list(idata.groups()))
    print("posterior draws per chain:", idata.posterior.sizes["draw"], "chains:",
          idata.posterior.sizes["chain"], "(sampled:", draws, "per chain)")
    print(az.summary(idata, var_names=["pi"]).to_string())
    raw = to_inference_data({"pi": est.hub_.all_samples_["pi"]})
    ess_raw = float(az.ess(raw, var_names=["pi"])["pi"].min())
    ess_rel = float(az.ess(idata, var_names=["pi"])["pi"].min())
    print(f"min bulk ESS of pi: raw draws {ess_raw:.0f}, relabelled {ess_rel:.0f}")
    ss = idata.sample_stats
    print("sample_stats:", list(ss.data_vars))
    for k in ss.data_vars:
        print(f"  {k:16s} per-chain mean {np.round(ss[k].values.mean(1).astype(float), 3)}")
    print(f"  target_accept_prob {ss.attrs.get('target_accept_prob')}; BFMI "
          f"{np.round(az.bfmi(idata), 3)}")
    import matplotlib

    matplotlib.use("Agg")
    ax = az.plot_energy(idata)
    if figure:
        np.atleast_1d(ax)[0].figure.savefig(figure, dpi=100)
        print("az.plot_energy ->", figure)
    return idata


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="wine")
    p.add_argument("--rows", type=int, default=60)
    p.add_argument("--draws", type=int, default=300)
    p.add_argument("--figure", default=None)
    a = p.parse_args()
    main(a.dataset, a.rows, a.draws, figure=a.figure)
