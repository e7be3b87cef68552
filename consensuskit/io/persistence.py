"""Saving and loading fitted estimators and checkpoints in a format that cannot run code.

A file (format version 2) is::

    CONSENSUSKIT\\n
    {"format_version": 2, "class": "module:Qualname", "kind": ..., "sha256": ..., ...}\\n
    <tree: one line of JSON>\\n
    <arrays: a numpy .npz archive>

``kind`` is "estimator" (:func:`save`) or "checkpoint" (:func:`save_checkpoint`, the
resumable state of a long fit, see :mod:`consensuskit.io.checkpoint`).  The *tree*
describes the saved object with plain JSON values (numbers, strings, lists, dicts) and
tagged nodes; every array lives in the ``.npz`` archive, read with
``numpy.load(..., allow_pickle=False)``, so object arrays (pickles) are refused.  The
SHA-256 in the header covers tree and arrays.

Why: a pickle runs whatever its author put in it when it is loaded, and sharing a
fitted model or a checkpoint is normal research practice.  Nothing here unpickles or
calls anything the file names, except:

* classes of an **allow-list**: the package's estimators and the dataclasses and
  other value classes defined in ``consensuskit`` modules (:func:`resolve`); objects
  are rebuilt by ``cls.__new__(cls)`` and a ``__dict__`` update, no ``__init__`` or
  ``__setstate__`` runs; any other class or function is refused unless the caller
  names it in ``allowed=`` (e.g. a user's subclass, or the user's Pyro model of a
  :class:`~consensuskit.PyroConsensus`);
* named constants of torch and pyro (dtypes, devices, distribution constraints);
* the bit generators of ``numpy.random`` (by class name, from numpy itself).

Tagged nodes of the tree (``{"$": tag, ...}``): ``arr`` (an array of the archive),
``tensor`` (a CPU torch tensor, dtype and ``requires_grad`` kept; a Parameter stays a
Parameter), ``np`` (numpy scalar), ``tuple``, ``dict`` (non-string keys), ``set``,
``obj`` (an allow-listed class and its state), ``fn`` (an allow-listed function),
``dtype``/``device`` (torch), ``constraint`` (torch/pyro), ``randomstate`` /
``generator`` (numpy RNGs, state as arrays and ints), ``objarr`` (an object array,
element by element), ``guide`` (the default guide of a PyroConsensus, rebuilt from its
model).

Files written by consensuskit before this format (format version 1: a pickle) are
refused, unread; ``load(path, trust=True)`` reads one *only* if you trust its source
(it runs the pickle), after which :func:`save` writes it in the safe format.
"""

from __future__ import annotations

import hashlib
import importlib
import io
import json
import os
import re
import threading
import types

import numpy as np

__all__ = ["save", "load", "save_checkpoint", "load_checkpoint", "resolve", "encode",
           "decode", "UnsafeFileError", "DefaultGuide", "remove_stale_temporaries",
           "FORMAT_VERSION", "MAGIC"]

MAGIC = b"CONSENSUSKIT\n"
FORMAT_VERSION = 2
#: the last version that stored a pickle; read only with ``trust=True``
PICKLE_FORMAT_VERSION = 1

_MODULE_RE = re.compile(r"^consensuskit(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_QUALNAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
#: modules of the package that do something when imported (entry points): never imported
_NOT_IMPORTED = ("__main__",)
_RNG_CLASSES = ("MT19937", "PCG64", "PCG64DXSM", "Philox", "SFC64")


class UnsafeFileError(ValueError):
    """The file would need to run code to be read (an old pickle, or a class or function
    outside the allow-list)."""


def _name(obj) -> str:
    return f"{obj.__module__}:{obj.__qualname__}"


def resolve(name: str, allowed=(), functions: bool = False):
    """The class or function called ``name`` ("module:qualname"), if it is allowed.

    Allowed are the objects in ``allowed`` (matched by their own ``module:qualname``)
    and objects defined in a ``consensuskit`` module (never a ``__main__``), looked up
    by importing that module of the package.  Anything else raises
    :class:`UnsafeFileError` without importing anything.
    """
    for obj in allowed:
        if _name(obj) == name:
            return obj
    module, sep, qualname = str(name).partition(":")
    if (not sep or not _MODULE_RE.match(module) or not _QUALNAME_RE.match(qualname)
            or any(part in _NOT_IMPORTED for part in module.split("."))
            or (functions and not module.startswith("consensuskit.models."))):
        raise UnsafeFileError(
            f"the file names {name!r}, which is not part of consensuskit; it is not imported. "
            "If you trust it, pass the object itself in allowed=[...]")
    try:
        obj = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError):
        raise ValueError(f"the file names {name}, which this installation lacks") from None
    home = getattr(obj, "__module__", "") or ""
    if not (home == "consensuskit" or home.startswith("consensuskit.")):
        raise UnsafeFileError(f"{name} resolves to {home}, outside consensuskit; refused")
    return obj


# --------------------------------------------------------------------------- encoding
def _torch():
    try:
        import torch
    except ImportError:  # pragma: no cover
        return None
    return torch


def _constraint_name(c):
    """('module', 'attr') of a named constraint singleton of torch or pyro, or None."""
    for modname in ("torch.distributions.constraints", "pyro.distributions.constraints"):
        try:
            mod = importlib.import_module(modname)
        except ImportError:  # pragma: no cover
            continue
        for attr, value in vars(mod).items():
            if value is c and not attr.startswith("_"):
                return modname, attr
    return None


class _Encoder:
    def __init__(self, allowed):
        self.arrays: dict[str, np.ndarray] = {}
        self.allowed = allowed

    def array(self, a: np.ndarray) -> dict:
        if a.dtype.hasobject:
            return {"$": "objarr", "shape": list(a.shape),
                    "items": [self(x) for x in a.ravel(order="C").tolist()]}
        key = f"a{len(self.arrays)}"
        self.arrays[key] = a
        return {"$": "arr", "key": key}

    def __call__(self, o, path="state"):  # noqa: C901 - one branch per kind of value
        if o is None or isinstance(o, (bool, str)):
            return o
        if type(o) is int:
            return o
        if type(o) is float:
            return o
        if isinstance(o, np.ndarray):
            return self.array(o)
        if isinstance(o, np.generic):
            return {"$": "np", "value": self.array(np.asarray(o))}
        torch = _torch()
        if torch is not None:
            if isinstance(o, torch.Tensor):
                t = o.detach().cpu()
                node = {"$": "tensor", "dtype": str(t.dtype).removeprefix("torch."),
                        "requires_grad": bool(o.requires_grad),
                        "parameter": isinstance(o, torch.nn.Parameter)}
                if t.dtype == torch.bfloat16:
                    node["value"] = self.array(t.view(torch.int16).numpy())
                else:
                    node["value"] = self.array(t.numpy())
                return node
            if isinstance(o, torch.dtype):
                return {"$": "dtype", "name": str(o).removeprefix("torch.")}
            if isinstance(o, torch.device):
                return {"$": "device", "name": str(o)}
            if isinstance(o, torch.distributions.constraints.Constraint):
                named = _constraint_name(o)
                if named is not None:
                    return {"$": "constraint", "module": named[0], "name": named[1]}
                cls = type(o)
                return {"$": "constraint", "module": cls.__module__, "class": cls.__qualname__,
                        "state": self(dict(vars(o)), path)}
        if isinstance(o, tuple) and not hasattr(o, "_fields"):
            return {"$": "tuple", "items": [self(x, f"{path}[{i}]") for i, x in enumerate(o)]}
        if isinstance(o, list):
            return [self(x, f"{path}[{i}]") for i, x in enumerate(o)]
        if isinstance(o, (set, frozenset)):
            return {"$": "set", "frozen": isinstance(o, frozenset),
                    "items": [self(x, path) for x in sorted(o, key=repr)]}
        if isinstance(o, dict):
            if all(type(k) is str and k != "$" for k in o):
                return {k: self(v, f"{path}[{k!r}]") for k, v in o.items()}
            return {"$": "dict", "items": [[self(k, path), self(v, f"{path}[{k!r}]")]
                                           for k, v in o.items()]}
        if isinstance(o, np.random.RandomState):
            return {"$": "randomstate", "state": self(o.get_state(legacy=True), path)}
        if isinstance(o, np.random.Generator):
            bg = o.bit_generator
            return {"$": "generator", "bit_generator": type(bg).__name__,
                    "state": self(bg.state, path)}
        if isinstance(o, (types.FunctionType, type)):
            name = _name(o)
            resolve(name, self.allowed, functions=True)  # fail at save time, not load time
            return {"$": "fn", "name": name}
        guide = _default_guide_of(o)
        if guide is not None:
            return guide
        cls = type(o)
        name = _name(cls)
        try:
            resolve(name, self.allowed)
        except UnsafeFileError:
            raise TypeError(
                f"cannot save {path}: a {name} is not a value consensuskit knows how to "
                "store without pickling") from None
        state = o.__getstate__() if _own_getstate(cls) else dict(vars(o))
        return {"$": "obj", "class": name,
                "state": {k: self(v, f"{path}.{k}") for k, v in state.items()}}


def _own_getstate(cls) -> bool:
    return any("__getstate__" in vars(c) for c in cls.__mro__ if c is not object)


def _default_guide_of(o):
    """The tree node of a PyroConsensus default guide (``AutoNormal`` or
    ``AutoMultivariateNormal`` of the blocked model), rebuilt from the model on load (the
    estimator's ``guide_family_`` says which); its parameters live in the param state."""
    try:
        from pyro.infer.autoguide import AutoMultivariateNormal, AutoNormal
    except ImportError:  # pragma: no cover
        return None
    if type(o) not in (AutoNormal, AutoMultivariateNormal):
        return None
    return {"$": "guide", "kind": "default"}


def encode(obj, allowed=()):
    """``(tree, arrays)``: the JSON-able tree of ``obj`` and its arrays (name -> ndarray)."""
    enc = _Encoder(tuple(allowed))
    tree = enc(obj)
    return tree, enc.arrays


# --------------------------------------------------------------------------- decoding
class _Decoder:
    def __init__(self, arrays, allowed):
        self.arrays = arrays
        self.allowed = allowed
        self.guides = []  # (owner dict, key) of default guides, rebuilt once the model is known

    def __call__(self, t):  # noqa: C901
        if t is None or isinstance(t, (bool, int, float, str)):
            return t
        if isinstance(t, list):
            return [self(x) for x in t]
        if not isinstance(t, dict):
            raise ValueError(f"unexpected node {type(t).__name__} in the file's tree")
        tag = t.get("$")
        if tag is None:
            return {k: self(v) for k, v in t.items()}
        if tag == "arr":
            return self.arrays[t["key"]]
        if tag == "np":
            return self(t["value"])[()]
        if tag == "objarr":
            out = np.empty(len(t["items"]), dtype=object)
            for i, x in enumerate(t["items"]):
                out[i] = self(x)
            return out.reshape(t["shape"])
        if tag == "tuple":
            return tuple(self(x) for x in t["items"])
        if tag == "set":
            items = (self(x) for x in t["items"])
            return frozenset(items) if t["frozen"] else set(items)
        if tag == "dict":
            return {self(k): self(v) for k, v in t["items"]}
        if tag in ("tensor", "dtype", "device", "constraint"):
            return self.torch_node(t)
        if tag == "randomstate":
            rs = np.random.RandomState()
            rs.set_state(self(t["state"]))
            return rs
        if tag == "generator":
            name = t["bit_generator"]
            if name not in _RNG_CLASSES:
                raise UnsafeFileError(f"unknown bit generator {name!r}")
            bg = getattr(np.random, name)()
            bg.state = self(t["state"])
            return np.random.Generator(bg)
        if tag == "fn":
            return resolve(t["name"], self.allowed, functions=True)
        if tag == "guide":
            return DefaultGuide()
        if tag == "obj":
            cls = resolve(t["class"], self.allowed)
            if not isinstance(cls, type):
                raise UnsafeFileError(f"{t['class']} is not a class")
            obj = cls.__new__(cls)
            state = {k: self(v) for k, v in t["state"].items()}
            obj.__dict__.update(state)
            _restore(obj)
            return obj
        raise ValueError(f"unknown node {tag!r} in the file's tree")

    def torch_node(self, t):
        torch = _torch()
        if torch is None:  # pragma: no cover
            raise ValueError("the file holds torch values; install torch to read it")
        tag = t["$"]
        if tag == "dtype":
            return _torch_dtype(torch, t["name"])
        if tag == "device":
            return torch.device(str(t["name"]))
        if tag == "tensor":
            dtype = _torch_dtype(torch, t["dtype"])
            a = self(t["value"])
            if dtype == torch.bfloat16:
                x = torch.from_numpy(np.array(a, dtype=np.int16)).view(torch.bfloat16)
            else:
                x = torch.from_numpy(np.array(a))
            if t.get("parameter"):
                return torch.nn.Parameter(x, requires_grad=bool(t["requires_grad"]))
            return x.requires_grad_(bool(t["requires_grad"])) if x.is_floating_point() else x
        # constraint
        modname = t["module"]
        if modname not in ("torch.distributions.constraints", "pyro.distributions.constraints"):
            raise UnsafeFileError(f"constraint module {modname!r} is not allowed")
        mod = importlib.import_module(modname)
        if "name" in t:
            c = getattr(mod, t["name"], None)
            if not isinstance(c, torch.distributions.constraints.Constraint):
                raise UnsafeFileError(f"{modname}.{t['name']} is not a constraint")
            return c
        cls = getattr(mod, t["class"], None)
        if not (isinstance(cls, type)
                and issubclass(cls, torch.distributions.constraints.Constraint)):
            raise UnsafeFileError(f"{modname}.{t['class']} is not a constraint class")
        c = cls.__new__(cls)
        c.__dict__.update(self(t["state"]))
        return c


class DefaultGuide:
    """Stands for a PyroConsensus default guide in a loaded state; the estimator's
    ``__persistence_restore__`` rebuilds the guide from its model (its parameters are
    in the saved param store state)."""


def _restore(obj) -> None:
    """Let an allow-listed object rebuild what the file stores by description only."""
    hook = getattr(type(obj), "__persistence_restore__", None)
    if hook is not None:
        hook(obj)


def _torch_dtype(torch, name):
    dtype = getattr(torch, str(name), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown torch dtype {name!r}")
    return dtype


def decode(tree, arrays, allowed=()):
    """Inverse of :func:`encode`."""
    return _Decoder(arrays, tuple(allowed))(tree)


# --------------------------------------------------------------------------- files
def _temporary_name(path: str) -> str:
    """A name beside ``path``, unique per process *and* thread (two threads writing the
    same checkpoint must not share a temporary file)."""
    return f"{path}.tmp-{os.getpid()}-{threading.get_ident()}"


def _write(path, cls, obj, kind, allowed=()) -> None:
    """Header + tree + arrays of ``obj``, written to a temporary file then renamed (atomic).

    A write interrupted by an exception removes its temporary file; one killed outright
    leaves a ``*.tmp-PID-TID`` file that :func:`remove_stale_temporaries` clears."""
    tree, arrays = encode(obj, allowed=(cls, *allowed))
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    body = json.dumps(tree, allow_nan=True, separators=(",", ":")).encode() + b"\n"
    body += buf.getvalue()
    from consensuskit import __version__

    header = {
        "format_version": FORMAT_VERSION,
        "class": _name(cls),
        "kind": kind,
        "sha256": hashlib.sha256(body).hexdigest(),
        "n_bytes": len(body),
        "consensuskit_version": __version__,
    }
    path = os.fspath(path)
    remove_stale_temporaries(path)
    tmp = _temporary_name(path)
    try:
        with open(tmp, "wb") as fh:
            fh.write(MAGIC)
            fh.write(json.dumps(header).encode() + b"\n")
            fh.write(body)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def remove_stale_temporaries(path) -> list[str]:
    """Remove temporary files beside ``path`` left by writers that no longer run (killed
    processes); returns their names.  Files of live processes are left alone."""
    path = os.fspath(path)
    folder = os.path.dirname(path) or "."
    stem = os.path.basename(path) + ".tmp-"
    removed = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in names:
        if not name.startswith(stem):
            continue
        pid = name[len(stem):].split("-", 1)[0]
        if not pid.isdigit() or _alive(int(pid)):
            continue
        try:
            os.unlink(os.path.join(folder, name))
            removed.append(name)
        except OSError:
            pass
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read_header(path):
    with open(os.fspath(path), "rb") as fh:
        data = fh.read()
    if not data.startswith(MAGIC):
        raise ValueError(f"{path}: not a consensuskit estimator file (bad magic header)")
    line, sep, body = data[len(MAGIC):].partition(b"\n")
    try:
        header = json.loads(line)
        version = int(header["format_version"])
        cls_name = str(header["class"])
        digest = str(header["sha256"])
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: corrupted header ({exc})") from None
    return header, version, cls_name, digest, body


def _read(path, expected_class, kind, trust=False, allowed=()):
    """Check the header, checksum and class of a file from :func:`_write`; decode it."""
    header, version, cls_name, digest, body = _read_header(path)
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
    if version == PICKLE_FORMAT_VERSION:
        if not trust:
            raise UnsafeFileError(
                f"{path}: written by an older consensuskit as a pickle (format version 1), "
                "which can run arbitrary code when loaded; refused without reading it. Only "
                "if you trust its source: load it with trust=True, then save it again to "
                "convert it to the safe format")
        return _read_pickle(path, expected_class, cls_name, digest, body)
    if hashlib.sha256(body).hexdigest() != digest:
        raise ValueError(f"{path}: file is truncated or corrupted (checksum mismatch)")
    allowed = tuple(allowed) + ((expected_class,) if expected_class is not None else ())
    # the caller's class and its bases are already imported: a file naming one of them
    # gets the clear "holds a X, not a Y" below rather than an allow-list refusal
    known = tuple(expected_class.__mro__) if expected_class is not None else ()
    try:
        cls = resolve(cls_name, allowed + known)
    except UnsafeFileError as exc:
        raise UnsafeFileError(f"{path}: {exc}") from None
    if not isinstance(cls, type):
        raise UnsafeFileError(f"{path}: {cls_name} is not a class")
    if expected_class is not None and not issubclass(cls, expected_class):
        raise ValueError(
            f"{path}: holds a {cls.__qualname__}, not a {expected_class.__qualname__}"
        )
    tree_line, _, npz = body.partition(b"\n")
    try:
        tree = json.loads(tree_line)
        with np.load(io.BytesIO(npz), allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except ValueError as exc:  # object arrays (pickles) are refused by numpy here
        raise UnsafeFileError(f"{path}: unreadable or unsafe content ({exc})") from None
    try:
        obj = decode(tree, arrays, allowed=allowed)
    except UnsafeFileError as exc:
        raise UnsafeFileError(f"{path}: {exc}") from None
    return cls, obj


def _read_pickle(path, expected_class, cls_name, digest, body):  # pragma: no cover - trust
    import pickle

    if hashlib.sha256(body).hexdigest() != digest:
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
    return cls, pickle.loads(body)


def save(estimator, path, *, allowed=()) -> None:
    """Write ``estimator`` (fitted or not) to ``path`` in the safe format.

    ``allowed``: user classes or functions the estimator holds (a subclass, a Pyro
    model) that are stored by name; whoever loads the file must name them too.
    Raises TypeError for state that cannot be stored without pickling (named)."""
    state = dict(estimator.__getstate__() if _own_getstate(type(estimator))
                 else vars(estimator))
    _write(path, type(estimator), {"state": state}, "estimator", allowed)


def load(path, expected_class=None, *, trust=False, allowed=()):
    """Read an estimator written by :func:`save`.

    Parameters
    ----------
    expected_class : class, optional
        Refuse a file holding another class (a subclass is accepted).
    trust : bool
        Read a file of the old pickle format (version 1).  That runs the pickle: use it
        only for files you wrote yourself.
    allowed : sequence of classes / functions
        User code the file may name (beyond consensuskit's own classes).

    Raises
    ------
    UnsafeFileError (a ValueError)
        Old pickle format without ``trust``, or a class or function outside the allow-list.
    ValueError
        Not a consensuskit file, truncated or corrupted, written by a newer format
        version, or holds another class than ``expected_class``.
    """
    cls, obj = _read(path, expected_class, "estimator", trust=trust, allowed=allowed)
    est = cls.__new__(cls)
    est.__dict__.update(obj["state"])
    _restore(est)
    return est


def save_checkpoint(estimator, state, path) -> None:
    """Write the resumable ``state`` (a dict) of a running ``estimator`` fit to ``path``.

    Same header, version and checksum as :func:`save`, with ``kind`` "checkpoint"."""
    _write(path, type(estimator), {"state": state}, "checkpoint")


def load_checkpoint(path, expected_class=None, *, trust=False) -> dict:
    """Read the state dict written by :func:`save_checkpoint` (same checks as :func:`load`)."""
    return _read(path, expected_class, "checkpoint", trust=trust)[1]["state"]
