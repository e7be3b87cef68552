"""consensuskit: probabilistic models for cluster ensembles (consensus clustering).

Given M base clusterings of N points (an N x M label matrix, possibly with missing
entries) the estimators here find a soft and hard consensus clustering and say
how well each model explains the labels.  Estimators are imported lazily so that
``import consensuskit`` stays fast; Pyro models live in :mod:`consensuskit.models`
and inference engines in :mod:`consensuskit.inference`.
"""

from importlib import import_module as _import_module

from consensuskit import _moved
from consensuskit.data.ensemble import Ensemble, as_ensemble
from consensuskit.io import numba_cache as _numba_cache
from consensuskit.models import family as _family

__version__ = "0.1.0"

#: Public name -> defining module, imported on first use: the model families' estimators
#: (from their records, :mod:`consensuskit.models.family`), then everything else.
_LAZY = {f.estimator: f.module for f in _family.families()} | {
    "KCC": "consensuskit.consensus.kcc",
    "CSPA": "consensuskit.consensus.graph",
    "HGPA": "consensuskit.consensus.graph",
    "MCLA": "consensuskit.consensus.graph",
    "HBGF": "consensuskit.consensus.graph",
    "EAC": "consensuskit.consensus.eac",
    "QMI": "consensuskit.consensus.qmi",
    "PyroConsensus": "consensuskit.inference.pyro_consensus",
    "compare": "consensuskit.evaluation.comparison",
    "plot_comparison": "consensuskit.evaluation.comparison",
    "ResamplingConsensus": "consensuskit.consensus.resampling",
    "MajorityVote": "consensuskit.consensus.voting",
    "IVC": "consensuskit.consensus.voting",
    "IPVC": "consensuskit.consensus.voting",
    "MedoidConsensus": "consensuskit.consensus.partition",
    "LeastSquaresConsensus": "consensuskit.consensus.partition",
    "PartitionPosterior": "consensuskit.posterior",
    "PartitionConsensus": "consensuskit.posterior",
}

#: Subpackages and modules reachable as attributes (imported on first use).
_SUBMODULES = {
    "datasets": "consensuskit.data.datasets",
    "ensemble": "consensuskit.data.ensemble",
    "generate": "consensuskit.data.generate",
    "metrics": "consensuskit.evaluation.metrics",
    "models": "consensuskit.models",
    "inference": "consensuskit.inference",
    "posterior": "consensuskit.posterior",
}

_moved.install()
# numba's cache files locked against concurrent writers (patched when numba loads it)
_numba_cache.install()

__all__ = ["Ensemble", "as_ensemble", "__version__", *_LAZY]


def __getattr__(name):
    if name in _LAZY:
        return getattr(_import_module(_LAZY[name]), name)
    if name in _SUBMODULES:
        return _import_module(_SUBMODULES[name])
    for f in _family.families():  # a family registered after import
        if f.estimator == name:
            return f.load()
    raise AttributeError(f"module 'consensuskit' has no attribute {name!r}")


def __dir__():
    """The public names, lazy ones included, so ``dir()`` and tab completion see them."""
    return sorted(set(globals()) | set(__all__) | set(_SUBMODULES)
                  | {f.estimator for f in _family.families()})
