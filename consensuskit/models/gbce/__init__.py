"""Generalized Bayesian cluster ensembles (GBCE; Wang, Shan & Banerjee 2011, section 6).

One home for the family: ``spec`` (the Pyro model and its guides: the specification),
``cavi`` (variational EM over labels and features), and ``estimator`` (the scikit-learn
estimator). The spec's public names are reachable here too, so ``from
consensuskit.models import gbce; gbce.model`` keeps working; they are imported on first
use, so importing the estimator does not import Pyro.
"""

from importlib import import_module as _import_module

from consensuskit.models.family import Family

__all__ = ["FAMILY", "spec", "estimator"]

#: The family's registration record (:mod:`consensuskit.models.family`).
FAMILY = Family(
    name="gbce", estimator="GBCE", module="consensuskit.models.gbce.estimator",
    spec="consensuskit.models.gbce.spec", fast_paths="consensuskit.models.gbce.fast_paths",
    tiny_fit={"n_init": 1, "max_iter": 10}, order=30)


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
