"""Consensus methods by the names the papers' tables use.

:func:`consensus_labels` fits one method to a label matrix and returns its
hard consensus; a method that cannot run on the input (too few base clusters
for the graph partitioners, for example) raises ``ValueError`` and the caller
records NaN with the reason.
"""

from __future__ import annotations

import warnings

import numpy as np

from consensuskit.data.ensemble import Ensemble

#: settings used by every reproduction (one restart, as in the papers' single runs)
SETTINGS = {
    "MM": "consensuskit.MM(K, n_init=1) (MAP-EM, label_prior=1.01)",
    "BCE": ("consensuskit.BCE(K, alpha_estimate='meanfield', n_init=1) (variational EM, "
            "k-means init on the one-hot labels)"),
    "CSPA": "consensuskit.CSPA(K)",
    "HGPA": "consensuskit.HGPA(K)",
    "MCLA": "consensuskit.MCLA(K)",
    "k-means": ("sklearn KMeans(K, n_init=10) on the one-hot label matrix "
                "(missing label = zero block)"),
    "KCC": "consensuskit.KCC(K, utility=...)",
    "EAC": "consensuskit.EAC(K)",
    "PartitionConsensus": ("consensuskit.PartitionConsensus('vi', max_n_clusters=K, "
                           "missing='singletons') (the base clusterings' VI-optimal partition "
                           "with at most K clusters; a missing label is its own class)"),
}


def make_estimator(method, n_clusters, seed):
    """A fresh estimator for ``method`` (a name of :data:`SETTINGS`)."""
    import consensuskit as ck

    if method == "MM":
        return ck.MM(n_clusters, n_init=1, random_state=seed)
    if method == "BCE":
        return ck.BCE(n_clusters, alpha_estimate="meanfield", n_init=1, random_state=seed)
    if method in ("CSPA", "HGPA", "MCLA", "EAC"):
        return getattr(ck, method)(n_clusters, random_state=seed)
    if method == "PartitionConsensus":
        return ck.PartitionConsensus("vi", max_n_clusters=n_clusters, missing="singletons",
                                     random_state=seed)
    if method.startswith("KCC"):
        utility = method.split("-", 1)[1] if "-" in method else "UH"
        return ck.KCC(n_clusters, utility=utility, random_state=seed)
    raise ValueError(f"unknown consensus method {method!r}")


def consensus_labels(method, X, n_clusters, seed):
    """Hard consensus of ``method`` on label matrix ``X`` (N, M); -1 = missing."""
    ens = X if isinstance(X, Ensemble) else Ensemble.from_labels(X)
    if method == "k-means":
        from sklearn.cluster import KMeans

        A = ens.onehot().toarray()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return KMeans(n_clusters, n_init=10, random_state=seed).fit_predict(A)
    est = make_estimator(method, n_clusters, seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(ens)
    return np.asarray(est.labels_)


def score_methods(methods, X, y, n_clusters, seed, metric):
    """``{method: metric(y, labels)}``; NaN where a method raised ValueError.

    Returns the scores and ``{method: error message}`` for the failures.
    """
    ens = Ensemble.from_labels(X)
    scores, errors = {}, {}
    for m in methods:
        try:
            scores[m] = float(metric(y, consensus_labels(m, ens, n_clusters, seed)))
        except ValueError as exc:
            scores[m] = float("nan")
            errors[m] = str(exc)
    return scores, errors
