"""The consensuskit command line (called in-process through ``main``)."""

import numpy as np
import pandas as pd
import pytest

from consensuskit import cli, reproduce
from consensuskit.base import ConsensusEstimator


class FirstColumn(ConsensusEstimator):
    """Test double: the consensus is the first base clustering, one-hot memberships."""

    def __init__(self, n_clusters=2, random_state=None):
        self.n_clusters = n_clusters
        self.random_state = random_state

    def _fit(self, ensemble):
        codes = ensemble.codes[:, 0]
        self.labels_ = np.where(codes >= 0, codes, 0)
        self.membership_ = np.eye(self.n_clusters)[self.labels_ % self.n_clusters]

    def perplexity(self, X):
        return 1.5


def test_demo_prints_base_partition_quality(capsys):
    assert cli.main(["--quiet", "demo"]) == 0
    out, err = capsys.readouterr()
    assert "20 k-means partitions" in out
    lines = out.splitlines()
    start = lines.index("base partitions") + 2
    rows = [ln.split() for ln in lines[start : start + 20]]
    assert [int(r[0]) for r in rows] == list(range(20))
    mp = np.array([float(r[2]) for r in rows])
    assert ((mp > 0.5) & (mp <= 1.0)).all()
    mean_line = next(ln for ln in lines if ln.startswith("mean"))
    assert float(mean_line.split()[1]) == pytest.approx(mp.mean(), abs=1e-3)
    assert "k-means partitions" not in err  # --quiet: no progress bar


def test_demo_runs_available_models_and_skips_missing(capsys, monkeypatch):
    def missing():
        raise ModuleNotFoundError("no module", name="consensuskit.estimators.notyet")

    models = [("NOTYET", missing), ("FIRST", lambda: FirstColumn(n_clusters=3))]
    monkeypatch.setattr(cli, "CONSENSUS_MODELS", models)
    assert cli.main(["--quiet", "demo", "--n-partitions", "5"]) == 0
    out = capsys.readouterr().out
    assert "NOTYET" not in out
    row = next(ln for ln in out.splitlines() if ln.startswith("FIRST")).split()
    assert int(row[1]) == 3  # clusters found
    assert float(row[6]) == 1.5  # perplexity column
    assert 0.5 < float(row[2]) <= 1.0  # micro-precision of the first base partition


def test_demo_shows_progress_without_quiet(capsys, monkeypatch):
    monkeypatch.setattr(cli, "CONSENSUS_MODELS", [])
    assert cli.main(["demo", "--n-partitions", "3"]) == 0
    assert "k-means partitions" in capsys.readouterr().err


@pytest.fixture
def fake_model(monkeypatch):
    monkeypatch.setattr(cli, "_import_estimator", lambda name: FirstColumn)


@pytest.mark.parametrize("header", [True, False])
def test_fit_writes_consensus_and_memberships(tmp_path, fake_model, header, capsys):
    src = tmp_path / "labels.csv"
    text = "3,1\n3,-1\n7,1\n,0\n7,0\n"  # empty cell and -1 are missing
    src.write_text(("bp0,bp1\n" if header else "") + text)
    dst = tmp_path / "out.csv"
    assert cli.main(["fit", "--model", "mm", "--n-clusters", "2", str(src), "-o", str(dst)]) == 0
    df = pd.read_csv(dst)
    assert list(df.columns) == ["consensus", "p0", "p1"]
    # first column re-coded: 3 -> 0, 7 -> 1, missing -> 0 by the test double
    assert df["consensus"].tolist() == [0, 0, 1, 0, 1]
    np.testing.assert_array_equal(df[["p0", "p1"]].sum(axis=1), 1.0)
    assert "wrote" in capsys.readouterr().err


def test_fit_to_stdout_quiet(tmp_path, fake_model, capsys):
    src = tmp_path / "labels.csv"
    src.write_text("0,1\n1,0\n")
    assert cli.main(["--quiet", "fit", "--model", "bce", "--n-clusters", "2", str(src)]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[0] == "consensus,p0,p1" and err == ""


@pytest.mark.parametrize(
    "content, pattern",
    [
        ("a,b\n0,1\nx,0\n", "line 3, column 1: 'x' is not an integer label"),
        ("0,1\n-1,-1\n1,0\n", "row 1 has no observed label"),
        ("0,1.5\n1,0\n", "not an integer"),
        ("", "is empty"),
    ],
)
def test_fit_bad_input_one_line_error(tmp_path, fake_model, capsys, content, pattern):
    src = tmp_path / "labels.csv"
    src.write_text(content)
    assert cli.main(["fit", "--model", "mm", "--n-clusters", "2", str(src)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and pattern in err
    assert "\n" not in err and "Traceback" not in err


def test_fit_missing_file_and_too_many_clusters(tmp_path, fake_model, capsys):
    assert cli.main(["fit", "--model", "mm", "--n-clusters", "2", str(tmp_path / "no.csv")]) == 2
    assert "file not found" in capsys.readouterr().err
    src = tmp_path / "labels.csv"
    src.write_text("0\n1\n")
    assert cli.main(["fit", "--model", "mm", "--n-clusters", "5", str(src)]) == 2
    assert "exceeds the 2 rows" in capsys.readouterr().err


def test_fit_unavailable_model(tmp_path, monkeypatch, capsys):
    def unavailable(name):
        raise ModuleNotFoundError("No module named 'consensuskit.estimators.x'")

    monkeypatch.setattr(cli, "_import_estimator", unavailable)
    src = tmp_path / "labels.csv"
    src.write_text("0,1\n1,0\n")
    assert cli.main(["fit", "--model", "qmi", "--n-clusters", "2", str(src)]) == 2
    assert "model 'qmi' (QMI) is not available" in capsys.readouterr().err


def test_fit_rejects_unknown_model_name(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["fit", "--model", "nope", "--n-clusters", "2", "x.csv"])
    assert exc.value.code == 2


def test_reproduce_unknown_lists_names(capsys, monkeypatch):
    monkeypatch.setattr(reproduce, "REGISTRY", {})
    monkeypatch.setattr(reproduce, "discover", lambda: None)
    reproduce.register("toy-table", description="a toy")(lambda progress=True: 0)
    assert cli.main(["reproduce", "nothing-here"]) == 2
    out, err = capsys.readouterr()
    assert "no reproduction called 'nothing-here'" in err
    assert "toy-table  a toy" in out
    assert cli.main(["reproduce"]) == 0


def test_reproduce_runs_registered_function(capsys, monkeypatch):
    monkeypatch.setattr(reproduce, "REGISTRY", {})
    monkeypatch.setattr(reproduce, "discover", lambda: None)
    calls = []

    @reproduce.register("toy")
    def toy(progress=True):
        calls.append(progress)
        print("toy table")
        return 3

    assert cli.main(["--quiet", "reproduce", "toy"]) == 3
    assert calls == [False]
    assert "toy table" in capsys.readouterr().out
    with pytest.raises(ValueError, match="already registered"):
        reproduce.register("toy")(lambda progress=True: 0)


def test_reproduce_discovers_submodules():
    reproduce.discover()  # importing whatever reproductions exist must not fail
    assert reproduce.available() == sorted(reproduce.REGISTRY)
