"""Resampling consensus for choosing K (Monti et al. 2003, as in ConsensusClusterPlus).

For each candidate K, the items are subsampled ``n_resamples`` times (a fraction
``item_fraction`` without replacement, optionally a fraction of the features or
base clusterings too), each subsample is clustered into K groups, and the
*consensus matrix* records, for every pair, the fraction of the subsamples that
drew both items and put them together.  A stable K gives a consensus matrix of
(near) 0s and 1s; its empirical CDF over pairs is then flat in the middle.
Read off per K:

* the area under the consensus CDF and its relative change ``delta(K)``
  (Monti et al.), computed on ConsensusClusterPlus's histogram grid (100 bins,
  right-closed, R's ``hist`` tolerance) so the numbers are the package's;
* PAC, the proportion of ambiguous clustering (Senbabaoglu et al. 2014): the
  fraction of pairs whose consensus lies in ``(0.1, 0.9]``;
* the final partition: average-linkage clustering of ``1 - consensus``;
* cluster consensus (mean consensus over the pairs inside a cluster) and item
  consensus (mean consensus of an item with each cluster's members), as
  ConsensusClusterPlus's ``calcICL``.

The resampled partitions of one K form an ensemble with missing labels (items
not drawn are ``-1``), and the consensus matrix is its co-association
``c_ij / n_ij``: the same quantity EAC and CSPA use.
"""

from __future__ import annotations

import numbers

import numpy as np
from sklearn.utils import check_random_state

from consensuskit.base import ConsensusEstimator, check_n_clusters, check_positive_int
from consensuskit.consensus.coassociation import condensed_coassociation_distance
from consensuskit.data.ensemble import Ensemble, as_ensemble, code_dtype, sample_pairs

__all__ = [
    "ResamplingConsensus",
    "consensus_cdf",
    "cdf_area",
    "delta_area",
    "proportion_ambiguous",
    "cluster_consensus",
    "item_consensus",
    "choose_k",
    "choose_n_clusters",
    "resolve_n_clusters",
]

#: Histogram bins of the consensus CDF (ConsensusClusterPlus's ``breaks = 100``).
CDF_BREAKS = 100
_METRICS = ("euclidean", "manhattan", "pearson", "spearman")
_CRITERIA = ("pac", "delta_area")
_LINKAGES = ("single", "complete", "average", "weighted", "centroid", "median", "ward")


# -- statistics of one consensus matrix ----------------------------------------------

def consensus_cdf(values, breaks: int = CDF_BREAKS):
    """Empirical CDF of the pairwise consensus values on ``breaks`` equal bins.

    Parameters
    ----------
    values : (n_pairs,) consensus values in [0, 1] (one per unordered pair)
    breaks : number of bins on [0, 1]

    Returns
    -------
    edges : (breaks + 1,) bin edges ``b / breaks``
    cdf : (breaks,) fraction of pairs at or below each bin's right edge.  As R's
        ``hist`` (right-closed bins), an edge counts values up to ``1e-7`` of a
        bin width above it, so a value equal to an edge in exact arithmetic is
        counted there whatever its rounding.
    """
    v = np.sort(np.asarray(values, dtype=np.float64).ravel())
    if v.size == 0:
        raise ValueError("no pairs: the consensus CDF needs at least two items")
    edges = np.arange(breaks + 1) * (1.0 / breaks)
    fuzz = 1e-7 / breaks
    counts = np.searchsorted(v, edges[1:] + fuzz, side="right")
    return edges, counts / v.size


def cdf_area(values, breaks: int = CDF_BREAKS) -> float:
    """Area under the consensus CDF, as ConsensusClusterPlus sums it (bin height x width)."""
    edges, cdf = consensus_cdf(values, breaks)
    return float(np.sum(cdf * np.diff(edges)))


def delta_area(areas) -> np.ndarray:
    """Relative change of the CDF area from K-1 to K; the first entry is the first area."""
    a = np.asarray(areas, dtype=np.float64)
    out = a.copy()
    out[1:] = (a[1:] - a[:-1]) / a[:-1]
    return out


def proportion_ambiguous(values, lower: float = 0.1, upper: float = 0.9) -> float:
    """PAC: fraction of pairs with consensus in ``(lower, upper]`` (lower is better)."""
    v = np.asarray(values, dtype=np.float64)
    return float(np.mean((v > lower) & (v <= upper)))


def _pair_index(n: int):
    i, j = np.triu_indices(n, k=1)
    return i, j


def cluster_consensus(consensus, labels) -> np.ndarray:
    """Mean consensus over the pairs inside each cluster, shape (K,).

    ``consensus`` is the condensed (n(n-1)/2,) consensus vector (scipy's order) or
    the (n, n) matrix; a singleton cluster has no pair and gets NaN.
    """
    from scipy.spatial.distance import squareform

    labels = np.asarray(labels)
    C = np.asarray(consensus, dtype=np.float64)
    if C.ndim == 1:
        C = squareform(C, checks=False)
    K = int(labels.max()) + 1
    out = np.full(K, np.nan)
    for k in range(K):
        idx = np.flatnonzero(labels == k)
        if idx.size > 1:
            block = C[np.ix_(idx, idx)]
            out[k] = (block.sum() - np.trace(block)) / (idx.size * (idx.size - 1))
    return out


def item_consensus(consensus, labels) -> np.ndarray:
    """Mean consensus of each item with the members of each cluster, shape (n, K).

    An item's own entry is left out of its own cluster's mean (a singleton's
    consensus with its own cluster is NaN).
    """
    from scipy.spatial.distance import squareform

    labels = np.asarray(labels)
    C = np.asarray(consensus, dtype=np.float64)
    if C.ndim == 1:
        C = squareform(C, checks=False)
    else:
        C = C.copy()
    np.fill_diagonal(C, 0.0)
    K = int(labels.max()) + 1
    onehot = np.zeros((labels.size, K))
    onehot[np.arange(labels.size), labels] = 1.0
    sums = C @ onehot
    sizes = onehot.sum(axis=0)[None, :] - onehot  # leave the item itself out
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(sizes > 0, sums / np.maximum(sizes, 1), np.nan)


def choose_k(ks, *, pac=None, delta=None, criterion: str = "pac",
             min_delta: float = 0.1) -> int:
    """The K that a criterion picks from the per-K statistics.

    * ``"pac"``: the K with the smallest PAC; on a tie the largest such K (merging
      true groups is as stable as finding them -- both leave no ambiguous pair --
      while splitting a group is not, so the largest stable K is the finest one);
    * ``"delta_area"``: Monti et al.'s reading of the delta-area curve: the
      smallest K after which the next K adds less than ``min_delta`` relative
      CDF area (the largest K if every step adds more).
    """
    ks = [int(k) for k in ks]
    if criterion == "pac":
        p = np.asarray(pac, dtype=np.float64)
        return ks[int(np.flatnonzero(p == p.min())[-1])]
    if criterion == "delta_area":
        d = np.asarray(delta, dtype=np.float64)
        for i in range(len(ks) - 1):
            if d[i + 1] < min_delta:
                return ks[i]
        return ks[-1]
    raise ValueError(f"criterion must be one of {_CRITERIA}; got {criterion!r}")


# -- clustering one subsample ---------------------------------------------------------

def cut_tree_labels(Z: np.ndarray, ks) -> dict:
    """Cut a linkage matrix into exactly K groups for every K in ``ks`` (R's ``cutree``).

    The cut undoes the last K-1 merges, so tied merge heights still give K
    groups (scipy's ``fcluster(maxclust)`` cuts by height and can give fewer).
    """
    from scipy.cluster.hierarchy import cut_tree, fcluster, is_monotonic

    out, tied = {}, []
    if not is_monotonic(Z):  # centroid / median linkage: height cuts are not merge cuts
        tied = [int(k) for k in ks]
        ks = []
    for k in (int(k) for k in ks):
        # fast path: on a monotone tree a height cut with exactly K groups is the same cut
        lab = fcluster(Z, t=k, criterion="maxclust")
        if lab.max() == k:
            out[k] = lab.astype(np.int64) - 1
        else:
            tied.append(k)
    if tied:
        cuts = cut_tree(Z, n_clusters=tied)
        out.update({k: cuts[:, i].astype(np.int64) for i, k in enumerate(tied)})
    return out


def hierarchical_labels(distance, ks, linkage: str = "average") -> dict:
    """Cut one agglomerative tree at every K in ``ks``.

    Parameters
    ----------
    distance : (m(m-1)/2,) condensed distances of the m items
    ks : iterable of int

    Returns
    -------
    dict K -> (m,) int64 labels in 0..K-1.
    """
    from scipy.cluster.hierarchy import linkage as scipy_linkage

    d = np.asarray(distance, dtype=np.float64)
    m = int(round((1 + np.sqrt(1 + 8 * d.size)) / 2))
    if m < 2:
        return {k: np.zeros(m, dtype=np.int64) for k in ks}
    return cut_tree_labels(scipy_linkage(d, method=linkage), ks)


def _feature_distance(F: np.ndarray, metric: str) -> np.ndarray:
    """Condensed distances between the rows of ``F`` (pearson/spearman: 1 - correlation)."""
    from scipy.spatial.distance import pdist
    from scipy.stats import rankdata

    if metric == "euclidean":
        return pdist(F, "euclidean")
    if metric == "manhattan":
        return pdist(F, "cityblock")
    G = rankdata(F, axis=1) if metric == "spearman" else F
    with np.errstate(invalid="ignore", divide="ignore"):
        d = pdist(G, "correlation")
    if not np.all(np.isfinite(d)):
        raise ValueError(f"{metric} distance is undefined for an item with constant features")
    return d


def _sub_condensed(d_full: np.ndarray, n: int, rows: np.ndarray) -> np.ndarray:
    """The condensed distances among ``rows`` (sorted) taken from the full condensed vector."""
    i, j = _pair_index(rows.size)
    a, b = rows[i], rows[j]
    return d_full[n * a - a * (a + 1) // 2 + (b - a - 1)]


class ResamplingConsensus(ConsensusEstimator):
    """Consensus clustering by item resampling; chooses K (Monti et al. 2003).

    ``fit(X)`` takes the base-clustering matrix (``data="labels"``, n x M, -1 =
    missing), whose subsamples are clustered by average-linkage on one minus
    their co-association (or by any consensus estimator given as ``clusterer``);
    with ``data="features"`` it takes a feature matrix (n x d) and works like
    ConsensusClusterPlus with ``clusterAlg = "hc"`` or ``"km"``.

    Parameters
    ----------
    n_clusters : int or None, default None
        None: K is chosen from ``k_range`` by ``criterion``.  An int: ``labels_``
        is the consensus partition at that K (the statistics are still
        reported over ``k_range``).
    k_range : (int, int), default (2, 8)
        Inclusive range of candidate K.
    n_resamples : int, default 100
        Subsamples per K (ConsensusClusterPlus's ``reps``).
    item_fraction : float in (0, 1], default 0.8
        Fraction of items drawn without replacement (``pItem``).
    feature_fraction : float in (0, 1], default 1.0
        Fraction of the features (or base clusterings) drawn per subsample
        (``pFeature``).
    data : {"labels", "features"}, default "labels"
    clusterer : {"hierarchical", "kmeans"} or a consensus estimator, default "hierarchical"
        "hierarchical": one tree per subsample (``linkage``) cut at every K;
        "kmeans": k-means per K (features only, one random start, as ``km``);
        an estimator with an ``n_clusters`` parameter (labels only) is cloned
        and refitted on each sub-ensemble.
    linkage : str, default "average"
        Linkage of the subsample trees (``innerLinkage``).
    final_linkage : str, default "average"
        Linkage of the tree on ``1 - consensus`` that gives each K's partition.
    metric : {"euclidean", "manhattan", "pearson", "spearman"}, default "euclidean"
        Item distance for ``data="features"``.
    criterion : {"pac", "delta_area"}, default "pac"
        How K is chosen when ``n_clusters`` is None; see :func:`choose_k`.
    pac_interval : (float, float), default (0.1, 0.9)
    min_delta : float, default 0.1
        Threshold of the ``"delta_area"`` criterion.
    random_state : None, int or RandomState
    progress : bool, default False
        Show a progress bar over the subsamples.
    n_pairs : int or None, default None
        None: the statistics use every pair (the exact consensus matrix, memory
        ``n(n-1)/2`` floats per K).  An int: they are estimated on ``n_pairs`` pairs
        drawn uniformly without replacement (:func:`~consensuskit.data.ensemble.sample_pairs`,
        memory O(n_pairs + n * n_resamples)), with standard errors ``cdf_se_``,
        ``area_se_`` and ``pac_se_`` (each statistic is a mean over pairs; SE = the
        pairs' standard deviation / sqrt(n_pairs)).  For large n (beyond
        ``DENSE_COASSOCIATION_LIMIT`` = 20,000) also give ``clusterer`` as a consensus
        estimator (e.g. ``MM(n_init=1)``): average-linkage trees need every pair.  Then
        each K's partition is that estimator refitted on the K resampled partitions
        (an ensemble with the items not drawn missing), ``cluster_consensus_`` is
        estimated on the sampled pairs inside each cluster, and ``item_consensus_``
        and :meth:`consensus_matrix` are not available.

    Attributes
    ----------
    ks_ : (n_k,) candidate K
    resamples_ : dict K -> (n, n_resamples) integer labels (smallest type), -1 where not drawn
    area_, delta_area_, pac_ : (n_k,) per-K statistics
    cdf_ : (n_k, 100) consensus CDFs on the grid ``cdf_edges_[1:]``
    labels_by_k_ : dict K -> (n,) consensus partition
    cluster_consensus_ : dict K -> (K,)
    item_consensus_ : dict K -> (n, K)
    n_clusters_ : the chosen (or given) K; ``labels_`` its partition.

    Notes
    -----
    Memory (exact, ``n_pairs=None``): the condensed consensus of every K is kept
    (n(n-1)/2 floats each, e.g. 7 x 100 MB at n = 5,000), and each subsample builds its
    own distance matrix; meant for up to a few thousand items (the automatic choice of
    K for other estimators subsamples 1,000).  With ``n_pairs`` and an estimator as
    ``clusterer`` nothing grows with n^2: the resampled labels (n x n_resamples per K, in
    the smallest integer type) and the sampled pairs.
    """

    def __init__(self, n_clusters=None, *, k_range=(2, 8), n_resamples=100, item_fraction=0.8,
                 feature_fraction=1.0, data="labels", clusterer="hierarchical",
                 linkage="average", final_linkage="average", metric="euclidean",
                 criterion="pac", pac_interval=(0.1, 0.9), min_delta=0.1, random_state=None,
                 progress=False, n_pairs=None):
        self.n_clusters = n_clusters
        self.k_range = k_range
        self.n_resamples = n_resamples
        self.item_fraction = item_fraction
        self.feature_fraction = feature_fraction
        self.data = data
        self.clusterer = clusterer
        self.linkage = linkage
        self.final_linkage = final_linkage
        self.metric = metric
        self.criterion = criterion
        self.pac_interval = pac_interval
        self.min_delta = min_delta
        self.random_state = random_state
        self.progress = progress
        self.n_pairs = n_pairs

    # -- fitting ---------------------------------------------------------------------
    def fit(self, X, y=None):
        """Resample, cluster, and summarise; ``X`` is labels or features (see ``data``)."""
        if self.data == "labels":
            return super().fit(X)
        if self.data != "features":
            raise ValueError(f"data must be 'labels' or 'features'; got {self.data!r}")
        from sklearn.utils.validation import check_array

        F = check_array(X, dtype=np.float64, ensure_min_samples=2)
        self.ensemble_ = None
        self.n_features_in_ = F.shape[1]
        self._fit_source(F, F.shape[0])
        return self

    def _fit(self, ensemble: Ensemble):
        self._fit_source(ensemble, ensemble.n_samples)

    def _check_params(self, n: int):
        if n < 3:
            raise ValueError(f"n_samples={n}: resampling consensus needs at least 3 samples")
        if not isinstance(self.k_range, (tuple, list)) or len(self.k_range) != 2:
            raise ValueError(f"k_range must be a pair (k_min, k_max); got {self.k_range!r}")
        lo = check_positive_int(self.k_range[0], "k_range[0]", minimum=2)
        hi = check_positive_int(self.k_range[1], "k_range[1]", minimum=lo)
        ks = list(range(lo, hi + 1))
        if self.n_clusters is not None:
            k = check_n_clusters(self.n_clusters, n)
            ks = sorted(set(ks) | {k})
        for name in ("item_fraction", "feature_fraction"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not 0 < v <= 1:
                raise ValueError(f"{name} must be a number in (0, 1]; got {v!r}")
        m = int(round(self.item_fraction * n))
        if m <= max(ks):
            raise ValueError(
                f"a subsample of {m} items (item_fraction={self.item_fraction} of {n}) cannot "
                f"be cut into K={max(ks)} clusters; lower k_range or raise item_fraction"
            )
        if self.criterion not in _CRITERIA:
            raise ValueError(f"criterion must be one of {_CRITERIA}; got {self.criterion!r}")
        lower, upper = self.pac_interval
        if not 0 <= lower < upper <= 1:
            raise ValueError(f"pac_interval must satisfy 0 <= lower < upper <= 1; got "
                             f"{self.pac_interval!r}")
        for name in ("linkage", "final_linkage"):
            if getattr(self, name) not in _LINKAGES:
                raise ValueError(f"{name} must be one of {_LINKAGES}; got {getattr(self, name)!r}")
        if self.data == "features" and self.metric not in _METRICS:
            raise ValueError(f"metric must be one of {_METRICS}; got {self.metric!r}")
        check_positive_int(self.n_resamples, "n_resamples")
        if self.n_pairs is not None:
            check_positive_int(self.n_pairs, "n_pairs")
        return ks, m

    def _fit_source(self, source, n: int):
        ks, m = self._check_params(n)
        rs = check_random_state(self.random_state)
        draw = self._partitioner(source, ks, rs)
        H = self.n_resamples
        small = code_dtype([max(ks)])  # labels 0..K-1 and -1
        resamples = {k: np.full((n, H), -1, dtype=small) for k in ks}
        it = range(H)
        if self.progress:
            from tqdm.auto import tqdm

            it = tqdm(it, desc="resampling consensus")
        for h in it:
            rows = np.sort(rs.choice(n, size=m, replace=False))
            for k, lab in draw(rows).items():
                resamples[k][rows, h] = lab
        self.fit_resamples(resamples)

    def _partitioner(self, source, ks, rs):
        """A function ``rows -> {K: labels}`` clustering one subsample."""
        clusterer = self.clusterer
        n = source.n_samples if isinstance(source, Ensemble) else source.shape[0]
        n_cols = source.n_partitions if isinstance(source, Ensemble) else source.shape[1]
        n_keep = max(1, int(round(self.feature_fraction * n_cols)))
        all_cols = n_keep == n_cols

        if isinstance(clusterer, str) and clusterer not in ("hierarchical", "kmeans"):
            raise ValueError("clusterer must be 'hierarchical', 'kmeans' or a consensus "
                             f"estimator; got {clusterer!r}")
        if isinstance(source, Ensemble):
            if clusterer == "kmeans":
                raise ValueError("clusterer='kmeans' needs data='features'")
            if not isinstance(clusterer, str):
                return self._estimator_partitioner(source, ks, rs, n_keep)
            full = condensed_coassociation_distance(source) if all_cols else None

            def draw_labels(rows):
                if full is not None:
                    d = _sub_condensed(full, n, rows)
                else:
                    cols = np.sort(rs.choice(n_cols, size=n_keep, replace=False))
                    sub = Ensemble.from_labels(source.codes[np.ix_(rows, cols)],
                                               allow_missing_rows=True)
                    d = condensed_coassociation_distance(sub)
                return hierarchical_labels(d, ks, self.linkage)

            return draw_labels

        if not isinstance(clusterer, str):
            raise ValueError("a consensus estimator as clusterer needs data='labels'")
        if clusterer == "kmeans":
            from sklearn.cluster import KMeans

            def draw_kmeans(rows):
                F = source[rows]
                if not all_cols:
                    F = F[:, np.sort(rs.choice(n_cols, size=n_keep, replace=False))]
                return {k: KMeans(k, init="random", n_init=1, max_iter=10,
                                  random_state=rs.randint(2**31 - 1)).fit_predict(F)
                        for k in ks}

            return draw_kmeans
        full = _feature_distance(source, self.metric) if all_cols else None

        def draw_features(rows):
            if full is not None:
                d = _sub_condensed(full, n, rows)
            else:
                cols = np.sort(rs.choice(n_cols, size=n_keep, replace=False))
                d = _feature_distance(source[np.ix_(rows, cols)], self.metric)
            return hierarchical_labels(d, ks, self.linkage)

        return draw_features

    def _estimator_partitioner(self, ens: Ensemble, ks, rs, n_keep):
        from sklearn.base import clone

        if "n_clusters" not in self.clusterer.get_params():
            raise ValueError("a clusterer estimator needs an n_clusters parameter")

        def draw(rows):
            cols = np.sort(rs.choice(ens.n_partitions, size=n_keep, replace=False))
            sub = ens.codes[np.ix_(rows, cols)]
            labelled = (sub >= 0).any(axis=1)  # a row no drawn column labels sits out
            out = {}
            for k in ks:
                est = clone(self.clusterer).set_params(n_clusters=k)
                if "random_state" in est.get_params():
                    est.set_params(random_state=rs.randint(2**31 - 1))
                lab = np.full(rows.size, -1, dtype=np.int64)
                lab[labelled] = est.fit(sub[labelled]).labels_
                out[k] = lab
            return out

        return draw

    def fit_resamples(self, resamples: dict):
        """Summarise given resampled partitions (what :meth:`fit` draws itself).

        Parameters
        ----------
        resamples : dict K -> (n, H) int labels, -1 where a subsample did not draw
            the item (e.g. partitions produced by other software).
        """
        from scipy.cluster.hierarchy import linkage

        ks = sorted(int(k) for k in resamples)
        lower, upper = self.pac_interval
        self.ks_ = np.asarray(ks)
        self.resamples_ = {k: np.asarray(resamples[k]) for k in ks}
        for k in ks:
            if self.resamples_[k].dtype.kind not in "iu":
                self.resamples_[k] = self.resamples_[k].astype(np.int64)
        if self.n_pairs is not None:
            return self._fit_resamples_sampled(ks)
        areas, pacs, cdfs = [], [], []
        self.labels_by_k_, self.cluster_consensus_, self.item_consensus_ = {}, {}, {}
        self.consensus_ = {}
        for k in ks:
            ens = Ensemble.from_labels(self.resamples_[k], allow_missing_rows=True)
            dist = condensed_coassociation_distance(ens)
            cons = 1.0 - dist
            self.consensus_[k] = cons
            edges, cdf = consensus_cdf(cons)
            cdfs.append(cdf)
            areas.append(float(np.sum(cdf * np.diff(edges))))
            pacs.append(proportion_ambiguous(cons, lower, upper))
            lab = cut_tree_labels(linkage(dist, method=self.final_linkage), [k])[k]
            self.labels_by_k_[k] = lab
            self.cluster_consensus_[k] = cluster_consensus(cons, lab)
            self.item_consensus_[k] = item_consensus(cons, lab)
        return self._set_statistics(ks, edges, cdfs, areas, pacs)

    def _set_statistics(self, ks, edges, cdfs, areas, pacs):
        """The fitted CDF, area, delta area and PAC over ``ks``, the chosen K and its
        labels (both modes)."""
        self.cdf_edges_ = edges
        self.cdf_ = np.asarray(cdfs)
        self.area_ = np.asarray(areas)
        self.delta_area_ = delta_area(areas)
        self.pac_ = np.asarray(pacs)
        if self.n_clusters is None:
            self.n_clusters_ = choose_k(ks, pac=self.pac_, delta=self.delta_area_,
                                        criterion=self.criterion, min_delta=self.min_delta)
        else:
            self.n_clusters_ = int(self.n_clusters)
        self.labels_ = self.labels_by_k_[self.n_clusters_]
        return self

    def _fit_resamples_sampled(self, ks):
        """Statistics on ``n_pairs`` sampled pairs, with their standard errors."""
        from sklearn.base import clone

        n = next(iter(self.resamples_.values())).shape[0]
        total = n * (n - 1) // 2
        P = min(int(self.n_pairs), total)
        rs = check_random_state(self.random_state)
        pairs = sample_pairs(n, P, rs)
        lower, upper = self.pac_interval
        edges = np.arange(CDF_BREAKS + 1) * (1.0 / CDF_BREAKS)
        fuzz = 1e-7 / CDF_BREAKS
        areas, area_se, pacs, pac_se, cdfs, cdf_se = [], [], [], [], [], []
        self.labels_by_k_, self.cluster_consensus_ = {}, {}
        self.item_consensus_ = None
        self.pairs_ = pairs
        self.pair_consensus_ = {}
        for k in ks:
            ens = Ensemble.from_labels(self.resamples_[k], allow_missing_rows=True)
            c, nn = ens.coassociation(pairs)
            cons = np.where(nn > 0, c / np.maximum(nn, 1), 0.0)
            self.pair_consensus_[k] = cons
            _, cdf = consensus_cdf(cons)
            cdfs.append(cdf)
            cdf_se.append(np.sqrt(cdf * (1 - cdf) / P))
            # area = mean over pairs of g(v) = (number of edges at or above v) / breaks
            g = (CDF_BREAKS - np.searchsorted(edges[1:] + fuzz, cons, side="left")) / CDF_BREAKS
            areas.append(float(g.mean()))
            area_se.append(float(g.std(ddof=1) / np.sqrt(P)) if P > 1 else np.nan)
            amb = (cons > lower) & (cons <= upper)
            pacs.append(float(amb.mean()))
            pac_se.append(float(amb.std(ddof=1) / np.sqrt(P)) if P > 1 else np.nan)
            lab = self._sampled_partition(clone, k)
            self.labels_by_k_[k] = lab
            same = lab[pairs[:, 0]] == lab[pairs[:, 1]]
            cc = np.full(k, np.nan)
            for c_ in range(k):
                inside = same & (lab[pairs[:, 0]] == c_)
                if inside.any():
                    cc[c_] = cons[inside].mean()
            self.cluster_consensus_[k] = cc
        self.cdf_se_ = np.asarray(cdf_se)
        self.area_se_ = np.asarray(area_se)
        self.pac_se_ = np.asarray(pac_se)
        self.consensus_ = None
        return self._set_statistics(ks, edges, cdfs, areas, pacs)

    def _sampled_partition(self, clone, k):
        """Each K's partition without the n x n consensus: the clusterer estimator refitted
        on the K resampled partitions, or (small n) average linkage as in the exact mode."""
        R = self.resamples_[k]
        if not isinstance(self.clusterer, str):
            est = clone(self.clusterer).set_params(n_clusters=k)
            if "random_state" in est.get_params():
                est.set_params(random_state=self.random_state)
            labelled = (R >= 0).any(axis=1)
            lab = np.full(R.shape[0], -1, dtype=np.int64)
            lab[labelled] = est.fit(R[labelled]).labels_
            if not labelled.all():
                raise ValueError(f"{int((~labelled).sum())} item(s) were drawn by no "
                                 "subsample: raise n_resamples or item_fraction")
            return lab
        from scipy.cluster.hierarchy import linkage

        dist = condensed_coassociation_distance(Ensemble.from_labels(R, allow_missing_rows=True))
        return cut_tree_labels(linkage(dist, method=self.final_linkage), [k])[k]

    # -- results ---------------------------------------------------------------------
    def consensus_matrix(self, k=None) -> np.ndarray:
        """The (n, n) consensus matrix at ``k`` (default: the chosen K), diagonal 1."""
        from scipy.spatial.distance import squareform

        if self.consensus_ is None:
            raise ValueError("fitted with n_pairs: only the sampled pairs' consensus is kept "
                             "(pairs_, pair_consensus_)")
        k = self.n_clusters_ if k is None else int(k)
        C = squareform(self.consensus_[k], checks=False)
        np.fill_diagonal(C, 1.0)
        return C

    def summary(self):
        """Per-K table: area, delta area, PAC, mean cluster consensus (a DataFrame)."""
        import pandas as pd

        return pd.DataFrame({
            "k": self.ks_,
            "area": self.area_,
            "delta_area": self.delta_area_,
            "pac": self.pac_,
            "mean_cluster_consensus": [np.nanmean(self.cluster_consensus_[k]) for k in self.ks_],
        }).set_index("k")

    def plot(self, k=None, axes=None):
        """Consensus CDFs, delta area, PAC and the ordered consensus matrix at ``k``.

        Returns the matplotlib Figure (four panels unless ``axes`` is given).
        """
        import matplotlib.pyplot as plt
        from scipy.cluster.hierarchy import leaves_list, linkage

        k = self.n_clusters_ if k is None else int(k)
        if axes is None:
            fig, axes = plt.subplots(1, 4, figsize=(17, 3.8))
        else:
            fig = np.ravel(axes)[0].figure
        a0, a1, a2, a3 = np.ravel(axes)
        colors = plt.cm.viridis(np.linspace(0, 0.95, len(self.ks_)))
        for kk, cdf, c in zip(self.ks_, self.cdf_, colors):
            a0.step(self.cdf_edges_[1:], cdf, where="post", color=c, label=f"K={kk}")
        a0.set(xlabel="consensus index", ylabel="CDF", title="consensus CDF")
        a0.legend(fontsize="small")
        a1.plot(self.ks_, self.delta_area_, "o-")
        a1.set(xlabel="K", ylabel="relative change in CDF area", title="delta area")
        a2.plot(self.ks_, self.pac_, "o-")
        a2.axvline(self.n_clusters_, color="grey", ls=":")
        a2.set(xlabel="K", ylabel="PAC", title=f"PAC (chosen K = {self.n_clusters_})")
        order = leaves_list(linkage(1.0 - self.consensus_[k], method=self.final_linkage))
        C = self.consensus_matrix(k)[np.ix_(order, order)]
        im = a3.imshow(C, cmap="Blues", vmin=0, vmax=1, interpolation="nearest")
        a3.set(title=f"consensus matrix, K={k}", xticks=[], yticks=[])
        fig.colorbar(im, ax=a3, fraction=0.046)
        fig.tight_layout()
        return fig

    def plot_item_consensus(self, k=None, ax=None):
        """Stacked bars of each item's consensus with every cluster, items ordered by cluster."""
        import matplotlib.pyplot as plt

        k = self.n_clusters_ if k is None else int(k)
        ic = np.nan_to_num(self.item_consensus_[k])
        lab = self.labels_by_k_[k]
        order = np.lexsort((-ic[np.arange(lab.size), lab], lab))
        if ax is None:
            _, ax = plt.subplots(figsize=(10, 3))
        bottom = np.zeros(lab.size)
        for c in range(ic.shape[1]):
            ax.bar(np.arange(lab.size), ic[order, c], bottom=bottom, width=1.0, label=f"{c}")
            bottom += ic[order, c]
        ax.set(xlabel="item (by consensus cluster)", ylabel="item consensus",
               title=f"item consensus, K={k}", xticks=[])
        ax.legend(title="cluster", fontsize="small", ncol=min(k, 8))
        return ax.figure


# -- automatic K for other estimators -------------------------------------------------

#: Settings of the automatic choice of K (``n_clusters=None``).
AUTO_K_RANGE = (2, 8)
AUTO_K_RESAMPLES = 50
AUTO_K_MAX_SAMPLES = 1000


def choose_n_clusters(X, *, k_range=AUTO_K_RANGE, n_resamples=AUTO_K_RESAMPLES,
                      max_samples=AUTO_K_MAX_SAMPLES, criterion="pac", random_state=None):
    """K for a label ensemble by resampling consensus (the rule behind ``n_clusters=None``).

    Average-linkage clustering of one minus the co-association of 80% subsamples,
    ``n_resamples`` times per K in ``k_range``; K with the smallest PAC (or by
    ``criterion``).  Above ``max_samples`` points a random subset of that size is
    used, which keeps the cost at O(max_samples^2) per subsample.

    Returns
    -------
    k : int
    fitted : the fitted :class:`ResamplingConsensus` (its ``summary()`` and ``plot()``).
    """
    ens = as_ensemble(X)
    rs = check_random_state(random_state)
    n = ens.n_samples
    if n > max_samples:
        ens = ens.subset(np.sort(rs.choice(n, size=max_samples, replace=False)))
        n = max_samples
    hi = min(int(k_range[1]), int(round(0.8 * n)) - 1)
    if hi < int(k_range[0]):
        raise ValueError(f"{n} points are too few to choose n_clusters by resampling; "
                         "pass n_clusters")
    fitted = ResamplingConsensus(k_range=(int(k_range[0]), hi), n_resamples=n_resamples,
                                 criterion=criterion, random_state=rs).fit(ens)
    return int(fitted.n_clusters_), fitted


def resolve_n_clusters(estimator, ensemble: Ensemble) -> int:
    """``estimator.n_clusters`` checked, or chosen by :func:`choose_n_clusters` when None.

    On the automatic path the fitted :class:`ResamplingConsensus` is kept as
    ``estimator.auto_k_``.
    """
    if estimator.n_clusters is not None:
        return check_n_clusters(estimator.n_clusters, ensemble.n_samples)
    k, fitted = choose_n_clusters(ensemble, random_state=getattr(estimator, "random_state", None))
    estimator.auto_k_ = fitted
    return k
