"""GBCE's feature weights on bundled data sets with many features (D against M = 10).

For each data set (rows subsampled to at most 2,000 with seed 11, features standardised,
constant columns dropped) and each ensemble family (k-means, k-means on random feature
subsets; M = 10, k drawn per column from 2 to 2K), fits BCE, GBCE with unit weights,
GBCE with ``label_weight="n_features"`` (the paper's weighting in its experiments) and GBCE
with ``feature_weight=M/D``, every other setting at its default, and prints one JSON line:
ARI with the classes, ``sum(alpha_)``, CPU seconds, and GBCE's ``feature_share_``.

    python experiments/gbce_feature_weights.py dermatology_358 optdigits ionosphere \\
        synthetic_control wine
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def cell(name, family, n_partitions=10, max_rows=2000):
    from defaults_on_every_dataset import bundled_rows
    from sklearn.metrics import adjusted_rand_score

    import consensuskit as ck
    from consensuskit.data import generate

    F, y, _ = bundled_rows(name, max_rows, seed=11)
    K, D = len(np.unique(y)), F.shape[1]
    make = {"kmeans": generate.kmeans_partitions,
            "rfs": generate.random_feature_partitions}[family]
    X = make(F, n_partitions, n_clusters=(2, 2 * K), random_state=5)
    fits = {
        "bce": (ck.BCE(K, random_state=0), {}),
        "gbce_unit": (ck.GBCE(K, random_state=0), {"features": F}),
        "gbce_label_weight_D": (ck.GBCE(K, label_weight="n_features", random_state=0),
                                {"features": F}),
        "gbce_feature_weight_M_over_D": (
            ck.GBCE(K, feature_weight=n_partitions / D, random_state=0), {"features": F}),
    }
    out = {"data": name, "family": family, "D": D, "M": n_partitions, "K": K}
    for tag, (est, kw) in fits.items():
        t = time.process_time()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est.fit(X, **kw)
        out[tag] = {"ari": round(float(adjusted_rand_score(y, est.labels_)), 3),
                    "sum_alpha": round(float(np.sum(est.alpha_)), 3),
                    "cpu": round(time.process_time() - t, 2)}
        if hasattr(est, "feature_share_"):
            out[tag]["feature_share"] = round(est.feature_share_, 3)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("datasets", nargs="+")
    p.add_argument("--families", nargs="*", default=["kmeans", "rfs"])
    args = p.parse_args(argv)
    for name in args.datasets:
        for family in args.families:
            print(json.dumps(cell(name, family)), flush=True)


if __name__ == "__main__":
    main()
