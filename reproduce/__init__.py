"""Registry of paper reproductions run by ``consensuskit reproduce <name>``.

A reproduction is a function registered under a name, normally in a submodule
of this package (``reproduce/<paper>.py``)::

    from reproduce import register

    @register("mm-table3", description="MM paper, Table 3 (iris, mean error)")
    def mm_table3(*, progress=True):
        ...          # compute and print the table
        return 0     # exit status (None counts as 0)

The CLI calls ``function(progress=not quiet)``.  Submodules are imported by
:func:`discover` (the CLI does this before looking a name up), so registering
needs no edit here.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["REGISTRY", "Reproduction", "register", "discover", "available", "get"]


@dataclass(frozen=True)
class Reproduction:
    """One registered reproduction."""

    name: str
    function: Callable
    description: str = ""


#: name -> :class:`Reproduction`; filled by :func:`register`.
REGISTRY: dict[str, Reproduction] = {}


def register(name: str, *, description: str = ""):
    """Decorator registering ``function`` under ``name`` (names must be unique)."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError("a reproduction needs a non-empty name")

    def decorator(function):
        existing = REGISTRY.get(name)
        if existing is not None and existing.function is not function:
            raise ValueError(f"reproduction {name!r} is already registered")
        REGISTRY[name] = Reproduction(name=name, function=function, description=description)
        return function

    return decorator


def discover() -> None:
    """Import every submodule of this package so that their ``@register`` calls run."""
    for info in pkgutil.iter_modules(__path__, prefix=__name__ + "."):
        importlib.import_module(info.name)


def available() -> list[str]:
    """Sorted names of the registered reproductions (after :func:`discover`)."""
    discover()
    return sorted(REGISTRY)


def get(name: str) -> Reproduction:
    """The reproduction called ``name``; ``KeyError`` if there is none."""
    discover()
    return REGISTRY[name]
