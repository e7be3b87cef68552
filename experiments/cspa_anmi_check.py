"""Which CSPA partitioner gives the better consensus by Strehl & Ghosh's own criterion?

For glass, iris, wine and ecoli (seeds 0-1; 50 k-means partitions with k in K..K+9;
20% of the labels removed; "noisy" also replaces 20% of the rest at random) prints,
for CSPA's spectral and METIS partitions, the ARI with the classes and, in brackets,
the average NMI (geometric) with the base clusterings over the rows each labels
(ANMI, the criterion Strehl & Ghosh use to choose among consensus functions), and
the ARI of the partition that criterion picks.

Usage::

    python experiments/cspa_anmi_check.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

sys.path.insert(0, str(Path(__file__).resolve().parent))


def anmi(X, labels):
    """Mean NMI of ``labels`` with each column of ``X`` over the rows that column labels."""
    return float(np.mean([
        normalized_mutual_info_score(X[X[:, j] >= 0, j], labels[X[:, j] >= 0],
                                     average_method="geometric")
        for j in range(X.shape[1])]))


def main():
    from bench_graph_consensus import replace_labels

    import consensuskit as ck
    from consensuskit.data import datasets, generate

    picks_spectral = total = 0
    for ds in ["glass", "iris", "wine", "ecoli"]:
        F, y = datasets.load(ds)
        K = len(np.unique(y))
        for seed in range(2):
            X = generate.kmeans_partitions(F, 50, n_clusters=(K, K + 9), random_state=seed)
            Xm = generate.drop_labels(X, 0.2, random_state=seed)
            for kind in ("incomplete", "noisy"):
                Z = replace_labels(Xm, 0.2, np.random.default_rng(seed)) if kind == "noisy" else Xm
                s = ck.CSPA(K, random_state=0).fit(Z).labels_
                m = ck.CSPA(K, partitioner="metis", random_state=0).fit(Z).labels_
                a_s, a_m = anmi(Z, s), anmi(Z, m)
                picks_spectral += a_s >= a_m
                total += 1
                pick = s if a_s >= a_m else m
                print(f"{ds:6s} seed {seed} {kind:10s} spectral {adjusted_rand_score(y, s):.3f} "
                      f"({a_s:.3f})  metis {adjusted_rand_score(y, m):.3f} ({a_m:.3f})  "
                      f"ANMI picks {adjusted_rand_score(y, pick):.3f}", flush=True)
    print(f"ANMI prefers the spectral partition in {picks_spectral} of {total} cases")


if __name__ == "__main__":
    main()
