"""Start distributed BCE fits: local worker processes, or ``torchrun`` on many machines.

Python::

    from consensuskit.distributed import fit_distributed
    bce = fit_distributed(X, n_clusters=3, n_workers=4, mode="row")   # a fitted BCE
    bce.labels_, bce.alpha_, bce.predict(X_new), bce.perplexity(X_new), bce.save(path)
    bce.distributed_.bytes_sent()                                      # what travelled

Command line (one process per rank, any number of machines)::

    torchrun --nproc-per-node 4 -m consensuskit.distributed fit \\
        --mode row --n-clusters 3 labels.csv -o out.csv

Without ``torchrun``, ``python -m consensuskit.distributed fit --workers 4 ...``
spawns the workers locally.  See ``docs/scaling_out.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import queue as queue_mod
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from consensuskit.base import (
    check_n_clusters,
    check_positive_float,
    check_positive_int,
    resolve_dtype,
)
from consensuskit.data.ensemble import Ensemble, as_ensemble
from consensuskit.data.label_input import labels_to_int
from consensuskit.distributed._worker import (
    beta_columns,
    column_ensemble,
    init_group,
    run_rank,
    worker_main,
)
from consensuskit.distributed.comm import CommError, LocalComm, TorchComm
from consensuskit.distributed.common import EMConfig, FaultHook, WorkerResult
from consensuskit.distributed.rendezvous import (
    TOKEN_ENV,
    RendezvousError,
    bind_listener,
    connect_store,
    host_store,
)

__all__ = ["fit_distributed", "CommRecord", "DistributedFitError", "MODES", "main"]

#: Distribution schemes: exact row-distributed, the paper's heuristic sequential
#: row variant, and the column-distributed client-server scheme.
MODES = ("row", "row-sequential", "column")


class DistributedFitError(RuntimeError):
    """A distributed fit failed on at least one rank (crash, timeout, bad data)."""


@dataclass
class CommRecord:
    """How a distributed fit ran: ``BCE.distributed_`` after :func:`fit_distributed`.

    Attributes
    ----------
    mode : str
    n_workers : int
    messages : list of list of Message
        ``messages[p]``: every message rank ``p`` took part in.
    seconds : list of dict
        Per rank: ``total`` wall seconds of the fit, ``comm`` wall seconds inside
        communication calls, ``cpu`` process CPU seconds of the fit (and, for
        spawned workers, ``entered``/``joined`` epoch times of start-up).
    assignment : list of ndarray
        Rows (row modes) or columns (column mode) held by each rank.
    """

    mode: str
    n_workers: int
    messages: list = field(repr=False, default_factory=list)
    seconds: list = field(repr=False, default_factory=list)
    assignment: list = field(repr=False, default_factory=list)

    def bytes_sent(self, phase: str | None = "fit") -> list:
        """Payload bytes each rank contributed to messages of ``phase`` (None: all)."""
        return [sum(m.nbytes for m in log if m.role in ("send", "both")
                    and (phase is None or m.phase == phase)) for log in self.messages]


def _process_state(pid: int) -> str:
    """The kernel's one-letter state of ``pid`` ("T": stopped), "" when unknown."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def _end(procs, wait: float = 2.0) -> list:
    """End every worker for sure: SIGKILL (which a stopped process cannot ignore or
    postpone, unlike SIGTERM), then reap it.  Returns the ranks still alive (none
    unless the kernel is stuck)."""
    deadline = time.monotonic() + wait
    for p in procs:
        if p.is_alive():
            p.join(timeout=max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
    for p in procs:
        p.join(timeout=5.0)
    return [r for r, p in enumerate(procs) if p.is_alive()]


def _collect(procs, results, timeout: float, grace: float = 5.0):
    """Gather one message per worker; fail fast (with every rank's story) on any failure.

    A worker that exits without reporting (killed, ``os._exit``) or reports an error
    starts a grace period of ``min(grace, timeout)`` seconds in which the others may
    report (their collectives fail at once when the peer's connection drops, or after
    ``timeout`` when it is stalled); then every worker still there is killed.  Workers
    that are all stopped (SIGSTOP) or all silent while one is stopped for ``timeout``
    seconds count as a failure too, so no fault leaves the launcher waiting for ever.
    """
    P = len(procs)
    ok, errors, exits = {}, {}, {}
    quiet_exit = {}
    stopped_since: dict[int, float] = {}
    failed_at = None
    grace = min(grace, timeout)
    while len(ok) + len(errors) + len(exits) < P:
        try:
            kind, rank, obj = results.get(timeout=0.1)
            (ok if kind == "ok" else errors)[rank] = obj
            exits.pop(rank, None)
        except queue_mod.Empty:
            pass
        now = time.monotonic()
        for r, p in enumerate(procs):
            if r in ok or r in errors or r in exits:
                continue
            if p.is_alive():
                if _process_state(p.pid) == "T":
                    stopped_since.setdefault(r, now)
                else:
                    stopped_since.pop(r, None)
                continue
            # exited cleanly: give its queued message a moment to arrive
            seen = quiet_exit.setdefault(r, now)
            if p.exitcode != 0 or now - seen > 2.0:
                exits[r] = p.exitcode
        if failed_at is None and (errors or exits or any(
                now - t > timeout + grace for t in stopped_since.values())):
            failed_at = now
        if failed_at is not None and now - failed_at > grace:
            break
        pending = [r for r in range(P) if r not in ok and r not in errors and r not in exits]
        if failed_at is not None and pending and all(r in stopped_since for r in pending):
            break  # a stopped process reports nothing: no reason to wait for it
    left = _end(procs)
    if errors or exits or len(ok) < P:
        lines = []
        for r in range(P):
            if r in exits:
                how = (f"killed by signal {-exits[r]}" if exits[r] is not None and exits[r] < 0
                       else f"exited with code {exits[r]}")
                lines.append(f"rank {r}: process {how} without reporting a result")
            elif r in errors:
                lines.append(f"rank {r}: {errors[r]}")
            elif r not in ok:
                if r in stopped_since:
                    lines.append(f"rank {r}: stopped (SIGSTOP), so it could not report; killed")
                else:
                    lines.append(f"rank {r}: still running {grace:.0f} s after the first "
                                 "failure; killed")
        if left:
            lines.append(f"ranks {left} could not be ended (kernel did not reap them)")
        raise DistributedFitError(
            "distributed BCE fit failed:\n  " + "\n  ".join(lines))
    return [ok[r] for r in range(P)]


def _context(start_method):
    """A multiprocessing context; the fork server preloads torch and the engines once."""
    import multiprocessing as mp

    if start_method is None:
        start_method = "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
    if start_method not in mp.get_all_start_methods():
        raise ValueError(f"start_method must be one of {mp.get_all_start_methods()}; "
                         f"got {start_method!r}")
    ctx = mp.get_context(start_method)
    if start_method == "forkserver":
        ctx.set_forkserver_preload(["consensuskit.distributed._preload"])
    return ctx


def _spawn(jobs, timeout: float, n_threads: int, start_method=None, host="127.0.0.1"):
    """Run ``jobs`` in local worker processes around a store this process hosts on
    ``host`` (loopback by default), with a fresh token; every worker is ended on return."""
    import secrets

    ctx = _context(start_method)
    results = ctx.Queue()
    P = len(jobs)
    sock = bind_listener(host, 0)
    address = (host, sock.getsockname()[1], secrets.token_bytes(32))
    store = host_store(sock, P, timeout)
    procs = [ctx.Process(target=worker_main, daemon=True,
                         args=(r, P, address, timeout, n_threads, jobs[r], results))
             for r in range(P)]
    try:
        for p in procs:
            p.start()
        return _collect(procs, results, timeout)
    finally:
        _end(procs, wait=0.0)
        del store  # closes the listening socket


def _check_split(mode, ens: Ensemble, P: int) -> None:
    """Each of the ``P`` workers gets at least one column (column mode) or row."""
    N, M = ens.shape
    if mode == "column" and M < P:
        raise ValueError(f"column mode needs at least one base clustering per worker; "
                         f"got M={M} columns for n_workers={P}")
    if mode != "column" and N < P:
        raise ValueError(f"row modes need at least one row per worker; got N={N} rows for "
                         f"n_workers={P}")


def _validate_beta_init(beta_init, ens: Ensemble, K: int) -> np.ndarray:
    if isinstance(beta_init, (list, tuple)):
        if len(beta_init) != ens.n_partitions:
            raise ValueError(f"beta_init has {len(beta_init)} blocks; expected one per base "
                             f"clustering ({ens.n_partitions})")
        beta_init = np.concatenate([np.asarray(b, dtype=np.float64) for b in beta_init], 1)
    b = np.asarray(beta_init, dtype=np.float64)
    if b.shape != (K, ens.n_total_labels):
        raise ValueError(f"beta_init must have shape ({K}, {ens.n_total_labels}) "
                         f"(n_clusters, sum of labels per base clustering); got {b.shape}")
    if not np.all(np.isfinite(b)) or (b <= 0).any():
        raise ValueError("beta_init must be finite and positive")
    return b


def fit_distributed(X, n_clusters, *, n_workers=2, mode="row", n_init=1, max_iter=100,
                    tol=1e-6, inner_iter=5, smoothing=1e-6, init="kmeans", alpha_init=None,
                    beta_init=None, random_state=None, dtype="float64", timeout=60.0,
                    n_threads=1, verbose=False, start_method=None, _fault=None):
    """Fit BCE by variational EM over ``n_workers`` local processes (gloo, CPU).

    The data are split (rows or columns) in this process and each worker
    receives only its part; the workers then talk to each other only through
    :mod:`consensuskit.distributed.comm`.  Each worker runs BCE's engine under the
    one fit driver (row mode: with an all-reduce of the sufficient statistics;
    column mode: with the client-server exchange), so the ``"row"`` and
    ``"column"`` fits equal :class:`consensuskit.BCE` with the same settings and
    ``random_state`` up to floating-point summation order, restarts included.

    Parameters
    ----------
    X : array-like (N, M) or Ensemble
        Base-clustering labels, -1 missing.
    n_clusters : int
        ``K``.
    n_workers : int, default 2
        ``P`` processes.  Row modes need ``N >= P``; column mode ``M >= P``.
    mode : {"row", "row-sequential", "column"}
        Exact row-distributed EM, the paper's heuristic sequential row variant,
        or column-distributed (client-server) EM.
    n_init, max_iter, tol, inner_iter, smoothing, init, random_state
        As in :class:`consensuskit.BCE`: ``n_init`` restarts, each from its own
        initial beta drawn from ``random_state`` in the estimator's order; the best
        bound (non-degenerate first) is kept.  ``init`` is ignored when ``beta_init``
        is given.
    alpha_init : array-like (K,), optional
        Default ``ones(K)``, as the estimator.
    beta_init : array-like (K, sum_j k_j) or list of (K, k_j), optional
        The start of a single run (``n_init=1``).
    dtype : {"float64", "float32"}
    timeout : float, default 60
        Seconds a collective may wait for a peer (gloo's timeout) and the grace
        period after a worker fails before the rest are terminated.
    n_threads : int, default 1
        torch threads per worker.
    verbose : bool
        Progress bar on rank 0.
    start_method : {None, "forkserver", "spawn", "fork"}
        How workers start; None: a fork server (one per Python session) that
        imports torch once, so later fits start their workers in well under a
        second; "spawn" where fork servers are unavailable.

    Returns
    -------
    BCE
        Fitted (``alpha_``, ``beta_``, ``gamma_``, ``labels_``, ``lower_bounds_``, ...),
        so it predicts, scores, saves and loads as any BCE; ``distributed_`` (a
        :class:`CommRecord`) tells how the fit ran and what travelled.

    Raises
    ------
    DistributedFitError
        If any worker fails; the message gives every rank's error.
    """
    from sklearn.utils import check_random_state

    from consensuskit.models.bce.estimator import BCE

    ens = as_ensemble(X)
    K = check_n_clusters(n_clusters, ens.n_samples)
    P = check_positive_int(n_workers, "n_workers")
    n_init = check_positive_int(n_init, "n_init")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}; got {mode!r}")
    if beta_init is not None and n_init > 1:
        raise ValueError("beta_init gives one start; use n_init=1 with it")
    cfg = EMConfig(n_clusters=K, max_iter=check_positive_int(max_iter, "max_iter"),
                   tol=check_positive_float(tol, "tol", allow_zero=True),
                   inner_iter=check_positive_int(inner_iter, "inner_iter"),
                   smoothing=check_positive_float(smoothing, "smoothing"), verbose=verbose)
    tdtype = resolve_dtype(dtype)
    timeout = check_positive_float(timeout, "timeout")
    n_threads = check_positive_int(n_threads, "n_threads")
    if init not in ("kmeans", "random"):
        raise ValueError(f"init must be 'kmeans' or 'random'; got {init!r}")
    _check_split(mode, ens, P)
    est = BCE(K, alpha_estimate="meanfield", max_iter=cfg.max_iter, tol=cfg.tol,
              n_init=n_init, inner_iter=cfg.inner_iter,
              init=init, smoothing=cfg.smoothing, random_state=random_state, dtype=dtype)
    if beta_init is None:
        rs = check_random_state(random_state)
        beta0s = [est.initial_beta(ens, K, rs) for _ in range(n_init)]
    else:
        beta0s = [_validate_beta_init(beta_init, ens, K)]
    alpha0 = np.ones(K) if alpha_init is None else np.asarray(alpha_init, dtype=np.float64)
    if alpha0.shape != (K,) or not np.all(np.isfinite(alpha0)) or (alpha0 <= 0).any():
        raise ValueError(f"alpha_init must be {K} finite positive numbers; got {alpha_init!r}")
    fault = None
    if _fault is not None:
        fault = _fault if isinstance(_fault, FaultHook) else FaultHook(**_fault)

    parts, jobs = _jobs(mode, ens, P, cfg, alpha0, beta0s, tdtype, fault)
    outs = _run(jobs, timeout, n_threads, start_method)
    return _assemble(est, outs, mode, ens, K, parts, tdtype)


def _jobs(mode, ens: Ensemble, P, cfg, alpha0, beta0s, dtype, fault):
    """``(parts, jobs)``: the rows (row modes) or columns (column mode) of each of the ``P``
    workers and the keyword arguments of its :func:`run_rank`."""
    jobs = []
    if mode == "column":
        parts = np.array_split(np.arange(ens.n_partitions), P)
        for cols in parts:
            jobs.append(dict(mode=mode, ensemble=column_ensemble(ens, cols), cfg=cfg,
                             alpha0=alpha0,
                             beta0s=[beta_columns(b, ens.offsets, cols) for b in beta0s],
                             dtype=dtype, index=cols, hook=fault))
    else:
        parts = np.array_split(np.arange(ens.n_samples), P)
        for rows in parts:
            jobs.append(dict(mode=mode, ensemble=ens.subset(rows), cfg=cfg, alpha0=alpha0,
                             beta0s=beta0s, dtype=dtype, index=rows, hook=fault))
    return parts, jobs


def _run(jobs, timeout, n_threads, start_method):
    """The workers' outputs: one job in this process (``n_threads`` torch threads), more
    in spawned worker processes."""
    if len(jobs) == 1:
        import torch

        torch_threads = torch.get_num_threads()
        torch.set_num_threads(n_threads)
        try:
            return [run_rank(LocalComm(), **jobs[0])]
        finally:
            torch.set_num_threads(torch_threads)
    return _spawn(jobs, timeout, n_threads, start_method)


def _assemble(est, outs, mode, ens: Ensemble, K: int, parts, dtype):
    """The workers' results as the fitted ``est`` (a BCE) with its ``distributed_`` record."""
    import torch

    from consensuskit.inference.driver import Fit, Run
    from consensuskit.models.bce.cavi import CAVIState, bound_at

    N, M = ens.shape
    gamma = np.empty((N, K))
    beta = [None] * M
    for o in outs:
        if o.gamma is not None:
            gamma[o.rows] = o.gamma
        if mode == "column":
            for j, b in o.beta.items():
                beta[j] = b
    head = outs[-1] if mode == "row-sequential" else outs[0]
    if mode != "column":
        beta = [head.beta[j] for j in range(M)]
    as_t = lambda a: torch.as_tensor(np.asarray(a), dtype=dtype)  # noqa: E731
    state = CAVIState(as_t(head.alpha), as_t(np.concatenate(beta, axis=1)), as_t(gamma.T),
                      n_alpha_rejected=head.n_alpha_rejected)
    best = Run(state, list(head.lower_bounds), head.n_iter, head.converged, head.degenerate)
    others = [Run(None, [obj], 0, degenerate=deg) for obj, deg in head.runs]
    fit = Fit(runs=others, best=best)
    est.ensemble_ = ens
    est.n_features_in_ = M
    est.set_fitted_state(ens, fit, torch.device("cpu"), dtype)
    # as the single-process estimator: the bound at the returned alpha, beta and gamma
    est.lower_bound_ = bound_at(state.alpha, state.beta, state.gamma,
                                ens.label_data(dtype=dtype), smoothing=est.smoothing)
    est.distributed_ = CommRecord(mode=mode, n_workers=len(outs),
                                  messages=[o.messages for o in outs],
                                  seconds=[o.seconds for o in outs], assignment=list(parts))
    return est


# ----------------------------------------------------------------------------- torchrun CLI
def _read_labels(path: str, rank: int) -> np.ndarray:
    import pandas as pd

    p = path.format(rank=rank) if "{rank}" in path else path
    df = pd.read_csv(p)
    return labels_to_int(df.to_numpy(dtype=np.float64))


def _row_ensemble_global(comm, L: np.ndarray) -> Ensemble:
    """Code this rank's rows with a coding every rank shares: labels 0..max_j over all ranks.

    Message ``setup/label_max`` (M,) int64 all-reduce(max): the largest label of
    each column (metadata of size M, not rows).
    """
    import torch

    if (L.max(axis=1) < 0).any():
        i = int(np.flatnonzero(L.max(axis=1) < 0)[0])
        raise ValueError(f"row {i} of rank {comm.rank} has no observed label")
    M = L.shape[1]
    mm = torch.tensor([float(M), -float(M)], dtype=torch.float64)
    comm.all_reduce(mm, "setup/n_columns", op="max")
    if int(mm[0]) != M or int(-mm[1]) != M:
        raise ValueError(f"rank {comm.rank} has {M} columns; the ranks disagree")
    mx = torch.as_tensor(L.max(axis=0), dtype=torch.int64).clone()
    comm.all_reduce(mx, "setup/label_max", op="max")
    k = mx.numpy() + 1
    if (k <= 0).any():
        raise ValueError(f"column {int(np.flatnonzero(k <= 0)[0])} has no observed label")
    return Ensemble(codes=np.asfortranarray(L), n_labels=k.astype(np.int64),
                    categories=tuple(np.arange(kj) for kj in k))


def _cli_worker(args) -> int:
    import torch
    import torch.distributed as dist
    from sklearn.utils import check_random_state

    from consensuskit.models.bce import initialise

    torch.set_num_threads(args.threads)
    store = _cli_store(args.timeout)
    token = os.environ.get(TOKEN_ENV)
    init_group(store, int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]),
               args.timeout, token.encode() if token else None)
    comm = TorchComm(timeout=args.timeout)
    r, P = comm.rank, comm.world_size
    L = _read_labels(args.labels, r)
    per_rank_file = "{rank}" in args.labels
    K = args.n_clusters
    dtype = resolve_dtype(args.dtype)
    cfg = EMConfig(n_clusters=K, max_iter=args.max_iter, tol=args.tol,
                   inner_iter=args.inner_iter, smoothing=args.smoothing,
                   verbose=not args.quiet)
    if args.mode == "column":
        cols = (np.arange(L.shape[1]) if per_rank_file
                else np.array_split(np.arange(L.shape[1]), P)[r])
        if cols.size == 0:
            raise ValueError(f"rank {r} got no column; use at most M ranks in column mode")
        ens = Ensemble.from_labels(L[:, cols], allow_missing_rows=True)
        if args.init == "kmeans":
            raise ValueError("--init kmeans needs every column in one place; column mode "
                             "uses --init random")
        rs = check_random_state(None if args.random_state is None
                                else args.random_state + 7919 * r)
        beta0 = initialise.init_beta_random(ens, K, rs)
        index = cols
    else:
        rows = (np.arange(L.shape[0]) if per_rank_file
                else np.array_split(np.arange(L.shape[0]), P)[r])
        ens = _row_ensemble_global(comm, L[rows])
        beta0 = torch.empty(K, ens.n_total_labels, dtype=torch.float64)
        if r == 0:
            rs = check_random_state(args.random_state)
            b = (initialise.init_beta_kmeans(ens, K, rs) if args.init == "kmeans"
                 else initialise.init_beta_random(ens, K, rs))
            beta0 = torch.as_tensor(b, dtype=torch.float64).clone()
        comm.broadcast(beta0, 0, "setup/beta0")
        beta0 = beta0.numpy()
        index = rows
    res = run_rank(comm, args.mode, ens, cfg, np.ones(K), [beta0], dtype, index)
    _cli_output(comm, args, res, K)
    dist.destroy_process_group()
    return 0


def _cli_store(timeout: float):
    """The store of a rank started by ``torchrun`` or by hand.

    Under ``torchrun`` (``TORCHELASTIC_USE_AGENT_STORE``) the agent hosts the store at
    ``MASTER_ADDR:MASTER_PORT`` and every rank is its client.  Ranks started by hand
    (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT`` set): rank 0 hosts it,
    bound to ``MASTER_ADDR`` only (a port in use is a clear error), the others connect.
    """
    try:
        host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    except (KeyError, ValueError) as exc:
        raise RendezvousError(f"RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT must be set "
                              f"(integers where numbers): {exc}") from None
    if host in ("127.0.0.1", "localhost", "::1"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    if rank == 0 and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return host_store(bind_listener(host, port), world, timeout)
    return connect_store(host, port, timeout)


def _cli_output(comm, args, res: WorkerResult, K: int) -> None:
    import pandas as pd
    import torch

    comm.set_phase("output")
    P, r = comm.world_size, comm.rank
    per_rank = "{rank}" in args.output
    gamma = res.gamma
    if args.mode != "column" and not per_rank:
        # gather the rows' gamma (float outputs, not labels) to rank 0
        counts = torch.zeros(P, dtype=torch.float64)
        counts[r] = float(gamma.shape[0])
        comm.all_reduce(counts, "output/row_counts")
        if r == 0:
            parts = [gamma]
            for src in range(1, P):
                buf = torch.empty(int(counts[src]), K, dtype=torch.float64)
                parts.append(comm.recv(buf, src, "output/gamma").numpy())
            gamma = np.concatenate(parts)
        else:
            comm.send(torch.as_tensor(gamma, dtype=torch.float64).contiguous(), 0,
                      "output/gamma")
            gamma = None
    if gamma is None:
        return
    if args.mode == "column" and r != 0:
        return
    path = args.output.format(rank=r) if per_rank else args.output
    mem = gamma / gamma.sum(1, keepdims=True)
    df = pd.DataFrame(mem, columns=[f"p{h}" for h in range(K)])
    df.insert(0, "label", mem.argmax(1))
    df.to_csv(path, index=False)
    if args.summary and r == (P - 1 if args.mode == "row-sequential" else 0):
        with open(args.summary, "w") as fh:
            json.dump({"mode": args.mode, "n_workers": P, "alpha": res.alpha.tolist(),
                       "lower_bounds": res.lower_bounds, "n_iter": res.n_iter,
                       "converged": res.converged, "degenerate": res.degenerate,
                       "n_alpha_steps_rejected": res.n_alpha_rejected,
                       "bytes_sent_rank0_fit": comm.bytes_sent("fit")}, fh, indent=1)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m consensuskit.distributed",
        description="Distributed BCE (row- or column-distributed variational EM) on "
                    "torch.distributed with the gloo backend.")
    sub = ap.add_subparsers(dest="command", required=True)
    f = sub.add_parser("fit", help="fit BCE; run under torchrun, or with --workers P locally")
    f.add_argument("labels", help="CSV of base-clustering labels (header row; -1 or empty = "
                   "missing). '{rank}' in the name: each rank reads its own file")
    f.add_argument("-o", "--output", required=True,
                   help="CSV of consensus label and memberships; '{rank}' in the name: each "
                   "rank writes its own rows (row modes)")
    f.add_argument("--mode", choices=MODES, default="row")
    f.add_argument("--n-clusters", type=int, required=True)
    f.add_argument("--max-iter", type=int, default=100)
    f.add_argument("--tol", type=float, default=1e-6)
    f.add_argument("--inner-iter", type=int, default=5)
    f.add_argument("--smoothing", type=float, default=1e-6)
    f.add_argument("--init", choices=("kmeans", "random"), default=None,
                   help="default: kmeans (row modes), random (column mode)")
    f.add_argument("--random-state", type=int, default=None)
    f.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    f.add_argument("--timeout", type=float, default=300.0,
                   help="seconds a collective waits for a peer before failing")
    f.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    f.add_argument("--workers", type=int, default=None,
                   help="without torchrun: spawn this many local workers")
    f.add_argument("--summary", default=None, help="JSON file with alpha, bounds, n_iter")
    f.add_argument("--quiet", action="store_true", help="no progress bar")
    return ap


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    if args.init is None:
        args.init = "random" if args.mode == "column" else "kmeans"
    if args.n_clusters < 1:
        raise SystemExit("--n-clusters must be >= 1")
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        try:
            return _cli_worker(args)
        except (CommError, ValueError, RendezvousError) as exc:
            print(f"rank {os.environ.get('RANK')}: {type(exc).__name__}: {exc}",
                  file=sys.stderr, flush=True)
            sys.stdout.flush()
            # leave now: torch's store and gloo objects may wait on dead peers (or abort)
            # in their destructors at interpreter exit
            os._exit(1)
    # no torchrun: spawn local workers
    import pandas as pd

    if "{rank}" in args.labels:
        raise SystemExit("'{rank}' file names need torchrun (one process per file)")
    X = pd.read_csv(args.labels).to_numpy(dtype=np.float64)
    bce = fit_distributed(X, args.n_clusters, n_workers=args.workers or 2, mode=args.mode,
                          max_iter=args.max_iter, tol=args.tol, inner_iter=args.inner_iter,
                          smoothing=args.smoothing, init=args.init,
                          random_state=args.random_state, dtype=args.dtype,
                          timeout=args.timeout, n_threads=args.threads,
                          verbose=not args.quiet)
    df = pd.DataFrame(bce.membership_, columns=[f"p{h}" for h in range(args.n_clusters)])
    df.insert(0, "label", bce.labels_)
    df.to_csv(args.output, index=False)
    if args.summary:
        rec = bce.distributed_
        with open(args.summary, "w") as fh:
            json.dump({"mode": rec.mode, "n_workers": rec.n_workers,
                       "alpha": bce.alpha_.tolist(), "lower_bounds": bce.lower_bounds_,
                       "lower_bound": bce.lower_bound_,
                       "n_alpha_steps_rejected": bce.n_alpha_steps_rejected_,
                       "n_iter": bce.n_iter_, "converged": bce.converged_,
                       "degenerate": bce.degenerate_, "bytes_sent_fit": rec.bytes_sent()},
                      fh, indent=1)
    return 0
