"""How ranks find each other: a rendezvous store bound to the address given, and a
checked join (world size, duplicate or missing ranks, a shared token) with a deadline.

torch's ``TCPStore`` is a key-value server without authentication: whoever reaches its
port can read and write every key (and so disturb or join a fit).  Created by torch
from a ``tcp://`` address it listens on *every* interface; here the server socket is
bound by us to the address given (``127.0.0.1`` for local workers) and handed to the
store (``master_listen_fd``), so it listens there only.  Ranks then *join*: each
writes its rank, world size and an HMAC of the job's token under its rank's key, and
waits (up to ``timeout`` seconds) for every rank of the world; it fails with
:class:`RendezvousError` naming the missing ranks, the ranks that disagree on the
world size, a rank that joined twice, or a rank without the token.  The token is
never written to the store (only HMACs of it), so a process that can read the store
cannot forge a rank's entry for another job; it can still disturb a running fit, so
keep the port off networks you do not trust (``docs/scaling_out.md``).
"""

from __future__ import annotations

import datetime
import errno
import hashlib
import hmac
import json
import os
import secrets
import socket
import time

__all__ = ["RendezvousError", "bind_listener", "host_store", "connect_store", "join",
           "TOKEN_ENV"]

#: environment variable holding the shared token of ``torchrun`` / hand-launched ranks
TOKEN_ENV = "CONSENSUSKIT_DIST_TOKEN"
_PREFIX = "consensuskit/join"


class RendezvousError(RuntimeError):
    """The ranks could not form the world (missing, duplicate or foreign ranks, world-size
    mismatch, port in use, store unreachable)."""


def bind_listener(host: str, port: int) -> socket.socket:
    """A listening TCP socket bound to ``host:port`` only (``port`` 0: a free port)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    family, _, _, _, addr = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(addr)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise RendezvousError(
                f"port {port} on {host} is in use by another process; free it or choose "
                "another port (MASTER_PORT)") from None
        raise RendezvousError(f"cannot bind the rendezvous store to {host}:{port}: {exc}"
                              ) from None
    sock.listen(128)
    sock.set_inheritable(False)
    return sock


def host_store(sock: socket.socket, world_size: int, timeout: float):
    """The ``TCPStore`` server on the already bound, listening ``sock`` (the store takes
    the socket over and closes it when it is destroyed)."""
    import torch.distributed as dist

    host, port = sock.getsockname()[:2]
    try:
        return dist.TCPStore(host, port, world_size, True, datetime.timedelta(seconds=timeout),
                             wait_for_workers=False, master_listen_fd=sock.fileno())
    finally:
        sock.detach()


def connect_store(host: str, port: int, timeout: float):
    """A client of the store at ``host:port``; RendezvousError if it does not answer in
    ``timeout`` seconds (nothing there, or another program holding the port: torch's
    client then waits for a handshake without a deadline, so it runs in a thread here)."""
    import threading

    import torch.distributed as dist

    out: dict = {}

    def connect():
        try:
            out["store"] = dist.TCPStore(host, int(port), None, False,
                                         datetime.timedelta(seconds=timeout))
        except (RuntimeError, OSError) as exc:  # DistNetworkError / DistStoreError
            out["error"] = exc

    th = threading.Thread(target=connect, daemon=True, name="consensuskit-store-connect")
    th.start()
    th.join(timeout + 1.0)
    if "store" in out:
        return out["store"]
    exc = out.get("error")
    why = (f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
           if exc is not None else "no answer; is another program holding that port?")
    raise RendezvousError(f"could not reach the rendezvous store at {host}:{port} within "
                          f"{timeout:g} s ({why})")


def _mac(token: bytes | None, rank: int, world_size: int) -> str:
    if token is None:
        return ""
    return hmac.new(token, f"rank {rank} of {world_size}".encode(), hashlib.sha256).hexdigest()


def join(store, rank: int, world_size: int, timeout: float, token: bytes | None = None,
         poll: float = 0.02) -> None:
    """See :func:`_join`; a store that fails under it (its host ended, typically rank 0
    after its own error) is a RendezvousError too."""
    try:
        _join(store, rank, world_size, timeout, token, poll)
    except RendezvousError:
        raise
    except RuntimeError as exc:  # torch's DistError family
        raise RendezvousError(
            f"rank {rank}: the rendezvous store stopped answering while the ranks joined "
            f"(its host ended, usually rank 0 after an error of its own: see that rank's "
            f"message) ({type(exc).__name__}: {str(exc).splitlines()[0]})") from None


def _join(store, rank, world_size, timeout, token, poll) -> None:
    """Register ``rank`` and wait until the whole world has joined, with checks.

    Raises
    ------
    RendezvousError
        A rank is missing after ``timeout`` s; ranks disagree on the world size; the
        rank was already taken; a rank lacks the token.
    """
    if not 0 <= rank < world_size:
        raise RendezvousError(f"rank {rank} is outside the world of size {world_size}")
    me = json.dumps({"world_size": world_size, "mac": _mac(token, rank, world_size),
                     "pid": os.getpid(), "host": socket.gethostname(),
                     "nonce": secrets.token_hex(8)})
    key = f"{_PREFIX}/rank/{rank}"
    got = store.compare_set(key, "", me)
    got = got.decode() if isinstance(got, bytes) else got
    if got != me:
        other = json.loads(got)
        raise RendezvousError(f"rank {rank} was already taken by process {other.get('pid')} "
                              f"on {other.get('host')}; each rank must be given once")
    store.add(f"{_PREFIX}/count", 1)
    deadline = time.monotonic() + timeout
    seen: dict[int, dict] = {}
    while True:
        for r in range(world_size):
            if r not in seen and store.check([f"{_PREFIX}/rank/{r}"]):
                seen[r] = json.loads(store.get(f"{_PREFIX}/rank/{r}"))
        _check_world(seen, rank, world_size, token)
        if len(seen) == world_size:
            break
        if time.monotonic() > deadline:
            missing = sorted(set(range(world_size)) - set(seen))
            raise RendezvousError(
                f"rank {rank}: rank(s) {missing} of {world_size} did not join within "
                f"{timeout:g} s (not started, stopped, crashed, or launched with another "
                "world size or address)")
        time.sleep(poll)
    # every rank of this world is here; more joins than ranks means a rank of another
    # world size shares the store
    store.set(f"{_PREFIX}/ready/{rank}", "1")
    while not store.check([f"{_PREFIX}/ready/{r}" for r in range(world_size)]):
        if time.monotonic() > deadline:
            raise RendezvousError(f"rank {rank}: not every rank confirmed the join within "
                                  f"{timeout:g} s")
        time.sleep(poll)
    n = int(store.add(f"{_PREFIX}/count", 0))
    if n != world_size:
        raise RendezvousError(f"{n} processes joined a world of size {world_size}: ranks "
                              "were launched with different world sizes")


def _check_world(seen, rank, world_size, token):
    for r, info in seen.items():
        if int(info.get("world_size", -1)) != world_size:
            raise RendezvousError(
                f"world-size mismatch: rank {rank} was launched with world size "
                f"{world_size}, rank {r} (process {info.get('pid')}) with "
                f"{info.get('world_size')}")
        if token is not None and not hmac.compare_digest(str(info.get("mac", "")),
                                                         _mac(token, r, world_size)):
            raise RendezvousError(
                f"rank {r} (process {info.get('pid')} on {info.get('host')}) does not hold "
                "this job's token: another job or an unknown process joined the store")
