"""Graph-based consensus functions: CSPA, HGPA, MCLA (Strehl & Ghosh 2002) and HBGF
(Fern & Brodley 2004).

All four read the base clusterings as the hypergraph whose hyperedges are the
base clusters, i.e. the sparse one-hot matrix ``B`` (n x sum_j k_j, one column
per base cluster; a missing label is a zero block) from
:meth:`Ensemble.onehot`.  None of them forms a dense n x n array above
``DENSE_COASSOCIATION_LIMIT`` (20,000) points:

* CSPA partitions the co-association graph (spectral clustering by default,
  METIS on request); exactly (sparse ``B B^T``) for ``n <= max_exact``, else a
  sparse graph restricted to sampled same-cluster neighbours (O(n * n_neighbors)
  edges);
* HGPA cuts the hypergraph itself with KaHyPar (configuration shipped in
  ``consensuskit/consensus/data/hgpa_kahypar.ini``), falling back to METIS on its
  star expansion (n + sum_j k_j vertices, one edge per observed label) only if
  KaHyPar is missing or fails;
* MCLA works on the (sum_j k_j) x (sum_j k_j) meta-graph and an n x K
  association matrix;
* HBGF embeds the (n + sum_j k_j)-vertex bipartite graph spectrally via the
  (sum_j k_j) x (sum_j k_j) Gram matrix of the normalised biadjacency.

Graph partitioning uses METIS through :mod:`pymetis` and hypergraph
partitioning KaHyPar through :mod:`kahypar` (both seeded from ``random_state``).
"""

from __future__ import annotations

import warnings
from importlib import resources

import numpy as np
import scipy.sparse as sp
from sklearn.utils import check_random_state

from consensuskit.base import ConsensusEstimator, check_positive_float, check_positive_int
from consensuskit.data.ensemble import DENSE_COASSOCIATION_LIMIT, Ensemble

__all__ = ["CSPA", "HGPA", "MCLA", "HBGF", "metis_partition", "kahypar_partition",
           "spectral_partition", "hyperedge_cut", "max_part_size"]

#: Integer resolution of METIS edge weights (similarities in [0, 1] are scaled by it).
WEIGHT_SCALE = 1000


def _seed(random_state) -> int:
    return int(check_random_state(random_state).randint(0, 2**31 - 1))


def metis_partition(W: sp.spmatrix, n_parts: int, random_state=None, vweights=None,
                    return_cut: bool = False):
    """Partition a symmetric, non-negative sparse graph into ``n_parts`` with METIS.

    Parameters
    ----------
    W : sparse (V, V)
        Symmetric edge weights in [0, 1] (scaled by ``WEIGHT_SCALE`` and rounded;
        edges rounding to 0 and the diagonal are dropped).
    n_parts : int
        Number of parts (METIS balances part sizes, ~3% imbalance).
    random_state : seeds METIS.
    vweights : None or (V,) int vertex weights.

    return_cut : bool
        Also return METIS's edge cut (in scaled integer weights).

    Returns
    -------
    parts : ndarray of int64, shape (V,)
    cut : int, only with ``return_cut``.
    """
    import pymetis

    V = W.shape[0]
    if n_parts == 1:
        parts = np.zeros(V, dtype=np.int64)
        return (parts, 0) if return_cut else parts
    W = sp.csr_matrix(W, dtype=np.float64)
    W.setdiag(0)
    W.data = np.rint(W.data * WEIGHT_SCALE)
    W.eliminate_zeros()
    W.sort_indices()
    opts = pymetis.Options(seed=_seed(random_state) % (2**31 - 1))
    kwargs = {}
    if vweights is not None:
        kwargs["vweights"] = np.asarray(vweights, dtype=np.int64)
    if W.nnz == 0:
        # no edges: METIS would still balance; spread the vertices round-robin
        parts = np.arange(V, dtype=np.int64) % n_parts
        return (parts, 0) if return_cut else parts
    res = pymetis.part_graph(
        n_parts,
        adjacency=pymetis.CSRAdjacency(W.indptr.astype(np.int64), W.indices.astype(np.int64)),
        eweights=W.data.astype(np.int64),
        options=opts,
        **kwargs,
    )
    parts = np.asarray(res.vertex_part, dtype=np.int64)
    return (parts, int(res.edge_cuts)) if return_cut else parts


def relabel_consecutive(labels: np.ndarray) -> np.ndarray:
    """Map the distinct labels, in sorted order, to 0..K'-1."""
    _, inv = np.unique(labels, return_inverse=True)
    return inv.astype(np.int64)


def _check_parts(k: int, n_vertices: int, what: str):
    if k > n_vertices:
        raise ValueError(f"n_clusters={k} is more than the number of {what} ({n_vertices})")


def spectral_partition(W: sp.spmatrix, n_parts: int, random_state=None) -> np.ndarray:
    """Normalised spectral clustering of a symmetric non-negative affinity ``W`` (V, V).

    scikit-learn's :class:`~sklearn.cluster.SpectralClustering` (precomputed
    affinity, k-means on the embedding), with the LOBPCG eigensolver: ARPACK's
    shift-invert mode took over ten minutes on a 20,000-point sampled graph whose
    clusters give nearly equal leading eigenvalues; LOBPCG takes seconds.  Unlike
    METIS it does not force balanced parts.
    """
    from sklearn.cluster import SpectralClustering

    if n_parts == 1:
        return np.zeros(W.shape[0], dtype=np.int64)
    with warnings.catch_warnings():
        # a co-association graph of well separated groups is not connected; the
        # embedding is still the right one (one indicator vector per component)
        warnings.filterwarnings("ignore", message="Graph is not fully connected")
        sc = SpectralClustering(n_clusters=n_parts, affinity="precomputed",
                                eigen_solver="lobpcg", random_state=_seed(random_state))
        return sc.fit_predict(sp.csr_matrix(W)).astype(np.int64)


#: KaHyPar presets shipped with the package (the PyPI wheel ships none), per objective.
KAHYPAR_CONFIG = {"cut": "hgpa_kahypar.ini", "km1": "hgpa_kahypar_km1.ini"}


def hyperedge_sizes_and_pins(ensemble: Ensemble):
    """The hypergraph of base clusters: pins of each hyperedge, contiguous.

    Returns
    -------
    indptr : (T + 1,) int64, hyperedge ``e`` holds ``pins[indptr[e]:indptr[e + 1]]``
    pins : (number of observed labels,) int64 point indices
    """
    B = ensemble.onehot(dtype=np.float64).tocsc()
    B.sort_indices()
    return B.indptr.astype(np.int64), B.indices.astype(np.int64)


def hyperedge_cut(ensemble: Ensemble, labels) -> int:
    """Number of base clusters (hyperedges) whose points ``labels`` puts in more than one part.

    ``labels`` : (n,) int, any partition of the ``n`` points.  This is HGPA's objective
    (Strehl & Ghosh 2002); one-point hyperedges are never cut.
    """
    labels = np.asarray(labels)
    if labels.shape != (ensemble.n_samples,):
        raise ValueError(f"labels must have shape ({ensemble.n_samples},); got {labels.shape}")
    indptr, pins = hyperedge_sizes_and_pins(ensemble)
    nonempty = np.flatnonzero(np.diff(indptr) > 0)
    vals = labels[pins]
    lo = np.minimum.reduceat(vals, indptr[nonempty])
    hi = np.maximum.reduceat(vals, indptr[nonempty])
    return int(np.count_nonzero(lo != hi))


def _connectivity_minus_one(ensemble: Ensemble, labels) -> int:
    """``sum_e (number of parts hyperedge e spans - 1)`` for the partition ``labels``."""
    indptr, pins = hyperedge_sizes_and_pins(ensemble)
    edge = np.repeat(np.arange(indptr.size - 1), np.diff(indptr))
    K = int(np.max(labels)) + 1
    spanned = np.unique(edge * K + np.asarray(labels)[pins]) // K
    counts = np.bincount(spanned, minlength=indptr.size - 1)
    return int(np.sum(np.maximum(counts - 1, 0)))


def max_part_size(n_points: int, n_parts: int, imbalance: float) -> int:
    """KaHyPar's bound on a part's size: ``floor((1 + imbalance) * ceil(n / K))``."""
    return int(np.floor((1.0 + imbalance) * np.ceil(n_points / n_parts) + 1e-9))


#: KaHyPar objectives HGPA accepts: the hyperedge cut (Strehl & Ghosh's) and the
#: connectivity minus one (``sum_e (parts spanned by e - 1)``, ClusterEnsembles').
HGPA_OBJECTIVES = ("cut", "km1")


def kahypar_partition(ensemble: Ensemble, n_parts: int, *, imbalance: float = 0.05,
                      random_state=None, objective: str = "cut"):
    """Cut the hypergraph of base clusters into ``n_parts`` balanced parts with KaHyPar.

    One vertex per point (weight 1), one hyperedge (weight 1) per base cluster
    holding the points it labels; minimises the number of cut hyperedges
    (``objective="cut"``) or ``sum_e (lambda_e - 1)`` with ``lambda_e`` the number
    of parts hyperedge ``e`` spans (``"km1"``), with parts of at most
    :func:`max_part_size` points.

    With the cut objective, a hyperedge larger than that bound is cut by every
    balanced partition: it adds the same 1 to every feasible cut, so it is left out
    of the hypergraph KaHyPar sees (the optimal partitions are unchanged) and added
    back to the returned cut.  These are the largest hyperedges, whose pins dominate
    KaHyPar's coarsening cost (at N = 20,000 with 5 parts this halves the time).
    One-point hyperedges, never cut, are left out too (they crash KaHyPar).

    Returns
    -------
    parts : (n,) int64
    cut : int, number of hyperedges spanning more than one part (all of them,
        including the ones left out).
    """
    import kahypar

    if objective not in HGPA_OBJECTIVES:
        raise ValueError(f"objective must be one of {HGPA_OBJECTIVES}; got {objective!r}")
    N = ensemble.n_samples
    indptr, pins = hyperedge_sizes_and_pins(ensemble)
    sizes = np.diff(indptr)
    keep = sizes > 1
    n_always_cut = 0
    if objective == "cut":
        too_big = sizes > max_part_size(N, n_parts, imbalance)
        n_always_cut = int(np.count_nonzero(too_big & keep)) if n_parts > 1 else 0
        if n_parts > 1:
            keep &= ~too_big
    keep = np.flatnonzero(keep)
    if keep.size == 0:  # nothing left to cut: every balanced split is optimal
        parts = np.arange(N, dtype=np.int64) % n_parts
        return parts, hyperedge_cut(ensemble, parts)
    index = np.concatenate([[0], np.cumsum(sizes[keep])]).astype(np.uint64)
    kept_pins = np.concatenate([pins[indptr[e]:indptr[e + 1]] for e in keep])
    hg = kahypar.Hypergraph(N, keep.size, index.tolist(), kept_pins.astype(np.uint64).tolist(),
                            n_parts, [1] * keep.size, [1] * N)
    ctx = kahypar.Context()
    with resources.as_file(resources.files("consensuskit.consensus").joinpath(
            "data", KAHYPAR_CONFIG[objective])) as path:
        ctx.loadINIconfiguration(str(path))
    ctx.setK(n_parts)
    ctx.setEpsilon(imbalance)
    ctx.setSeed(_seed(random_state))
    ctx.suppressOutput(True)
    kahypar.partition(hg, ctx)
    parts = np.fromiter((hg.blockID(i) for i in range(N)), dtype=np.int64, count=N)
    if parts.min() < 0 or parts.max() >= n_parts:
        raise RuntimeError("KaHyPar returned unassigned vertices")
    if objective == "cut":
        return parts, int(kahypar.cut(hg)) + n_always_cut
    return parts, hyperedge_cut(ensemble, parts)


class CSPA(ConsensusEstimator):
    """Cluster-based similarity partitioning (Strehl & Ghosh 2002).

    The co-association similarity ``s_ij = c_ij / n_ij`` (the fraction of the
    base clusterings labelling both i and j that put them together; 0 when no
    base clustering labels both, so missing labels are supported) is the
    weighted graph cut into ``n_clusters`` parts.

    Parameters
    ----------
    n_clusters : int or None, default 2
        None: chosen by resampling consensus
        (:func:`consensuskit.consensus.resampling.choose_n_clusters`).
    partitioner : {"spectral", "metis"}, default "spectral"
        "spectral": normalised spectral clustering of the graph (parts of any
        size).  "metis": Strehl & Ghosh's balanced METIS cut, which splits
        large classes when the true ones are unequal in size (on glass, with
        classes of 9 to 76 points, it loses about a third of the ARI).
    max_exact : int, default 5000
        Up to this many points the full co-association graph is built as the
        sparse product ``B B^T`` (up to n^2 non-zeros, never a dense array).
        Must be <= 20,000.  Above it, the sparse approximation below is used.
    n_neighbors : int, default 30
        Sparse mode: each point draws ``n_neighbors`` partners, each a uniform
        member of its own cluster in a uniformly chosen base clustering that
        labels it (high-similarity candidates); the graph keeps these pairs
        with their exact ``s_ij`` (O(n * n_neighbors) edges and memory).
    random_state : None, int or RandomState

    Attributes
    ----------
    labels_ : (n,) int64 in 0..K-1
    sparse_mode_ : bool, whether the sampled graph was used.
    n_edges_ : int, undirected edges of the graph.
    """

    def __init__(self, n_clusters=2, *, partitioner="spectral", max_exact=5000, n_neighbors=30,
                 random_state=None):
        self.n_clusters = n_clusters
        self.partitioner = partitioner
        self.max_exact = max_exact
        self.n_neighbors = n_neighbors
        self.random_state = random_state

    def _fit(self, ensemble: Ensemble):
        from consensuskit.consensus.resampling import resolve_n_clusters

        N = ensemble.n_samples
        K = resolve_n_clusters(self, ensemble)
        if self.partitioner not in ("spectral", "metis"):
            raise ValueError(f"partitioner must be 'spectral' or 'metis'; got {self.partitioner!r}")
        max_exact = check_positive_int(self.max_exact, "max_exact")
        if max_exact > DENSE_COASSOCIATION_LIMIT:
            raise ValueError(
                f"max_exact={max_exact} exceeds {DENSE_COASSOCIATION_LIMIT}: the exact "
                "co-association graph has up to N^2 entries; use the sparse mode above that"
            )
        n_nb = check_positive_int(self.n_neighbors, "n_neighbors")
        rs = check_random_state(self.random_state)
        if N <= max_exact:
            W = self._exact_graph(ensemble)
            self.sparse_mode_ = False
        else:
            W = self._sampled_graph(ensemble, n_nb, rs)
            self.sparse_mode_ = True
        self.n_edges_ = int((W.nnz - W.diagonal().astype(bool).sum()) // 2)
        cut = spectral_partition if self.partitioner == "spectral" else metis_partition
        self.labels_ = relabel_consecutive(cut(W, K, rs))
        self.n_clusters_ = int(self.labels_.max() + 1)
        return self

    @staticmethod
    def _exact_graph(ens: Ensemble) -> sp.csr_matrix:
        B = ens.onehot(dtype=np.float64)
        C = (B @ B.T).tocsr()
        if ens.has_missing:
            O = sp.csr_matrix(ens.mask.astype(np.float64))
            Nn = (O @ O.T).tocsr()
            # same sparsity: c_ij > 0 implies n_ij > 0
            n_ij = np.asarray(Nn[C.nonzero()]).ravel()
            C.data = C.data / n_ij
            return C
        return C / ens.n_partitions

    @staticmethod
    def _sampled_graph(ens: Ensemble, n_nb: int, rs) -> sp.csr_matrix:
        N, M = ens.shape
        codes = ens.codes
        # per column: members of each cluster, contiguous in `order`
        orders, starts, sizes = [], [], []
        for j in range(M):
            col = codes[:, j]
            cnt = np.bincount(col[col >= 0], minlength=int(ens.n_labels[j]))
            order = np.argsort(np.where(col >= 0, col, ens.n_labels[j]), kind="stable")
            orders.append(order)
            starts.append(np.concatenate([[0], np.cumsum(cnt)[:-1]]))
            sizes.append(cnt)
        mask = ens.mask
        rows_all, cols_all = [], []
        ar = np.arange(N)
        for _ in range(n_nb):
            # a uniformly random observed column per point
            j_pick = np.argmax(np.where(mask, rs.random_sample((N, M)), -1.0), axis=1)
            partner = np.empty(N, dtype=np.int64)
            for j in range(M):
                sel = np.flatnonzero(j_pick == j)
                if sel.size == 0:
                    continue
                lab = codes[sel, j]
                off = (rs.random_sample(sel.size) * sizes[j][lab]).astype(np.int64)
                partner[sel] = orders[j][starts[j][lab] + off]
            keep = partner != ar
            rows_all.append(ar[keep])
            cols_all.append(partner[keep])
        a = np.concatenate(rows_all)
        b = np.concatenate(cols_all)
        lo, hi = np.minimum(a, b), np.maximum(a, b)
        key = np.unique(lo * N + hi)
        pairs = np.stack([key // N, key % N], axis=1)
        c, n = ens.coassociation(pairs)
        s = np.where(n > 0, c / np.maximum(n, 1), 0.0)
        W = sp.coo_matrix((s, (pairs[:, 0], pairs[:, 1])), shape=(N, N))
        return (W + W.T).tocsr()


class HGPA(ConsensusEstimator):
    """Hypergraph partitioning consensus (Strehl & Ghosh 2002) with KaHyPar.

    The base clusters are the hyperedges of a hypergraph on the points; HGPA
    cuts it into ``n_clusters`` balanced parts (at most ``max_part_size_`` points
    each) cutting as few hyperedges as possible.  Strehl & Ghosh used HMETIS;
    here KaHyPar (recursive bisection) with the configuration shipped in
    ``consensuskit/consensus/data/``.  Missing labels: a point is simply in fewer
    hyperedges.  Each of ``n_init`` seeds gives a partition; the smallest
    objective wins.  Hyperedges larger than a part can hold are cut by every
    balanced partition and are left out of what KaHyPar sees (see
    :func:`kahypar_partition`).

    If KaHyPar is not installed or fails, HGPA falls back to METIS on the star
    expansion (one vertex per point and per base cluster, an edge per observed
    label; vertex weight 0 on cluster vertices so balance is over points),
    warns, and records it in ``partitioner_`` and ``fallback_reason_``.

    Parameters
    ----------
    n_clusters : int or None, default 2
        None: chosen by resampling consensus.
    objective : {"cut", "km1"}, default "cut"
        "cut": the number of cut hyperedges (Strehl & Ghosh).  "km1": the sum over
        hyperedges of (parts spanned - 1), the objective ClusterEnsembles uses; the
        same for two parts.
    imbalance : float, default 0.05
        KaHyPar's epsilon: parts may exceed the average size by this fraction.
    n_init : int, default 5
        Partitioner runs with different seeds; the smallest objective wins.
    random_state : None, int or RandomState

    Attributes
    ----------
    labels_ : (n,) int64
    partitioner_ : "kahypar", or "metis" after a fallback.
    fallback_reason_ : None, or why KaHyPar was not used.
    edge_cut_ : int, hyperedges cut by ``labels_`` (all base clusters of two or more
        points; after a METIS fallback too).
    n_hyperedges_ : int, base clusters of two or more points.
    n_always_cut_ : int, of those, the ones larger than ``max_part_size_``.
    max_part_size_ : int, the balance bound ``floor((1 + imbalance) ceil(n / K))``.
    uncut_label_fraction_ : float, share of the observed labels whose base cluster
        ``labels_`` keeps whole.  A partition equal to one balanced base clustering
        keeps about ``1 / M``; far below that, the objective constrained the result
        little (see Notes).

    Notes
    -----
    HGPA's objective carries no signal once every base cluster holds a few points of
    every group: the planted partition then cuts every hyperedge, and so does
    almost any other balanced partition.  On ``experiments/bench_consensus.py``'s
    planted ensemble (N = 2,000, 5 groups, 10 base clusterings with heavy
    relabelling noise) the planted partition cuts 72 of 72 hyperedges and KaHyPar
    finds balanced partitions cutting 68, with ARI 0.00; the connectivity objective
    ("km1") saturates the same way (ARI 0.00).  This is the objective, not the
    partitioner (``experiments/bench_graph_consensus.py`` prints both cuts); on clean
    hypergraphs HGPA cuts nothing and is exact.  Prefer MCLA or CSPA on noisy
    ensembles.
    """

    def __init__(self, n_clusters=2, *, objective="cut", imbalance=0.05, n_init=5,
                 random_state=None):
        self.n_clusters = n_clusters
        self.objective = objective
        self.imbalance = imbalance
        self.n_init = n_init
        self.random_state = random_state

    def _fit(self, ensemble: Ensemble):
        from consensuskit.consensus.resampling import resolve_n_clusters

        K = resolve_n_clusters(self, ensemble)
        n_init = check_positive_int(self.n_init, "n_init")
        imbalance = check_positive_float(self.imbalance, "imbalance")
        if self.objective not in HGPA_OBJECTIVES:
            raise ValueError(f"objective must be one of {HGPA_OBJECTIVES}; "
                             f"got {self.objective!r}")
        rs = check_random_state(self.random_state)
        N = ensemble.n_samples
        self.partitioner_, self.fallback_reason_ = "kahypar", None
        try:
            runs = [kahypar_partition(ensemble, K, imbalance=imbalance, random_state=rs,
                                      objective=self.objective)
                    for _ in range(n_init)]
            if self.objective == "km1":
                runs = [(parts, _connectivity_minus_one(ensemble, parts)) for parts, _ in runs]
        except Exception as exc:  # ImportError, or KaHyPar rejecting the input
            self.partitioner_ = "metis"
            self.fallback_reason_ = f"{type(exc).__name__}: {exc}"
            warnings.warn(
                f"HGPA: KaHyPar could not partition the hypergraph ({self.fallback_reason_}); "
                "fell back to METIS on the star expansion (partitioner_='metis')",
                RuntimeWarning, stacklevel=3,
            )
            runs = self._metis_runs(ensemble, K, n_init, rs)
        parts, _ = min(runs, key=lambda r: r[1])
        self.labels_ = relabel_consecutive(parts)
        self.n_clusters_ = int(self.labels_.max() + 1)
        indptr, pins = hyperedge_sizes_and_pins(ensemble)
        sizes = np.diff(indptr)
        self.max_part_size_ = max_part_size(N, K, imbalance)
        self.n_hyperedges_ = int(np.count_nonzero(sizes > 1))
        self.n_always_cut_ = int(np.count_nonzero(sizes > self.max_part_size_)) if K > 1 else 0
        self.edge_cut_ = hyperedge_cut(ensemble, self.labels_)
        whole = np.ones(sizes.size, dtype=bool)
        nonempty = np.flatnonzero(sizes > 0)
        vals = self.labels_[pins]
        whole[nonempty] = (np.minimum.reduceat(vals, indptr[nonempty])
                           == np.maximum.reduceat(vals, indptr[nonempty]))
        self.uncut_label_fraction_ = float(sizes[whole].sum() / max(sizes.sum(), 1))
        largest = int(np.bincount(self.labels_).max())
        if self.partitioner_ == "kahypar" and largest > self.max_part_size_:
            warnings.warn(
                f"HGPA: KaHyPar returned a part of {largest} points, above the balance bound "
                f"{self.max_part_size_} (imbalance={imbalance})", RuntimeWarning, stacklevel=3)
        return self

    @staticmethod
    def _metis_runs(ensemble: Ensemble, K: int, n_init: int, rs):
        N = ensemble.n_samples
        T = ensemble.n_total_labels
        B = ensemble.onehot(dtype=np.float64) / WEIGHT_SCALE  # weight 1 after scaling
        W = sp.bmat([[None, B], [B.T, None]], format="csr")
        vw = np.concatenate([np.ones(N, dtype=np.int64), np.zeros(T, dtype=np.int64)])
        runs = []
        for _ in range(n_init):
            parts, cut = metis_partition(W, K, rs, vweights=vw, return_cut=True)
            runs.append((parts[:N], cut))
        return runs


class MCLA(ConsensusEstimator):
    """Meta-clustering algorithm (Strehl & Ghosh 2002).

    1. The base clusters (hyperedges, columns of ``B``) form a meta-graph with
       Jaccard edge weights ``|a & b| / |a | b|`` over the points each labels.
    2. METIS cuts it into ``n_clusters`` balanced meta-clusters.
    3. Each meta-cluster's association with a point is the fraction of its
       hyperedges that contain the point (n x K, O(n r) work).
    4. Each point goes to the meta-cluster it is most associated with (ties
       broken at random with ``random_state``).

    A meta-cluster that wins no point is dropped, so fewer than K clusters can
    come out (``n_clusters_``).  Missing labels are natural: a point is simply
    in fewer hyperedges.  Needs ``n_clusters <= sum_j k_j``.

    Attributes
    ----------
    labels_, n_clusters_, meta_labels_ ((sum_j k_j,) meta-cluster of each base
    cluster), association_ ((n, K) association matrix).
    """

    def __init__(self, n_clusters=2, *, random_state=None):
        self.n_clusters = n_clusters
        self.random_state = random_state

    def _fit(self, ensemble: Ensemble):
        from consensuskit.consensus.resampling import resolve_n_clusters

        K = resolve_n_clusters(self, ensemble)
        T = ensemble.n_total_labels
        _check_parts(K, T, "base clusters (hyperedges)")
        rs = check_random_state(self.random_state)
        B = ensemble.onehot(dtype=np.float64).tocsc()
        inter = (B.T @ B).toarray() if T <= 4000 else (B.T @ B).tocsr()
        size = np.asarray(B.sum(axis=0)).ravel()
        if sp.issparse(inter):
            inter = inter.tocoo()
            union = size[inter.row] + size[inter.col] - inter.data
            J = sp.coo_matrix((inter.data / union, (inter.row, inter.col)), shape=(T, T))
        else:
            J = inter / (size[:, None] + size[None, :] - inter)
        meta = metis_partition(sp.csr_matrix(J), K, rs)
        H = sp.csr_matrix((np.ones(T), (np.arange(T), meta)), shape=(T, K))
        msize = np.asarray(H.sum(axis=0)).ravel()
        A = np.asarray((B @ H).todense()) / np.maximum(msize, 1)[None, :]
        jitter = rs.random_sample(A.shape) * 1e-9  # random tie-breaking
        lab = np.argmax(A + jitter * (A == A.max(axis=1, keepdims=True)), axis=1)
        self.meta_labels_ = meta
        self.association_ = A
        self.labels_ = relabel_consecutive(lab)
        self.n_clusters_ = int(self.labels_.max() + 1)
        return self


class HBGF(ConsensusEstimator):
    """Hybrid bipartite graph formulation (Fern & Brodley 2004).

    Points and base clusters are the two sides of a bipartite graph with the
    one-hot matrix ``B`` (n x T, T = sum_j k_j) as biadjacency.  Its spectral
    partition: with degrees ``d1`` (labels per point) and ``d2`` (cluster
    sizes), ``A = D1^{-1/2} B D2^{-1/2}``; the top-K singular vectors
    ``A = U S V^T`` give the top eigenvectors ``[U; V]`` of the normalised
    adjacency of the bipartite graph.  The rows of ``[U; V]`` (all n + T
    vertices) are normalised to unit length and clustered by k-means (Ng,
    Jordan & Weiss); the points' clusters are the consensus.  The SVD is taken
    from the T x T matrix ``A^T A`` (dense eigendecomposition), so the cost is
    O(n r K + T^3) and memory O(n K + T^2).  Missing labels: a point has fewer
    edges.

    Parameters
    ----------
    n_clusters : int or None, default 2
        None: chosen by resampling consensus (see docs/consensus_functions.md).
    n_init : int, default 10
        k-means restarts.
    random_state : None, int or RandomState
    """

    def __init__(self, n_clusters=2, *, n_init=10, random_state=None):
        self.n_clusters = n_clusters
        self.n_init = n_init
        self.random_state = random_state

    def _fit(self, ensemble: Ensemble):
        from sklearn.cluster import KMeans

        from consensuskit.consensus.resampling import resolve_n_clusters

        N = ensemble.n_samples
        K = resolve_n_clusters(self, ensemble)
        n_init = check_positive_int(self.n_init, "n_init")
        T = ensemble.n_total_labels
        if T > 20_000:
            raise ValueError(
                f"HBGF needs a T x T eigendecomposition; T={T} base clusters is too many"
            )
        B = ensemble.onehot(dtype=np.float64)
        d1 = np.asarray(B.sum(axis=1)).ravel()
        d2 = np.asarray(B.sum(axis=0)).ravel()
        A = sp.diags(1 / np.sqrt(d1)) @ B @ sp.diags(1 / np.sqrt(d2))
        G = (A.T @ A).toarray()
        evals, evecs = np.linalg.eigh(G)
        k = min(K, T)
        top = np.argsort(evals)[::-1][:k]
        s = np.sqrt(np.clip(evals[top], 0.0, None))
        V = evecs[:, top]
        # fix eigenvector signs for reproducibility
        V *= np.where(V[np.argmax(np.abs(V), axis=0), np.arange(k)] < 0, -1.0, 1.0)
        U = (A @ V) / np.where(s > 1e-12, s, 1.0)[None, :]
        Z = np.vstack([U, V])
        norms = np.linalg.norm(Z, axis=1, keepdims=True)
        Z = Z / np.where(norms > 0, norms, 1.0)
        km = KMeans(n_clusters=K, n_init=n_init, random_state=self.random_state).fit(Z)
        self.labels_ = relabel_consecutive(km.labels_[:N])
        self.n_clusters_ = int(self.labels_.max() + 1)
        self.embedding_ = U
        return self
