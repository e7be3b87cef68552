"""The package layout: one package per model family, old import paths still working."""

import importlib
import sys
import warnings
from pathlib import Path

import pytest

import consensuskit as ck
from consensuskit._moved import MOVED

PACKAGE = Path(ck.__file__).parent


@pytest.mark.parametrize("family", ["mm", "bce", "gbce", "nbce", "pcc"])
def test_family_package_reexports_its_spec(family):
    """``from consensuskit.models import bce; bce.model`` is the spec's model."""
    from consensuskit import models

    pkg = getattr(models, family)
    spec = importlib.import_module(f"consensuskit.models.{family}.spec")
    assert pkg.model is spec.model
    assert set(spec.__all__) <= set(dir(pkg))
    with pytest.raises(AttributeError):
        pkg.no_such_name  # noqa: B018


@pytest.mark.parametrize("old", [k for k, v in MOVED.items() if v is not None])
def test_old_module_path_is_the_new_module_with_a_warning(old):
    new = importlib.import_module(f"consensuskit.{MOVED[old]}")
    sys.modules.pop(f"consensuskit.{old}", None)  # import the alias afresh
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = importlib.import_module(f"consensuskit.{old}")
    assert got is new
    assert got.__spec__.name == f"consensuskit.{MOVED[old]}"  # the new module untouched
    assert any(issubclass(w.category, DeprecationWarning) for w in caught)


def test_old_estimator_path_is_the_public_class():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from consensuskit.estimators.bce import BCE
    assert BCE is ck.BCE


def test_public_attributes_keep_their_short_names():
    from consensuskit import datasets, generate, metrics  # noqa: F401

    assert ck.metrics is metrics and ck.Ensemble is ck.ensemble.Ensemble
    assert callable(ck.models.simulate)


def test_no_module_over_900_lines():
    long = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 900}
    assert not long, f"modules over 900 lines: {long}"
