"""Probabilistic consensus clustering (PCC; Lourenço et al. 2015).

One home for the family: ``spec`` (the Pyro model and its guides: the specification),
``descent`` (the projected descent engine), and ``estimator`` (the scikit-learn
estimator). The spec's public names are reachable here too, so ``from
consensuskit.models import pcc; pcc.model`` keeps working; they are imported on first
use, so importing the estimator does not import Pyro.
"""

from importlib import import_module as _import_module

from consensuskit.models.family import Family, WarmUp

__all__ = ["FAMILY", "spec", "estimator"]

#: The family's registration record (:mod:`consensuskit.models.family`).
FAMILY = Family(
    name="pcc", estimator="PCC", module="consensuskit.models.pcc.estimator",
    spec="consensuskit.models.pcc.spec",
    # both divergences, dense and on sampled pairs
    warm_up=WarmUp("PCC descent",
                   tuple(dict(n_clusters=3, divergence=d, sparse_pairs=s, max_iter=3)
                         for d in ("kl", "l2") for s in (None, 0.5)),
                   ("consensuskit.models.pcc.descent",)),
    demo=(("PCC (KL)", dict(n_clusters=3, divergence="kl")),),
    order=50)


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
