"""The mixture model of consensus (MM; Topchy, Jain & Punch 2004).

One home for the family: ``spec`` (the Pyro model and its guides: the specification),
``em`` (EM engine) with its numba ``kernels``, and ``estimator`` (the scikit-learn
estimator). The spec's public names are reachable here too, so ``from
consensuskit.models import mm; mm.model`` keeps working; they are imported on first use,
so importing the estimator does not import Pyro.
"""

from importlib import import_module as _import_module

__all__ = ["spec", "estimator"]


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    spec = _import_module(f"{__name__}.spec")
    try:
        return getattr(spec, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


def __dir__():
    spec = _import_module(f"{__name__}.spec")
    return sorted(set(globals()) | set(getattr(spec, "__all__", ())))
