"""Hand-written engines registered as fast paths of their Pyro spec.

Each entry names a model family and an engine (``("bce", "cavi")``), the spec module in
:mod:`consensuskit.models`, how to build the estimator that runs the engine, and how to
read the engine's *fitted* state as values of the spec's global sites (by default the
estimator's public ``to_spec()``).  The registry knows no family: each family declares
its entries in its own package (``FAST_PATHS`` in the module named by its record,
:class:`consensuskit.models.family.Family`), and
:func:`consensuskit.models.family.fast_paths` registers them here.  With that, one
generic check holds for every entry (``tests/test_fast_paths.py``): the estimator's
per-row log-likelihood equals the spec's (computed by enumeration and likelihood
weighting in :mod:`consensuskit.inference.pointwise`) within Monte-Carlo error, and where
the engine reports an objective (EM's log joint, CAVI's bound) it equals the spec's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["FastPath", "register_engine", "fast_paths", "spec_values"]


@dataclass(frozen=True)
class FastPath:
    """One registered engine.

    family, engine : str
    spec : module with ``model`` following the convention of :mod:`consensuskit.models`
    make_estimator : callable(**overrides) -> unfitted estimator that runs the engine
    to_spec : callable(fitted estimator) -> (model_kwargs, draws), or None
        ``draws``: dict global site -> tensor (D, ...) (D = 1 for a point estimate).
        None (the default): the estimator's own ``to_spec()``.
    objective : callable(fitted estimator) -> (engine value, spec value, spec SE) or None
    data : callable() -> (X_train, X_test, fit_kwargs) or None
        The engine's own check data when labels alone do not fit it (GBCE's features go
        in ``fit_kwargs``, passed to ``fit``); None: the check's shared labels-only data.
    """

    family: str
    engine: str
    spec: object
    make_estimator: Callable
    to_spec: Callable | None = None
    objective: Callable | None = None
    data: Callable | None = None


_REGISTRY: dict = {}


def register_engine(fast_path: FastPath) -> FastPath:
    """Add ``fast_path`` under ``(family, engine)``; returns it."""
    _REGISTRY[(fast_path.family, fast_path.engine)] = fast_path
    return fast_path


def fast_paths() -> list:
    """Every :class:`FastPath` registered so far.  The families' own entries are
    registered by :func:`consensuskit.models.family.fast_paths` (which returns this list
    after loading them)."""
    return list(_REGISTRY.values())


def spec_values(fast_path: FastPath, est):
    """``(model_kwargs, draws)``: the spec's global-site values at ``est``'s fitted state,
    by the entry's own mapping or else the estimator's ``to_spec()``."""
    if fast_path.to_spec is not None:
        return fast_path.to_spec(est)
    return est.to_spec()
