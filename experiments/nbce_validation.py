"""Does NBCE's *default* Gibbs sampler converge on the data we ship?  A validation grid.

Cells: every bundled dataset (``consensuskit.data.datasets.names()``, rows subsampled to
at most 2,000) x ensemble size M in {10, 20} x base algorithm family x prior:

* ``kmeans``: k-means partitions with k drawn per column from {2..10} (RPS);
* ``rfs``: k-means on random feature subsets, k drawn per column;
* ``mixed``: k-means, average and Ward linkage, fuzzy c-means in turn, k drawn per column;
* ``gmm``: Gaussian mixtures (diagonal covariances, standardised features), k drawn per
  column.

``--breadth`` runs one cell per dataset instead of the full product, the settings rotated
so that both M, both priors and all four families are used (:func:`breadth_cells`;
``--breadth-offset 1`` gives each dataset the other M); with ``--datasets`` it runs those
datasets' cells, in that order.

Each cell fits ``NBCE(prior=...)`` with every other setting at its default (so the
defaults' chain count and lengths are what is judged), ``--runs`` times with independent
seeds on the same ensemble, and prints: the worst split R-hat and the smallest bulk ESS
(ArviZ, rank-normalised) over the runs of the log joint, the number of clusters, alpha0
and beta; the mean number of clusters, alpha0, beta; the spread (max - min) of the runs'
mean log joint against its standard error (the runs' MCSEs combined: sqrt(sum se^2));
the most clusters occupied in a draw against the tables' size; the CPU seconds per fit.
A cell passes when every run has R-hat <= 1.01 and bulk ESS >= 400 for all four.

Results go to a JSON-lines file (``--out``); a cell already there is not rerun, so a
long grid can be run in pieces (``--datasets``, ``--M``, ``--prior``, ``--algorithms``)
and ``--jobs`` processes.  Run it against another checkout (``PYTHONPATH=/other``) to
compare samplers: it uses only the estimator's public parameters and ``samples_``.

    PYTHONPATH=$PWD python experiments/nbce_validation.py --datasets wine balance \\
        --M 10 --prior tsb --algorithms kmeans --out /tmp/nbce_val.jsonl
    PYTHONPATH=$PWD python experiments/nbce_validation.py --table --out /tmp/nbce_val.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import time
import warnings
from concurrent.futures import ProcessPoolExecutor

import numpy as np

VARIABLES = ("log_joint", "n_clusters", "alpha0", "beta")
FAMILIES = ("kmeans", "rfs", "mixed", "gmm")
MAX_ROWS = 2000
RHAT_MAX, ESS_MIN = 1.01, 400.0


def _arviz():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        import arviz as az
    return az


def ensemble(name, n_partitions, family, seed=0):
    """The (N, M) label matrix of one cell: dataset rows subsampled to ``MAX_ROWS``."""
    from consensuskit.data import datasets
    from consensuskit.data.generate import (
        kmeans_partitions,
        mixed_partitions,
        random_feature_partitions,
    )

    features, _ = datasets.load(name)
    features = np.asarray(features, dtype=np.float64)
    rng = np.random.default_rng(seed)
    if features.shape[0] > MAX_ROWS:
        features = features[np.sort(rng.choice(features.shape[0], MAX_ROWS, replace=False))]
    k = (2, 10)
    if family == "kmeans":
        return kmeans_partitions(features, n_partitions, n_clusters=k, random_state=seed)
    if family == "rfs":
        return random_feature_partitions(features, n_partitions, n_clusters=k,
                                         random_state=seed)
    if family == "mixed":
        return mixed_partitions(features, n_partitions, n_clusters=k,
                                algorithms=("kmeans", "average", "ward", "fuzzy_cmeans"),
                                random_state=seed)
    if family == "gmm":
        return gaussian_mixture_partitions(features, n_partitions, k, seed)
    raise ValueError(f"unknown family {family!r}; choose from {FAMILIES}")


def gaussian_mixture_partitions(features, n_partitions, k_range, seed):
    """(N, M) labels of Gaussian mixtures with diagonal covariances, k drawn per column
    from ``k_range`` (inclusive), one random initialisation each, on standardised
    features; labels re-coded to ``0..k'-1`` (a component may end up empty)."""
    from sklearn.mixture import GaussianMixture

    rng = np.random.default_rng(seed)
    x = features - features.mean(axis=0)
    sd = x.std(axis=0)
    x = x[:, sd > 0] / sd[sd > 0]
    out = np.empty((x.shape[0], n_partitions), dtype=np.int64)
    for j in range(n_partitions):
        k = int(rng.integers(k_range[0], k_range[1] + 1))
        gm = GaussianMixture(k, covariance_type="diag", init_params="random_from_data",
                             reg_covar=1e-3, max_iter=100,
                             random_state=int(rng.integers(2**31 - 1)))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # ConvergenceWarning: the labels are still used
            labels = gm.fit_predict(x)
        out[:, j] = np.unique(labels, return_inverse=True)[1]
    return out


def breadth_cells(names, offset=0):
    """One cell per dataset: dataset ``i`` (with ``j = i + offset``) gets M =
    (10, 20)[j % 2], prior ("tsb", "fsd")[(j // 2) % 2] and family
    ``FAMILIES[(j // 4) % 4]``, so each block of four datasets covers both M and both
    priors with one family, and the families rotate over the blocks."""
    return [(n, (10, 20)[j % 2], ("tsb", "fsd")[(j // 2) % 2], FAMILIES[(j // 4) % 4])
            for j, n in enumerate(names, start=offset)]


def _diagnostics(est):
    az = _arviz()
    post = est.inference_data_.posterior
    out = {}
    for v in VARIABLES:
        x = np.asarray(post[v], dtype=np.float64)
        if np.ptp(x) == 0:  # every chain and draw equal: nothing to diagnose
            out[v] = (1.0, float(x.size), float(x.mean()), 0.0)
        else:
            out[v] = (float(az.rhat(x)), float(az.ess(x, method="bulk")), float(x.mean()),
                      float(np.ravel(az.mcse(x, method="mean"))[0]))
    return out


def run_cell(cell, runs, n_chains=None, point_estimate=None):
    """Fit default NBCE ``runs`` times on one cell's ensemble; one result dict.
    ``n_chains`` overrides the default chain count only (for checkouts whose default is
    fewer than the four the diagnostics need); ``point_estimate="dahl"`` skips the
    default's SALSO search for ``labels_``, which runs after the chains and changes
    neither the draws nor the diagnostics (only the CPU column)."""
    import consensuskit as ck

    name, M, prior, family = cell
    X = ensemble(name, M, family)
    fits = []
    for r in range(runs):
        kw = {} if n_chains is None else {"n_chains": n_chains}
        if point_estimate is not None:
            kw["point_estimate"] = point_estimate
        est = ck.NBCE(prior=prior, random_state=1000 + r, **kw)
        c0 = time.process_time()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            est.fit(X)
        cpu = time.process_time() - c0
        d = _diagnostics(est)
        T = int(est.samples_["truncation"])
        fits.append({"diag": d, "cpu": cpu, "max_occupied": int(est.samples_["n_occupied"].max()),
                     "tables": T, "filled": float(np.mean(est.samples_["n_occupied"] >= T)),
                     "unbounded": bool(est.samples_.get("unbounded", False)),
                     "warnings": sorted({str(w.message)[:60] for w in caught})})
    rhat = {v: max(f["diag"][v][0] for f in fits) for v in VARIABLES}
    ess = {v: min(f["diag"][v][1] for f in fits) for v in VARIABLES}
    means = [f["diag"]["log_joint"][2] for f in fits]
    se = float(np.sqrt(sum(f["diag"]["log_joint"][3] ** 2 for f in fits)))
    return {
        "cell": list(cell), "N": int(X.shape[0]), "runs": runs, "rhat": rhat, "ess": ess,
        "clusters": float(np.mean([f["diag"]["n_clusters"][2] for f in fits])),
        "alpha0": float(np.mean([f["diag"]["alpha0"][2] for f in fits])),
        "beta": float(np.mean([f["diag"]["beta"][2] for f in fits])),
        "spread": float(np.ptp(means)), "spread_se": se,
        "max_occupied": max(f["max_occupied"] for f in fits),
        "tables": max(f["tables"] for f in fits),
        "filled": max(f["filled"] for f in fits),
        "unbounded": fits[0]["unbounded"],
        "cpu": float(np.median([f["cpu"] for f in fits])),
        "passed": all(rhat[v] <= RHAT_MAX and ess[v] >= ESS_MIN for v in VARIABLES),
        "warnings": sorted({w for f in fits for w in f["warnings"]}),
    }


def _worker(args):
    cell, runs, n_chains, point_estimate = args
    os.environ.setdefault("NUMBA_NUM_THREADS", "1")
    return run_cell(tuple(cell), runs, n_chains, point_estimate)


def _load(path):
    if not path or not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def print_table(rows):
    head = (f"{'data':<26}{'M':>3} {'prior':<4} {'alg':<6} {'N':>5} "
            + " ".join(f"{'Rhat ' + v[:5]:>11}" for v in VARIABLES)
            + " " + " ".join(f"{'ESS ' + v[:5]:>10}" for v in VARIABLES)
            + f" {'K':>5} {'a0':>6} {'beta':>7} {'spread/SE':>12} {'occ/T':>7} {'cpu s':>6} ok")
    print(head)
    for r in rows:
        name, M, prior, fam = r["cell"]
        ratio = r["spread"] / r["spread_se"] if r["spread_se"] > 0 else float("nan")
        print(f"{name[:25]:<26}{M:>3} {prior:<4} {fam:<6} {r['N']:>5} "
              + " ".join(f"{r['rhat'][v]:>11.3f}" for v in VARIABLES) + " "
              + " ".join(f"{r['ess'][v]:>10.0f}" for v in VARIABLES)
              + f" {r['clusters']:>5.1f} {r['alpha0']:>6.2f} {r['beta']:>7.4f}"
              + f" {r['spread']:>5.1f}/{r['spread_se']:<5.1f}{'' if ratio != ratio else ''}"
              + f" {r['max_occupied']:>3}/{r['tables']:<3}{'*' if r['filled'] > 0 else ' '}"
              + f" {r['cpu']:>6.1f} {'yes' if r['passed'] else 'no'}")
    if rows:
        ok = sum(r["passed"] for r in rows)
        worst = max(rows, key=lambda r: r["spread"] / max(r["spread_se"], 1e-12))
        print(f"\ncells passing (R-hat <= {RHAT_MAX}, bulk ESS >= {ESS_MIN:.0f} for all four): "
              f"{ok}/{len(rows)} = {ok / len(rows):.0%}")
        print(f"largest spread of runs' mean log joint: {worst['spread']:.1f} nats "
              f"= {worst['spread'] / max(worst['spread_se'], 1e-12):.1f} SE ({worst['cell']})")
        print("largest occupied / tables: "
              + str(max((r["max_occupied"], r["tables"]) for r in rows))
              + "   (* = some draw filled every component of a fixed truncation)")


def main(argv=None):
    from consensuskit.data import datasets

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--datasets", nargs="*", default=None, help="default: every bundled one")
    p.add_argument("--M", nargs="*", type=int, default=[10, 20])
    p.add_argument("--prior", nargs="*", default=["tsb", "fsd"])
    p.add_argument("--algorithms", nargs="*", default=list(FAMILIES))
    p.add_argument("--runs", type=int, default=2, help="independent fits per cell")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--n-chains", type=int, default=None,
                   help="override the default chain count (nothing else)")
    p.add_argument("--point-estimate", default=None,
                   help="override NBCE's point_estimate (dahl: no SALSO search after the "
                        "chains; the draws and diagnostics are the same)")
    p.add_argument("--breadth", action="store_true",
                   help="one cell per dataset, settings rotated (breadth_cells)")
    p.add_argument("--breadth-offset", type=int, default=0)
    p.add_argument("--out", default="nbce_validation.jsonl")
    p.add_argument("--table", action="store_true", help="only print the table of --out")
    a = p.parse_args(argv)
    names = a.datasets or list(datasets.names())
    if a.breadth:  # settings by position among all datasets; run in --datasets' order
        plan = {c[0]: c for c in breadth_cells(list(datasets.names()), a.breadth_offset)}
        cells = [plan[n] for n in names]
    else:
        cells = [(n, M, pr, f) for n in names for M in a.M for pr in a.prior
                 for f in a.algorithms]
    done = {tuple(r["cell"]) for r in _load(a.out)}
    todo = [c for c in cells if c not in done]
    if not a.table and todo:
        from tqdm import tqdm

        with ProcessPoolExecutor(max_workers=a.jobs) as pool, open(a.out, "a") as f:
            jobs = [(c, a.runs, a.n_chains, a.point_estimate) for c in todo]
            for row in tqdm(pool.map(_worker, jobs), total=len(todo),
                            desc="NBCE validation cells"):
                f.write(json.dumps(row) + "\n")
                f.flush()
    rows = [r for r in _load(a.out) if tuple(r["cell"]) in set(cells)]
    print_table(rows)


if __name__ == "__main__":
    main()
