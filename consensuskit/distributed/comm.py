"""A thin, instrumented layer over the ``torch.distributed`` calls the engines use.

Every message an engine sends or receives goes through a :class:`Comm`, which
names it and records its shape, dtype and payload size.  The record is what the
tests inspect to show that no message carries labels or rows (only float
sufficient statistics whose shapes do not depend on ``N`` in row mode; only
``(K, N)`` float row summaries in column mode), and what the cost model in
``docs/scaling_out.md`` is checked against.

Two implementations share the interface:

* :class:`TorchComm` -- the real thing, over an initialised process group
  (gloo on CPU);
* :class:`LocalComm` -- a world of one process: collectives are identities and
  no process group is needed (used for the single-process reference path).

Failures of a peer surface as :class:`CommError` naming the message, the rank
and the peer or collective that failed, instead of gloo's bare RuntimeError.
"""

from __future__ import annotations

import datetime
import time
from dataclasses import asdict, dataclass

import torch

__all__ = ["Message", "Comm", "TorchComm", "LocalComm", "CommError"]


class CommError(RuntimeError):
    """A collective or point-to-point call failed (peer died, timed out, ...)."""


@dataclass(frozen=True)
class Message:
    """One recorded message, from the point of view of the recording rank.

    Attributes
    ----------
    name : str
        What the payload is, e.g. ``"row/suffstats"``.
    op : str
        ``all_reduce``, ``reduce``, ``broadcast``, ``send``, ``recv`` or ``barrier``.
    role : str
        ``"send"`` if this rank contributes the payload, ``"recv"`` if it only
        receives it, ``"both"`` for all-reduce, ``"local"`` in a world of one.
    peer : int or None
        The other rank of a point-to-point message, the root of a rooted
        collective, None for all-reduce / barrier.
    shape : tuple of int
    dtype : str
        e.g. ``"torch.float64"``.
    nbytes : int
        Payload size in bytes (``numel * element_size``).
    phase : str
        ``"setup"``, ``"fit"`` or ``"output"``.
    """

    name: str
    op: str
    role: str
    peer: int | None
    shape: tuple
    dtype: str
    nbytes: int
    phase: str

    def to_dict(self) -> dict:
        return asdict(self)


def _nbytes(t: torch.Tensor) -> int:
    return int(t.numel() * t.element_size())


class Comm:
    """Interface: named, recorded collectives.  See :class:`TorchComm`, :class:`LocalComm`.

    Attributes
    ----------
    rank, world_size : int
    log : list of Message
        Every message this rank took part in, in order.
    phase : str
        Tag attached to subsequent records (set it with :meth:`set_phase`).
    """

    rank: int = 0
    world_size: int = 1

    def __init__(self):
        self.log: list[Message] = []
        self.phase = "setup"
        self.comm_seconds = 0.0

    # -- bookkeeping ---------------------------------------------------------
    def set_phase(self, phase: str) -> None:
        self.phase = phase

    def _record(self, name, op, role, peer, t: torch.Tensor | None):
        if t is None:
            self.log.append(Message(name, op, role, peer, (), "", 0, self.phase))
        else:
            self.log.append(Message(name, op, role, peer, tuple(t.shape), str(t.dtype),
                                    _nbytes(t), self.phase))

    def bytes_sent(self, phase: str | None = None) -> int:
        """Payload bytes this rank contributed (send / reduce / all-reduce / own broadcast)."""
        return sum(m.nbytes for m in self.log
                   if m.role in ("send", "both") and (phase is None or m.phase == phase))

    def bytes_received(self, phase: str | None = None) -> int:
        """Payload bytes this rank received (recv / broadcast from others / all-reduce)."""
        return sum(m.nbytes for m in self.log
                   if m.role in ("recv", "both") and (phase is None or m.phase == phase))

    # -- interface -----------------------------------------------------------
    def all_reduce(self, t: torch.Tensor, name: str, op: str = "sum") -> torch.Tensor:
        raise NotImplementedError

    def reduce(self, t: torch.Tensor, dst: int, name: str, op: str = "sum") -> torch.Tensor:
        raise NotImplementedError

    def broadcast(self, t: torch.Tensor, src: int, name: str) -> torch.Tensor:
        raise NotImplementedError

    def send(self, t: torch.Tensor, dst: int, name: str) -> None:
        raise NotImplementedError

    def recv(self, t: torch.Tensor, src: int, name: str) -> torch.Tensor:
        raise NotImplementedError

    def barrier(self, name: str) -> None:
        raise NotImplementedError


class LocalComm(Comm):
    """A world of one: collectives return their input; point-to-point is an error.

    Messages are recorded with role ``"local"``: nothing leaves the process, so
    they count towards neither :meth:`bytes_sent` nor :meth:`bytes_received`.
    """

    rank = 0
    world_size = 1

    def all_reduce(self, t, name, op="sum"):
        self._record(name, "all_reduce", "local", None, t)
        return t

    def reduce(self, t, dst, name, op="sum"):
        self._record(name, "reduce", "local", dst, t)
        return t

    def broadcast(self, t, src, name):
        self._record(name, "broadcast", "local", src, t)
        return t

    def send(self, t, dst, name):
        raise CommError(f"send({name!r}) in a world of one process")

    def recv(self, t, src, name):
        raise CommError(f"recv({name!r}) in a world of one process")

    def barrier(self, name):
        self._record(name, "barrier", "local", None, None)


_OPS = {"sum": "SUM", "max": "MAX", "min": "MIN"}


class TorchComm(Comm):
    """Named, recorded collectives over the default ``torch.distributed`` process group.

    Parameters
    ----------
    timeout : float
        Seconds; used by :meth:`barrier` (gloo's ``monitored_barrier`` names the
        rank that did not arrive).  Collectives use the timeout the process
        group was created with.
    """

    def __init__(self, timeout: float = 60.0):
        super().__init__()
        import torch.distributed as dist

        if not dist.is_initialized():
            raise CommError("torch.distributed is not initialised; call init_process_group first")
        self._dist = dist
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        self.timeout = float(timeout)

    def _call(self, name, what, fn):
        t0 = time.perf_counter()
        try:
            out = fn()
        except CommError:
            raise
        except Exception as exc:  # gloo raises RuntimeError / DistBackendError
            raise CommError(
                f"rank {self.rank}: {what} of message {name!r} failed: "
                f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc) else ''}"
                " -- a peer process has probably died or stalled"
            ) from exc
        self.comm_seconds += time.perf_counter() - t0
        return out

    def _op(self, op):
        return getattr(self._dist.ReduceOp, _OPS[op])

    def all_reduce(self, t, name, op="sum"):
        self._record(name, "all_reduce", "both", None, t)
        self._call(name, "all_reduce", lambda: self._dist.all_reduce(t, op=self._op(op)))
        return t

    def reduce(self, t, dst, name, op="sum"):
        self._record(name, "reduce", "recv" if self.rank == dst else "send", dst, t)
        self._call(name, f"reduce to rank {dst}",
                   lambda: self._dist.reduce(t, dst=dst, op=self._op(op)))
        return t

    def broadcast(self, t, src, name):
        self._record(name, "broadcast", "send" if self.rank == src else "recv", src, t)
        self._call(name, f"broadcast from rank {src}", lambda: self._dist.broadcast(t, src=src))
        return t

    def send(self, t, dst, name):
        self._record(name, "send", "send", dst, t)
        self._call(name, f"send to rank {dst}", lambda: self._dist.send(t, dst=dst))

    def recv(self, t, src, name):
        self._record(name, "recv", "recv", src, t)
        self._call(name, f"recv from rank {src}", lambda: self._dist.recv(t, src=src))
        return t

    def barrier(self, name):
        self._record(name, "barrier", "both", None, None)
        td = datetime.timedelta(seconds=self.timeout)
        self._call(name, "monitored_barrier",
                   lambda: self._dist.monitored_barrier(timeout=td, wait_all_ranks=True))
