"""consensuskit: probabilistic models for cluster ensembles (consensus clustering).

Given M base clusterings of N points (an N x M label matrix, possibly with missing
entries) the estimators here find a soft and hard consensus clustering and say
how well each model explains the labels.  Estimators are imported lazily so that
``import consensuskit`` stays fast; Pyro models live in :mod:`consensuskit.models`
and inference engines in :mod:`consensuskit.inference`.
"""

from importlib import import_module as _import_module

from .ensemble import Ensemble, as_ensemble

__version__ = "0.1.0"

_LAZY = {
    "MM": "consensuskit.estimators.mm",
    "BCE": "consensuskit.estimators.bce",
    "GBCE": "consensuskit.estimators.gbce",
    "NBCE": "consensuskit.estimators.nbce",
    "PCC": "consensuskit.estimators.pcc",
    "KCC": "consensuskit.consensus.kcc",
    "CSPA": "consensuskit.consensus.graph",
    "HGPA": "consensuskit.consensus.graph",
    "MCLA": "consensuskit.consensus.graph",
    "HBGF": "consensuskit.consensus.graph",
    "EAC": "consensuskit.consensus.eac",
    "QMI": "consensuskit.consensus.qmi",
    "PyroConsensus": "consensuskit.estimators.pyro",
    "compare": "consensuskit.comparison",
    "plot_comparison": "consensuskit.comparison",
    "ResamplingConsensus": "consensuskit.consensus.resampling",
    "MajorityVote": "consensuskit.consensus.voting",
    "IVC": "consensuskit.consensus.voting",
    "IPVC": "consensuskit.consensus.voting",
    "MedoidConsensus": "consensuskit.consensus.partition",
    "LeastSquaresConsensus": "consensuskit.consensus.partition",
}

#: Subpackages and modules reachable as attributes (imported on first use).
_SUBMODULES = ("datasets", "ensemble", "generate", "metrics", "models", "inference")

__all__ = ["Ensemble", "as_ensemble", "__version__", *_LAZY]


def __getattr__(name):
    if name in _LAZY:
        return getattr(_import_module(_LAZY[name]), name)
    if name in _SUBMODULES:
        return _import_module(f"consensuskit.{name}")
    raise AttributeError(f"module 'consensuskit' has no attribute {name!r}")


def __dir__():
    """The public names, lazy ones included, so ``dir()`` and tab completion see them."""
    return sorted(set(globals()) | set(__all__) | set(_SUBMODULES))
