"""GBCE versus BCE as the number of base clusterings grows, and the effect of the weights.

Reproduces the set-up of Wang, Shan & Banerjee (2011), section 7.6:

* Fig. 7 -- a pool of ``--pool`` k-means clusterings (k = number of classes, random
  initialisation) per dataset; for each ``s`` in ``--steps`` draw ``s`` of them
  ``--runs`` times and fit BCE and GBCE (feature weight 1, label weight ``D``, the
  number of features); report the average micro-precision (MP).
* Fig. 8 -- GBCE with label weights ``D/8, D/4, D/2, D`` (feature weight 1) on the
  same draws.

Prints one table per figure and saves ``results/gbce_weights.png`` (and the raw
micro-precisions, per step and run, in ``results/gbce_weights.json``).  The paper
uses a pool of 50, ``s = 1..10`` and 50 runs; the defaults here are smaller so the
script finishes in minutes on a shared 2-core machine::

    python experiments/gbce_weights.py                       # iris, wine; 8 runs
    python experiments/gbce_weights.py --datasets iris wine wdbc --runs 50 \\
        --steps 1 2 3 4 5 6 7 8 9 10                          # the paper's protocol
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
from sklearn.cluster import KMeans
from sklearn.metrics.cluster import contingency_matrix
from tqdm.auto import tqdm

from consensuskit.estimators.bce import BCE
from consensuskit.estimators.gbce import GBCE


def load_dataset(name):
    """(features, labels) from consensuskit.datasets, or scikit-learn's bundled copies."""
    try:
        from consensuskit.datasets import load

        return load(name)
    except ImportError:
        from sklearn import datasets as skd

        loaders = {"iris": skd.load_iris, "wine": skd.load_wine, "wdbc": skd.load_breast_cancer}
        if name not in loaders:
            raise SystemExit(f"dataset {name!r} needs consensuskit.datasets") from None
        return loaders[name](return_X_y=True)


def micro_precision(y_true, y_pred):
    """The paper's MP: each consensus cluster counts its majority class."""
    return contingency_matrix(y_true, y_pred).max(axis=0).sum() / len(y_true)


def run(datasets, steps, runs, pool_size, n_init, max_iter, seed, progress=True):
    """Return ``{dataset: {method: array (len(steps), runs)}}`` of micro-precisions."""
    out = {}
    for name in datasets:
        F, y = load_dataset(name)
        F = np.asarray(F, dtype=np.float64)
        y = np.asarray(y)
        k = len(np.unique(y))
        D = F.shape[1]
        pool = np.column_stack([
            KMeans(k, n_init=1, init="random", random_state=seed + p).fit_predict(F)
            for p in range(pool_size)])
        methods = {"BCE": None}
        for frac, lab in [(1 / 8, "D/8"), (1 / 4, "D/4"), (1 / 2, "D/2"), (1.0, "D")]:
            methods[f"GBCE u={lab}"] = frac * D
        res = {m: np.zeros((len(steps), runs)) for m in methods}
        rs = np.random.RandomState(seed)
        bar = tqdm(total=len(steps) * runs, desc=name, disable=not progress)
        for a, s in enumerate(steps):
            for r in range(runs):
                X = pool[:, rs.choice(pool_size, s, replace=False)]
                kw = dict(n_clusters=k, n_init=n_init, max_iter=max_iter, random_state=r)
                for m, u in methods.items():
                    if u is None:
                        lab = BCE(**kw).fit(X).labels_
                    else:
                        lab = GBCE(label_weight=u, feature_weight=1.0, **kw).fit(
                            X, features=F).labels_
                    res[m][a, r] = micro_precision(y, lab)
                bar.update(1)
        bar.close()
        res["_pool_mp"] = np.array([micro_precision(y, pool[:, j]) for j in range(pool_size)])
        out[name] = res
    return out


def print_tables(out, steps):
    for name, res in out.items():
        pool = res["_pool_mp"]
        print(f"\n{name}: average micro-precision over runs (pool of {pool.size} k-means, "
              f"mean MP {pool.mean():.3f}, worst {pool.min():.3f})")
        methods = [m for m in res if not m.startswith("_")]
        print("   s  " + "".join(f"{m:>13s}" for m in methods) + "   GBCE(D)-BCE")
        for a, s in enumerate(steps):
            row = "".join(f"{res[m][a].mean():13.4f}" for m in methods)
            diff = res["GBCE u=D"][a] - res["BCE"][a]
            se = diff.std(ddof=1) / np.sqrt(diff.size) if diff.size > 1 else float("nan")
            print(f"{s:4d}  {row}   {diff.mean():+.4f} ± {se:.4f}")


def plot(out, steps, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(out)
    fig, axes = plt.subplots(2, len(names), figsize=(4.2 * len(names), 7), squeeze=False,
                             sharey="col")
    for c, name in enumerate(names):
        res = out[name]
        ax = axes[0, c]
        for m, style in [("BCE", "o-"), ("GBCE u=D", "s-")]:
            ax.plot(steps, res[m].mean(1), style, label=m.replace(" u=D", " (u=D, w=1)"))
        ax.set_title(f"{name}: GBCE vs BCE (Fig. 7)")
        ax.set_xlabel("number of base clusterings s")
        ax.set_ylabel("average micro-precision")
        ax.legend()
        ax = axes[1, c]
        for m in [k for k in res if k.startswith("GBCE")]:
            ax.plot(steps, res[m].mean(1), ".-", label=m.replace("GBCE ", ""))
        ax.plot(steps, res["BCE"].mean(1), "k--", label="BCE")
        ax.set_title(f"{name}: label weight u (Fig. 8)")
        ax.set_xlabel("number of base clusterings s")
        ax.set_ylabel("average micro-precision")
        ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--datasets", nargs="+", default=["iris", "wine"])
    p.add_argument("--steps", nargs="+", type=int, default=[1, 2, 3, 5, 10])
    p.add_argument("--runs", type=int, default=8)
    p.add_argument("--pool", type=int, default=50)
    p.add_argument("--n-init", type=int, default=3)
    p.add_argument("--max-iter", type=int, default=150)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("results/gbce_weights.png"))
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    out = run(args.datasets, args.steps, args.runs, args.pool, args.n_init, args.max_iter,
              args.seed, progress=not args.quiet)
    print_tables(out, args.steps)
    plot(out, args.steps, args.out)
    raw = args.out.with_suffix(".json")
    raw.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                               "mp": {d: {m: v.tolist() for m, v in r.items()}
                                      for d, r in out.items()}}, indent=1))
    print(f"\nsaved {args.out} and {raw}; {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
