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
    broadcasts them (with the summed bound) as the start of the next iteration.
    Only one rank computes at a time (no parallel speed-up; it suits data that may
    not be pooled), and there is no convergence guarantee.  The monitored objective is the sum of
    the ranks' local bounds, each at the parameters that rank produced.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch

from consensuskit.data.ensemble import LabelData
from consensuskit.distributed.comm import Comm
from consensuskit.distributed.common import EMConfig, pack_flags, progress, unpack_flags
from consensuskit.inference.driver import Engine
from consensuskit.inference.driver import fit as drive
from consensuskit.models.bce import cavi

__all__ = [
    "fit_rows_exact", "fit_rows_sequential", "row_setup", "drive_ranks", "RingCAVI",
]


def row_setup(comm: Comm, data: LabelData, cfg: EMConfig, beta0s=()):
    """Check the starts, agree on the total number of rows ``N`` and on ``alpha_cap``.

    Messages (phase "setup"): ``setup/n_rows`` (1,) sum and ``setup/max_labels_per_row``
    (1,) max.  Leaves the phase at "fit".
    """
    for b in beta0s:
        if b.shape[1] != data.n_total_labels:
            raise ValueError(f"beta0 has {b.shape[1]} label columns; the data have "
                             f"{data.n_total_labels}")
    comm.set_phase("setup")
    n = torch.tensor([float(data.n_rows)], dtype=torch.float64)
    comm.all_reduce(n, "setup/n_rows")
    vmax = torch.tensor([float(data.n_observed_rows.max()) if data.n_rows else 0.0],
                        dtype=torch.float64)
    comm.all_reduce(vmax, "setup/max_labels_per_row", op="max")
    cap = cfg.alpha_cap if cfg.alpha_cap is not None else 10.0 * float(vmax)
    comm.set_phase("fit")
    return int(round(float(n))), cap


def _local_bound(alpha, beta, gamma, phi_sum, stats, plogp, terms):
    """This rank's rows' share of ``L(alpha, beta; phi, gamma)`` (no smoothing term)."""
    return cavi.lower_bound(alpha, beta, gamma, phi_sum, stats, plogp, smoothing=0.0,
                            terms=terms)


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

    Every rank runs :class:`~consensuskit.models.bce.cavi.CAVI` on its rows with
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
    N, alpha_cap = row_setup(comm, data, cfg, beta0s)
    starts = iter(beta0s)
    engine = cavi.CAVI(data, cfg.n_clusters, lambda rng: next(starts),
                       alpha0=torch.as_tensor(alpha0, dtype=dtype), inner_iter=cfg.inner_iter,
                       smoothing=cfg.smoothing, alpha_cap=alpha_cap, newton_tol=cfg.newton_tol,
                       chunk_size=cfg.chunk_size, n_rows=N,
                       reduce=lambda t, name: comm.all_reduce(t, name))
    return drive_ranks(comm, engine, cfg, len(beta0s), hook, "BCE row-distributed", t0)


@dataclass
class RingState:
    """A rank's parameters after a round of the heuristic (those of rank ``P-1``, the same
    on every rank), its rows' ``gamma``, the summed local bounds, the degeneracy flag and
    the number of rounds so far in which some rank's Newton solve for alpha stalled."""

    alpha: torch.Tensor
    beta: torch.Tensor
    gamma: torch.Tensor
    bound: float = math.nan
    degenerate: bool = False
    n_alpha_rejected: int = 0


class RingCAVI(Engine):
    """The paper's heuristic row-distributed EM as an engine of the one fit driver.

    A step is one round: rank 0 starts from the round's parameters; rank ``p`` runs the
    E-step on its rows, updates beta (eq. 7) and alpha (eq. 8) *from its rows alone*,
    adds its local bound and sends the result to rank ``p+1``; rank ``P-1`` broadcasts
    the round's parameters, the summed bound and its degeneracy flag, so every rank's
    driver takes the same decisions.  A run ends with every rank refreshing its rows'
    gamma with the final parameters.
    """

    def __init__(self, comm: Comm, data: LabelData, cfg: EMConfig, alpha0, beta0s, alpha_cap):
        self.comm, self.data, self.cfg = comm, data, cfg
        self.alpha0, self.beta0s, self.alpha_cap = alpha0, beta0s, alpha_cap
        self.dtype = data.n_observed_rows.dtype
        self.K, self.L = cfg.n_clusters, data.n_total_labels

    def _pack(self, alpha, beta, acc, stalled, degenerate=False):
        return torch.cat([alpha.to(torch.float64), beta.reshape(-1).to(torch.float64),
                          torch.tensor([acc, pack_flags(degenerate, stalled)],
                                       dtype=torch.float64)])

    def _unpack(self, buf):
        """alpha, beta, summed bound, whether some rank's alpha solve stalled, degenerate."""
        K, L = self.K, self.L
        degenerate, stalled = unpack_flags(buf[-1])
        return (buf[:K].to(self.dtype), buf[K:K + K * L].reshape(K, L).to(self.dtype),
                float(buf[-2]), stalled, degenerate)

    def init(self, rng=None, run=0) -> RingState:
        alpha = torch.as_tensor(self.alpha0, dtype=self.dtype).clone()
        beta = torch.as_tensor(self.beta0s[run], dtype=self.dtype).clone()
        return RingState(alpha, beta, cavi.initial_gamma(alpha, self.data, self.dtype))

    def step(self, state: RingState, rng=None) -> RingState:
        comm, cfg, data = self.comm, self.cfg, self.data
        P, r = comm.world_size, comm.rank
        alpha, beta, acc, stalled = state.alpha, state.beta, 0.0, False
        size = self.K + self.K * self.L + 2
        if r > 0:
            buf = torch.empty(size, dtype=torch.float64)
            comm.recv(buf, r - 1, "rowseq/params")
            alpha, beta, acc, stalled, _ = self._unpack(buf)
        gamma, phi_sum, stats_p, plogp_p, _, terms = cavi.e_step(
            alpha, beta, data, state.gamma, cfg.inner_iter, chunk_size=cfg.chunk_size,
            with_terms=True)
        suff_p = terms.suff.to(gamma.dtype)
        beta = cavi.update_beta(stats_p, data.offsets, cfg.smoothing)
        alpha, newton = cavi.update_alpha(alpha, suff_p, data.n_rows, tol=cfg.newton_tol,
                                          ensure_ascent=True, alpha_cap=self.alpha_cap)
        stalled = stalled or newton["stalled"]
        acc += _local_bound(alpha, beta, gamma, phi_sum, stats_p, plogp_p, terms)
        if r < P - 1:
            comm.send(self._pack(alpha, beta, acc, stalled), r + 1, "rowseq/params")
            end = torch.empty(size, dtype=torch.float64)
        else:
            lb = acc + cfg.smoothing * float(torch.log(beta).sum(dtype=torch.float64))
            end = self._pack(alpha, beta, lb, stalled, float(alpha.sum()) > self.alpha_cap)
        comm.broadcast(end, P - 1, "rowseq/round")
        alpha, beta, bound, stalled, degenerate = self._unpack(end)
        return RingState(alpha, beta, gamma, bound, degenerate,
                         state.n_alpha_rejected + int(stalled))

    def objective(self, state: RingState) -> float:
        return state.bound

    def degenerate(self, state: RingState) -> bool:
        return state.degenerate

    def result(self, state: RingState) -> cavi.CAVIState:
        gamma = cavi.e_step(state.alpha, state.beta, self.data, state.gamma,
                            self.cfg.inner_iter, collect=False,
                            chunk_size=self.cfg.chunk_size).gamma
        return cavi.CAVIState(state.alpha, state.beta, gamma, state.bound,
                              n_alpha_rejected=state.n_alpha_rejected)


def fit_rows_sequential(comm: Comm, data: LabelData, cfg: EMConfig, alpha0, beta0s,
                        hook=None):
    """The paper's heuristic row-distributed EM (:class:`RingCAVI` under the fit driver).

    Only one rank computes at a time (no parallel speed-up; it suits data that may not
    be pooled), and there is no convergence guarantee: the monitored objective is the
    sum of the ranks' local bounds, each at the parameters that rank produced.

    Messages per iteration: ``rowseq/params`` point-to-point from rank ``p`` to ``p+1``
    (``P-1`` hops of ``K * (L + 1) + 2`` floats: parameters, bound, flags) and
    ``rowseq/round``, a broadcast of as many floats from rank ``P-1``.

    Returns
    -------
    (Fit, seconds) as :func:`fit_rows_exact`.
    """
    t0 = time.perf_counter(), time.process_time()
    _, alpha_cap = row_setup(comm, data, cfg, beta0s)
    engine = RingCAVI(comm, data, cfg, alpha0, beta0s, alpha_cap)
    return drive_ranks(comm, engine, cfg, len(beta0s), hook, "BCE row-sequential", t0)
