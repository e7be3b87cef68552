"""Column-distributed variational EM for BCE (paper section 5.2.2).

Each rank holds one or more base clusterings (columns) of all ``N`` rows, their
label distributions ``beta_j`` and nothing else; labels and ``beta_j`` never
leave their rank.  Rank 0 is also the *coordinator* (the paper's E-step and
M-step server): it holds ``gamma`` (K, N) and ``alpha``.

One E-step pass (eqs. 5-6) factorises over columns given ``gamma``:

1. the coordinator broadcasts ``gamma`` (K, N);
2. rank ``p`` computes, for its columns ``J_p`` only,
   ``phi_ij ∝ exp(E_q[log theta_i]) * beta_j(., x_ij)`` and sends the sum
   ``sum_{j in J_p} phi_ij`` (K, N) in a reduction to the coordinator;
3. the coordinator sets ``gamma_i = alpha + sum_p sum_{j in J_p} phi_ij``.

After the last pass each rank turns its own expected label counts into its
``beta_j`` (eq. 7) locally, and sends two scalars (its columns' share of the
entropy term and of ``sum phi ln beta``) for the bound.  The coordinator
updates alpha by Newton (eq. 8) from ``gamma`` alone and broadcasts a
continue/stop flag.

The paper's protocol has each client send ``log beta_j(., x_ij)`` per row and
column and the server form ``phi``; sending the per-rank *sum* of phi instead
moves the O(N M K) work of eq. 5 to the clients (the parallel part the paper's
complexity analysis counts on), sends ``K * N`` numbers per rank and pass
whatever the number of columns a rank holds, and shows the coordinator only a
mixture over each rank's columns.  What it does show is discussed in
``docs/scaling_out.md`` (with one column per rank, rows with equal labels get
equal ``phi`` rows, so the partition of that column can be read off).

Each rank's pass is :func:`consensuskit.inference.bce_cavi.e_step` with one
pass on its columns (alpha passed as 0, so its returned gamma is the partial
phi sum); all bound pieces come from
:func:`~consensuskit.inference.bce_cavi.lower_bound` on the pieces each rank
holds.  The result equals the single-process fit up to the order of
floating-point additions.
"""

from __future__ import annotations

import time
from types import SimpleNamespace

import torch

from ..inference import bce_cavi as cavi
from .comm import Comm
from .common import EMConfig, progress, relative_change_small

__all__ = ["fit_columns", "COORDINATOR"]

#: Rank of the coordinator (E-step and M-step server).
COORDINATOR = 0


def _beta_bound_part(beta, stats, smoothing):
    """``sum phi ln beta + smoothing * sum ln beta`` over a rank's columns.

    :func:`~consensuskit.inference.bce_cavi.lower_bound` evaluated on zero rows
    (its row terms vanish), so the formula stays in one place.
    """
    K = beta.shape[0]
    g0 = beta.new_ones(K, 0)
    return cavi.lower_bound(beta.new_ones(K), beta, g0, g0, stats, 0.0, smoothing=smoothing)


def fit_columns(comm: Comm, data: cavi.BCEData, cfg: EMConfig, alpha0, beta0, hook=None):
    """Column-distributed variational EM (client-server; rank 0 coordinates).

    Parameters
    ----------
    comm : Comm
    data : BCEData
        This rank's columns (all ``N`` rows), coded with this rank's own offsets.
        Rows whose labels in these columns are all missing are allowed; every
        row must have a label on some rank.
    cfg : EMConfig
    alpha0 : Tensor (K,)
        Used on the coordinator only.
    beta0 : Tensor (K, L_p)
        This rank's columns' initial label distributions.
    hook : callable(rank, iteration) or None

    Returns
    -------
    dict with ``beta`` (K, L_p) on every rank; ``alpha`` (K,), ``gamma`` (K, N)
    and ``bounds`` on the coordinator (None / empty elsewhere); ``n_iter``,
    ``converged``, ``degenerate``, ``seconds`` on every rank.

    Messages: setup -- ``setup/n_rows`` (2,), ``setup/n_observed_rows`` (N,)
    reduce, ``setup/status`` (1,); per iteration -- ``inner_iter`` times
    ``column/gamma`` broadcast (K, N) and ``column/phi_sum`` reduce (K, N), then
    ``column/bound_terms`` reduce (2,) and ``column/control`` broadcast (2,).
    """
    t_start, c_start = time.perf_counter(), time.process_time()
    K = cfg.n_clusters
    dtype = data.n_observed_rows.dtype
    coord = comm.rank == COORDINATOR
    N = data.n_rows
    comm.set_phase("setup")
    # every rank must describe the same rows
    nn = torch.tensor([float(N), -float(N)], dtype=torch.float64)
    comm.all_reduce(nn, "setup/n_rows", op="max")
    if int(nn[0]) != N or int(-nn[1]) != N:
        raise ValueError(
            f"rank {comm.rank} holds {N} rows, but the ranks disagree on the number of rows "
            f"(between {int(-nn[1])} and {int(nn[0])}); column mode needs the same rows, in "
            "the same order, on every rank")
    V = data.n_observed_rows.to(torch.float64).clone()
    comm.reduce(V, COORDINATOR, "setup/n_observed_rows")
    status = torch.zeros(1, dtype=torch.float64)
    if coord:
        status[0] = float((V <= 0).sum())
    comm.broadcast(status, COORDINATOR, "setup/status")
    if status[0] > 0:
        raise ValueError(f"{int(status[0])} row(s) have no observed label on any rank")
    comm.set_phase("fit")

    beta = torch.as_tensor(beta0, dtype=dtype).clone()
    if beta.shape != (K, data.n_total_labels):
        raise ValueError(f"beta0 for rank {comm.rank} has shape {tuple(beta.shape)}; "
                         f"expected ({K}, {data.n_total_labels})")
    zero_alpha = torch.zeros(K, dtype=dtype)
    alpha = gamma = None
    alpha_cap = None
    if coord:
        alpha = torch.as_tensor(alpha0, dtype=dtype).clone()
        V = V.to(dtype)
        gamma = cavi.initial_gamma(alpha, SimpleNamespace(n_observed_rows=V), dtype)
        alpha_cap = cfg.alpha_cap if cfg.alpha_cap is not None else 10.0 * float(V.max())
    else:
        gamma = torch.empty(K, N, dtype=dtype)
    bounds: list[float] = []
    converged = degenerate = False
    bar = progress(cfg, comm.rank, f"BCE column-distributed (P={comm.world_size})")
    it = 0
    for it in range(1, cfg.max_iter + 1):
        for t in range(1, cfg.inner_iter + 1):
            last = t == cfg.inner_iter
            comm.broadcast(gamma, COORDINATOR, "column/gamma")
            _, acc, stats_p, plogp_p, _ = cavi.e_step(
                zero_alpha, beta, data, gamma, 1, collect=last, chunk_size=cfg.chunk_size)
            comm.reduce(acc, COORDINATOR, "column/phi_sum")
            if coord:
                phi_sum = acc
                gamma = cavi.update_gamma(alpha, acc)
        # local M-step for beta; this rank's pieces of the bound
        beta = cavi.update_beta(stats_p, data.offsets, cfg.smoothing)
        terms = torch.tensor(
            [plogp_p, _beta_bound_part(beta, stats_p, cfg.smoothing)],
            dtype=torch.float64)
        comm.reduce(terms, COORDINATOR, "column/bound_terms")
        control = torch.zeros(2, dtype=torch.float64)
        if coord:
            suff = cavi.elog_dirichlet(gamma).sum(1)
            alpha, _ = cavi.update_alpha(alpha, suff, N, tol=cfg.newton_tol,
                                         ensure_ascent=True, alpha_cap=alpha_cap)
            empty = torch.ones(K, 0, dtype=dtype)
            lb = cavi.lower_bound(alpha, empty, gamma, phi_sum, empty, float(terms[0]),
                                  smoothing=0.0) + float(terms[1])
            bounds.append(lb)
            if float(alpha.sum()) > alpha_cap:
                control[:] = torch.tensor([1.0, 1.0])
            elif relative_change_small(bounds, cfg.tol):
                control[0] = 1.0
        comm.broadcast(control, COORDINATOR, "column/control")
        if bar is not None:
            bar.update(1)
        if hook is not None:
            hook(comm.rank, it)
        if control[0] > 0:
            degenerate = bool(control[1] > 0)
            converged = not degenerate
            break
    if bar is not None:
        bar.close()
    return {"alpha": alpha, "beta": beta, "gamma": gamma if coord else None,
            "bounds": bounds, "n_iter": it, "converged": converged, "degenerate": degenerate,
            "seconds": {"total": time.perf_counter() - t_start, "comm": comm.comm_seconds,
                        "cpu": time.process_time() - c_start}}
