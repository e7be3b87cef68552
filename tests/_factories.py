"""Factories of every consensus estimator, for the cross-cutting reliability tests.

Each entry builds an estimator for ``n_clusters`` with a fixed ``random_state``;
an estimator whose module is missing is skipped by the tests that use it.
"""

import importlib

import pytest

from consensuskit.models.family import families


def _make(name, **kwargs):
    def factory(n_clusters, random_state=0):
        try:
            cls = getattr(importlib.import_module("consensuskit"), name)
        except (ImportError, AttributeError) as exc:  # pragma: no cover - not merged yet
            pytest.skip(f"{name} not available: {exc}")
        return cls(n_clusters=n_clusters, random_state=random_state, **kwargs)

    factory.__name__ = name
    return factory


#: the model families' records (consensuskit.models.family): the families' entries of every
#: list below derive from them
FAMILIES = families()

#: consensus functions (not model families): their tiny-fit keyword arguments
CONSENSUS_FUNCTIONS = {
    "KCC": {"n_init": 1},
    "CSPA": {},
    "HGPA": {"n_init": 1},
    "MCLA": {},
    "HBGF": {"n_init": 1},
    "EAC": {},
    "QMI": {"n_init": 1},
    "ResamplingConsensus": {"n_resamples": 5, "k_range": (2, 3)},
    "MajorityVote": {},
    "IVC": {"n_init": 1},
    "IPVC": {"n_init": 1},
    "MedoidConsensus": {},
    "LeastSquaresConsensus": {"n_init": 1},
    "PartitionConsensus": {"n_runs": 2},
}

#: every estimator exported by consensuskit
ESTIMATORS = [f.estimator for f in FAMILIES] + list(CONSENSUS_FUNCTIONS)
#: keyword arguments that keep each fit tiny (bad-input, sklearn-check, degenerate tests)
FAST = {f.estimator: dict(f.tiny_fit) for f in FAMILIES} | CONSENSUS_FUNCTIONS
#: the hyper-parameter that plays the role of the number of clusters
K_PARAM = {f.estimator: f.k_param for f in FAMILIES} | {n: "n_clusters"
                                                         for n in CONSENSUS_FUNCTIONS} | {
    "PartitionConsensus": "max_n_clusters"}
#: factories of the estimators fitted with their defaults in the invariance tests: the
#: model families that take ``n_clusters``, and KCC
FACTORIES = {f.estimator: _make(f.estimator) for f in FAMILIES
             if f.k_param == "n_clusters"} | {"KCC": _make("KCC")}


def make_fast(name, **params):
    """Estimator ``name`` with tiny-fit settings, n_clusters=2, random_state=0, ``params``."""
    cls = getattr(importlib.import_module("consensuskit"), name)
    kw = dict(FAST[name])
    if K_PARAM[name] == "n_clusters":
        kw["n_clusters"] = 2
    kw["random_state"] = 0
    kw.update(params)
    return cls(**kw)
