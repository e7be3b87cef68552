"""Factories of every consensus estimator, for the cross-cutting reliability tests.

Each entry builds an estimator for ``n_clusters`` with a fixed ``random_state``;
an estimator whose module is missing is skipped by the tests that use it.
"""

import importlib

import pytest


def _make(name, **kwargs):
    def factory(n_clusters, random_state=0):
        try:
            cls = getattr(importlib.import_module("consensuskit"), name)
        except (ImportError, AttributeError) as exc:  # pragma: no cover - not merged yet
            pytest.skip(f"{name} not available: {exc}")
        return cls(n_clusters=n_clusters, random_state=random_state, **kwargs)

    factory.__name__ = name
    return factory


FACTORIES = {
    "MM": _make("MM"),
    "BCE": _make("BCE"),
    "KCC": _make("KCC"),
    "PCC": _make("PCC"),
}
