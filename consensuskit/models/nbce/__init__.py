"""The nonparametric Bayesian clustering ensemble (NBCE; Wang, Domeniconi & Laskey 2010).

One home for the family: ``spec`` (the Pyro model and its guides: the specification),
``priors`` (TSB, FSD), ``gibbs`` (collapsed Gibbs with split-merge), ``vb`` and ``cvb``
(variational), and ``estimator`` (the scikit-learn estimator). Its spec's public names
are reachable here too (``from consensuskit.models import nbce; nbce.model``), and the
package declares the family's registration record ``FAMILY``
(:mod:`consensuskit.models.family`).
"""

from consensuskit.models.family import Family, WarmUp, spec_reexport

__all__ = ["FAMILY", "spec", "estimator"]

#: The family's registration record (:mod:`consensuskit.models.family`).
FAMILY = Family(
    name="nbce", estimator="NBCE", module="consensuskit.models.nbce.estimator",
    spec="consensuskit.models.nbce.spec", fast_paths="consensuskit.models.nbce.fast_paths",
    # both priors, several chains on threads, and the untruncated default
    warm_up=WarmUp("NBCE Gibbs sampler",
                   tuple(dict(truncation=5, prior=prior, n_samples=2, burn_in=1, n_chains=2)
                         for prior in ("tsb", "fsd"))
                   + (dict(n_samples=2, burn_in=1, n_chains=2),),
                   ("consensuskit.models.nbce.gibbs.kernels",
                    "consensuskit.models.nbce.gibbs.moves",
                    "consensuskit.models.nbce.gibbs.split_merge",
                    "consensuskit.models.nbce.gibbs.summaries")),
    demo=(("NBCE (Gibbs)", dict(truncation=10, n_samples=100, burn_in=100, n_chains=2)),),
    tiny_fit={"truncation": 4, "n_samples": 5, "burn_in": 2, "n_chains": 1},
    k_param="truncation", order=40)


__getattr__, __dir__ = spec_reexport(__name__)
