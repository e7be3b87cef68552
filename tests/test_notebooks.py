"""Execute the tutorial notebooks in quick mode and check the figures they save.

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
pytest.importorskip("ipykernel")

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"

EXPECTED_FIGURES = {
    "01_quickstart.ipynb": ["quickstart_comparison"],
    "02_posterior_analysis.ipynb": ["posterior_trace", "posterior_n_clusters",
                                    "posterior_coclustering", "posterior_uncertain_points"],
    "03_extending_a_model.ipynb": ["extending_reliability", "extending_perplexity"],
}

# Test-owned checks appended as a last cell: they run in the notebook's namespace
# and assert on its results (not only that it ran).
CHECKS = {
    "01_quickstart.ipynb": """
assert len(table) == 12 and set(GENERATIVE) <= set(table.index), table.index
gen_ppl = table.loc[sorted(GENERATIVE), ["perplexity (train)", "perplexity (held-out)"]]
assert np.isfinite(gen_ppl.to_numpy()).all() and (gen_ppl.to_numpy() >= 1).all(), gen_ppl
# every base clustering has 2..6 labels, so a useful model is well below 6
assert (gen_ppl.to_numpy() < 3).all(), gen_ppl
assert table[scores].to_numpy().min() >= -1 and table[scores].to_numpy().max() <= 1
assert table.loc["BCE", "accuracy"] > 0.7 and table.loc["MM", "accuracy"] > 0.7, table
""",
    "02_posterior_analysis.ipynb": """
assert {"r_hat", "ess_bulk"} <= set(summary.columns)
assert set(summary.index) == set(var_names) and np.isfinite(summary["ess_bulk"]).all()
assert abs(counts.sum() - 1) < 1e-12 and (counts.index >= 1).all()
assert P.shape == (150, 150) and np.allclose(P, P.T) and np.allclose(np.diag(P), 1)
assert ((doubt >= 0) & (doubt <= 1)).all() and (row_entropy >= 0).all()
# the setosa rows are clustered together with near certainty
setosa = truth == truth[0]
assert P[np.ix_(setosa, setosa)].mean() > 0.9
""",
    "03_extending_a_model.ipynb": """
ref_ppl, ref_se = bce_cavi_model.perplexity(ens_test.codes, return_se=True, unknown="missing")
own_ppl, own_se = perplexity_is(bce_cavi_model.alpha_, bce_cavi_model.beta_, ens_test)
assert abs(own_ppl - ref_ppl) < 0.01 * ref_ppl, (own_ppl, ref_ppl)
assert np.isfinite(comparison[["train", "held-out"]].to_numpy()).all()
assert (comparison[["train", "held-out"]].to_numpy() >= 1).all()
# reliabilities: clean clusterings near 1, pure noise low, ordered like the accuracies
assert rho[noise_level == 0].min() > 0.9, rho
assert rho[noise_level == 1].max() < 0.4, rho
assert pd.Series(rho).corr(pd.Series(column_accuracy), method="spearman") > 0.7
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

    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
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
    "01_quickstart.ipynb",
    pytest.param("02_posterior_analysis.ipynb", marks=pytest.mark.slow),
    pytest.param("03_extending_a_model.ipynb", marks=pytest.mark.slow),
])
def test_notebook_executes_and_saves_figures(name, kernel_dir, tmp_path, monkeypatch):
    nb, figures = _run(name, kernel_dir, tmp_path, monkeypatch)
    assert not _errors(nb)
    for fig in EXPECTED_FIGURES[name]:
        _check_png(figures / f"{fig}.png")
    assert nb.cells[-1].execution_count is not None  # the checks cell ran
    # the injected QUICK = True really ran after the parameters cell
    injected = [c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert injected and injected[0].execution_count is not None


def test_notebooks_are_generated_and_cleared():
    """The committed notebooks equal the generator's output (no stale code, no outputs)."""
    sys.path.insert(0, str(ROOT / "experiments"))
    try:
        import build_notebooks
    finally:
        sys.path.pop(0)
    for name, nb in build_notebooks.notebooks().items():
        on_disk = nbformat.read(NOTEBOOKS / name, as_version=4)
        assert nbformat.writes(on_disk) == nbformat.writes(nb), f"{name} is stale"
        for cell in on_disk.cells:
            if cell.cell_type == "code":
                assert cell.outputs == [] and cell.execution_count is None
    assert set(EXPECTED_FIGURES) == set(build_notebooks.notebooks()) == set(CHECKS)
