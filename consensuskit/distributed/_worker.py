"""What runs inside one worker process (kept free of scikit-learn imports).

Locally spawned workers start in a fork server that has imported this module
(and with it torch and the engines) once, so that starting ``P`` workers does
not pay ``P`` torch imports; :func:`worker_main` is their entry point.
:func:`run_rank` is shared with the ``torchrun`` command line and with the
in-process ``P = 1`` path.
"""

from __future__ import annotations

import datetime
import os
import time
import traceback

import numpy as np
import torch
import torch.distributed as dist

from consensuskit.data.ensemble import Ensemble
from consensuskit.distributed import column, row
from consensuskit.distributed.comm import CommError, TorchComm
from consensuskit.distributed.common import EMConfig, WorkerResult
from consensuskit.distributed.rendezvous import RendezvousError, connect_store, join
from consensuskit.models.bce import cavi

__all__ = ["run_rank", "worker_main", "column_ensemble", "beta_columns"]


def column_ensemble(ens: Ensemble, cols) -> Ensemble:
    """The columns ``cols`` of ``ens`` as an Ensemble, keeping their coding."""
    cols = np.asarray(cols, dtype=np.int64)
    return Ensemble(codes=np.asfortranarray(ens.codes[:, cols]),
                    n_labels=ens.n_labels[cols].copy(),
                    categories=tuple(ens.categories[j] for j in cols))


def beta_columns(beta: np.ndarray, offsets: np.ndarray, cols) -> np.ndarray:
    """The blocks of ``beta`` (K, L) that belong to columns ``cols``, side by side."""
    return np.concatenate([beta[:, offsets[j]:offsets[j + 1]] for j in cols], axis=1)


def run_rank(comm, mode: str, ensemble: Ensemble, cfg: EMConfig, alpha0, beta0s, dtype,
             index, hook=None) -> WorkerResult:
    """Run one rank's part of a fit over ``comm`` and package its result.

    ``beta0s`` holds the initial beta of each restart (this rank's columns in column
    mode); ``index`` the global row indices (row modes) or column indices (column mode)
    of ``ensemble``'s rows / columns.
    """
    data = ensemble.label_data(dtype=dtype)
    # every rank has its data: a monitored barrier names any rank that did not get here
    comm.barrier("setup/ready")
    a0 = torch.as_tensor(np.asarray(alpha0), dtype=dtype)
    b0s = [torch.as_tensor(np.asarray(b), dtype=dtype) for b in beta0s]
    fn = {"row": row.fit_rows_exact, "row-sequential": row.fit_rows_sequential,
          "column": column.fit_columns}[mode]
    fit, seconds = fn(comm, data, cfg, a0, b0s, hook=hook)
    best = fit.best
    res = best.params
    out = WorkerResult(rank=comm.rank, lower_bounds=list(best.objectives), n_iter=best.n_iter,
                       converged=best.converged, degenerate=best.degenerate,
                       n_alpha_rejected=int(res.n_alpha_rejected),
                       runs=[(r.objective, r.degenerate) for r in fit.runs],
                       messages=list(comm.log), seconds=seconds)
    if res.alpha is not None:
        out.alpha = res.alpha.numpy().astype(np.float64)
    blocks = cavi.unpack_beta(res.beta, ensemble.offsets)
    if mode == "column":
        out.beta = {int(j): b.numpy().astype(np.float64) for j, b in zip(index, blocks)}
        if res.alpha is not None:
            out.rows = np.arange(ensemble.n_samples)
            out.gamma = res.gamma.T.numpy().astype(np.float64)
    else:
        out.beta = {j: b.numpy().astype(np.float64) for j, b in enumerate(blocks)}
        out.rows = np.asarray(index, dtype=np.int64)
        out.gamma = res.gamma.T.numpy().astype(np.float64)
    return out


def init_group(store, rank: int, world_size: int, timeout: float, token=None) -> None:
    """Join the world on ``store`` (checked, see :func:`rendezvous.join`), then start the
    gloo process group on a prefixed view of the same store."""
    hook = _START_HOOK.get("hook")
    if hook is not None:
        hook(rank, -1)  # fault injection at start-up (tests and experiments)
    join(store, rank, world_size, timeout, token)
    dist.init_process_group("gloo", store=dist.PrefixStore("consensuskit/pg", store),
                            rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=timeout))


_START_HOOK: dict = {}


def worker_main(rank, world_size, address, timeout, n_threads, job, results):
    """Entry point of a locally spawned worker process.

    ``address`` is ``(host, port, token)`` of the store the launcher hosts."""
    t_entered = time.time()
    torch.set_num_threads(n_threads)
    host, port, token = address
    if host in ("127.0.0.1", "localhost", "::1"):
        os.environ["GLOO_SOCKET_IFNAME"] = "lo"  # gloo's own sockets on loopback too
    try:
        _START_HOOK["hook"] = job.get("hook")
        store = connect_store(host, port, timeout)
        init_group(store, rank, world_size, timeout, token)
        t_joined = time.time()
        comm = TorchComm(timeout=timeout)
        res = run_rank(comm, **job)
        res.seconds.update(entered=t_entered, joined=t_joined)
        results.put(("ok", rank, res))
    except BaseException as exc:  # report, then leave without waiting on dead peers
        detail = f"{type(exc).__name__}: {exc}"
        if not isinstance(exc, (CommError, ValueError, RendezvousError)):
            detail += "\n" + traceback.format_exc(limit=6)
        results.put(("error", rank, detail))
        results.close()
        results.join_thread()
        os._exit(1)
    try:
        dist.destroy_process_group()
    except Exception:  # pragma: no cover - best effort at shutdown
        pass
