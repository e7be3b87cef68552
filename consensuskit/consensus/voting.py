"""Voting consensus: majority voting after label alignment, and iterative voting
consensus (IVC) and iterative probabilistic voting consensus (IPVC; Nguyen &
Caruana 2007).

* :class:`MajorityVote` renumbers every base clustering's classes onto a
  reference partition (maximal overlap, the Hungarian method), lets each point
  take the label most base clusterings give it, and repeats with the vote as the
  new reference until it stops changing.
* :class:`IVC` is k-modes on the label vectors: a cluster's centre is the
  majority label of its members in every base clustering, and a point joins the
  centre it disagrees with in the fewest base clusterings (Hamming distance).
* :class:`IPVC` keeps the members' label *frequencies* instead of the mode: a
  point's distance to a cluster is the expected number of base clusterings in
  which a random member disagrees with it.

Missing labels (-1) neither vote nor count in a distance.
"""

from __future__ import annotations

import numpy as np
from sklearn.utils import check_random_state

from consensuskit.base import ConsensusEstimator, check_positive_int
from consensuskit.consensus.graph import relabel_consecutive
from consensuskit.consensus.partition import align_labels, partition_dissimilarities
from consensuskit.consensus.utilities import contingency
from consensuskit.data.ensemble import Ensemble

__all__ = ["MajorityVote", "IVC", "IPVC"]


def _argmax_random_ties(S: np.ndarray, rs) -> np.ndarray:
    """Row-wise argmax with ties broken uniformly at random."""
    top = S == S.max(axis=1, keepdims=True)
    return np.argmax(top * rs.random_sample(S.shape), axis=1).astype(np.int64)


def _aligned_votes(ensemble: Ensemble, reference: np.ndarray, k_ref: int) -> np.ndarray:
    """(n, k_ref) count of base clusterings that, aligned to ``reference``, vote each class."""
    votes = np.zeros((ensemble.n_samples, k_ref))
    for j in range(ensemble.n_partitions):
        a = align_labels(ensemble.codes[:, j], reference, int(ensemble.n_labels[j]), k_ref)
        ok = np.flatnonzero(a >= 0)
        votes[ok, a[ok]] += 1.0
    return votes


class MajorityVote(ConsensusEstimator):
    """Majority voting after aligning every base clustering to a reference.

    Parameters
    ----------
    n_clusters : int or None, default None
        Number of consensus classes.  None: K is chosen by resampling
        consensus (:func:`consensuskit.consensus.resampling.choose_n_clusters`).
    reference : "medoid" or int, default "medoid"
        The first reference: the medoid (:class:`MedoidConsensus`) of the base
        clusterings that have exactly K classes, or a column index.  If no base
        clustering has K classes, the medoid of those with more is used and its
        smallest classes are merged into their best-overlapping ones by the
        first vote.
    max_iter : int, default 10
        Align-and-vote rounds; stops early when the vote no longer changes.
    random_state : None, int or RandomState (ties between votes)

    Attributes
    ----------
    labels_ : (n,) int64; votes_ : (n, K) fraction of the labelling base
    clusterings that vote for each class; reference_ : column of the first
    reference; n_iter_ : rounds run; n_clusters_ : K.
    """

    def __init__(self, n_clusters=None, *, reference="medoid", max_iter=10, random_state=None):
        self.n_clusters = n_clusters
        self.reference = reference
        self.max_iter = max_iter
        self.random_state = random_state

    def _fit(self, ensemble: Ensemble):
        from consensuskit.consensus.resampling import resolve_n_clusters

        rs = check_random_state(self.random_state)
        K = resolve_n_clusters(self, ensemble)
        max_iter = check_positive_int(self.max_iter, "max_iter")
        ref_col = self._reference(ensemble, K)
        ref = ensemble.codes[:, ref_col].copy()
        k_ref = int(ensemble.n_labels[ref_col])
        for it in range(1, max_iter + 1):  # noqa: B007 - `it` is reported
            votes = _aligned_votes(ensemble, ref, k_ref)
            new = _argmax_random_ties(votes, rs)
            if k_ref > K:  # keep the K classes with most votes; their points vote again
                keep = np.argsort(-np.bincount(new, minlength=k_ref), kind="stable")[:K]
                new = keep[_argmax_random_ties(votes[:, keep], rs)]
            new = relabel_consecutive(new)
            if np.array_equal(new, ref):
                break
            ref, k_ref = new, int(new.max() + 1)
        self.labels_ = ref
        self.n_clusters_ = int(ref.max() + 1)
        counts = _aligned_votes(ensemble, ref, self.n_clusters_)
        self.votes_ = counts / counts.sum(axis=1, keepdims=True)
        self.reference_ = ref_col
        self.n_iter_ = it
        return self

    def _reference(self, ens: Ensemble, K: int) -> int:
        if self.reference == "medoid":
            sums = partition_dissimilarities(ens).sum(axis=1)
            for pool in (ens.n_labels == K, ens.n_labels > K, ens.n_labels > 0):
                cand = np.flatnonzero(pool)
                if cand.size:
                    return int(cand[np.argmin(sums[cand])])
        if isinstance(self.reference, (int, np.integer)) and not isinstance(self.reference, bool):
            if not 0 <= self.reference < ens.n_partitions:
                raise ValueError(f"reference={self.reference} is not a column of X "
                                 f"(0..{ens.n_partitions - 1})")
            return int(self.reference)
        raise ValueError(f"reference must be 'medoid' or a column index; got {self.reference!r}")


class IVC(ConsensusEstimator):
    """Iterative voting consensus (Nguyen & Caruana 2007): k-modes on label vectors.

    Parameters
    ----------
    n_clusters : int or None, default None
        None: chosen by resampling consensus (see :class:`MajorityVote`).
    n_init : int, default 10
        Random starts (random assignment of the points); the smallest total
        distance wins.
    max_iter : int, default 100
    random_state : None, int or RandomState

    Attributes
    ----------
    labels_ : (n,) int64; objective_ : total distance of the points to their
    clusters; n_iter_ : iterations of the kept start; n_clusters_ : K.
    """

    #: IVC uses each cluster's majority label; IPVC the label frequencies.
    _probabilistic = False

    def __init__(self, n_clusters=None, *, n_init=10, max_iter=100, random_state=None):
        self.n_clusters = n_clusters
        self.n_init = n_init
        self.max_iter = max_iter
        self.random_state = random_state

    def _fit(self, ensemble: Ensemble):
        from consensuskit.consensus.resampling import resolve_n_clusters

        K = resolve_n_clusters(self, ensemble)
        n_init = check_positive_int(self.n_init, "n_init")
        max_iter = check_positive_int(self.max_iter, "max_iter")
        rs = check_random_state(self.random_state)
        idx = ensemble.offset_index()  # (n, M) column of the one-hot, -1 missing
        obs = idx >= 0
        T = ensemble.n_total_labels
        best = None
        for _ in range(n_init):
            z = rs.randint(K, size=ensemble.n_samples)
            z[rs.choice(ensemble.n_samples, size=K, replace=False)] = np.arange(K)
            run = self._run(ensemble, idx, obs, T, K, z, max_iter, rs)
            if best is None or run[1] < best[1]:
                best = run
        z, obj, n_iter = best
        self.labels_ = relabel_consecutive(z)
        self.objective_ = float(obj)
        self.n_iter_ = n_iter
        self.n_clusters_ = int(self.labels_.max() + 1)
        return self

    def _centres(self, ensemble, idx, obs, T, K, z):
        """(K, T) per-cluster agreement scores of every base-cluster label."""
        counts = contingency(ensemble, z, K)
        offs = ensemble.offsets
        out = np.zeros_like(counts)
        for j in range(ensemble.n_partitions):
            block = counts[:, offs[j]:offs[j + 1]]
            tot = block.sum(axis=1, keepdims=True)
            if self._probabilistic:
                out[:, offs[j]:offs[j + 1]] = np.where(tot > 0, block / np.maximum(tot, 1), 0.0)
            else:  # the mode (first on ties); a cluster with no label here matches nothing
                mode = np.zeros_like(block)
                mode[np.arange(K), np.argmax(block, axis=1)] = 1.0
                out[:, offs[j]:offs[j + 1]] = mode * (tot > 0)
        return out

    def _run(self, ensemble, idx, obs, T, K, z, max_iter, rs):
        n_obs = obs.sum(axis=1).astype(np.float64)
        safe = np.where(obs, idx, 0)
        for it in range(1, max_iter + 1):  # noqa: B007 - `it` is reported
            agree = self._centres(ensemble, idx, obs, T, K, z)
            # distance = number of labelled base clusterings that disagree (in expectation)
            A = (agree[:, safe] * obs[None, :, :]).sum(axis=2).T  # (n, K)
            dist = n_obs[:, None] - A
            new = _argmax_random_ties(-dist, rs)
            empty = np.setdiff1d(np.arange(K), new)
            for k in empty:  # re-seed an empty cluster with the worst-fitting point
                far = int(np.argmax(dist[np.arange(dist.shape[0]), new]))
                new[far] = k
                dist[far, :] = 0.0
            if np.array_equal(new, z):
                break
            z = new
        agree = self._centres(ensemble, idx, obs, T, K, z)
        A = (agree[:, safe] * obs[None, :, :]).sum(axis=2).T
        obj = float(np.sum(n_obs - A[np.arange(z.size), z]))
        return z, obj, it


class IPVC(IVC):
    """Iterative probabilistic voting consensus (Nguyen & Caruana 2007).

    As :class:`IVC`, but a cluster keeps, for every base clustering, the
    frequencies of its members' labels; a point's distance to a cluster is
    ``sum_j (1 - P_kj(x_ij))``, the expected number of base clusterings in which
    a random member of the cluster disagrees with it.
    """

    _probabilistic = True
