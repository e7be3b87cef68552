"""The mixture model of consensus (MM; Topchy, Jain & Punch 2004).

One home for the family: ``spec`` (the Pyro model and its guides: the specification),
``em`` (EM engine) with its numba ``kernels``, and ``estimator`` (the scikit-learn
estimator). Its spec's public names are reachable here too (``from consensuskit.models
import mm; mm.model``), and the package declares the family's registration record
``FAMILY`` (:mod:`consensuskit.models.family`).
"""

from consensuskit.models.family import Family, WarmUp, spec_reexport

__all__ = ["FAMILY", "spec", "estimator"]

#: The family's registration record (:mod:`consensuskit.models.family`).
FAMILY = Family(
    name="mm", estimator="MM", module="consensuskit.models.mm.estimator",
    spec="consensuskit.models.mm.spec", fast_paths="consensuskit.models.mm.fast_paths",
    # the E-pass is compiled once per K (fixed at compile time): K = 2..8 here
    warm_up=WarmUp("MM fused EM pass",
                   tuple(dict(n_clusters=k, max_iter=2, n_init=1) for k in range(2, 9)),
                   ("consensuskit.models.mm.kernels", "consensuskit.models.vector_math")),
    demo=(("MM", dict(n_clusters=3)),),
    tiny_fit={"n_init": 1, "max_iter": 20}, order=10)


__getattr__, __dir__ = spec_reexport(__name__)
