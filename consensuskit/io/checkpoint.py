"""Callbacks and checkpoints for long fits (BCE, GBCE variational EM; NBCE Gibbs).

An estimator that supports them takes three hyper-parameters:

``callback`` : callable or None
    Called as ``callback(state)`` after every EM iteration / Gibbs sweep with a
    dict describing the run (keys common to all: ``"restart"`` or ``"chain"``,
    ``"iteration"``; engine-specific ones such as ``"lower_bound"``).  Returning
    ``False`` (exactly) stops the fit; see each estimator for what it keeps.
``checkpoint_path`` : str, path-like or None
    Where to write the resumable state (with :func:`consensuskit.io.persistence.
    save_checkpoint`: versioned, checksummed, written atomically).
``checkpoint_every`` : int
    Write a checkpoint every this many iterations / sweeps, and always when the
    callback stops the fit.

and ``fit(X, resume_from=path)`` continues a run from such a file.  The loop that
calls the callback and writes the checkpoints is the fit driver
(:mod:`consensuskit.inference.driver`); this module holds the file side.  Because the
state holds the random generator and every quantity the next step reads, the
resumed fit ends exactly where the uninterrupted one with the same
``random_state`` ends.  A checkpoint is refused (ValueError) for another class,
other hyper-parameters or other data.

Files are written in the format of :mod:`consensuskit.io.persistence`, which cannot run
code when read (the random generator's state is stored as arrays and integers); a
checkpoint of the old pickle format is refused.  One fit at a time may write a given
``checkpoint_path``: the writer holds an exclusive lock on ``<path>.lock`` (``flock``,
per open file, so it excludes other threads as well as other processes) from the start
of the fit until the writer is released, and a second fit on the same path fails at
once with a clear error instead of overwriting the first one's state.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import weakref

import numpy as np

from consensuskit.base import check_positive_int
from consensuskit.io.persistence import load_checkpoint, save_checkpoint

__all__ = ["checkpoint_writer", "check_checkpoint_params", "read_checkpoint", "fingerprint"]

#: hyper-parameters that may differ between a checkpointed run and its resumption
_FREE = {"callback", "checkpoint_path", "checkpoint_every", "verbose", "n_jobs"}


def check_checkpoint_params(est):
    """Validate ``callback``, ``checkpoint_path`` and ``checkpoint_every`` of ``est``."""
    if est.callback is not None and not callable(est.callback):
        raise TypeError(f"callback must be callable or None; got {est.callback!r}")
    path = est.checkpoint_path
    if path is not None and not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"checkpoint_path must be a path or None; got {path!r}")
    check_positive_int(est.checkpoint_every, "checkpoint_every")


def fingerprint(ensemble) -> str:
    """A digest of the label matrix, to refuse resuming on other data."""
    h = hashlib.sha256()
    h.update(np.ascontiguousarray(ensemble.codes).tobytes())
    h.update(np.asarray(ensemble.n_labels, dtype=np.int64).tobytes())
    h.update(str(ensemble.codes.shape).encode())
    return h.hexdigest()


def _params(est):
    """Hyper-parameters that must match on resume (a generator object compares by type:
    its state at the time of the checkpoint is restored from the checkpoint)."""
    out = {}
    for k, v in est.get_params(deep=False).items():
        if k in _FREE:
            continue
        out[k] = f"<{type(v).__name__}>" if isinstance(v, np.random.RandomState) else v
    return out


def read_checkpoint(path, est, ensemble, extra_digest: str = "") -> dict:
    """Load a checkpoint for ``est`` and check it matches its parameters and data."""
    ck = load_checkpoint(path, expected_class=type(est))
    if ck.get("fingerprint") != fingerprint(ensemble) + extra_digest:
        raise ValueError(f"{path}: checkpoint was written for other data than this X")
    saved, now = ck.get("params", {}), _params(est)
    diff = sorted(k for k in set(saved) | set(now) if repr(saved.get(k)) != repr(now.get(k)))
    if diff:
        raise ValueError(
            f"{path}: checkpoint was written with other hyper-parameters ({', '.join(diff)}); "
            "resume with the same settings"
        )
    state = ck["state"]
    missing = {"run", "iteration", "objectives", "state", "runs"} - set(state)
    if missing:
        raise ValueError(f"{path}: checkpoint was written by an older consensuskit (before the "
                         "one fit driver); it cannot be resumed, start the fit again")
    return state


def checkpoint_writer(est, ensemble, extra_digest: str = ""):
    """The driver's ``checkpoint`` hook for ``est``: a function writing a snapshot to
    ``est.checkpoint_path`` (None when no path is set).

    The file holds the snapshot, the hyper-parameters and a digest of the data, which
    :func:`read_checkpoint` checks before a resume.
    """
    check_checkpoint_params(est)
    if est.checkpoint_path is None:
        return None
    digest = fingerprint(ensemble) + extra_digest
    path = est.checkpoint_path
    lock = _lock(path)

    def write(snapshot):
        save_checkpoint(est, {"state": snapshot, "params": _params(est), "fingerprint": digest},
                        path)

    weakref.finalize(write, os.close, lock)  # released with the writer (end of the fit)
    return write


def _lock(path) -> int:
    """An exclusive, non-blocking ``flock`` on ``<path>.lock``; its file descriptor."""
    name = os.fspath(path) + ".lock"
    fd = os.open(name, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise RuntimeError(
            f"checkpoint_path {os.fspath(path)!r} is in use by another running fit (it "
            f"holds the lock file {name!r}); give each fit its own checkpoint_path") from None
    return fd
