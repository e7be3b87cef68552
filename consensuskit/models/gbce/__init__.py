"""Generalized Bayesian cluster ensembles (GBCE; Wang, Shan & Banerjee 2011, section 6).

One home for the family: ``spec`` (the Pyro model and its guides: the specification),
``cavi`` (variational EM over labels and features), and ``estimator`` (the scikit-learn
estimator). Its spec's public names are reachable here too (``from consensuskit.models
import gbce; gbce.model``), and the package declares the family's registration record
``FAMILY`` (:mod:`consensuskit.models.family`).
"""

from consensuskit.models.family import Family, spec_reexport

__all__ = ["FAMILY", "spec", "estimator"]

#: The family's registration record (:mod:`consensuskit.models.family`).
FAMILY = Family(
    name="gbce", estimator="GBCE", module="consensuskit.models.gbce.estimator",
    spec="consensuskit.models.gbce.spec", fast_paths="consensuskit.models.gbce.fast_paths",
    tiny_fit={"n_init": 1, "max_iter": 10}, order=30)


__getattr__, __dir__ = spec_reexport(__name__)
