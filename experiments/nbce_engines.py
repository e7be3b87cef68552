"""NBCE's engines side by side on small data: held-out perplexity of Gibbs (the
estimator's defaults), VB (FSD) and CVB (TSB and FSD), and their numbers of clusters.

Each bundled small dataset (``--datasets``) gets an ensemble of ``--M`` k-means
partitions (k drawn per column from ``--k``, or a fixed k), its rows split 80/20 at
random; every engine is fitted on the 80% and scored on the 20% (labels a column never
showed in training are treated as missing).  Variational engines that end with a single
cluster say so (a warning of the estimator).

    PYTHONPATH=$PWD python experiments/nbce_engines.py --datasets wine iris glass --k 3
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

ENGINES = {
    "Gibbs tsb": dict(inference="gibbs", prior="tsb"),
    "VB fsd": dict(inference="vb", prior="fsd"),
    "CVB tsb": dict(inference="cvb", prior="tsb"),
    "CVB fsd": dict(inference="cvb", prior="fsd"),
}


def main(argv=None):
    import consensuskit as ck
    from consensuskit.data import datasets
    from consensuskit.data.generate import kmeans_partitions

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--datasets", nargs="*",
                   default=["iris", "wine", "glass", "ecoli", "bupa", "pima"])
    p.add_argument("--M", type=int, default=10)
    p.add_argument("--k", type=int, nargs="*", default=[2, 10], help="k, or a range lo hi")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    k = a.k[0] if len(a.k) == 1 else tuple(a.k)
    print(f"{'data':<12}{'N':>5} " + " ".join(f"{e + ' perp':>15} {'K':>3}" for e in ENGINES)
          + "   cpu s per engine")
    for name in a.datasets:
        features, _ = datasets.load(name)
        X = kmeans_partitions(features, a.M, n_clusters=k, random_state=a.seed)
        rng = np.random.default_rng(a.seed)
        test = rng.random(X.shape[0]) < 0.2
        cells, cpus = [], []
        for kw in ENGINES.values():
            est = ck.NBCE(random_state=a.seed, **kw)
            c0 = time.process_time()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                est.fit(X[~test])
            cpus.append(time.process_time() - c0)
            cells.append((est.perplexity(X[test], unknown="missing"), est.n_clusters_))
        print(f"{name:<12}{X.shape[0]:>5} " + " ".join(f"{pp:>15.4f} {kk:>3}" for pp, kk in cells)
              + "   " + " ".join(f"{c:.1f}" for c in cpus), flush=True)


if __name__ == "__main__":
    main()
