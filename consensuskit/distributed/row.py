"""Row-distributed variational EM for BCE (paper section 5.2.1).

The ``N`` rows are split over ``P`` ranks; each rank holds its rows' labels and
their variational parameters ``gamma_i`` (and never sends either).

Exact variant (:func:`fit_rows_exact`)
    BCE's own engine under the one fit driver, with a ``reduce`` hook.  Every rank
    runs the E-step (eqs. 5-6) on its rows with the shared
    ``(alpha, beta)``.  The M-step needs only sums over rows, so each rank
    contributes

    * ``c_p[h, l] = sum_{i in rows_p, j: x_ij = l} phi_ijh``  -- beta's expected
      label counts, ``(K, sum_j k_j)``;
    * ``S_p[h] = sum_{i in rows_p} (psi(gamma_ih) - psi(sum_h' gamma_ih'))`` --
      alpha's sufficient statistic, ``(K,)``;

    and one all-reduce gives every rank ``c = sum_p c_p`` and ``S = sum_p S_p``.
    Each rank then performs the identical beta update (eq. 7) and the identical
    Newton iterations for alpha (eq. 8).  The Newton iterations need nothing
    else: ``S`` does not change while gamma is held fixed, so -- unlike the
    paper's description, which passes the sums around once per Newton step --
    one reduction per EM iteration suffices.  A second, scalar all-reduce sums
    the rows' contributions to the bound.  The result equals the
    single-process fit up to the order of floating-point additions.

Heuristic sequential variant (:func:`fit_rows_sequential`)
    The paper's heuristic: the parameters travel from rank to rank; rank ``p``
    runs the E-step on its rows with the parameters it received, re-estimates
    ``(alpha, beta)`` from *its rows only* and passes them on; rank ``P-1``
    hands them back to rank 0 for the next iteration.  Only one rank computes
    at a time (no parallel speed-up; it suits data that may not be pooled), and
    there is no convergence guarantee.  The monitored objective is the sum of
    the ranks' local bounds, each at the parameters that rank produced.
"""

from __future__ import annotations

import time

import torch

from ..ensemble import LabelData
from ..inference import bce_cavi as cavi
from ..inference.driver import Fit, Run
from ..inference.driver import fit as drive
from .comm import Comm
from .common import EMConfig, progress, relative_change_small

__all__ = ["fit_rows_exact", "fit_rows_sequential", "row_setup"]


def row_setup(comm: Comm, data: LabelData, cfg: EMConfig):
    """Agree on the total number of rows ``N`` and on ``alpha_cap``.

    Messages: ``setup/n_rows`` (1,) sum and ``setup/max_labels_per_row`` (1,) max.
    """
    n = torch.tensor([float(data.n_rows)], dtype=torch.float64)
    comm.all_reduce(n, "setup/n_rows")
    vmax = torch.tensor([float(data.n_observed_rows.max()) if data.n_rows else 0.0],
                        dtype=torch.float64)
    comm.all_reduce(vmax, "setup/max_labels_per_row", op="max")
    cap = cfg.alpha_cap if cfg.alpha_cap is not None else 10.0 * float(vmax)
    return int(round(float(n))), cap


def _local_bound(alpha, beta, gamma, phi_sum, stats, plogp):
    """This rank's rows' share of ``L(alpha, beta; phi, gamma)`` (no smoothing term)."""
    return cavi.lower_bound(alpha, beta, gamma, phi_sum, stats, plogp, smoothing=0.0)


def drive_ranks(comm: Comm, engine, cfg: EMConfig, n_runs: int, hook, desc: str, t0):
    """Run ``engine`` on this rank under the one fit driver: ``n_runs`` restarts, a
    progress bar on rank 0, ``hook(rank, iteration)`` after every iteration.  Every rank
    sees the same objectives, so all take the same stopping and restart decisions.

    Returns ``(Fit, seconds)``; ``t0`` = ``(perf_counter, process_time)`` at the start.
    """
    bar = progress(cfg, comm.rank, f"{desc} (P={comm.world_size})")

    def callback(snapshot):
        if bar is not None:
            bar.update(1)
        if hook is not None:
            hook(comm.rank, snapshot["iteration"])

    try:
        fit = drive(engine, max_iter=cfg.max_iter, n_runs=n_runs, tol=cfg.tol,
                    callback=callback if (hook is not None or bar is not None) else None)
    finally:
        if bar is not None:
            bar.close()
    return fit, {"total": time.perf_counter() - t0[0], "comm": comm.comm_seconds,
                 "cpu": time.process_time() - t0[1]}


def fit_rows_exact(comm: Comm, data: LabelData, cfg: EMConfig, alpha0, beta0s, hook=None):
    """Exact row-distributed variational EM: BCE's engine with an all-reduce, under the driver.

    Every rank runs :class:`~consensuskit.inference.bce_cavi.CAVI` on its rows with
    ``reduce`` = an all-reduce of the sufficient statistics (and of the bound), so
    every rank takes the identical M-step and the identical stopping and restart
    decisions.

    Parameters
    ----------
    comm : Comm
    data : LabelData
        This rank's rows, coded with the *global* label offsets.
    cfg : EMConfig
    alpha0 : Tensor (K,)
        Identical on every rank.
    beta0s : list of Tensor (K, L)
        Initial beta of each restart, identical on every rank.
    hook : callable(rank, iteration) or None
        Called after every iteration (tests use it to kill a rank).

    Returns
    -------
    (Fit, seconds)
        The driver's :class:`~consensuskit.inference.driver.Fit` (its best run's
        ``params`` hold alpha, beta and this rank's gamma) and the rank's wall / CPU
        seconds.

    Messages per iteration: ``row/suffstats`` all-reduce of ``K * (L + 1)``
    floats and ``row/bound`` all-reduce of one float.
    """
    t0 = time.perf_counter(), time.process_time()
    dtype = data.n_observed_rows.dtype
    comm.set_phase("setup")
    N, alpha_cap = row_setup(comm, data, cfg)
    comm.set_phase("fit")
    for b in beta0s:
        if b.shape[1] != data.n_total_labels:
            raise ValueError(f"beta0 has {b.shape[1]} label columns; the data have "
                             f"{data.n_total_labels}")
    starts = iter(beta0s)
    engine = cavi.CAVI(data, cfg.n_clusters, lambda rng: next(starts),
                       alpha0=torch.as_tensor(alpha0, dtype=dtype), inner_iter=cfg.inner_iter,
                       smoothing=cfg.smoothing, alpha_cap=alpha_cap, newton_tol=cfg.newton_tol,
                       chunk_size=cfg.chunk_size, n_rows=N,
                       reduce=lambda t, name: comm.all_reduce(t, name))
    return drive_ranks(comm, engine, cfg, len(beta0s), hook, "BCE row-distributed", t0)


def fit_rows_sequential(comm: Comm, data: LabelData, cfg: EMConfig, alpha0, beta0s,
                        hook=None):
    """The paper's heuristic row-distributed EM: parameters passed from rank to rank.

    Iteration ``t``: rank 0 starts from ``(alpha, beta)`` of rank ``P-1`` at ``t-1``
    (``alpha0, beta0`` at ``t = 1``); rank ``p`` runs the E-step on its rows,
    updates beta (eq. 7) and alpha (eq. 8) from its rows alone and sends the
    result to rank ``p+1``.  Rank ``P-1`` applies the stopping rule to the sum of
    the local bounds and starts the stop signal round.  At the end every rank
    receives the final parameters and refreshes its rows' ``gamma`` with them.

    Messages: ``rowseq/params`` point-to-point, ``K * (L + 1) + 3`` floats per hop
    (``P`` hops per iteration), and ``rowseq/final`` broadcast once.

    Returns
    -------
    (Fit, seconds) as :func:`fit_rows_exact` (one run: ``beta0s`` must hold one start);
    the run's objectives (the summed local bounds) only on rank ``P-1``, empty elsewhere.
    """
    if len(beta0s) != 1:
        raise ValueError("the row-sequential heuristic runs one start (n_init=1)")
    beta0 = beta0s[0]
    t_start, c_start = time.perf_counter(), time.process_time()
    K = cfg.n_clusters
    P, r = comm.world_size, comm.rank
    dtype = data.n_observed_rows.dtype
    comm.set_phase("setup")
    _, alpha_cap = row_setup(comm, data, cfg)
    comm.set_phase("fit")
    alpha = torch.as_tensor(alpha0, dtype=dtype).clone()
    beta = torch.as_tensor(beta0, dtype=dtype).clone()
    L = beta.shape[1]
    if L != data.n_total_labels:
        raise ValueError(f"beta0 has {L} label columns; the data have {data.n_total_labels}")
    n_local = data.n_rows
    gamma = cavi.initial_gamma(alpha, data, dtype)
    size = K + K * L + 3  # alpha, beta, bound so far, stop flag, degenerate flag
    prev, nxt = (r - 1) % P, (r + 1) % P

    def pack(a, b, acc, stop, degen):
        return torch.cat([a.to(torch.float64), b.reshape(-1).to(torch.float64),
                          torch.tensor([acc, stop, degen], dtype=torch.float64)])

    def unpack(buf):
        return (buf[:K].to(dtype), buf[K:K + K * L].reshape(K, L).to(dtype),
                float(buf[-3]), bool(buf[-2] > 0), bool(buf[-1] > 0))

    bounds: list[float] = []
    converged = degenerate = False
    bar = progress(cfg, r, f"BCE row-sequential (P={P})")
    it = 0
    while True:
        acc = 0.0
        if P > 1 and not (r == 0 and it == 0):
            buf = torch.empty(size, dtype=torch.float64)
            comm.recv(buf, prev, "rowseq/params")
            alpha, beta, acc, stop, _ = unpack(buf)
            if r == 0:
                acc = 0.0  # rank P-1 closed the previous iteration
            if stop:  # rank P-1 ended the run: pass the signal along and leave
                if r + 1 < P - 1:
                    comm.send(buf, nxt, "rowseq/params")
                break
        it += 1
        gamma, phi_sum, stats_p, plogp_p, _ = cavi.e_step(
            alpha, beta, data, gamma, cfg.inner_iter, chunk_size=cfg.chunk_size)
        suff_p = cavi.elog_dirichlet(gamma).sum(1)
        beta = cavi.update_beta(stats_p, data.offsets, cfg.smoothing)
        alpha, _ = cavi.update_alpha(alpha, suff_p, n_local, tol=cfg.newton_tol,
                                     ensure_ascent=True, alpha_cap=alpha_cap)
        acc += _local_bound(alpha, beta, gamma, phi_sum, stats_p, plogp_p)
        stop = False
        if r == P - 1:
            lb = acc + cfg.smoothing * float(torch.log(beta).sum(dtype=torch.float64))
            bounds.append(lb)
            if float(alpha.sum()) > alpha_cap:
                degenerate = stop = True
            elif relative_change_small(bounds, cfg.tol):
                converged = stop = True
            stop = stop or it >= cfg.max_iter
        if bar is not None:
            bar.update(1)
        if hook is not None:
            hook(r, it)
        if P > 1:
            comm.send(pack(alpha, beta, acc, float(stop), float(degenerate)), nxt,
                      "rowseq/params")
        if stop:
            break
    if bar is not None:
        bar.close()
    # everybody ends with rank P-1's parameters, flags and iteration count
    final = pack(alpha, beta, float(it), float(converged), float(degenerate))
    comm.broadcast(final, P - 1, "rowseq/final")
    alpha, beta, n_iter, converged, degenerate = unpack(final)
    gamma, _, _, _, _ = cavi.e_step(alpha, beta, data, gamma, cfg.inner_iter, collect=False,
                                    chunk_size=cfg.chunk_size)
    run = Run(cavi.CAVIState(alpha, beta, gamma), bounds, int(n_iter), converged, degenerate)
    return Fit(runs=[run], best=run), {"total": time.perf_counter() - t_start,
                                       "comm": comm.comm_seconds,
                                       "cpu": time.process_time() - c_start}
