"""Saving and loading fitted estimators, with a versioned, checked file format.

A file is a small header line followed by a pickle of the estimator's
parameters and fitted state::

    CONSENSUSKIT\\n{"format_version": 1, "class": "...", "sha256": "..."}\\n<pickle>

The header is read before anything is unpickled, so a file that is not ours,
is truncated or corrupted (checksum mismatch), or was written by a newer format
version fails with a clear error.  Torch tensors in the state are moved to the
CPU before saving.  As with any pickle, load only files you trust.
"""

from __future__ import annotations

import hashlib
import importlib
import io
import json
import os
import pickle

__all__ = ["save", "load", "FORMAT_VERSION", "MAGIC"]

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
    return obj


def save(estimator, path) -> None:
    """Write ``estimator`` (fitted or not) to ``path``."""
    cls = type(estimator)
    state = {k: _to_cpu(v) for k, v in estimator.__dict__.items()}
    payload = pickle.dumps({"state": state}, protocol=pickle.HIGHEST_PROTOCOL)
    header = {
        "format_version": FORMAT_VERSION,
        "class": f"{cls.__module__}:{cls.__qualname__}",
        "sha256": hashlib.sha256(payload).hexdigest(),
        "n_bytes": len(payload),
    }
    with open(os.fspath(path), "wb") as fh:
        fh.write(MAGIC)
        fh.write(json.dumps(header).encode() + b"\n")
        fh.write(payload)


def load(path, expected_class=None):
    """Read an estimator written by :func:`save`.

    Raises
    ------
    ValueError
        The file is not a consensuskit file, is truncated or corrupted, was
        written by a newer format version, or holds another class than
        ``expected_class``.
    """
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
    state = pickle.loads(payload)["state"]
    obj = cls.__new__(cls)
    obj.__dict__.update(state)
    return obj
