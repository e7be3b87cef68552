"""Module paths from before the model families became packages, still importable.

``import consensuskit.inference.bce_cavi`` (and every other path in :data:`MOVED`) loads
the module's new home, registers it under the old name too and warns once
(``DeprecationWarning``), so users' code and files that name an old path keep working.
``from consensuskit.models import bce; bce.model`` needs no alias: the family package
re-exports its spec.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

__all__ = ["MOVED", "install"]

#: old path -> new path, both relative to ``consensuskit`` (None: an empty package).
MOVED = {
    "estimators": None,  # an empty package: the parent of the old estimator paths below
    "ensemble": "data.ensemble",
    "generate": "data.generate",
    "datasets": "data.datasets",
    "persistence": "io.persistence",
    "checkpoint": "io.checkpoint",
    "label_files": "io.label_files",
    "metrics": "evaluation.metrics",
    "heldout": "evaluation.heldout",
    "comparison": "evaluation.comparison",
    "figures": "evaluation.figures",
    "demo": "cli.demo",
    "warmup": "cli.warmup",
    "estimator_options": "cli.options",
    "models._convention": "models.convention",
    "inference.mm_em": "models.mm.em",
    "inference._mm_numba": "models.mm.kernels",
    "estimators.mm": "models.mm.estimator",
    "models.bce_guides": "models.bce.guides",
    "models.bce_marginal": "models.bce.marginal",
    "inference.bce_cavi": "models.bce.cavi",
    "inference._bce_numba": "models.bce.kernels",
    "inference.bce_alpha": "models.bce.alpha",
    "inference.bce_svi": "models.bce.svi",
    "estimators.bce": "models.bce.estimator",
    "inference.gbce_cavi": "models.gbce.cavi",
    "estimators.gbce": "models.gbce.estimator",
    "models.nbce_priors": "models.nbce.priors",
    "inference.nbce_gibbs": "models.nbce.gibbs",
    "inference.nbce_vb": "models.nbce.vb",
    "inference.nbce_cvb": "models.nbce.cvb",
    "estimators.nbce": "models.nbce.estimator",
    "inference.pcc_descent": "models.pcc.descent",
    "estimators.pcc": "models.pcc.estimator",
    "estimators.pyro": "inference.pyro_consensus",
}

_PREFIX = "consensuskit."


class _MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old path and loads it as an alias of the module at its new path."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith(_PREFIX) and fullname[len(_PREFIX):] in MOVED:
            is_package = MOVED[fullname[len(_PREFIX):]] is None
            return importlib.util.spec_from_loader(fullname, self, is_package=is_package)
        return None

    def create_module(self, spec):
        return None  # a placeholder, replaced in exec_module

    def exec_module(self, module):
        old = module.__name__
        if MOVED[old[len(_PREFIX):]] is None:
            return  # an empty package that only holds old paths
        new = _PREFIX + MOVED[old[len(_PREFIX):]]
        warnings.warn(f"{old} moved to {new}; the old path will be removed",
                      DeprecationWarning, stacklevel=2)
        # The import system returns whatever sys.modules holds under the old name once
        # this returns: the new module itself, its own __spec__ untouched.
        sys.modules[old] = importlib.import_module(new)


def install() -> None:
    """Put the finder on ``sys.meta_path`` once."""
    if not any(isinstance(f, _MovedModuleFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _MovedModuleFinder())  # before the path finder
