"""Probabilistic consensus clustering (PCC; Lourenço et al. 2015).

One home for the family: ``spec`` (the Pyro model and its guides: the specification),
``descent`` (the projected descent engine), and ``estimator`` (the scikit-learn
estimator). Its spec's public names are reachable here too (``from consensuskit.models
import pcc; pcc.model``), and the package declares the family's registration record
``FAMILY`` (:mod:`consensuskit.models.family`).
"""

from consensuskit.models.family import Family, WarmUp, spec_reexport

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


__getattr__, __dir__ = spec_reexport(__name__)
