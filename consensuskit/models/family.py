"""One registration record per model family, and the lists derived from the records.

A family (MM, BCE, GBCE, NBCE, PCC, or a user's) lives in one package under
:mod:`consensuskit.models` and declares itself once, as ``FAMILY = Family(...)`` in that
package's ``__init__.py``.  Everything that lists the families reads the records:

* the lazy top-level names (``consensuskit.BCE``): :attr:`Family.estimator` and
  :attr:`Family.module`;
* the command line's ``--model`` choices (:mod:`consensuskit.cli.commands`):
  :attr:`Family.name`;
* the numba warm-up (:mod:`consensuskit.cli.warmup`): :attr:`Family.warm_up`;
* the demo's models (:mod:`consensuskit.cli.demo`): :attr:`Family.demo`;
* the fast-path registry's entries (:mod:`consensuskit.inference.registry`): the module
  named by :attr:`Family.fast_paths`, loaded by :func:`fast_paths`;
* the tests' estimator factories (``tests/_factories.py``): :attr:`Family.tiny_fit` and
  :attr:`Family.k_param`.

The records hold names (module paths, class names), not objects, so that reading them
imports neither Pyro nor numba: ``import consensuskit`` reads them to know its lazy names.
The built-in families are found by scanning the subpackages of :mod:`consensuskit.models`
for a ``FAMILY`` attribute; a family that lives elsewhere (a user's package, a test) joins
with :func:`register`.  This module imports no family and nothing above ``models``.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field

__all__ = ["Family", "WarmUp", "register", "unregister", "families", "get", "fast_paths",
           "spec_reexport"]


@dataclass(frozen=True)
class WarmUp:
    """The numba warm-up step of a family (see :mod:`consensuskit.cli.warmup`).

    title : str
        The step's line in ``consensuskit warmup``'s output.
    fits : tuple of dict
        Keyword arguments of the estimator; the step fits one estimator per dict on a
        small synthetic (60, 6) label matrix with missing entries, so each dict should
        select the configuration (dtype, prior, divergence, K ...) whose kernels it
        compiles and keep the fit tiny.
    modules : tuple of str
        The modules whose numba kernels these fits compile (``tests/test_warmup.py``
        checks that every numba module of the package is named by some step).
    """

    title: str
    fits: tuple
    modules: tuple


@dataclass(frozen=True)
class Family:
    """The registration record of one model family.

    name : str
        Short lower-case name: the ``--model`` choice of ``consensuskit fit`` and the
        family's key in every derived list.
    estimator : str
        The estimator's class name, exported lazily as ``consensuskit.<estimator>``.
    module : str
        The module that defines the estimator class.
    spec : str or None
        The module of the family's Pyro program (``model`` and guides), if any.
    fast_paths : str or None
        A module defining ``FAST_PATHS``: the :class:`~consensuskit.inference.registry.
        FastPath` entries of the family's hand-written engines, checked against ``spec``
        by ``tests/test_fast_paths.py``.
    warm_up : WarmUp or None
        The warm-up step compiling the family's numba kernels (None: it has none).
    demo : tuple of (str, dict)
        The demo's entries: ``(title, estimator keyword arguments)``; empty: not in it.
    tiny_fit : dict
        Keyword arguments that keep a fit tiny (the cross-cutting reliability tests).
    k_param : str
        The hyper-parameter that plays the role of the number of clusters.
    order : int
        Position in every derived list (ties broken by ``name``).
    """

    name: str
    estimator: str
    module: str
    spec: str | None = None
    fast_paths: str | None = None
    warm_up: WarmUp | None = None
    demo: tuple = ()
    tiny_fit: dict = field(default_factory=dict)
    k_param: str = "n_clusters"
    order: int = 100

    def load(self):
        """The estimator class (imports its module)."""
        return getattr(importlib.import_module(self.module), self.estimator)


_REGISTERED: dict = {}


def register(family: Family) -> Family:
    """Add a family that does not live under :mod:`consensuskit.models`; returns it.

    A family registered under the name of an existing one replaces it.
    """
    if not isinstance(family, Family):
        raise TypeError(f"register takes a Family record; got {type(family).__name__}")
    _REGISTERED[family.name] = family
    return family


def unregister(name: str) -> None:
    """Remove a family added by :func:`register` (no error if it is not there)."""
    _REGISTERED.pop(name, None)


def _builtin() -> dict:
    from consensuskit import models

    found = {}
    for info in pkgutil.iter_modules(models.__path__):
        if not info.ispkg:
            continue
        record = getattr(importlib.import_module(f"{models.__name__}.{info.name}"),
                         "FAMILY", None)
        if isinstance(record, Family):
            found[record.name] = record
    return found


def families() -> list:
    """Every family record, built-in and registered, in ``(order, name)`` order."""
    every = {**_builtin(), **_REGISTERED}
    return sorted(every.values(), key=lambda f: (f.order, f.name))


def get(name: str) -> Family:
    """The record of the family called ``name`` (its short name or its estimator's)."""
    for f in families():
        if name in (f.name, f.estimator):
            return f
    raise KeyError(f"no model family {name!r}; known: {[f.name for f in families()]}")


def fast_paths() -> list:
    """Every family's fast paths, registered in :mod:`consensuskit.inference.registry`
    (loading the modules named by :attr:`Family.fast_paths`), plus any registered there
    directly."""
    from consensuskit.inference import registry

    for f in families():
        if f.fast_paths is not None:
            for fp in importlib.import_module(f.fast_paths).FAST_PATHS:
                registry.register_engine(fp)
    return registry.fast_paths()


def spec_reexport(package: str):
    """``(__getattr__, __dir__)`` for a family package ``package`` (its ``__name__``) that
    makes the public names of its ``spec`` module reachable on the package, imported on
    first use: ``from consensuskit.models import bce; bce.model`` is ``bce.spec.model``, and
    importing the estimator does not import Pyro."""

    def __getattr__(name):
        if name.startswith("__"):
            raise AttributeError(name)
        spec = importlib.import_module(f"{package}.spec")
        try:
            return getattr(spec, name)
        except AttributeError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None

    def __dir__():
        spec = importlib.import_module(f"{package}.spec")
        return sorted(set(vars(importlib.import_module(package)))
                      | set(getattr(spec, "__all__", ())))

    return __getattr__, __dir__
