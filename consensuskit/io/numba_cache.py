"""numba's on-disk cache made safe for processes that compile at the same time.

numba keeps one *index* per cached function (``<name>-<line>.pyXY.nbi``, a dict from
signature and closure key to a numbered data file ``.N.nbc``).  Saving an entry reads
the index, picks the first free number, writes the index back, then the data file;
loading reads the index, then the data file.  Neither holds a lock, so two processes
adding different specialisations of one function (MM's E-step kernel is compiled per
number of clusters K) can both pick number 1: one index entry is lost and the data
file holds the other process's machine code.  A third process that then loads it runs
code compiled for another K and crashes (``SystemError: NRT_adapt_ndarray_to_python``)
or, worse, computes with the wrong constants.

:func:`install` wraps numba's ``IndexDataCacheFile.save`` and ``load`` so that each
holds an exclusive ``flock`` on ``<index>.lock`` for its read-modify-write (save) or
its read of index and data (load).  The locks are held for milliseconds (compilation
happens outside them); a folder where no lock file can be created falls back to
numba's own behaviour for that function, counted in :data:`UNLOCKED`.

``import consensuskit`` installs it the moment numba's caching module is imported
(nothing is imported early: ``import consensuskit`` stays fast).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import importlib.abc
import os
import sys
import warnings

__all__ = ["install", "installed", "UNLOCKED"]

#: cache folders where no lock could be taken (numba's unlocked behaviour was used)
UNLOCKED: set[str] = set()
_TARGET = "numba.core.caching"


@contextlib.contextmanager
def _locked(index_path: str):
    try:
        fd = os.open(index_path + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        folder = os.path.dirname(index_path)
        if folder not in UNLOCKED:
            UNLOCKED.add(folder)
            warnings.warn(f"numba cache folder {folder} is not writable for a lock file: "
                          "concurrent compilations there are not serialised", stacklevel=3)
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _patch(caching) -> None:
    cls = caching.IndexDataCacheFile
    if getattr(cls, "_consensuskit_locked", False):
        return
    save, load = cls.save, cls.load

    @functools.wraps(save)
    def locked_save(self, key, data):
        with _locked(self._index_path):
            return save(self, key, data)

    @functools.wraps(load)
    def locked_load(self, key):
        with _locked(self._index_path):
            return load(self, key)

    cls.save, cls.load = locked_save, locked_load
    cls._consensuskit_locked = True


def installed() -> bool:
    """Whether numba's cache files are locked in this process."""
    mod = sys.modules.get(_TARGET)
    return bool(mod is not None and getattr(mod.IndexDataCacheFile, "_consensuskit_locked",
                                            False))


class _PatchWhenImported(importlib.abc.MetaPathFinder):
    """Finds nothing itself; when numba's caching module is imported, patches it."""

    def find_spec(self, name, path=None, target=None):
        if name != _TARGET:
            return None
        sys.meta_path.remove(self)
        try:
            import importlib.util

            spec = importlib.util.find_spec(name)
        finally:
            pass
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        exec_module = loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            _patch(module)

        loader.exec_module = exec_and_patch
        return spec


def install() -> None:
    """Lock numba's cache files now (numba imported) or as soon as numba is imported."""
    if _TARGET in sys.modules:
        _patch(sys.modules[_TARGET])
        return
    if not any(isinstance(f, _PatchWhenImported) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchWhenImported())
