"""Initial label distributions ``beta`` (K, L) for BCE's fits: k-means, seeded, random.

How a fit starts is a concept of its own (the estimator's ``init=``); the CAVI, SVI and
collapsed-Gibbs engines all start from one of these.
"""
from __future__ import annotations

import numpy as np
import torch

from consensuskit.models.bce.cavi import update_beta

__all__ = ["init_beta_kmeans", "init_beta_seeded", "init_beta_random", "KMEANS_MAX_ROWS"]

#: rows a k-means start sees by default (a random subset above it)
KMEANS_MAX_ROWS = 20000


def init_beta_kmeans(ensemble, n_clusters: int, random_state, *, smoothing: float = 1e-2,
                     max_rows: int = KMEANS_MAX_ROWS, n_jobs: int | None = None):
    """Initial beta from k-means on the one-hot labels, as a ``(K, L)`` float64 array.

    k-means (``n_init=1``) runs on at most ``max_rows`` randomly chosen rows of the
    sparse one-hot matrix; each centroid's block of column ``j`` is the fraction
    of the cluster's members carrying each label of ``j``, i.e. a label
    distribution.  ``smoothing`` is added before each block is normalised, so no
    label starts at probability 0.  k-means runs on ``n_jobs`` OpenMP threads (None:
    torch's setting, ``torch.get_num_threads()``), so a user who limits torch to one
    thread is not charged for scikit-learn's thread pool (on a busy machine its
    spinning threads cost several times the work itself).
    """
    from sklearn.cluster import KMeans
    from sklearn.utils import check_random_state
    from threadpoolctl import threadpool_limits

    rs = check_random_state(random_state)
    N = ensemble.n_samples
    rows = np.arange(N) if N <= max_rows else np.sort(rs.choice(N, max_rows, replace=False))
    sub = ensemble.subset(rows)
    B = sub.onehot(dtype=np.float64)
    km = KMeans(n_clusters=n_clusters, n_init=1, random_state=rs.randint(2**31 - 1))
    with threadpool_limits(limits=n_jobs or torch.get_num_threads(), user_api="openmp"):
        lab = km.fit_predict(B)
    import scipy.sparse as sp

    assign = sp.csr_matrix((np.ones(lab.size), (lab, np.arange(lab.size))),
                           shape=(n_clusters, lab.size))
    counts = np.asarray((assign @ B).todense())
    beta = update_beta(torch.as_tensor(counts), ensemble.offsets, smoothing=smoothing)
    return beta.numpy()


def init_beta_seeded(ensemble, n_clusters: int, random_state, *, smoothing: float = 1e-2,
                     max_rows: int = 2000, n_lloyd: int = 2):
    """Initial beta from k-means++ seeding on a row subsample, as a ``(K, L)`` float64 array.

    The cheap default initialisation: on at most ``max_rows`` random rows, K seeds are
    chosen by k-means++ (D^2 sampling) under the Hamming distance between label rows (a
    missing label differs from nothing; it is the squared distance of the one-hot rows up to
    a factor 2), then ``n_lloyd`` assignment steps to the nearest seed profile (the
    profile: each cluster's label distribution per column, matched by its expected
    disagreement).  Each cluster's label counts over its members, plus ``smoothing``,
    normalised per column, give beta.  Cost: O(max_rows * K * M * (1 + n_lloyd)), about
    one E-step on ``max_rows`` rows -- independent of N.
    """
    from sklearn.utils import check_random_state

    rs = check_random_state(random_state)
    N = ensemble.n_samples
    rows = np.arange(N) if N <= max_rows else np.sort(rs.choice(N, max_rows, replace=False))
    codes = ensemble.codes[rows].astype(np.int64)  # (n, M), small
    n, M = codes.shape
    obs = codes >= 0
    K = int(n_clusters)
    gidx = np.where(obs, codes + ensemble.offsets[:-1], 0)
    L = ensemble.n_total_labels

    def disagreement(profile):
        """Expected number of observed labels of each row differing from ``profile`` (K, L)."""
        # sum_j [obs] (1 - profile_k(x_ij)), (n, K)
        agree = (profile.T[gidx] * obs[:, :, None]).sum(1)
        return obs.sum(1)[:, None] - agree

    first = rs.randint(n)
    seeds = [first]
    d2 = ((codes != codes[first]) & obs & obs[first]).sum(1).astype(np.float64)
    for _ in range(1, K):
        total = d2.sum()
        nxt = rs.randint(n) if total <= 0 else rs.choice(n, p=d2 / total)
        seeds.append(nxt)
        d2 = np.minimum(d2, ((codes != codes[nxt]) & obs & obs[nxt]).sum(1))
    onehot_rows = np.zeros((K, L))
    for k, i in enumerate(seeds):
        onehot_rows[k, gidx[i][obs[i]]] = 1.0
    lab = disagreement(onehot_rows).argmin(1)
    for _ in range(n_lloyd):
        counts = np.zeros((K, L))
        np.add.at(counts, (np.repeat(lab, M)[obs.ravel()], gidx[obs]), 1.0)
        profile = update_beta(torch.as_tensor(counts), ensemble.offsets,
                              smoothing=smoothing).numpy()
        lab = disagreement(profile).argmin(1)
    counts = np.zeros((K, L))
    np.add.at(counts, (np.repeat(lab, M)[obs.ravel()], gidx[obs]), 1.0)
    beta = update_beta(torch.as_tensor(counts), ensemble.offsets, smoothing=smoothing)
    return beta.numpy()


def init_beta_random(ensemble, n_clusters: int, random_state):
    """Initial beta, each row of each ``beta_j`` from a flat Dirichlet (authors' default)."""
    from sklearn.utils import check_random_state

    rs = check_random_state(random_state)
    blocks = [rs.dirichlet(np.ones(k), size=n_clusters) for k in ensemble.n_labels]
    return np.concatenate(blocks, axis=1)
