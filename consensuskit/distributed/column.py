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

Each rank's pass is :func:`consensuskit.models.bce.cavi.e_step` with one
pass on its columns (alpha passed as 0, so its returned gamma is the partial
phi sum); all bound pieces come from
:func:`~consensuskit.models.bce.cavi.lower_bound` on the pieces each rank
holds.  The result equals the single-process fit up to the order of
floating-point additions.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch

from consensuskit.data.ensemble import LabelData
from consensuskit.distributed.comm import Comm
from consensuskit.distributed.common import EMConfig, pack_flags, unpack_flags
from consensuskit.distributed.row import drive_ranks
from consensuskit.inference.driver import Engine
from consensuskit.models.bce import cavi

__all__ = ["fit_columns", "ColumnCAVI", "COORDINATOR"]

#: Rank of the coordinator (E-step and M-step server).
COORDINATOR = 0


def _beta_bound_part(beta, stats, smoothing):
    """``sum phi ln beta + smoothing * sum ln beta`` over a rank's columns.

    :func:`~consensuskit.models.bce.cavi.lower_bound` evaluated on zero rows
    (its row terms vanish), so the formula stays in one place.
    """
    K = beta.shape[0]
    g0 = beta.new_ones(K, 0)
    return cavi.lower_bound(beta.new_ones(K), beta, g0, g0, stats, 0.0, smoothing=smoothing)


@dataclass
class ColumnState:
    """One rank's state: its columns' ``beta`` (K, L_p); on the coordinator also ``alpha``
    (K,) and ``gamma`` (K, N) (elsewhere ``alpha`` is None and ``gamma`` a receive buffer);
    the bound and degeneracy flag every rank received from the coordinator, and the number
    of iterations so far whose Newton solve for alpha stalled (alpha left unchanged; the
    coordinator's count, which every rank receives)."""

    alpha: torch.Tensor | None
    beta: torch.Tensor
    gamma: torch.Tensor
    bound: float = math.nan
    degenerate: bool = False
    n_alpha_rejected: int = 0


class ColumnCAVI(Engine):
    """BCE's variational EM with the columns spread over ranks (the module's exchange), as
    an engine of the one fit driver: every rank runs the driver, and the coordinator
    broadcasts the bound and the degeneracy flag, so that all take the same decisions."""

    def __init__(self, comm: Comm, data: LabelData, cfg: EMConfig, alpha0, beta0s, V, N):
        self.comm, self.data, self.cfg = comm, data, cfg
        self.coord = comm.rank == COORDINATOR
        self.K, self.N = cfg.n_clusters, N
        self.dtype = data.n_observed_rows.dtype
        self.alpha0, self.beta0s, self.V = alpha0, beta0s, V
        self.alpha_cap = None
        if self.coord:
            self.alpha_cap = (cfg.alpha_cap if cfg.alpha_cap is not None
                              else 10.0 * float(V.max()))

    def init(self, rng=None, run=0) -> ColumnState:
        beta = torch.as_tensor(self.beta0s[run], dtype=self.dtype).clone()
        if self.coord:
            alpha = torch.as_tensor(self.alpha0, dtype=self.dtype).clone()
            gamma = cavi.initial_gamma(alpha, self.data, self.dtype, row_weights=self.V)
        else:
            alpha, gamma = None, torch.empty(self.K, self.N, dtype=self.dtype)
        return ColumnState(alpha, beta, gamma)

    def step(self, state: ColumnState, rng=None) -> ColumnState:
        comm, cfg, K = self.comm, self.cfg, self.K
        alpha, beta, gamma = state.alpha, state.beta, state.gamma
        zero_alpha = torch.zeros(K, dtype=self.dtype)
        for t in range(1, cfg.inner_iter + 1):
            last = t == cfg.inner_iter
            comm.broadcast(gamma, COORDINATOR, "column/gamma")
            _, acc, stats_p, plogp_p, _, _ = cavi.e_step(
                zero_alpha, beta, self.data, gamma, 1, collect=last, chunk_size=cfg.chunk_size)
            comm.reduce(acc, COORDINATOR, "column/phi_sum")
            if self.coord:
                phi_sum = acc
                gamma = cavi.update_gamma(alpha, acc)
        # local M-step for beta; this rank's pieces of the bound
        beta = cavi.update_beta(stats_p, self.data.offsets, cfg.smoothing)
        terms = torch.tensor([plogp_p, _beta_bound_part(beta, stats_p, cfg.smoothing)],
                             dtype=torch.float64)
        comm.reduce(terms, COORDINATOR, "column/bound_terms")
        control = torch.zeros(2, dtype=torch.float64)  # (bound, flags)
        if self.coord:
            suff = cavi.elog_dirichlet(gamma).sum(1)
            alpha, newton = cavi.update_alpha(alpha, suff, self.N, tol=cfg.newton_tol,
                                              ensure_ascent=True, alpha_cap=self.alpha_cap)
            empty = torch.ones(K, 0, dtype=self.dtype)
            control[0] = cavi.lower_bound(alpha, empty, gamma, phi_sum, empty, float(terms[0]),
                                          smoothing=0.0) + float(terms[1])
            control[1] = pack_flags(float(alpha.sum()) > self.alpha_cap, newton["stalled"])
        comm.broadcast(control, COORDINATOR, "column/control")
        degenerate, stalled = unpack_flags(control[1])
        return ColumnState(alpha, beta, gamma, float(control[0]), degenerate,
                           state.n_alpha_rejected + int(stalled))

    def objective(self, state: ColumnState) -> float:
        return state.bound

    def degenerate(self, state: ColumnState) -> bool:
        return state.degenerate


def fit_columns(comm: Comm, data: LabelData, cfg: EMConfig, alpha0, beta0s, hook=None):
    """Column-distributed variational EM (client-server; rank 0 coordinates).

    Parameters
    ----------
    comm : Comm
    data : LabelData
        This rank's columns (all ``N`` rows), coded with this rank's own offsets.
        Rows whose labels in these columns are all missing are allowed; every
        row must have a label on some rank.
    cfg : EMConfig
    alpha0 : Tensor (K,)
        Used on the coordinator only.
    beta0s : list of Tensor (K, L_p)
        This rank's columns' initial label distributions, one per restart.
    hook : callable(rank, iteration) or None

    Returns
    -------
    (Fit, seconds) as :func:`consensuskit.distributed.row.fit_rows_exact`: the best run's
    ``params`` (:class:`ColumnState`) hold this rank's ``beta`` (K, L_p), and on the
    coordinator ``alpha`` (K,) and ``gamma`` (K, N).

    Messages: setup -- ``setup/n_rows`` (2,), ``setup/n_observed_rows`` (N,)
    reduce, ``setup/status`` (1,); per iteration -- ``inner_iter`` times
    ``column/gamma`` broadcast (K, N) and ``column/phi_sum`` reduce (K, N), then
    ``column/bound_terms`` reduce (2,) and ``column/control`` broadcast (2,): the bound
    and the flags (degenerate, alpha's Newton solve stalled) as one number.
    """
    t0 = time.perf_counter(), time.process_time()
    K = cfg.n_clusters
    dtype = data.n_observed_rows.dtype
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
    if comm.rank == COORDINATOR:
        status[0] = float((V <= 0).sum())
    comm.broadcast(status, COORDINATOR, "setup/status")
    if status[0] > 0:
        raise ValueError(f"{int(status[0])} row(s) have no observed label on any rank")
    comm.set_phase("fit")
    for b in beta0s:
        if tuple(b.shape) != (K, data.n_total_labels):
            raise ValueError(f"beta0 for rank {comm.rank} has shape {tuple(b.shape)}; "
                             f"expected ({K}, {data.n_total_labels})")
    engine = ColumnCAVI(comm, data, cfg, alpha0, beta0s, V.to(dtype), N)
    return drive_ranks(comm, engine, cfg, len(beta0s), hook, "BCE column-distributed", t0)
