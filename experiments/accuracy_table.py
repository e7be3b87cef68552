"""Accuracy (Hungarian-matched) of every consensus function on iris, wine, glass, ecoli.

For each dataset and each of ``--seeds`` ensemble seeds s: features z-scored;
20 base clusterings, member m = k-means (n_init=1) with k_m uniform on
{2, ..., 2C} (C = number of classes), seeded from (s, m); every consensus
function is run with K = C and random_state=s.  The table gives mean (std) of
the accuracy over seeds, plus the average accuracy of the base clusterings.
Sanity check printed at the end: on iris every method should beat the average
base clustering.

A method that fails is listed under "Skipped" with its error, not hidden.
GBCE is left out: it needs the original features.

Usage::

    python experiments/accuracy_table.py [--seeds 5] [--out results]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from consensuskit.data import datasets
from consensuskit.evaluation.metrics import accuracy

DATASETS = ["iris", "wine", "glass", "ecoli"]


def load(name):
    """(features, labels) of a dataset shipped with consensuskit."""
    return datasets.load(name)


def base_clusterings(F, C, n_partitions, seed):
    from sklearn.cluster import KMeans
    from sklearn.preprocessing import StandardScaler

    Z = StandardScaler().fit_transform(F)
    cols = []
    for m in range(n_partitions):
        rng = np.random.default_rng([seed, m])
        k = int(rng.integers(2, 2 * C, endpoint=True))
        km = KMeans(n_clusters=k, n_init=1, random_state=int(rng.integers(2**31 - 1)))
        cols.append(km.fit_predict(Z))
    return np.column_stack(cols)


def estimators(C, seed):
    """name -> (factory or None, note)."""
    import consensuskit as ck

    out = {}
    for u in ["Uc", "UH", "NUH", "UL5"]:
        out[f"KCC({u})"] = (lambda u=u: ck.KCC(C, utility=u, random_state=seed), "")
    out["CSPA"] = (lambda: ck.CSPA(C, random_state=seed), "")
    out["HGPA"] = (lambda: ck.HGPA(C, random_state=seed), "")
    out["MCLA"] = (lambda: ck.MCLA(C, random_state=seed), "")
    out["HBGF"] = (lambda: ck.HBGF(C, random_state=seed), "")
    for link in ["single", "average", "ward"]:
        out[f"EAC({link})"] = (lambda link=link: ck.EAC(C, linkage=link), "")
    out["QMI"] = (lambda: ck.QMI(C, random_state=seed), "")
    for loss in ["vi", "binder"]:  # the base clusterings' expected-loss optimum, <= C clusters
        out[f"PartitionConsensus({loss})"] = (
            lambda loss=loss: ck.PartitionConsensus(loss, max_n_clusters=C, random_state=seed),
            "")
    suite = {
        "MM": lambda: ck.MM(C, random_state=seed),
        "BCE": lambda: ck.BCE(C, random_state=seed),
        "NBCE": lambda: ck.NBCE(truncation=2 * C, random_state=seed),
        "PCC(kl)": lambda: ck.PCC(C, divergence="kl", random_state=seed),
        "PCC(l2)": lambda: ck.PCC(C, divergence="l2", random_state=seed),
    }
    for name, make in suite.items():
        cls = name.split("(")[0]
        try:
            getattr(ck, cls)
            out[name] = (make, "")
        except (ImportError, AttributeError, ModuleNotFoundError) as err:
            out[name] = (None, f"not importable ({type(err).__name__})")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--partitions", type=int, default=20)
    ap.add_argument("--out", default="results")
    args = ap.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    records = []
    skipped = {}
    for ds in DATASETS:
        F, y = load(ds)
        C = int(np.unique(y).size)
        for seed in range(args.seeds):
            X = base_clusterings(F, C, args.partitions, seed)
            base = float(np.mean([accuracy(y, X[:, j]) for j in range(X.shape[1])]))
            records.append((ds, "base clusterings (mean)", seed, base, 0.0, C))
            for name, (make, note) in estimators(C, seed).items():
                if make is None:
                    skipped[name] = note
                    continue
                t0 = time.perf_counter()
                try:
                    lab = make().fit_predict(X)
                except Exception as err:  # report, do not hide: a method that fails is listed
                    skipped[name] = f"failed: {type(err).__name__}: {err}"
                    continue
                records.append((ds, name, seed, accuracy(y, lab), time.perf_counter() - t0,
                                int(np.unique(lab).size)))
            print(f"{ds} seed {seed} done", file=sys.stderr, flush=True)

    df = pd.DataFrame(records, columns=["dataset", "method", "seed", "accuracy", "seconds",
                                          "n_clusters_found"])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(out / "accuracy_table.csv", index=False)
    agg = df.groupby(["method", "dataset"], sort=False)["accuracy"].agg(["mean", "std"])
    methods = list(dict.fromkeys(df.method))
    lines = [
        f"# Consensus accuracy (Hungarian), {args.partitions} k-means base clusterings, "
        f"mean (std) over {args.seeds} ensemble seeds",
        "",
        "Generated by `experiments/accuracy_table.py`; k_m uniform on {2..2C}, K = C.",
        "",
        "| method | " + " | ".join(DATASETS) + " |",
        "|---|" + "---|" * len(DATASETS),
    ]
    for m in methods:
        cells = []
        for ds in DATASETS:
            if (m, ds) in agg.index:
                mu, sd = agg.loc[(m, ds)]
                cells.append(f"{mu:.3f} ({0.0 if np.isnan(sd) else sd:.3f})")
            else:
                cells.append("-")
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    if skipped:
        lines += ["", "Skipped:"] + [f"- {k}: {v}" for k, v in skipped.items()]
    iris_base = agg.loc[("base clusterings (mean)", "iris"), "mean"]
    bad = [m for m in methods if m != "base clusterings (mean)"
           and (m, "iris") in agg.index and agg.loc[(m, "iris"), "mean"] <= iris_base]
    verdict = ("all methods beat the average base clustering on iris" if not bad
               else "NOT above the average base clustering on iris: " + ", ".join(bad))
    found = df.groupby(["method", "dataset"], sort=False)["n_clusters_found"].mean()
    n_classes = {ds: int(df[(df.dataset == ds) & (df.method == methods[0])]
                         .n_clusters_found.iloc[0]) for ds in DATASETS}
    other_k = [m for m in methods
               if any(abs(found.get((m, ds), n_classes[ds]) - n_classes[ds]) > 1e-9
                      for ds in DATASETS)]
    if other_k:
        lines += ["", "Methods whose number of clusters differs from C (mean clusters found; "
                  "Hungarian accuracy counts every point of an unmatched extra cluster as "
                  "an error):", ""]
        for m in other_k:
            cells = ", ".join(f"{ds} {found.get((m, ds), float('nan')):.1f} (C={n_classes[ds]})"
                              for ds in DATASETS)
            lines.append(f"- {m}: {cells}")
    lines += ["", f"Sanity check: {verdict} ({iris_base:.3f})."]
    (out / "accuracy_table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
