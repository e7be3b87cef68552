"""The package layout: one package per model family, old import paths still working."""

import ast
import importlib
import sys
import warnings
from pathlib import Path

import numpy as np
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


# ------------------------------------------------------------------ imports, by AST
def _module_name(path):
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
PACKAGES = {_module_name(p) for p in PACKAGE.rglob("__init__.py")}


def _package_of(module):
    """The package a module belongs to (a package belongs to itself)."""
    return module if module in PACKAGES else module.rpartition(".")[0]


def _imports(module):
    """``(target module, imported name or None, line)`` of every import of the package's
    own modules in ``module``, at any depth (function-level imports included)."""
    path = MODULES[module]
    base = module if module in PACKAGES else module.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(a.name, None, node.lineno) for a in node.names
                    if a.name.split(".")[0] == PACKAGE.name]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                up = base.split(".")[:len(base.split(".")) - node.level + 1]
                source = ".".join(up + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if source.split(".")[0] != PACKAGE.name:
                continue
            for a in node.names:
                sub = f"{source}.{a.name}"
                out.append((sub, None, node.lineno) if sub in MODULES
                           else (source, a.name, node.lineno))
    return out


def _private_imports_across_packages():
    found = []
    for module in MODULES:
        for target, name, line in _imports(module):
            private = name if name is not None else target.rpartition(".")[2]
            if not (private.startswith("_") and not private.startswith("__")):
                continue
            source_pkg = _package_of(target) if name is not None else target.rpartition(".")[0]
            if source_pkg != _package_of(module):
                found.append(f"{module}:{line} imports {private} from {target}")
    return found


def test_no_private_name_imported_across_packages():
    """A private name (``_x``) is imported only by modules of its own package."""
    assert not _private_imports_across_packages()


def test_private_import_check_can_fail(tmp_path, monkeypatch):
    """The scan above sees a private import across packages (negative control)."""
    probe = PACKAGE / "io" / "label_files.py"
    fake = tmp_path / "probe.py"
    fake.write_text("from consensuskit.data.label_input import _to_numpy\n")
    monkeypatch.setitem(MODULES, "consensuskit.io.probe", fake)
    assert probe.exists()
    assert any("consensuskit.io.probe" in f for f in _private_imports_across_packages())


def _import_graph():
    graph = {m: set() for m in MODULES}
    for module in MODULES:
        for target, _, _ in _imports(module):
            if target in MODULES and target != module:
                graph[module].add(target)
    return graph


def _cycles(graph):
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_between_modules():
    """No two modules import each other, directly or through others, counting imports
    inside functions too (a function-level import that hides a cycle is still one)."""
    graph = _import_graph()
    assert sum(map(len, graph.values())) > 100, "the scan found no imports: it is broken"
    assert not _cycles(graph)
    graph["consensuskit.data.ensemble"].add("consensuskit.consensus.eac")  # control
    assert _cycles(graph)


def test_inference_imports_no_model_family():
    """``inference/`` is the family-independent machinery: it imports no family package,
    no estimator and nothing above it (of ``models`` only the calling convention)."""
    above = ("consensuskit.models", "consensuskit.cli", "consensuskit.evaluation",
             "consensuskit.distributed", "consensuskit.consensus", "consensuskit.estimators")
    bad = [f"{m} imports {t}" for m in MODULES if m.startswith("consensuskit.inference")
           for t, _, _ in _imports(m)
           if t.startswith(above) and t != "consensuskit.models.convention"]
    assert not bad


# ------------------------------------------------------- one registration per family
TOY_MODULE = '''
"""A model family that lives outside the package: MM's engine under another name."""
from consensuskit.inference.registry import FastPath
from consensuskit.models.mm import spec
from consensuskit.models.mm.estimator import MM


class Toy(MM):
    """MM, registered as a family of its own."""


FAST_PATHS = [FastPath("toy", "em", spec, lambda **o: Toy(n_clusters=2, random_state=0, **o))]
'''


@pytest.fixture
def toy_family(tmp_path, monkeypatch):
    """The toy family's package (one module) on sys.path and its one registration."""
    from consensuskit.inference import registry
    from consensuskit.models import family

    (tmp_path / "toy_family.py").write_text(TOY_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    record = family.register(family.Family(
        name="toy", estimator="Toy", module="toy_family", spec="consensuskit.models.mm.spec",
        fast_paths="toy_family",
        warm_up=family.WarmUp("Toy EM", (dict(n_clusters=2, max_iter=2, n_init=1),), ()),
        demo=(("Toy", dict(n_clusters=3)),), tiny_fit={"n_init": 1, "max_iter": 5},
        order=99))
    yield record
    family.unregister("toy")
    sys.modules.pop("toy_family", None)
    if "_factories" in sys.modules:  # the factories as they were, without the toy
        importlib.reload(sys.modules["_factories"])


def test_a_registered_family_appears_in_every_derived_list(toy_family, tmp_path, capsys):
    """One registration (no edit of consensuskit/__init__, the CLI, the warm-up, the demo,
    the registry or the tests' factories): the family is a lazy top-level name, a
    ``--model`` choice that fits, a warm-up step, a demo entry, a fast path and a factory."""
    import _factories

    from consensuskit.cli import commands, demo, warmup
    from consensuskit.models.family import fast_paths

    toy = ck.Toy
    assert toy.__module__ == "toy_family" and "Toy" in dir(ck)
    assert commands.model_classes()["toy"] == "Toy"
    assert ("Toy EM", ()) in [(name, mods) for name, _, mods in warmup.steps()]
    dict(((name, step) for name, step, _ in warmup.steps()))["Toy EM"]()  # runs the fits
    assert "Toy" in [name for name, _ in demo.consensus_models()]
    assert ("toy", "em") in [(fp.family, fp.engine) for fp in fast_paths()]
    factories = importlib.reload(_factories)
    assert "Toy" in factories.ESTIMATORS and factories.K_PARAM["Toy"] == "n_clusters"
    assert type(factories.make_fast("Toy")) is toy

    labels = tmp_path / "labels.csv"
    labels.write_text("\n".join(f"{i % 2},{i % 2},{(i // 2) % 2}" for i in range(12)) + "\n")
    assert commands.main(["fit", "--model", "toy", "--n-clusters", "2", "--quiet",
                          str(labels)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].startswith("consensus") and len(table) == 13


def test_the_built_in_families_are_read_from_their_packages():
    """Every family package under consensuskit/models declares a record; the lists derived
    from them name exactly those families."""
    from consensuskit.cli import commands, warmup
    from consensuskit.models import FAMILIES
    from consensuskit.models.family import families

    names = [f.name for f in families()]
    assert names == ["mm", "bce", "gbce", "nbce", "pcc"] and set(FAMILIES) == set(names)
    assert {f.estimator for f in families()} <= set(ck.__all__)
    assert [commands.model_classes()[n] for n in names] == [f.estimator for f in families()]
    assert {m for _, _, mods in warmup.STEPS for m in mods} >= {
        "consensuskit.models.bce.kernels", "consensuskit.models.mm.kernels"}


# ------------------------------------------------------------ the estimator base
DRIVEN = ["BCE", "GBCE", "NBCE"]


@pytest.mark.parametrize("name", DRIVEN)
def test_driven_families_share_the_base_fit(name):
    """BCE and NBCE fit through the one base (validation, resume); GBCE adds its features
    and passes them to the same resume reader."""
    from consensuskit.models.base import DriverFitMixin

    cls = getattr(ck, name)
    assert issubclass(cls, DriverFitMixin)
    if name != "GBCE":
        assert cls.fit is DriverFitMixin.fit
    assert cls._read_resume is DriverFitMixin._read_resume


@pytest.mark.parametrize("name,param", [(n, p) for n in DRIVEN
                                        for p in getattr(ck, n)._parameter_checks])
def test_every_declared_parameter_check_rejects_a_bad_value(name, param):
    """Each declared constraint is checked by ``fit``: a value of the wrong kind raises an
    error naming the parameter, before any engine runs."""
    import _factories

    est = _factories.make_fast(name, **{param: object()})
    with pytest.raises((TypeError, ValueError), match=param):
        est.fit(np.array([[0, 1], [1, 0], [0, 0], [1, 1]]))


@pytest.mark.parametrize("name,engine", [("BCE", "svi"), ("NBCE", "vb")])
def test_resume_needs_the_driven_engine(name, engine, tmp_path):
    est = getattr(ck, name)(inference=engine, **({"prior": "fsd"} if name == "NBCE" else {}))
    with pytest.raises(ValueError, match="resume_from needs inference="):
        est.fit(np.array([[0, 1], [1, 0], [0, 0], [1, 1]]), resume_from=tmp_path / "x.ckpt")
