"""Bayesian cluster ensembles (BCE; Wang, Shan & Banerjee 2011).

One home for the family: ``spec`` (the Pyro model and its guides: the specification),
``guides``, ``marginal`` (the exact count-vector row marginal), ``cavi`` (variational
EM) with its numba ``kernels``, ``alpha`` (importance-sampled marginal likelihood and
the ``iw`` refit), ``svi``, and ``estimator`` (the scikit-learn estimator). Its spec's
public names are reachable here too (``from consensuskit.models import bce;
bce.model``), and the package declares the family's registration record ``FAMILY``
(:mod:`consensuskit.models.family`).
"""

from consensuskit.models.family import Family, WarmUp, spec_reexport

__all__ = ["FAMILY", "spec", "estimator"]

#: The family's registration record (:mod:`consensuskit.models.family`).
FAMILY = Family(
    name="bce", estimator="BCE", module="consensuskit.models.bce.estimator",
    spec="consensuskit.models.bce.spec", fast_paths="consensuskit.models.bce.fast_paths",
    # one E-step kernel per dtype serves every K; the default estimate's collapsed Gibbs
    # kernels (two chains, so the audition runs too; GBCE's feature sweep compiles on
    # GBCE's first fit with features)
    warm_up=WarmUp("BCE E-step and Gibbs kernels",
                   tuple(dict(n_clusters=3, alpha_estimate="meanfield", max_iter=2, n_init=1,
                              dtype=dtype, n_perplexity_samples=10)
                         for dtype in ("float64", "float32"))
                   + (dict(n_clusters=3, n_sweeps=4, n_init=2),),
                   ("consensuskit.models.bce.kernels", "consensuskit.models.vector_math",
                    "consensuskit.models.bce.gibbs_kernels")),
    demo=(("BCE", dict(n_clusters=3)),),
    tiny_fit={"n_init": 1, "max_iter": 10}, order=20)


__getattr__, __dir__ = spec_reexport(__name__)
