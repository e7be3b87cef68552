"""Execute the tutorial notebooks in quick mode and check the figures they save.

The sources are the jupytext percent files ``notebooks/*.py``; the committed
``notebooks/*.ipynb`` are their executed copies (``make notebooks``), checked
here to hold the same cells, with outputs and without errors or widget warnings.

Each notebook is run with nbclient in a kernel started from *this* interpreter
(``sys.executable -m ipykernel_launcher``, via a kernelspec written to a temporary
directory), so the test works from any virtual environment without a registered
Jupyter kernel.  ``QUICK = True`` is injected after the cell tagged
``parameters`` (as papermill does), the repository root is put on the kernel's
``PYTHONPATH`` and ``CONSENSUSKIT_FIGURES`` points at a temporary directory; the
test then checks that the expected PNG files exist, are non-trivial images and
are not blank.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
jupytext = pytest.importorskip("jupytext")
pytest.importorskip("ipykernel")

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"

EXPECTED_FIGURES = {
    "01_quickstart.py": ["quickstart_comparison"],
    "02_posterior_analysis.py": ["posterior_trace", "posterior_n_clusters",
                                 "posterior_coclustering", "posterior_credible_ball",
                                 "posterior_uncertain_points"],
    "03_extending_a_model.py": ["extending_reliability", "extending_perplexity"],
}

# Test-owned checks appended as a last cell: they run in the notebook's namespace
# and assert on its results (not only that it ran).
CHECKS = {
    "01_quickstart.py": """
assert len(table) == 12 and set(GENERATIVE) <= set(table.index), table.index
gen_ppl = table.loc[sorted(GENERATIVE), ["perplexity (train)", "perplexity (held-out)"]]
assert np.isfinite(gen_ppl.to_numpy()).all() and (gen_ppl.to_numpy() >= 1).all(), gen_ppl
# every base clustering has 2..6 labels, so a useful model is well below 6
assert (gen_ppl.to_numpy() < 3).all(), gen_ppl
assert table[scores].to_numpy().min() >= -1 and table[scores].to_numpy().max() <= 1
assert table.loc["BCE", "accuracy"] > 0.7 and table.loc["MM", "accuracy"] > 0.7, table
""",
    "02_posterior_analysis.py": """
assert {"r_hat", "ess_bulk"} <= set(summary.columns)
assert set(summary.index) == set(var_names) and np.isfinite(summary["ess_bulk"]).all()
assert abs(counts.sum() - 1) < 1e-12 and (counts.index >= 1).all()
assert P.shape == (150, 150) and np.allclose(P, P.T) and np.allclose(np.diag(P), 1)
assert ((doubt >= 0) & (doubt <= 1)).all() and ((confidence > 0) & (confidence <= 1)).all()
# labels_ is the VI optimum: no worse than the Binder estimate and Dahl's draw under VI, and
# the Binder estimate no worse than Dahl's draw under Binder
assert table.loc["VI (labels_)", "expected VI"] <= table["expected VI"].min() + 1e-12, table
assert table.loc["Binder", "expected Binder"] <= table["expected Binder"].min() + 1e-12, table
assert ball.in_ball.mean() >= 0.95 and ball.radius >= 0
assert ball.n_clusters_upper_vertical <= ball.n_clusters_lower_vertical
# the chains agree (the single-site sampler of round 1 gave R-hat about 2 here)
assert (summary["r_hat"] < 1.1).all(), summary
# setosa is never put with another species; base clusterings with up to six labels cut
# it in two, and the posterior keeps that cut (co-clustering about 0.5 inside setosa)
setosa = truth == truth[0]
assert P[np.ix_(setosa, ~setosa)].max() < 0.05
assert doubt[setosa].max() < 0.05 and not set(est_vi[setosa]) & set(est_vi[~setosa])
""",
    "03_extending_a_model.py": """
assert set(table.index) == {"MM", "BCE", "NBCE", "BCE + reliability"}
assert np.isfinite(table[["heldout_perplexity", "train_perplexity", "elpd_diff"]]).all().all()
assert table["elpd_diff"].max() == 0 and (table["elpd_diff_se"].fillna(0) >= 0).all()
assert abs(ppl - table.loc["BCE + reliability", "heldout_perplexity"]) < 4 * se + 1e-9
# reliabilities: clean clusterings above pure noise on average, ordered like the accuracies
assert rho[noise_level == 0].mean() > rho[noise_level == 1].mean() + 0.1, rho
assert spearman > 0.5, spearman
assert "BCE + reliability" in loo_table.index
""",
}


@pytest.fixture(scope="module")
def kernel_dir(tmp_path_factory):
    """A kernelspec named ``consensuskit-test`` that runs the current interpreter."""
    d = tmp_path_factory.mktemp("kernels")
    spec_dir = d / "consensuskit-test"
    spec_dir.mkdir()
    spec = {"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "consensuskit test kernel", "language": "python"}
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    return d


def _inject_quick(nb):
    """Insert ``QUICK = True`` right after the cell tagged ``parameters``."""
    tagged = [i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, "each notebook needs exactly one cell tagged 'parameters'"
    assert "QUICK" in nb.cells[tagged[0]].source
    cell = nbformat.v4.new_code_cell("QUICK = True  # injected by tests/test_notebooks.py")
    cell.metadata["tags"] = ["injected-parameters"]
    nb.cells.insert(tagged[0] + 1, cell)
    return nb


def _run(name, kernel_dir, tmp_path, monkeypatch):
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    nb = jupytext.read(NOTEBOOKS / name)
    _inject_quick(nb)
    check = nbformat.v4.new_code_cell(CHECKS[name])
    check.metadata["tags"] = ["test-checks"]
    nb.cells.append(check)
    figures = tmp_path / "figures"
    monkeypatch.setenv("CONSENSUSKIT_FIGURES", str(figures))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    ksm = KernelSpecManager(kernel_dirs=[str(kernel_dir)])
    km = KernelManager(kernel_name="consensuskit-test", kernel_spec_manager=ksm)
    client = nbclient.NotebookClient(nb, km=km, timeout=600,
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    return nb, figures


def _check_png(path):
    import matplotlib.image as mpimg
    import numpy as np

    assert path.exists(), f"{path.name} was not saved"
    assert path.stat().st_size > 10_000, f"{path.name} is only {path.stat().st_size} bytes"
    img = mpimg.imread(path)
    assert img.ndim == 3 and img.shape[0] >= 200 and img.shape[1] >= 300, img.shape
    # not a blank canvas: a real plot has many distinct colours
    colours = np.unique(img[..., :3].reshape(-1, 3).round(2), axis=0)
    assert len(colours) > 20, f"{path.name} looks blank ({len(colours)} colours)"


def _errors(nb):
    return [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
            if o.output_type == "error"]


@pytest.mark.parametrize("name", [
    "01_quickstart.py",
    pytest.param("02_posterior_analysis.py", marks=pytest.mark.slow),
    pytest.param("03_extending_a_model.py", marks=pytest.mark.slow),
])
def test_notebook_executes_and_saves_figures(name, kernel_dir, tmp_path, monkeypatch):
    nb, figures = _run(name, kernel_dir, tmp_path, monkeypatch)
    assert not _errors(nb)
    assert not _warnings(nb), _warnings(nb)
    for fig in EXPECTED_FIGURES[name]:
        _check_png(figures / f"{fig}.png")
    assert nb.cells[-1].execution_count is not None  # the checks cell ran
    # the injected QUICK = True really ran after the parameters cell
    injected = [c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert injected and injected[0].execution_count is not None


WIDGET_WARNINGS = ("IProgress not found", "TqdmWarning", "TqdmExperimentalWarning",
                   "ipywidgets")


def _warnings(nb):
    """tqdm / ipywidgets warnings printed by any cell (e.g. "IProgress not found")."""
    text = " ".join(str(o.get("text", "")) + str(o.get("data", {}).get("text/plain", ""))
                    for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    return [w for w in WIDGET_WARNINGS if w in text]


@pytest.mark.parametrize("name", sorted(EXPECTED_FIGURES))
def test_committed_notebook_is_the_executed_source(name):
    """notebooks/X.ipynb holds the cells of notebooks/X.py, all run, with outputs, no errors."""
    source = jupytext.read(NOTEBOOKS / name)
    committed = nbformat.read(NOTEBOOKS / name.replace(".py", ".ipynb"), as_version=4)
    assert [(c.cell_type, c.source) for c in committed.cells] == \
        [(c.cell_type, c.source) for c in source.cells], f"{name}: run 'make notebooks'"
    code = [c for c in committed.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code), f"{name} was not executed"
    assert [c.execution_count for c in code] == list(range(1, len(code) + 1))
    assert not _errors(committed)
    images = [o for c in code for o in c.outputs if "image/png" in o.get("data", {})]
    assert len(images) >= len(EXPECTED_FIGURES[name])
    assert not _warnings(committed), _warnings(committed)
    assert "parameters" in code[0].metadata.get("tags", [])  # QUICK can be injected
    assert committed.metadata["jupytext"]["formats"] == "ipynb,py:percent"


def test_every_source_has_checks_and_figures():
    sources = {p.name for p in NOTEBOOKS.glob("0*.py")}
    assert sources == set(EXPECTED_FIGURES) == set(CHECKS)
    assert {p.name for p in NOTEBOOKS.glob("0*.ipynb")} == {
        n.replace(".py", ".ipynb") for n in sources}
