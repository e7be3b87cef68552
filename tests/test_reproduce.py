"""Paper reproductions: every experiment runs from the CLI and writes its files.

The default suite runs each experiment in ``--smoke`` mode (tiny sizes) on a
subset of its parts; the real ``--quick`` runs (a few minutes each) are marked
``slow``: ``pytest -m slow tests/test_reproduce.py``.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import reproduce
from consensuskit.cli import commands as cli
from reproduce import _common

EXPERIMENTS = ["bce", "nbce", "pcc", "mm", "kcc"]

# parts run by the fast smoke tests (the whole of each experiment runs in the slow tests)
SMOKE_PARTS = {
    "bce": "table3,table4,fig4",
    "nbce": "table3,table7",
    "pcc": "soft,type1",
    "mm": "table7,table8",
    "kcc": "table4,table11_12",  # table9_10: test_kcc_tables_6_10_share_one_fit
}


def _check_outputs(out: Path, name: str, with_paper: bool = True):
    md = out / f"{name}.md"
    csv = out / f"{name}.csv"
    assert md.is_file() and csv.is_file()
    text = md.read_text()
    assert f"consensuskit reproduce {name}" in text  # how the numbers were obtained
    df = pd.read_csv(csv)
    for col in ("part", "dataset", "method", "metric", "ours", "paper", "difference",
                "repeats"):
        assert col in df.columns
    assert len(df) > 0
    assert np.isfinite(df["ours"].astype(float)).any()
    both = df.dropna(subset=["ours", "paper"])
    # figure-only parts (the paper gives a plot, no numbers) pass with_paper=False
    assert len(both) > 0 or not with_paper, "no number is shown beside the paper's"
    np.testing.assert_allclose(both["difference"], both["ours"] - both["paper"], atol=1e-12)
    pngs = sorted(out.glob(f"{name}_*.png"))
    assert pngs, "no figure written"
    for p in pngs:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert p.name in text  # linked from the report
    return text, df


def test_all_experiments_are_registered():
    names = reproduce.available()
    for name in EXPERIMENTS:
        assert name in names
        assert reproduce.get(name).description


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_smoke_from_cli(name, tmp_path):
    status = cli.main(["--quiet", "reproduce", name, "--smoke", "--only", SMOKE_PARTS[name],
                       "--out", str(tmp_path)])
    assert status == 0
    text, df = _check_outputs(tmp_path, name)
    assert "--smoke" in text and "mode: **smoke**" in text


def test_bce_smoke_tables(tmp_path):
    assert cli.main(["--quiet", "reproduce", "bce", "--smoke", "--only", "table3,table4",
                     "--out", str(tmp_path)]) == 0
    df = pd.read_csv(tmp_path / "bce.csv")
    t3 = df[df.part == "table3b"]
    # iris average MP of BCE is shown beside the paper's 0.8911
    row = t3[(t3.dataset == "iris") & (t3.method == "BCE")].iloc[0]
    assert row.paper == pytest.approx(0.8911)
    assert 0.3 <= row.ours <= 1.0
    t4 = df[(df.part == "table4") & (df.metric == "Mean-D")]
    mm = t3[(t3.dataset == "iris") & (t3.method == "MM")].ours.iloc[0]
    # Mean-D is the mean paired difference, i.e. the difference of the averages
    assert t4[t4.dataset == "iris"].ours.iloc[0] == pytest.approx(mm - row.ours, abs=1e-12)


def test_bce_smoke_distributed_figs(tmp_path):
    """Figs. 5-6 through real worker processes (about 15 s: process start-up)."""
    assert cli.main(["--quiet", "reproduce", "bce", "--smoke", "--only", "fig5,fig6",
                     "--out", str(tmp_path)]) == 0
    text, df = _check_outputs(tmp_path, "bce", with_paper=False)
    assert "bce_fig5_row_distributed.png" in text and "bce_fig6_column_time.png" in text
    f5 = df[df.part == "fig5"]
    assert set(f5.n_processes) == {1, 2}
    assert ((f5.ours >= 0.3) & (f5.ours <= 1.0)).all()
    exact = f5[f5.method == "row-distributed BCE (exact)"].set_index("n_processes").ours
    # exact row-distributed EM is the single-process algorithm (up to summation order):
    # at most a near-tied point of iris (N = 150) may change its label
    assert abs(exact[2] - exact[1]) <= 1 / 150 + 1e-12
    f6 = df[df.part == "fig6"]
    assert set(f6.n_columns) == {10, 20}
    assert (f6.ours > 0).all()
    assert "cores shared with other jobs" in text


def test_only_rejects_unknown_parts(tmp_path, capsys):
    assert cli.main(["reproduce", "bce", "--smoke", "--only", "table99",
                     "--out", str(tmp_path)]) == 2
    assert "unknown part" in capsys.readouterr().err


def test_quick_and_smoke_are_exclusive(tmp_path):
    with pytest.raises(SystemExit):
        cli.main(["reproduce", "bce", "--smoke", "--quick", "--out", str(tmp_path)])


def test_options_reach_only_functions_that_take_them(monkeypatch, tmp_path):
    monkeypatch.setattr(reproduce, "REGISTRY", {})
    monkeypatch.setattr(reproduce, "discover", lambda: None)
    seen = {}

    @reproduce.register("old-style")
    def old(progress=True):
        seen["old"] = progress
        return 0

    @reproduce.register("new-style")
    def new(*, progress=True, mode="full", out="results", seed=0):
        seen["new"] = (progress, mode, out, seed)
        return 0

    assert cli.main(["--quiet", "reproduce", "old-style", "--quick"]) == 0
    assert cli.main(["reproduce", "new-style", "--quick", "--seed", "7",
                     "--out", str(tmp_path)]) == 0
    assert seen == {"old": False, "new": (True, "quick", str(tmp_path), 7)}


# -- helpers ---------------------------------------------------------------------------
def test_report_writes_table_and_difference(tmp_path):
    rep = _common.Report("toy", "Toy", "smoke", 3, str(tmp_path), argv=["--smoke"])
    rep.add_row("t1", "iris", "BCE", "MP", 0.9, 0.8911, repeats=4)
    rep.add_row("t1", "iris", "MM", "MP", 0.5, None, repeats=4)
    rep.add_section("Part", _common.markdown_table(["a", "b"], [[1, 2]]))
    md, csv = rep.write()
    df = pd.read_csv(csv)
    assert df.difference.iloc[0] == pytest.approx(0.9 - 0.8911)
    assert math.isnan(df.difference.iloc[1])
    text = Path(md).read_text()
    assert "`consensuskit reproduce toy --smoke`" in text and "| a | b |" in text


def test_parse_only_and_seeds():
    assert _common.parse_only(None, ("a", "b")) == ["a", "b"]
    assert _common.parse_only("b, a", ("a", "b")) == ["b", "a"]
    with pytest.raises(ValueError, match="unknown part"):
        _common.parse_only("c", ("a", "b"))
    assert _common.seeds(0, "x", 1) == _common.seeds(0, "x", 1)
    assert _common.seeds(0, "x", 1) != _common.seeds(0, "x", 2)
    assert _common.seeds(0, "segmentation") != _common.seeds(0, "segmentation_2310")
    with pytest.raises(ValueError, match="mode"):
        _common.check_mode("huge")


def test_nbce_synthetic_noise_fraction():
    from reproduce.nbce import synthetic

    X, truth = synthetic(200, 10, 0.15, seed=1)
    assert X.shape == (210, 10) and truth.shape == (210,)
    assert len(np.unique(truth)) == 12  # two clusters + ten singleton outliers
    for j in range(X.shape[1]):
        # relabel the column back through its majority mapping and count changes
        col = X[:, j]
        mapping = {}
        for t in np.unique(truth):
            vals, counts = np.unique(col[truth == t], return_counts=True)
            mapping[t] = vals[np.argmax(counts)] if t < 2 else None
        inl = truth < 2
        changed = np.mean(col[inl] != np.array([mapping[t] for t in truth[inl]]))
        assert 0.08 <= changed <= 0.22  # ~15 % of the rows changed (binomial spread)


def test_nbce_real_ensemble_cluster_counts():
    from reproduce.nbce import real_ensemble

    rng = np.random.RandomState(0)
    F = rng.standard_normal((120, 3))
    X = real_ensemble(F, 4, seed=0)
    assert X.shape == (120, 10)
    ks = sorted(len(np.unique(X[:, j])) for j in range(10))
    assert ks == [2, 2, 3, 3, 4, 4, 6, 6, 8, 8]  # 50/75/100/150/200 % of 4 classes


def test_pcc_soft_gaussians_and_tables():
    from reproduce.pcc import COLUMNS, TABLES, soft_gaussians

    Z, L = soft_gaussians(30, 50, seed=0)
    assert Z.shape == (120, 4) and L.shape == (120, 50)
    np.testing.assert_allclose(Z.sum(axis=1), 1.0)
    # sampled labels follow Z: empirical frequencies close to the soft truth
    freq = np.stack([(L == k).mean(axis=1) for k in range(4)], axis=1)
    assert np.abs(freq - Z).mean() < 0.06
    # every transcribed table has 9 columns per row and the expected methods
    for t in (4, 5, 6, 7):
        assert set(TABLES[t]) == {"PCC-KL", "PCC-L2", "QMI", "MM", "HBGF", "EAC-SL",
                                  "EAC-AL", "EAC-WL", "CSPA"}
        for stats in TABLES[t].values():
            for values in stats.values():
                assert len(values) == len(COLUMNS)
                assert all(-1.0 <= v <= 1.0 for v in values)


def test_kcc_rps_partition_range():
    from reproduce.kcc import rps_partitions

    F = np.random.RandomState(1).standard_normal((100, 2))
    X = rps_partitions(F, 3, 12, seed=0)
    ks = [len(np.unique(X[:, j])) for j in range(12)]
    assert min(ks) >= 3 and max(ks) <= 10  # k in [K, ceil(sqrt(n))]


def test_kcc_tables_6_10_share_one_fit(monkeypatch, tmp_path):
    """Tables 6-10 evaluate one fit per method; VI_n / VD_n take the best (smallest)
    graph partitioner, CA / NMI / R_n the largest."""
    from consensuskit.data.datasets import load
    from consensuskit.evaluation import metrics
    from reproduce import _methods, kcc

    _, y = load("iris")
    bad = np.arange(len(y)) % 3  # unrelated to the classes
    calls, kcc_labels = [], []

    def fake_consensus(method, X, K, seed):  # the graph partitioners and MM, cheaply
        calls.append(method)
        return y.copy() if method == "CSPA" else bad

    real_kcc = kcc._kcc

    class CountingKCC:
        def __init__(self, utility, K, seed):
            self.est = real_kcc(utility, K, seed)

        def fit(self, X):
            self.labels_ = self.est.fit(X).labels_
            kcc_labels.append(self.labels_)
            return self

    monkeypatch.setattr(_methods, "consensus_labels", fake_consensus)
    monkeypatch.setattr(kcc, "_kcc", CountingKCC)
    monkeypatch.setattr(kcc, "_eac_single", lambda X, K: bad)
    assert kcc.run(progress=False, mode="smoke", out=str(tmp_path),
                   only="table6_8,table9_10") == 0
    assert sorted(calls) == ["CSPA", "HGPA", "MCLA", "MM"]  # one run, one fit each
    assert len(kcc_labels) == 1
    df = pd.read_csv(tmp_path / "kcc.csv").set_index(["part", "method", "metric"])
    assert set(df.index.get_level_values("part")) == {f"table{t}" for t in range(6, 11)}
    ours = {"CA": metrics.accuracy, "NMI": metrics.nmi, "Rn": metrics.adjusted_rand,
            "VIn": metrics.normalized_variation_of_information, "VDn": metrics.van_dongen}
    for k, f in ours.items():
        part = f"table{kcc.TABLE_OF[k]}"
        row = df.loc[(part, "KCC-UH", k)]
        assert row.ours == pytest.approx(f(y, kcc_labels[0]), abs=1e-12)  # the same fit
        best = df.loc[(part, "best of CSPA/HGPA/MCLA", k)].ours
        assert best == pytest.approx(0.0 if k in kcc.LOWER_IS_BETTER else 1.0, abs=1e-12)
    # the paper's iris numbers (KCC, ClusterEnsemble, LinkCluE) sit beside ours
    assert df.loc[("table9", "KCC-UH", "VIn")].paper == pytest.approx(0.2064)
    assert df.loc[("table10", "best of CSPA/HGPA/MCLA", "VDn")].paper == pytest.approx(0.0404)
    assert df.loc[("table10", "EAC-SL", "VDn")].paper == pytest.approx(0.2814)
    text = (tmp_path / "kcc.md").read_text()
    assert "Table 9: VIn" in text and "Table 10: VDn" in text and "Lower is better" in text


# -- the real quick runs (minutes each) ----------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("name", EXPERIMENTS)
def test_quick_from_cli(name, tmp_path):
    assert cli.main(["--quiet", "reproduce", name, "--quick", "--out", str(tmp_path)]) == 0
    _check_outputs(tmp_path, name)


@pytest.mark.slow
@pytest.mark.parametrize("name", EXPERIMENTS)
def test_smoke_all_parts(name, tmp_path):
    assert cli.main(["--quiet", "reproduce", name, "--smoke", "--out", str(tmp_path)]) == 0
    _check_outputs(tmp_path, name)


def test_repeats_overrides_the_mode(tmp_path):
    assert cli.main(["--quiet", "reproduce", "bce", "--smoke", "--repeats", "3", "--only",
                     "table3", "--out", str(tmp_path)]) == 0
    df = pd.read_csv(tmp_path / "bce.csv")
    assert set(df.repeats) == {3}
    assert "--repeats 3" in (tmp_path / "bce.md").read_text()
    with pytest.raises(SystemExit):
        cli.main(["reproduce", "bce", "--repeats", "0"])


def test_bce_kdd99_part_needs_data(tmp_path, capsys):
    assert cli.main(["reproduce", "bce", "--smoke", "--only", "kdd99",
                     "--out", str(tmp_path)]) == 2
    assert "--data" in capsys.readouterr().err


@pytest.mark.parametrize("paper", EXPERIMENTS)
def test_paper_tables_are_data_files(paper):
    """Each paper's published tables load from reproduce/tables/<paper>.json: every table
    has rows, its rows one length (PCC: one value per column of COLUMNS), and every
    value is a number or missing."""
    tables = _common.paper_tables(paper)
    assert tables
    assert (_common.TABLES_DIR / f"{paper}.json").is_file()
    for name, rows in tables.items():
        assert rows, f"{paper} {name} has no rows"
        if paper == "pcc":
            from reproduce import pcc

            cells = [v for stats in rows.values() for v in stats.values()]
            assert {len(v) for v in cells} == {len(pcc.COLUMNS)}, name
        else:
            cells = list(rows.values())
            assert len({len(v) for v in cells}) == 1, f"{paper} {name}: ragged rows"
        assert all(x is None or isinstance(x, (int, float)) for v in cells for x in v)


def test_reproduce_help_lists_its_options(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["reproduce", "--help"])
    assert exc.value.code == 0
    assert "--smoke" in capsys.readouterr().out


def test_reproduce_without_a_checkout_says_what_it_needs(tmp_path):
    """An installation without the repository's reproduce/ (a wheel): a clear error, not a
    traceback.  A copy of the package alone, run from a folder without reproduce/."""
    import shutil
    import subprocess
    import sys

    import consensuskit

    site = tmp_path / "site"
    shutil.copytree(Path(consensuskit.__file__).parent, site / "consensuskit",
                    ignore=shutil.ignore_patterns("__pycache__", "*.csv.gz"))
    run = subprocess.run(
        [sys.executable, "-c", "import sys; from consensuskit.cli.commands import main; "
         "sys.exit(main(['reproduce', 'pcc', '--smoke']))"],
        cwd=tmp_path, env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=300)
    assert run.returncode != 0
    assert "needs a checkout of the consensuskit repository" in run.stderr
    assert "Traceback" not in run.stderr
