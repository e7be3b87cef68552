"""Generators of base clusterings (the input of every consensus function).

Each generator returns an int64 label matrix of shape ``(n_samples,
n_partitions)``; column ``j`` is one base clustering with labels ``0..k_j-1``
and ``-1`` where the point was not clustered (incomplete partitions).  All take
``random_state`` (int, ``numpy.random.RandomState`` or None) and draw one seed per
partition from it, so a run is reproducible; ``progress=True`` shows a tqdm bar.

* :func:`kmeans_partitions` -- k-means with random initialisation and a random
  number of clusters per partition (the "RPS" ensembles of the papers),
  optionally on a random subsample of rows (incomplete partitions).
* :func:`random_feature_partitions` -- k-means on random feature subsets (RFS).
* :func:`mixed_partitions` -- several algorithms mixed (k-means, fuzzy c-means,
  agglomerative single/average/ward, spectral, affinity propagation).
* :func:`noisy_copies` -- noisy copies of a planted partition (the mixture model of
  consensus with fixed label distributions, simulated from its Pyro spec).
* :func:`drop_labels` -- turn observed labels into missing ones.
* :func:`fuzzy_cmeans` -- the fuzzy c-means used by :func:`mixed_partitions`.
"""

from __future__ import annotations

import numbers
import warnings

import numpy as np
from sklearn.utils import check_random_state

from consensuskit.data.label_input import _to_numpy, labels_to_int

__all__ = [
    "kmeans_partitions",
    "random_feature_partitions",
    "mixed_partitions",
    "noisy_copies",
    "drop_labels",
    "fuzzy_cmeans",
    "ALGORITHMS",
]

#: Algorithms understood by :func:`mixed_partitions`.
ALGORITHMS = (
    "kmeans",
    "fuzzy_cmeans",
    "single",
    "average",
    "ward",
    "spectral",
    "affinity_propagation",
)


# -- validation helpers ------------------------------------------------------------


def _check_features(features) -> np.ndarray:
    A = _to_numpy(features) if not isinstance(features, np.ndarray) else features
    try:
        A = np.asarray(A, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"features must be numeric; {exc}") from exc
    if A.ndim != 2:
        raise ValueError(
            f"features must be 2-D of shape (n_samples, n_features); got shape {A.shape}"
        )
    if A.shape[0] < 2 or A.shape[1] < 1:
        raise ValueError(f"features need at least 2 rows and 1 column; got shape {A.shape}")
    if not np.isfinite(A).all():
        i, j = np.argwhere(~np.isfinite(A))[0]
        raise ValueError(f"feature at row {i}, column {j} is not finite ({A[i, j]!r})")
    return np.ascontiguousarray(A)


def _check_int(value, name, minimum=1):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer; got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}; got {value}")
    return int(value)


def _check_k_range(n_clusters, n_rows):
    """``n_clusters`` int or (lo, hi) -> (lo, hi) validated against the rows clustered."""
    if isinstance(n_clusters, numbers.Integral) and not isinstance(n_clusters, bool):
        lo = hi = int(n_clusters)
    else:
        try:
            lo, hi = n_clusters
        except (TypeError, ValueError) as exc:
            raise TypeError(
                f"n_clusters must be an int or a (low, high) pair; got {n_clusters!r}"
            ) from exc
        lo = _check_int(lo, "n_clusters low")
        hi = _check_int(hi, "n_clusters high")
    if lo < 1 or lo > hi:
        raise ValueError(f"n_clusters range must satisfy 1 <= low <= high; got ({lo}, {hi})")
    if hi > n_rows:
        raise ValueError(
            f"n_clusters up to {hi} but only {n_rows} rows are clustered per partition"
        )
    return lo, hi


def _check_subsample(subsample, n):
    """Fraction of rows per partition -> row count (None -> all rows)."""
    if subsample is None:
        return n
    if isinstance(subsample, bool) or not isinstance(subsample, numbers.Real):
        raise TypeError(f"subsample must be a fraction in (0, 1] or None; got {subsample!r}")
    if not 0.0 < float(subsample) <= 1.0:
        raise ValueError(f"subsample must be a fraction in (0, 1]; got {subsample!r}")
    return max(2, int(round(float(subsample) * n)))


def _progress(iterable, progress, desc, total=None):
    from tqdm.auto import tqdm

    return tqdm(iterable, desc=desc, total=total, disable=not progress, leave=False)


def _draw_k(rng, lo, hi):
    return int(rng.randint(lo, hi + 1))


def _cover_unlabelled(labels, features_used, rng):
    """Give every row that no partition labelled a label in one random partition.

    The row gets, in a partition drawn at random, the label of its nearest
    neighbour (Euclidean, in the features that partition used) among the rows
    that partition did label -- the natural out-of-sample extension of a
    clustering.  Modifies ``labels`` in place and returns it.
    """
    from sklearn.neighbors import NearestNeighbors

    missing_rows = np.flatnonzero((labels < 0).all(axis=1))
    if missing_rows.size == 0:
        return labels
    which = rng.randint(0, labels.shape[1], size=missing_rows.size)
    for j in np.unique(which):
        rows = missing_rows[which == j]
        have = np.flatnonzero(labels[:, j] >= 0)
        F = features_used[j]
        nn = NearestNeighbors(n_neighbors=1).fit(F[have])
        idx = nn.kneighbors(F[rows], return_distance=False)[:, 0]
        labels[rows, j] = labels[have[idx], j]
    return labels


def _recode(col):
    """Relabel observed entries of a column to 0..k-1 (algorithms may skip labels)."""
    out = np.full(col.shape, -1, dtype=np.int64)
    obs = col >= 0
    _, inv = np.unique(col[obs], return_inverse=True)
    out[obs] = inv.reshape(-1)
    return out


def _kmeans(F, k, seed, n_init):
    from sklearn.cluster import KMeans

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ConvergenceWarning on duplicate points
        return KMeans(n_clusters=k, init="random", n_init=n_init, random_state=seed).fit_predict(F)


def _partition_columns(X, M, n_clusters, subsample, random_state, progress, desc, cluster):
    """The loop both generators share: column ``j`` = ``cluster(j, X[rows], k_j, seed_j)``.

    Draws k and a seed per column, subsamples rows (others stay ``-1``), re-codes each
    column to ``0..k-1`` and finally gives every row that no column drew a label.
    """
    n = X.shape[0]
    m = _check_subsample(subsample, n)
    lo, hi = _check_k_range(n_clusters, m)
    rng = check_random_state(random_state)
    labels = np.full((n, M), -1, dtype=np.int64)
    for j in _progress(range(M), progress, desc):
        k = _draw_k(rng, lo, hi)
        seed = int(rng.randint(0, 2**31 - 1))
        rows = np.arange(n) if m == n else np.sort(rng.choice(n, size=m, replace=False))
        labels[rows, j] = _recode(cluster(j, X[rows], k, seed))
    if m < n:
        _cover_unlabelled(labels, [X] * M, rng)
    return labels


# -- generators ----------------------------------------------------------------------


def kmeans_partitions(
    features,
    n_partitions,
    n_clusters=(2, 10),
    subsample=None,
    random_state=None,
    n_init=1,
    progress=False,
):
    """k-means base clusterings with random initialisation and random k (RPS).

    Partition ``j`` runs ``KMeans(init="random", n_init=n_init)`` with ``k_j``
    drawn uniformly from ``{low, ..., high}`` (a fixed k if ``n_clusters`` is an
    int).  With ``subsample=f`` each partition clusters a random ``round(f*N)``
    rows drawn without replacement and leaves the others at ``-1``.  A row that
    no partition drew is afterwards labelled in one randomly chosen partition
    with the label of its nearest clustered neighbour, so that every row has at
    least one label (:meth:`Ensemble.from_labels` refuses empty rows).

    Parameters
    ----------
    features : array-like of shape (n_samples, n_features)
    n_partitions : int
        Number of base clusterings M.
    n_clusters : int or (int, int), default (2, 10)
        Fixed k, or inclusive range from which each partition's k is drawn.
    subsample : float in (0, 1] or None
        Fraction of rows clustered by each partition.
    random_state : int, RandomState or None
    n_init : int, default 1
        k-means restarts per partition (1 keeps the ensemble diverse).
    progress : bool, default False
        Show a progress bar.

    Returns
    -------
    labels : ndarray of int64, shape (n_samples, n_partitions)
        ``-1`` marks rows a partition did not cluster.
    """
    X = _check_features(features)
    M = _check_int(n_partitions, "n_partitions")
    n_init = _check_int(n_init, "n_init")
    return _partition_columns(X, M, n_clusters, subsample, random_state, progress,
                              "k-means partitions",
                              lambda j, F, k, seed: _kmeans(F, k, seed, n_init))


def _feature_count(n_features, d):
    if isinstance(n_features, bool):
        raise TypeError(f"n_features must be an int or a fraction; got {n_features!r}")
    if isinstance(n_features, numbers.Integral):
        if not 1 <= n_features <= d:
            raise ValueError(f"n_features must lie in [1, {d}]; got {n_features}")
        return int(n_features)
    if isinstance(n_features, numbers.Real):
        if not 0.0 < float(n_features) <= 1.0:
            raise ValueError(f"n_features as a fraction must lie in (0, 1]; got {n_features}")
        return max(1, int(round(float(n_features) * d)))
    raise TypeError(f"n_features must be an int or a fraction; got {n_features!r}")


def random_feature_partitions(
    features,
    n_partitions,
    n_clusters,
    n_features=0.5,
    subsample=None,
    random_state=None,
    n_init=1,
    progress=False,
):
    """k-means on random feature subsets (RFS).

    Each partition draws ``n_features`` distinct features uniformly (an int, or
    a fraction of the ``d`` features, rounded, at least 1) and runs k-means with
    random initialisation on them; ``n_clusters`` and ``subsample`` behave as in
    :func:`kmeans_partitions` (uncovered rows are labelled by nearest neighbour
    in the partition's own feature subset).

    Returns
    -------
    labels : ndarray of int64, shape (n_samples, n_partitions)
    """
    X = _check_features(features)
    M = _check_int(n_partitions, "n_partitions")
    n_init = _check_int(n_init, "n_init")
    n, d = X.shape
    q = _feature_count(n_features, d)
    m = _check_subsample(subsample, n)
    lo, hi = _check_k_range(n_clusters, m)
    rng = check_random_state(random_state)
    labels = np.full((n, M), -1, dtype=np.int64)
    used = []
    for j in _progress(range(M), progress, "random-feature partitions"):
        k = _draw_k(rng, lo, hi)
        seed = int(rng.randint(0, 2**31 - 1))
        cols = np.sort(rng.choice(d, size=q, replace=False))
        rows = np.arange(n) if m == n else np.sort(rng.choice(n, size=m, replace=False))
        F = X[:, cols]
        used.append(F)
        labels[rows, j] = _recode(_kmeans(F[rows], k, seed, n_init))
    if m < n:
        _cover_unlabelled(labels, used, rng)
    return labels


def fuzzy_cmeans(features, n_clusters, *, m=2.0, max_iter=300, tol=1e-6, random_state=None):
    """Fuzzy c-means (Bezdek 1981) in numpy.

    Alternates ``v_c = sum_i u_ic^m x_i / sum_i u_ic^m`` and
    ``u_ic = d_ic^(-2/(m-1)) / sum_l d_il^(-2/(m-1))`` (``d_ic`` Euclidean
    distance) from random Dirichlet memberships until the largest membership
    change is below ``tol``.  A point sitting on a centre gets membership 1 there.

    Parameters
    ----------
    features : array-like of shape (n_samples, n_features)
    n_clusters : int
    m : float > 1, default 2.0
        Fuzzifier.
    max_iter : int, default 300
    tol : float, default 1e-6
    random_state : int, RandomState or None

    Returns
    -------
    labels : ndarray of int64, shape (n_samples,)
        Hard labels, ``argmax`` of the memberships.
    memberships : ndarray of float64, shape (n_samples, n_clusters)
        Rows sum to one.
    centers : ndarray of float64, shape (n_clusters, n_features)
    """
    X = _check_features(features)
    k = _check_int(n_clusters, "n_clusters")
    if k > X.shape[0]:
        raise ValueError(f"n_clusters={k} exceeds the number of samples ({X.shape[0]})")
    if isinstance(m, bool) or not isinstance(m, numbers.Real) or not m > 1:
        raise ValueError(f"fuzzifier m must be > 1; got {m!r}")
    max_iter = _check_int(max_iter, "max_iter")
    rng = check_random_state(random_state)
    U = rng.dirichlet(np.ones(k), size=X.shape[0])
    expo = 2.0 / (float(m) - 1.0)
    for _ in range(max_iter):
        W = U ** m
        centers = (W.T @ X) / W.sum(axis=0)[:, None]
        d2 = ((X[:, None, :] - centers[None, :, :]) ** 2).sum(axis=2)
        zero = d2 <= 1e-300
        with np.errstate(divide="ignore"):
            inv = np.where(zero, 0.0, d2 ** (-expo / 2.0))
        hit = zero.any(axis=1)
        inv[hit] = zero[hit].astype(np.float64)  # on a centre: all membership there
        U_new = inv / inv.sum(axis=1, keepdims=True)
        delta = np.abs(U_new - U).max()
        U = U_new
        if delta < tol:
            break
    W = U ** m
    centers = (W.T @ X) / W.sum(axis=0)[:, None]
    return U.argmax(axis=1).astype(np.int64), U, centers


def _affinity_propagation(F, k, seed, max_steps=12):
    """Affinity propagation whose preference is bisected to approach ``k`` clusters.

    Affinity propagation does not take a number of clusters; it takes a
    preference (self-similarity), and the number of exemplars grows with it.
    With similarities ``s_ij = -||x_i - x_j||^2`` we bisect the preference
    between ``2 * min(s)`` and ``0`` (at most ``max_steps`` fits, stopping as soon
    as exactly ``k`` clusters appear) and keep the converged result whose number
    of clusters is closest to ``k``.  If no fit converges, k-means is used
    instead for this partition (with a RuntimeWarning).
    """
    from sklearn.cluster import AffinityPropagation
    from sklearn.metrics import pairwise_distances

    S = -pairwise_distances(F, metric="sqeuclidean")
    lo, hi = 2.0 * S.min(), 0.0
    best = None
    for _ in range(max_steps):
        pref = 0.5 * (lo + hi)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ap = AffinityPropagation(
                affinity="precomputed",
                preference=pref,
                damping=0.9,
                max_iter=400,
                convergence_iter=15,
                random_state=seed,
            ).fit(S)
        lab = ap.labels_
        got = len(ap.cluster_centers_indices_)
        if got > 0 and (lab >= 0).all():
            if best is None or abs(got - k) < abs(best[0] - k):
                best = (got, lab)
            if got == k:
                break
        if got > k:
            hi = pref
        else:  # too few clusters or not converged: raise the preference
            lo = pref
    if best is None:
        warnings.warn(
            "affinity propagation did not converge; using k-means for this partition",
            RuntimeWarning,
            stacklevel=3,
        )
        return _kmeans(F, k, seed, 1)
    return best[1]


def _run_algorithm(name, F, k, seed):
    if name == "kmeans":
        return _kmeans(F, k, seed, 1)
    if name == "fuzzy_cmeans":
        return fuzzy_cmeans(F, k, random_state=seed)[0]
    if name in ("single", "average", "ward"):
        from sklearn.cluster import AgglomerativeClustering

        return AgglomerativeClustering(n_clusters=k, linkage=name).fit_predict(F)
    if name == "spectral":
        from sklearn.cluster import SpectralClustering

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "graph is not fully connected"
            return SpectralClustering(
                n_clusters=k,
                affinity="nearest_neighbors",
                n_neighbors=min(10, F.shape[0] - 1),
                assign_labels="kmeans",
                random_state=seed,
            ).fit_predict(F)
    if name == "affinity_propagation":
        return _affinity_propagation(F, k, seed)
    raise ValueError(f"unknown algorithm {name!r}; choose from {ALGORITHMS}")  # pragma: no cover


def mixed_partitions(
    features,
    n_partitions,
    n_clusters,
    algorithms=ALGORITHMS,
    subsample=None,
    random_state=None,
    progress=False,
):
    """Base clusterings from several algorithms, cycled in the given order.

    Partition ``j`` uses ``algorithms[j % len(algorithms)]`` with ``k_j`` drawn
    from ``n_clusters`` (int or inclusive range):

    * ``"kmeans"``: scikit-learn KMeans, random initialisation, one run;
    * ``"fuzzy_cmeans"``: :func:`fuzzy_cmeans` (m=2), hard label = argmax membership;
    * ``"single"``, ``"average"``, ``"ward"``: scikit-learn AgglomerativeClustering
      (deterministic: they differ between partitions only through k and subsample);
    * ``"spectral"``: scikit-learn SpectralClustering on a 10-nearest-neighbour graph;
    * ``"affinity_propagation"``: cannot be told k; its preference is bisected to
      approach ``k_j`` and the closest converged result is kept, so this column
      may have a number of clusters other than ``k_j``.

    Agglomerative, spectral and affinity propagation need O(N^2) memory and time;
    use them for N up to a few thousand (or with ``subsample``).

    Returns
    -------
    labels : ndarray of int64, shape (n_samples, n_partitions)
    """
    X = _check_features(features)
    M = _check_int(n_partitions, "n_partitions")
    if isinstance(algorithms, str):
        algorithms = (algorithms,)
    algorithms = tuple(algorithms)
    if not algorithms:
        raise ValueError("algorithms is empty")
    unknown = [a for a in algorithms if a not in ALGORITHMS]
    if unknown:
        raise ValueError(f"unknown algorithm(s) {unknown}; choose from {list(ALGORITHMS)}")
    return _partition_columns(
        X, M, n_clusters, subsample, random_state, progress, "mixed partitions",
        lambda j, F, k, seed: _run_algorithm(algorithms[j % len(algorithms)], F, k, seed))


def noisy_copies(truth, n_partitions, *, noise, n_labels=None, random_state=None):
    """Base clusterings that copy a planted partition, each label replaced with prob ``noise``.

    Column ``j`` maps the ``K`` true clusters to ``K`` distinct labels of ``0..k_j-1`` (a
    random injection, so the label ids carry no information) and gives each row that
    label with probability ``1 - noise``, else a label drawn uniformly from all ``k_j``.
    This is the mixture model of consensus (:mod:`consensuskit.models.mm.spec`) with
    ``z = truth`` and fixed label distributions ``theta_j[h] = (1 - noise) e_{perm_j(h)}
    + noise / k_j``, and it is simulated from that spec.

    Parameters
    ----------
    truth : array-like of int, shape (n_samples,)
        The planted partition, labels ``0..K-1``.
    n_partitions : int
        ``M``, the number of base clusterings.
    noise : float in [0, 1]
        Probability that a label is replaced by a uniform one.
    n_labels : int or sequence of int (M,), optional
        ``k_j >= K`` labels per column (extra labels appear only through noise);
        default ``K``.
    random_state : int, RandomState or None

    Returns
    -------
    ndarray of int64, shape (n_samples, n_partitions)
    """
    from consensuskit.models.mm import spec as mm
    from consensuskit.models.simulation import simulate

    truth = np.asarray(truth)
    if truth.ndim != 1 or truth.dtype.kind not in "iu" or truth.size == 0 or truth.min() < 0:
        raise ValueError("truth must be a non-empty 1-D array of labels 0..K-1")
    M = _check_int(n_partitions, "n_partitions")
    if not 0.0 <= float(noise) <= 1.0:
        raise ValueError(f"noise must be in [0, 1]; got {noise!r}")
    K = int(truth.max()) + 1
    ks = np.broadcast_to(np.asarray(K if n_labels is None else n_labels), (M,)).astype(int)
    if ks.min() < K:
        raise ValueError(f"every column needs at least K = {K} labels; got n_labels={ks}")
    rs = check_random_state(random_state)
    params = {"pi": np.full(K, 1.0 / K), "z": truth.astype(np.int64)}
    for j, kj in enumerate(ks):
        theta = np.full((K, kj), float(noise) / kj)
        theta[np.arange(K), rs.permutation(kj)[:K]] += 1.0 - float(noise)
        params[f"theta_{j}"] = theta
    X, _ = simulate(mm, n_rows=truth.size, n_labels=ks, n_clusters=K, params=params,
                    seed=int(rs.randint(2**31 - 1)))
    return X


def drop_labels(X, fraction, random_state=None):
    """Set a fraction of the observed labels to ``-1`` (missing).

    ``round(fraction * n_observed)`` observed entries are removed while every row
    and every column keeps at least one label.  A "keep" set is fixed first --
    each row keeps one label, with the rows' kept columns spread over all columns
    so that for complete input exactly ``max(N, M)`` entries are reserved -- then
    the entries to drop are drawn uniformly from the rest.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_partitions)
        Labels; -1 / NaN / None already missing.
    fraction : float in [0, 1)
        Fraction of the observed entries to drop.
    random_state : int, RandomState or None

    Returns
    -------
    ndarray of int64, shape (n_samples, n_partitions)
        A copy with the dropped entries set to -1 (other labels unchanged).

    Raises
    ------
    ValueError
        If the request would empty a row or a column (e.g. any positive fraction
        with a single base clustering), with the largest feasible fraction.
    """
    A = _to_numpy(X)
    if A.ndim != 2:
        raise ValueError(f"X must be 2-D of shape (n_samples, n_partitions); got shape {A.shape}")
    if A.size == 0:
        raise ValueError(f"X is empty: shape {A.shape}")
    L = labels_to_int(A).copy()
    if isinstance(fraction, bool) or not isinstance(fraction, numbers.Real):
        raise TypeError(f"fraction must be a real number in [0, 1); got {fraction!r}")
    if not 0.0 <= float(fraction) < 1.0:
        raise ValueError(f"fraction must lie in [0, 1); got {fraction!r}")
    rng = check_random_state(random_state)
    obs = L >= 0
    N, M = L.shape
    if not obs.any(axis=1).all() or not obs.any(axis=0).all():
        raise ValueError("X already has a row or column without any label")
    n_obs = int(obs.sum())
    n_drop = int(round(float(fraction) * n_obs))
    if n_drop == 0:
        return L
    # keep set: row i keeps a target column; targets cycle over a permutation of
    # the columns so that all columns are covered when N >= M
    keep = np.zeros_like(obs)
    order = rng.permutation(N)
    col_perm = rng.permutation(M)
    target = np.empty(N, dtype=np.int64)
    target[order] = col_perm[np.arange(N) % M]
    ok = obs[np.arange(N), target]
    if not ok.all():  # incomplete input: any observed column of that row
        bad = np.flatnonzero(~ok)
        noise = rng.random_sample((bad.size, M)) * obs[bad]
        target[bad] = noise.argmax(axis=1)
    keep[np.arange(N), target] = True
    for j in np.flatnonzero(~keep.any(axis=0)):
        rows = np.flatnonzero(obs[:, j])
        keep[rows[rng.randint(rows.size)], j] = True
    candidates = np.flatnonzero((obs & ~keep).ravel())
    if n_drop > candidates.size:
        raise ValueError(
            f"cannot drop {n_drop} of {n_obs} labels ({fraction:.0%}) without emptying a row "
            f"or column of a {N}x{M} ensemble; at most {candidates.size} "
            f"({candidates.size / n_obs:.1%}) can be dropped"
        )
    drop = rng.choice(candidates, size=n_drop, replace=False)
    L.ravel()[drop] = -1
    return L
