"""Saving and loading fitted estimators, with a versioned, checked file format.

A file is a small header line followed by a pickle of the estimator's
parameters and fitted state::

    CONSENSUSKIT\\n{"format_version": 1, "class": "...", "kind": "...", "sha256": "..."}\\n<pickle>

``kind`` is "estimator" (:func:`save`) or "checkpoint" (:func:`save_checkpoint`,
the resumable state of a long fit; see :mod:`consensuskit.io.checkpoint`).

The header is read before anything is unpickled, so a file that is not ours,
is truncated or corrupted (checksum mismatch), or was written by a newer format
version fails with a clear error.  Torch tensors in the state are moved to the
CPU before saving.  As with any pickle, load only files you trust.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import io
import json
import os
import pickle

__all__ = ["save", "load", "save_checkpoint", "load_checkpoint", "FORMAT_VERSION", "MAGIC"]

MAGIC = b"CONSENSUSKIT\n"
FORMAT_VERSION = 1


def _to_cpu(obj):
    try:
        import torch
    except ImportError:  # pragma: no cover
        return obj
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {k: _to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_cpu(v) for v in obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.replace(obj, **{f.name: _to_cpu(getattr(obj, f.name))
                                           for f in dataclasses.fields(obj) if f.init})
    return obj


def _write(path, cls, obj, kind) -> None:
    """Header + pickle of ``obj``, written to a temporary file then renamed (atomic)."""
    payload = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    header = {
        "format_version": FORMAT_VERSION,
        "class": f"{cls.__module__}:{cls.__qualname__}",
        "kind": kind,
        "sha256": hashlib.sha256(payload).hexdigest(),
        "n_bytes": len(payload),
    }
    path = os.fspath(path)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as fh:
        fh.write(MAGIC)
        fh.write(json.dumps(header).encode() + b"\n")
        fh.write(payload)
    os.replace(tmp, path)


def _read(path, expected_class, kind):
    """Check the header, checksum and class of a file from :func:`_write`; unpickle it."""
    with open(os.fspath(path), "rb") as fh:
        data = fh.read()
    if not data.startswith(MAGIC):
        raise ValueError(f"{path}: not a consensuskit estimator file (bad magic header)")
    rest = io.BytesIO(data[len(MAGIC) :])
    line = rest.readline()
    try:
        header = json.loads(line)
        version = int(header["format_version"])
        cls_name = str(header["class"])
        digest = str(header["sha256"])
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: corrupted header ({exc})") from None
    if version > FORMAT_VERSION:
        raise ValueError(
            f"{path}: written with format version {version}, newer than this consensuskit "
            f"reads ({FORMAT_VERSION}); upgrade consensuskit"
        )
    if version < 1:
        raise ValueError(f"{path}: invalid format version {version}")
    found_kind = header.get("kind", "estimator")
    if found_kind != kind:
        raise ValueError(f"{path}: holds a {found_kind}, not a {kind}")
    payload = rest.read()
    if hashlib.sha256(payload).hexdigest() != digest:
        raise ValueError(f"{path}: file is truncated or corrupted (checksum mismatch)")
    module, _, qualname = cls_name.partition(":")
    try:
        cls = getattr(importlib.import_module(module), qualname)
    except (ImportError, AttributeError):
        raise ValueError(f"{path}: holds a {cls_name}, which this installation lacks") from None
    if expected_class is not None and not issubclass(cls, expected_class):
        raise ValueError(
            f"{path}: holds a {cls.__qualname__}, not a {expected_class.__qualname__}"
        )
    return cls, pickle.loads(payload)


def save(estimator, path) -> None:
    """Write ``estimator`` (fitted or not) to ``path``."""
    state = {k: _to_cpu(v) for k, v in estimator.__dict__.items()}
    _write(path, type(estimator), {"state": state}, "estimator")


def load(path, expected_class=None):
    """Read an estimator written by :func:`save`.

    Raises
    ------
    ValueError
        The file is not a consensuskit file, is truncated or corrupted, was
        written by a newer format version, or holds another class than
        ``expected_class``.
    """
    cls, obj = _read(path, expected_class, "estimator")
    est = cls.__new__(cls)
    est.__dict__.update(obj["state"])
    return est


def save_checkpoint(estimator, state, path) -> None:
    """Write the resumable ``state`` (a dict) of a running ``estimator`` fit to ``path``.

    Same header, version and checksum as :func:`save`, with ``kind`` "checkpoint".
    """
    _write(path, type(estimator), {"state": _to_cpu(state)}, "checkpoint")


def load_checkpoint(path, expected_class=None) -> dict:
    """Read the state dict written by :func:`save_checkpoint` (same checks as :func:`load`)."""
    return _read(path, expected_class, "checkpoint")[1]["state"]
