"""NBCE's engines registered as fast paths of its spec (``tests/test_fast_paths.py``).

VB (FSD prior), CVB (TSB prior) and the collapsed Gibbs sampler, each read by
``NBCE.to_spec()`` (Gibbs: every retained draw's posterior-mean parameters).
"""

from consensuskit.inference.registry import FastPath
from consensuskit.models.nbce import spec
from consensuskit.models.nbce.estimator import NBCE

__all__ = ["FAST_PATHS"]


def _variational(prior, engine):
    def make(**o):
        return NBCE(truncation=6, prior=prior, inference=engine, random_state=0, **o)

    return FastPath("nbce", f"{engine}-{prior}", spec, make)


FAST_PATHS = [
    _variational("fsd", "vb"),
    _variational("tsb", "cvb"),
    FastPath("nbce", "gibbs", spec,
             lambda **o: NBCE(truncation=6, n_samples=20, burn_in=20, n_chains=1,
                              random_state=0, **o)),
]
