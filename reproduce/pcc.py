"""PCC paper (Lourenco et al. 2015): soft-partition recovery (Sect. 7.1), Tables 4-7.

``consensuskit reproduce pcc [--quick|--smoke] [--out DIR] [--only PARTS]``

* **soft** -- Sect. 7.1: 4 isotropic planar Gaussians (200 points each, one mean
  per orthant), the soft truth Z = normalised component densities, 1000 hard
  partitions sampled from Z; PCC-KL and PCC-L2 with K = 8; J criterion
  (``metrics.js_criterion``) over 10 datasets (paper: 0.0012 +- 0.00005).
* **type1**, **type2** -- Tables 4-7: H criterion (``metrics.accuracy``, Hungarian-matched)
  and adjusted Rand index of PCC-KL, PCC-L2, QMI, MM, HBGF, EAC (single, average,
  Ward linkage) and CSPA, with ensembles of

  - type 1: k-means, random initialisation, k drawn uniformly from
    [ceil(sqrt(n)/2), ceil(sqrt(n))] (micro-blocks; the paper cites Lourenco et
    al. 2010 and gives no range or ensemble size);
  - type 2: single, average and Ward linkage, k-means and spectral clustering
    (the paper's centroid linkage is not available) at every k of the paper's
    Table 3 list K_i.

  Features are standardised (z-scores).  Each stochastic method runs ``runs``
  times on the same ensemble with different seeds (avg/std/max/min, as the
  paper); EAC and CSPA once.  Datasets: s-1 rings (3 concentric rings, 450
  points, generated here), r-1..r-7 from ``consensuskit.data.datasets``; s-2
  (image-1) is not available.  optdigits: 1000 rows drawn at random.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from reproduce import register
from reproduce._common import (
    bar_groups,
    fmt,
    markdown_table,
    paper_tables,
    progress_bar,
    seeds,
    start_run,
)

#: The paper's Tables 4-7 (``reproduce/tables/pcc.json``): table number -> method ->
#: statistic ("avg", "std", "max", "min"; the deterministic methods "avg" only) -> one
#: value per column of :data:`COLUMNS`.
TABLES = {int(name[len("table"):]): rows for name, rows in paper_tables("pcc").items()}
COLUMNS = ["s-1", "s-2", "r-1", "r-2", "r-3", "r-4", "r-5", "r-6", "r-7"]

PARTS = ("soft", "type1", "type2")  # type1: Tables 4 and 6; type2: Tables 5 and 7

#: paper column -> (description, consensuskit dataset or generator, K, type-2 k list)
DATASETS = {
    "s-1": ("rings", "rings", 3, list(range(2, 9))),
    "s-2": ("image-1", None, 8, list(range(8, 16)) + [20, 30]),
    "r-1": ("iris", "iris", 3, list(range(3, 11)) + [15, 20]),
    "r-2": ("wine", "wine", 3, list(range(4, 11)) + [15, 20]),
    "r-3": ("house-votes", "house_votes_84", 2, list(range(4, 11)) + [15, 20]),
    "r-4": ("ionosphere", "ionosphere", 2, list(range(4, 11)) + [15, 20]),
    "r-5": ("std-yeast-cell", "yeast_cellcycle_384_std", 5, list(range(5, 11)) + [15, 20]),
    "r-6": ("breast-cancer", "breast_cancer_wisconsin_683", 2, list(range(3, 11)) + [15, 20]),
    "r-7": ("optdigits", "optdigits", 10, [10, 12, 15, 20, 35, 50]),
}
METHODS = ["PCC-KL", "PCC-L2", "QMI", "MM", "HBGF", "EAC-SL", "EAC-AL", "EAC-WL", "CSPA"]
DETERMINISTIC = {"EAC-SL", "EAC-AL", "EAC-WL", "CSPA"}
TYPE2_ALGORITHMS = ("single", "average", "ward", "kmeans", "spectral")

SIZES = {
    "full": dict(soft_datasets=10, soft_per=200, soft_partitions=1000,
                 columns=[c for c in COLUMNS if c != "s-2"], type1_partitions=100, runs=10,
                 types=(1, 2)),
    "quick": dict(soft_datasets=2, soft_per=100, soft_partitions=300,
                  columns=["s-1", "r-1", "r-2", "r-3", "r-4", "r-5"], type1_partitions=30,
                  runs=3, types=(1, 2)),
    "smoke": dict(soft_datasets=1, soft_per=25, soft_partitions=40, columns=["r-1"],
                  type1_partitions=8, runs=1, types=(1,)),
}


def soft_gaussians(n_per, n_partitions, seed):
    """Sect. 7.1 data: (soft truth Z (n, 4), hard partitions (n, n_partitions))."""
    rng = np.random.RandomState(seed)
    orthants = np.array([[1, 1], [-1, 1], [-1, -1], [1, -1]], dtype=float)
    means = orthants * rng.uniform(0.5, 2.5, size=(4, 2))
    P = np.vstack([m + rng.standard_normal((n_per, 2)) for m in means])
    sq = ((P[:, None, :] - means[None, :, :]) ** 2).sum(axis=2)
    logd = -0.5 * sq
    Z = np.exp(logd - logd.max(axis=1, keepdims=True))
    Z /= Z.sum(axis=1, keepdims=True)
    cum = np.cumsum(Z, axis=1)
    u = rng.random_sample((len(P), n_partitions))
    labels = np.empty((len(P), n_partitions), dtype=np.int64)
    for j in range(n_partitions):
        labels[:, j] = np.minimum((u[:, j, None] > cum).sum(axis=1), 3)
    return Z, labels


def rings(n_per=150, noise=0.1, seed=0):
    """Three concentric noisy rings (radii 1, 2, 3), ``n_per`` points each."""
    rng = np.random.RandomState(seed)
    F, y = [], []
    for c, r in enumerate((1.0, 2.0, 3.0)):
        t = rng.uniform(0, 2 * np.pi, n_per)
        rad = r + noise * rng.standard_normal(n_per)
        F.append(np.column_stack([rad * np.cos(t), rad * np.sin(t)]))
        y.append(np.full(n_per, c))
    return np.vstack(F), np.concatenate(y)


def _load(col, seed):
    from consensuskit.data.datasets import load

    name = DATASETS[col][1]
    if name == "rings":
        F, y = rings(seed=seed)
    else:
        F, y = load(name)
    if col == "r-7" and len(y) > 1000:
        rows = np.sort(np.random.RandomState(seed).choice(len(y), 1000, replace=False))
        F, y = F[rows], y[rows]
    sd = F.std(axis=0)
    F = (F - F.mean(axis=0)) / np.where(sd > 0, sd, 1.0)
    return F, y


def ensemble(col, F, kind, n_partitions, seed):
    """Type-1 or type-2 ensemble for dataset column ``col``."""
    from consensuskit.data.generate import kmeans_partitions, mixed_partitions

    n = len(F)
    if kind == 1:
        lo, hi = max(2, math.ceil(math.sqrt(n) / 2)), math.ceil(math.sqrt(n))
        return kmeans_partitions(F, n_partitions, n_clusters=(lo, hi), random_state=seed)
    cols = []
    for i, k in enumerate(DATASETS[col][3]):
        cols.append(mixed_partitions(F, len(TYPE2_ALGORITHMS), k, algorithms=TYPE2_ALGORITHMS,
                                     random_state=seeds(seed, i)))
    return np.hstack(cols)


def _estimator(method, K, seed):
    import consensuskit as ck

    if method == "PCC-KL":
        return ck.PCC(K, divergence="kl", random_state=seed)
    if method == "PCC-L2":
        return ck.PCC(K, divergence="l2", random_state=seed)
    if method == "QMI":
        return ck.QMI(K, n_init=1, random_state=seed)
    if method == "MM":
        return ck.MM(K, n_init=1, random_state=seed)
    if method == "HBGF":
        return ck.HBGF(K, n_init=1, random_state=seed)
    if method.startswith("EAC"):
        link = {"SL": "single", "AL": "average", "WL": "ward"}[method[4:]]
        return ck.EAC(K, linkage=link)
    if method == "CSPA":
        return ck.CSPA(K, random_state=seed)
    raise ValueError(method)


def _soft(rep, sizes, seed, progress):
    from consensuskit.evaluation.metrics import js_criterion
    from consensuskit.models.pcc.estimator import PCC

    js = {"kl": [], "l2": []}
    used = {"kl": [], "l2": []}
    for d in progress_bar(range(sizes["soft_datasets"]), progress, "PCC Sect. 7.1"):
        s = seeds(seed, "soft", d)
        Z, L = soft_gaussians(sizes["soft_per"], sizes["soft_partitions"], s)
        for div in js:
            est = PCC(8, divergence=div, random_state=s).fit(L)
            js[div].append(js_criterion(est.membership_, Z))
            used[div].append(est.n_clusters_)
    rows = []
    for div in js:
        m, sd = float(np.mean(js[div])), float(np.std(js[div]))
        rep.add_row("soft", "4 Gaussians", f"PCC-{div.upper()}", "J mean", m, 0.0012,
                    repeats=len(js[div]))
        rep.add_row("soft", "4 Gaussians", f"PCC-{div.upper()}", "J std", sd, 0.00005,
                    repeats=len(js[div]))
        rows.append([f"PCC-{div.upper()}", f"{m:.5f} +- {sd:.5f}", "0.0012 +- 0.00005",
                     f"{m - 0.0012:+.5f}", f"{np.mean(used[div]):.1f}", len(js[div])])
    rep.add_section(
        "Sect. 7.1: recovery of a soft partition (J criterion)",
        f"{sizes['soft_datasets']} dataset(s) of 4 x {sizes['soft_per']} points, "
        f"{sizes['soft_partitions']} hard partitions sampled from the soft truth "
        "(`reproduce.pcc.soft_gaussians`; means uniform in [0.5, 2.5] per "
        "coordinate, one per orthant, unit variance), PCC with K = 8, default settings. "
        "J in bits (0 <= J <= 1).\n\n"
        + markdown_table(["model", "ours J", "paper J", "difference", "clusters used",
                          "datasets"], rows),
    )


def _tables(rep, sizes, seed, progress, types):
    from consensuskit.data.ensemble import Ensemble
    from consensuskit.evaluation.metrics import accuracy, adjusted_rand

    results = {}  # (type, col) -> method -> (H list, ARI list)
    for kind in types:
        for col in progress_bar(sizes["columns"], progress, f"PCC ensembles type {kind}"):
            s = seeds(seed, "pcc", kind, col)
            F, y = _load(col, s)
            K = DATASETS[col][2]
            X = ensemble(col, F, kind, sizes["type1_partitions"], s)
            ens = Ensemble.from_labels(X)
            res = {}
            for m in METHODS:
                n_runs = 1 if m in DETERMINISTIC else sizes["runs"]
                hs, aris = [], []
                for r in range(n_runs):
                    try:
                        with warnings.catch_warnings():
                            warnings.simplefilter("ignore")
                            lab = _estimator(m, K, seeds(s, m, r)).fit(ens).labels_
                        hs.append(accuracy(y, lab))
                        aris.append(adjusted_rand(y, lab))
                    except (ValueError, MemoryError):
                        hs.append(np.nan)
                        aris.append(np.nan)
                res[m] = (np.array(hs), np.array(aris))
            results[(kind, col)] = res
    for table, kind, idx, label in ((4, 1, 0, "H"), (5, 2, 0, "H"), (6, 1, 1, "ARI"),
                                    (7, 2, 1, "ARI")):
        if kind not in types:
            continue
        paper = TABLES[table]
        rows = []
        wins = 0
        for col in sizes["columns"]:
            j = COLUMNS.index(col)
            res = results[(kind, col)]
            cells = [f"{col} {DATASETS[col][0]}"]
            avgs = {}
            for m in METHODS:
                v = res[m][idx]
                ours = float(np.nanmean(v)) if np.isfinite(v).any() else float("nan")
                avgs[m] = ours
                pm = paper.get(m, {})
                pv = (pm.get("avg") or pm.get("value") or [None] * 9)[j]
                extra = {}
                if len(v) > 1:
                    extra = dict(std=float(np.nanstd(v)), max=float(np.nanmax(v)),
                                 min=float(np.nanmin(v)))
                rep.add_row(f"table{table}", DATASETS[col][0], m, f"{label} avg", ours, pv,
                            repeats=len(v), **extra)
                sd = f" +- {extra['std']:.2f}" if extra else ""
                cells.append(f"{fmt(ours, 2)}{sd} ({fmt(pv, 2)})")
            pcc_best = max(avgs["PCC-KL"], avgs["PCC-L2"])
            others = max(v for m, v in avgs.items() if not m.startswith("PCC"))
            wins += pcc_best >= others - 1e-12
            rows.append(cells)
        rep.add_section(
            f"Table {table}: {label}, ensemble type {kind}",
            f"Mean over runs (+- std over {sizes['runs']} runs for stochastic methods); "
            "ours (paper avg).\n\n"
            + markdown_table(["dataset"] + METHODS, rows)
            + f"\n\nThe better PCC variant is at least as good as every other method on "
            f"{wins} of {len(rows)} datasets.",
        )
        groups = {DATASETS[c][0]: {m: float(np.nanmean(results[(kind, c)][m][idx]))
                                   for m in METHODS} for c in sizes["columns"]}
        bar_groups(rep.figure_path(f"table{table}"), groups, label,
                   title=f"PCC paper Table {table} (ours): {label}, ensemble type {kind}")
    n1 = sizes["type1_partitions"]
    rep.add_section(
        "Ensembles used in Tables 4-7",
        f"Type 1: {n1} k-means partitions, k uniform in [ceil(sqrt(n)/2), ceil(sqrt(n))]. "
        f"Type 2: {', '.join(TYPE2_ALGORITHMS)} at every k of the paper's K_i list "
        "(its Table 3). Features standardised. s-2 (image-1) is not available. Methods: "
        "PCC(K, divergence='kl'|'l2'), QMI/MM/HBGF with n_init=1 (one run per seed), "
        "EAC(K, linkage='single'|'average'|'ward'), CSPA(K); K = number of classes.",
    )


@register("pcc", description="PCC paper: Sect. 7.1 soft recovery, Tables 4-7 (H, ARI)")
def run(*, progress=True, mode="full", out="results", data=None, seed=0, only=None,
        repeats=None):
    """Run the PCC reproduction; writes ``pcc.md``, ``pcc.csv`` and figures."""
    rep, parts, sizes = start_run(
        "pcc", "PCC paper (Lourenco et al. 2015): Sect. 7.1, Tables 4-7", PARTS, SIZES,
        {"runs": None, "soft_datasets": None},
        mode=mode, out=out, data=data, seed=seed, only=only, repeats=repeats)
    if "soft" in parts:
        _soft(rep, sizes, seed, progress)
    types = [k for k in sizes["types"] if f"type{k}" in parts]
    if types:
        _tables(rep, sizes, seed, progress, types)
    md, _ = rep.write()
    if progress:
        print(f"wrote {md}")
    return 0


__all__ = ["run", "soft_gaussians", "rings", "ensemble"]
