"""Timing helpers shared by ``experiments/bench_distributed.py`` and ``reproduce bce``.

* :func:`warm_up` -- start the worker fork server and compile the kernels once,
  so that later timings do not include it;
* :func:`column_vs_single` -- one point of the BCE paper's Fig. 6: the same
  fixed number of EM iterations from the same initialisation, in this process
  and column-distributed over ``P`` workers.
"""

from __future__ import annotations

import time

import numpy as np

__all__ = ["warm_up", "column_vs_single"]


def warm_up(n_clusters=3, n_workers=2, seed=0):
    """Run two tiny distributed fits (P = ``n_workers`` and P = 1); returns their wall seconds."""
    from consensuskit.distributed.launch import fit_distributed

    rng = np.random.default_rng(seed)
    X = rng.integers(0, 3, size=(60, 8))
    t0 = time.perf_counter()
    fit_distributed(X, n_clusters, n_workers=n_workers, max_iter=1, random_state=0)
    fit_distributed(X, n_clusters, n_workers=1, max_iter=1, random_state=0)
    return time.perf_counter() - t0


def column_vs_single(X, n_clusters, *, n_workers=2, max_iter=10, seed=0, check=True):
    """Wall and CPU seconds of ``max_iter`` EM iterations, single-process vs column-distributed.

    Both start from the same random ``beta`` (``bce_initialise.init_beta_random`` with
    ``seed``) and run exactly ``max_iter`` iterations (``tol = 0``).

    Parameters
    ----------
    X : array-like (N, M)
        Base-clustering labels, -1 missing.
    n_clusters : int
        ``K``.
    n_workers : int
        ``P`` column workers (``M >= P``).
    max_iter : int
        EM iterations timed.
    seed : int
        Seed of the shared initial ``beta``.
    check : bool
        Assert that both fits reach the same ``alpha`` (they run the same algorithm).

    Returns
    -------
    dict
        ``single`` (wall s) and ``single_cpu`` (process CPU s) of
        ``bce_cavi.variational_em`` in this process; ``column`` (wall s of the fit
        inside the workers, the slowest rank), ``compute_only`` (largest CPU
        seconds of any rank: the paper's "ignoring the communication overhead"),
        ``startup`` (call wall time minus ``column``: process start-up and data
        transfer) and ``bytes_rank1_per_iter`` (payload of rank 1, or rank 0 when
        ``P = 1``).
    """
    from consensuskit.data.ensemble import Ensemble
    from consensuskit.distributed.launch import fit_distributed
    from consensuskit.models.bce import cavi, initialise

    ens = Ensemble.from_labels(np.asarray(X))
    beta0 = initialise.init_beta_random(ens, n_clusters, np.random.RandomState(seed))
    data = ens.label_data()
    t0, c0 = time.perf_counter(), time.process_time()
    ref = cavi.variational_em(data, n_clusters, beta0, max_iter=max_iter, tol=0.0)
    t_single, c_single = time.perf_counter() - t0, time.process_time() - c0
    t0 = time.perf_counter()
    fit = fit_distributed(ens, n_clusters, n_workers=n_workers, mode="column", beta_init=beta0,
                          max_iter=max_iter, tol=0.0)
    t_call = time.perf_counter() - t0
    t_fit = max(s["total"] for s in fit.distributed_.seconds)
    if check and not np.allclose(fit.alpha_, ref.params.alpha.numpy(), atol=1e-8):
        raise AssertionError("column-distributed and single-process BCE disagree on alpha")
    rec = fit.distributed_
    sent = rec.bytes_sent()
    return {"single": t_single, "single_cpu": c_single, "column": t_fit,
            "compute_only": max(s["cpu"] for s in rec.seconds), "startup": t_call - t_fit,
            "bytes_rank1_per_iter": sent[min(1, len(sent) - 1)] / max_iter}
