"""Pieces shared by the row- and column-distributed engines.

The engines run the same variational EM as the single-process estimator
(:class:`consensuskit.models.bce.cavi.CAVI` under the one fit driver): per iteration an
E-step of ``inner_iter`` warm-started (phi, gamma) passes, then the beta
update (eq. 7), the Newton update of alpha (eq. 8, with ascent checks) and the
objective ``L + smoothing * sum ln beta``; they stop on a relative change of
the objective ``<= tol``, after ``max_iter`` iterations, or when ``sum(alpha)``
passes ``alpha_cap`` (the degenerate optimum).  Only where the data live and
which sums travel between processes differ.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

__all__ = ["EMConfig", "FaultHook", "WorkerResult", "progress"]


def pack_flags(degenerate: bool, alpha_stalled: bool) -> float:
    """Two flags of an iteration as one float of a control message (bit 0, bit 1)."""
    return float(int(bool(degenerate)) + 2 * int(bool(alpha_stalled)))


def unpack_flags(x) -> tuple[bool, bool]:
    """``(degenerate, alpha_stalled)`` from :func:`pack_flags`."""
    v = int(round(float(x)))
    return bool(v & 1), bool(v & 2)


@dataclass
class EMConfig:
    """Settings of one distributed variational-EM run (validated by the launcher).

    Attributes
    ----------
    n_clusters : int
        ``K``.
    max_iter : int
        EM iterations at most.
    tol : float
        Stop when ``|L_t - L_{t-1}| <= tol * |L_t|`` (0: run ``max_iter`` iterations).
    inner_iter : int
        (phi, gamma) passes per E-step, warm-started from the previous gamma.
    smoothing : float
        Pseudo-count of the beta update (the authors' ``lapParam``).
    alpha_cap : float or None
        Degenerate-optimum guard on ``sum(alpha)``; None: ``10 * max_i V_i``
        (``V_i`` = observed labels of row ``i``), as the estimator.
    newton_tol : float
        Relative L1 tolerance of the Newton iterations for alpha.
    chunk_size : int
        Rows per chunk inside the local E-step.
    verbose : bool
        tqdm progress bar on rank 0.
    """

    n_clusters: int
    max_iter: int = 100
    tol: float = 1e-6
    inner_iter: int = 5
    smoothing: float = 1e-6
    alpha_cap: float | None = None
    newton_tol: float = 1e-10
    chunk_size: int = 32768
    verbose: bool = False


@dataclass
class FaultHook:
    """Test hook: make one rank misbehave after a given EM iteration (``after_iter=-1``:
    at start-up, before the rank joins the world).

    ``action="exit"`` ends the process at once with ``os._exit(exit_code)`` (as a
    crash would); ``"kill"`` sends itself SIGKILL (a killed process or machine);
    ``"stop"`` sends itself SIGSTOP (a frozen process: it cannot run, nor react to
    SIGTERM); ``"hang"`` makes it sleep, as a stalled peer would, so that the others
    run into the collective timeout.
    """

    rank: int
    after_iter: int
    action: str = "exit"
    exit_code: int = 17
    #: a file the hook appends ``time.time()`` to just before it acts (experiments
    #: measure the time from the fault to the launcher's error)
    log_path: str | None = None

    def __call__(self, rank: int, iteration: int) -> None:
        if rank != self.rank or iteration != self.after_iter:
            return
        if self.log_path is not None:
            import time

            with open(self.log_path, "a") as fh:
                fh.write(f"{time.time()!r}\n")
        if self.action == "exit":
            os._exit(self.exit_code)
        if self.action in ("kill", "stop"):
            import signal

            os.kill(os.getpid(), signal.SIGKILL if self.action == "kill" else signal.SIGSTOP)
        if self.action == "hang":
            import time

            time.sleep(3600)


@dataclass
class WorkerResult:
    """What one rank returns to the launcher.

    Attributes
    ----------
    rank : int
    rows : ndarray of int64 or None
        Global indices of the rows whose ``gamma`` this rank returns.
    gamma : ndarray (n_rows, K) or None
        Variational Dirichlet parameters of those rows.
    alpha : ndarray (K,) or None
    beta : dict {column index: ndarray (K, k_j)}
        The label distributions this rank holds (all columns in row mode, its own
        columns in column mode).
    lower_bounds : list of float
        The kept restart's objective after every iteration.
    n_iter : int
    converged, degenerate : bool
    n_alpha_rejected : int
        Iterations of the kept restart whose Newton solve for alpha stalled (alpha left
        unchanged), as the single-process ``BCE.n_alpha_steps_rejected_``.
    runs : list of (float, bool)
        Final objective and degeneracy flag of every restart.
    messages : list of dict
        The rank's :class:`~consensuskit.distributed.comm.Message` records.
    seconds : dict
        ``total`` and ``comm`` (inside communication calls) wall seconds and
        ``cpu`` process seconds of the fit.
    """

    rank: int
    rows: np.ndarray | None = None
    gamma: np.ndarray | None = None
    alpha: np.ndarray | None = None
    beta: dict = field(default_factory=dict)
    lower_bounds: list = field(default_factory=list)
    n_iter: int = 0
    converged: bool = False
    degenerate: bool = False
    n_alpha_rejected: int = 0
    runs: list = field(default_factory=list)
    messages: list = field(default_factory=list)
    seconds: dict = field(default_factory=dict)


def progress(cfg: EMConfig, rank: int, desc: str):
    """A tqdm bar over EM iterations on rank 0 when ``cfg.verbose``; else None."""
    if not cfg.verbose or rank != 0:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=cfg.max_iter, desc=desc)
