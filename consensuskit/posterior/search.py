"""SALSO-class search for the partition that minimises a posterior expected loss.

The algorithm of Dahl, Johnson & Mueller (2022, "Search algorithms and loss functions for
Bayesian clustering", JCGS), written anew on the kernels of :mod:`._kernels`:

1. **Initial partition** (per run): with probability ``prob_sequential_allocation`` the items
   are allocated one at a time in a random order, each to the cluster (an existing one, or a new
   one while fewer than ``max_n_clusters``) that minimises the expected loss of the partial
   partition; otherwise every item gets a uniformly random label among ``max_n_clusters``.
2. **Sweetening**: scans over the items in a fresh random order, each item moved to its best
   cluster, until a scan moves nothing (or ``max_scans`` scans in the run).
3. **Zealous updates**: up to ``max_zealous`` times, a cluster of two or more items is
   destroyed, its items re-allocated sequentially in a random order and the whole partition
   sweetened again; the result is kept only if its expected loss is lower.
4. **Runs**: ``n_runs`` independent runs with independent seeds, spread over ``n_jobs``
   threads (the kernel releases the GIL); the best partition over runs is returned.

For VI and Binder a move is scored in O(S) per candidate cluster from the contingency tables of
the current partition with every draw, which are updated in O(S) when an item moves, so a scan
costs O(N S K) time and the search holds O(S L K) counts (L: the most clusters of a draw), never
an N x N matrix.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from . import _kernels as _k
from .losses import check_loss, f_table

__all__ = ["SearchInfo", "salso_search"]

#: bytes of search tables per run above which the search refuses (lower max_n_clusters)
_MAX_TABLE_BYTES = 4 << 30


@dataclass
class SearchInfo:
    """What the search did.

    Attributes
    ----------
    loss, a : the loss minimised and its cost parameter.
    expected_loss : float, the expected loss of the returned partition.
    n_clusters : int, its number of clusters.
    max_n_clusters : int, the bound on the number of clusters used.
    run_losses : (n_runs,) expected loss reached by each run.
    n_scans : (n_runs,) sweetening scans per run.
    n_zealous_accepts, n_zealous_attempts : (n_runs,) per run.
    sequential_init : (n_runs,) bool, whether the run started by sequential allocation.
    best_run : int, index of the run that gave the estimate.
    seeds : (n_runs,) the seed of each run.
    n_draws : int, the draws the search scored its moves on (see ``max_draws`` of
        :meth:`consensuskit.posterior.PartitionPosterior.point_estimate`).
    """

    loss: str
    a: float
    expected_loss: float
    n_clusters: int
    max_n_clusters: int
    run_losses: np.ndarray = field(repr=False)
    n_scans: np.ndarray = field(repr=False)
    n_zealous_accepts: np.ndarray = field(repr=False)
    n_zealous_attempts: np.ndarray = field(repr=False)
    sequential_init: np.ndarray = field(repr=False)
    best_run: int = 0
    seeds: np.ndarray = field(default=None, repr=False)
    n_draws: int = 0


def _precedes(loss, r, b) -> bool:
    """Whether run ``r`` comes before run ``b`` (-1: none yet) in ``np.argmin(loss)``'s
    choice: the least loss, the earlier run on ties, the first NaN before any number."""
    if b < 0:
        return True
    if np.isnan(loss[b]):
        return bool(np.isnan(loss[r]) and r < b)
    if np.isnan(loss[r]):
        return True
    return bool(loss[r] < loss[b] or (loss[r] == loss[b] and r < b))


def _check_int(v, name, minimum):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise ValueError(f"{name} must be an integer; got {v!r}")
    if v < minimum:
        raise ValueError(f"{name} must be >= {minimum}; got {v}")
    return int(v)


def salso_search(lab, k, loss="vi", a=1.0, max_n_clusters=None, n_runs=16, max_scans=None,
                 max_zealous=10, prob_sequential_allocation=0.5, sweeten=True, n_jobs=None,
                 random_state=None, progress=False):
    """Minimise the expected ``loss`` over partitions of the N items by SALSO.

    Parameters
    ----------
    lab : (N, S) uint16/int32 item-major draws relabelled 0..k_s-1 (see ``prepare_draws``).
    k : (S,) number of clusters of each draw.
    loss, a : ``"vi"``, ``"binder"``, ``"nvi"`` or ``"omari"``, and the cost parameter of VI and
        Binder (b = 2 - a).
    max_n_clusters : bound on the number of clusters of the estimate; default the largest
        number of clusters of a draw (salso's default).
    n_runs : independent runs; max_scans : sweetening scans per run (default unbounded until no
        item moves); max_zealous : zealous-update attempts per run.
    prob_sequential_allocation : probability that a run starts by sequential allocation (else a
        uniformly random partition); sweeten : False disables sweetening (for controls).
    n_jobs : threads (default: ``min(n_runs, os.cpu_count())``); random_state : int, None or
        ``np.random.Generator`` / ``RandomState``; each run gets an independent seed drawn from it.
    progress : print one line per finished run.

    Returns
    -------
    (labels (N,) int64 in 0..K-1 by order of first appearance, :class:`SearchInfo`)
    """
    name, code, a = check_loss(loss, a)
    N, S = lab.shape
    L = int(np.max(k))
    if max_n_clusters is None:
        maxk = L
    else:
        maxk = _check_int(max_n_clusters, "max_n_clusters", 1)
    maxk = min(maxk, N)
    n_runs = _check_int(n_runs, "n_runs", 1)
    max_zealous = _check_int(max_zealous, "max_zealous", 0)
    max_scans = np.iinfo(np.int64).max if max_scans is None else _check_int(max_scans,
                                                                            "max_scans", 0)
    p = float(prob_sequential_allocation)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"prob_sequential_allocation must be in [0, 1]; got {p}")
    need = 4 * S * L * maxk
    if need > _MAX_TABLE_BYTES:
        raise ValueError(f"the search tables would take {need / 2**30:.1f} GiB per run (S={S} "
                         f"draws x {L} draw clusters x max_n_clusters={maxk}); lower "
                         "max_n_clusters")
    if isinstance(random_state, (np.random.Generator, np.random.RandomState)):
        rng = random_state
    else:
        rng = np.random.default_rng(random_state)
    if isinstance(rng, np.random.Generator):
        seeds = rng.integers(0, 2**31 - 1, size=n_runs)
    else:
        seeds = rng.randint(0, 2**31 - 1, size=n_runs)
    ftab, fdo = f_table(code, N)
    if n_jobs is None:
        n_jobs = min(n_runs, os.cpu_count() or 1)
    n_jobs = _check_int(n_jobs, "n_jobs", 1)
    workers = 1 if n_runs == 1 else min(n_jobs, n_runs)
    # one partition buffer per worker and the best so far, not one per run (16 runs at
    # N = 1e7 held 640 MB); the best is the first run of least loss, as argmin picks
    free = [np.zeros(N, dtype=np.int32) for _ in range(workers)]
    best_z = np.zeros(N, dtype=np.int32)
    best_run = [-1]
    lock = threading.Lock()
    infos = np.zeros((n_runs, 5))
    lab = np.ascontiguousarray(lab)

    cm_dtype = np.uint16 if N < 65535 else np.uint32
    Dfull = np.zeros(S)
    _k.draw_sums(lab, L, ftab, Dfull)

    def one(r):
        cm = np.empty((S, L, maxk), dtype=cm_dtype)
        with lock:
            z = free.pop()
        _k.salso_run(lab, L, code, a, ftab, fdo, Dfull, maxk, max_scans, max_zealous, p,
                     bool(sweeten), int(seeds[r]), cm, z, infos[r])
        with lock:
            if _precedes(infos[:, 0], r, best_run[0]):
                best_z[:] = z
                best_run[0] = r
            free.append(z)
        if progress:
            print(f"salso run {r + 1}/{n_runs}: expected {name} loss {infos[r, 0]:.6g}, "
                  f"{int(infos[r, 1])} scans", flush=True)

    if workers == 1:
        for r in range(n_runs):
            one(r)
    else:
        with ThreadPoolExecutor(max_workers=workers) as ex:
            list(ex.map(one, range(n_runs)))
    best = best_run[0]
    # labels numbered by first appearance, in one pass (np.unique's sorts took four
    # (N,) int64 temporaries at the fit's peak, issue 27)
    labels = np.empty((N, 1), dtype=np.int64)
    _k.relabel_rows(best_z[None, :], labels, np.empty(1, dtype=np.int64))
    labels = labels.reshape(N)
    info = SearchInfo(
        loss=name, a=a, expected_loss=float(infos[best, 0]),
        n_clusters=int(labels.max()) + 1, max_n_clusters=maxk,
        run_losses=infos[:, 0].copy(), n_scans=infos[:, 1].astype(np.int64),
        n_zealous_accepts=infos[:, 2].astype(np.int64),
        n_zealous_attempts=infos[:, 3].astype(np.int64),
        sequential_init=infos[:, 4] > 0.5, best_run=best, seeds=np.asarray(seeds),
        n_draws=S,
    )
    return labels, info
