"""The consensuskit command line (called in-process through ``main``)."""

import numpy as np
import pandas as pd
import pytest

import reproduce
from consensuskit.base import ConsensusEstimator
from consensuskit.cli import commands as cli
from consensuskit.cli import demo


class FirstColumn(ConsensusEstimator):
    """Test double: the consensus is the first base clustering, one-hot memberships.

    Parameters
    ----------
    n_clusters : int, default 2
        Number of clusters.
    """

    def __init__(self, n_clusters=2, random_state=None):
        self.n_clusters = n_clusters
        self.random_state = random_state

    def _fit(self, ensemble):
        codes = ensemble.codes[:, 0]
        self.labels_ = np.where(codes >= 0, codes, 0)
        self.membership_ = np.eye(self.n_clusters)[self.labels_ % self.n_clusters]

    def perplexity(self, X, return_se=False, unknown="error"):
        return (1.5, 0.0) if return_se else 1.5


def _fit(*args):
    return cli.main(["fit", *map(str, args)])


def _error(capsys):
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err, err
    return err


def test_demo_prints_base_partition_quality(capsys, tmp_path):
    assert cli.main(["--quiet", "demo", "--figure", str(tmp_path / "demo.png")]) == 0
    out, err = capsys.readouterr()
    assert "20 k-means partitions" in out
    lines = out.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("base partitions")) + 2
    rows = [ln.split() for ln in lines[start : start + 20]]
    assert [int(r[0]) for r in rows] == list(range(20))
    mp = np.array([float(r[2]) for r in rows])
    assert ((mp > 0.5) & (mp <= 1.0)).all()
    mean_line = next(ln for ln in lines if ln.startswith("mean"))
    assert float(mean_line.split()[1]) == pytest.approx(mp.mean(), abs=1e-3)
    assert "k-means partitions" not in err  # --quiet: no progress bar


def test_demo_runs_available_models_skips_missing_and_draws_figure(capsys, monkeypatch,
                                                                  tmp_path):
    import matplotlib.image as mpimg

    def missing():
        raise ModuleNotFoundError("no module", name="consensuskit.estimators.notyet")

    models = [("NOTYET", missing), ("FIRST", lambda: FirstColumn(n_clusters=3))]
    monkeypatch.setattr(demo, "CONSENSUS_MODELS", models)
    figure = tmp_path / "sub" / "demo.png"
    figure.parent.mkdir()
    assert cli.main(["demo", "--n-partitions", "5", "--figure", str(figure), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "NOTYET" not in out
    row = next(ln for ln in out.splitlines() if ln.startswith("FIRST")).split()
    assert int(row[1]) == 3  # clusters found
    assert row[6:9] == ["1.5000", "±", "0.0000"]  # held-out perplexity ± SE
    assert 0.5 < float(row[2]) <= 1.0  # micro-precision of the first base partition
    assert f"wrote the figure to {figure}" in out
    img = mpimg.imread(figure)
    assert img.shape[0] > 300 and img.shape[1] > 800
    assert len(np.unique(img[..., :3].reshape(-1, 3).round(2), axis=0)) > 20  # not blank


def test_demo_shows_progress_without_quiet(capsys, monkeypatch):
    monkeypatch.setattr(demo, "CONSENSUS_MODELS", [])
    assert cli.main(["demo", "--n-partitions", "3", "--no-figure"]) == 0
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
    assert _fit("--model", "mm", "--n-clusters", "2", src, "-o", dst) == 0
    df = pd.read_csv(dst)
    assert list(df.columns) == ["consensus", "p0", "p1"]
    # first column re-coded: 3 -> 0, 7 -> 1, missing -> 0 by the test double
    assert df["consensus"].tolist() == [0, 0, 1, 0, 1]
    np.testing.assert_array_equal(df[["p0", "p1"]].sum(axis=1), 1.0)
    err = capsys.readouterr().err
    assert "wrote" in err and ("header on line 1" if header else "no header line") in err


# -- the CLI points of issue [5 of 5], "Found", one test each ------------------------------

ID_FILE = "id,a,b\n" + "".join(f"{100 + i},{i % 3},{(i // 2) % 3}\n" for i in range(9))


def test_found_id_column_is_an_error_that_says_what_to_do(tmp_path, fake_model, capsys):
    src = tmp_path / "labels.csv"
    src.write_text(ID_FILE)
    assert _fit("--model", "mm", "--n-clusters", "2", src) == 2
    err = _error(capsys)
    assert "column 1 ('id') has a different value on each of its 9 lines" in err
    assert "--index-col id" in err and "--allow-singletons" in err
    # monotone integers without a header: also refused, and the hint gives the number
    src.write_text("".join(f"{i},{i % 3}\n" for i in range(8)))
    assert _fit("--model", "mm", "--n-clusters", "2", src) == 2
    err = _error(capsys)
    assert "column 1 has a different value on each of its 8 lines" in err
    assert "--index-col 1 " in err
    # the escape hatch accepts a real clustering into singletons
    assert _fit("--model", "mm", "--n-clusters", "2", src, "--allow-singletons", "-q") == 0


@pytest.mark.parametrize("text, line, fields", [
    ("0,1,2\n1,0\n2,2,1\n", 2, 2),  # short row: was silently a missing label
    ("0,1,2\n1,0,1\n2,2,1,0\n", 3, 4),  # long row
])
def test_found_ragged_row_is_an_error_naming_its_line(tmp_path, fake_model, capsys, text, line,
                                                      fields):
    src = tmp_path / "labels.csv"
    src.write_text(text)
    assert _fit("--model", "mm", "--n-clusters", "2", src) == 2
    err = _error(capsys)
    assert f"line {line} has {fields} field(s) but line 1 has 3" in err and "-1" in err


def _recording(cls):
    """A subclass of ``cls`` whose fit only records its parameters (same options, same doc)."""
    seen = {}

    class Recording(cls):
        __doc__ = cls.__doc__

        def fit(self, X, y=None, **kwargs):
            seen.update(self.get_params())
            n = X.n_samples
            self.labels_ = np.arange(n) % 2
            self.membership_ = np.eye(2)[self.labels_]
            return self

    Recording.__name__ = cls.__name__
    return Recording, seen


@pytest.mark.parametrize("model, options, expected", [
    ("nbce", ["--prior", "fsd", "--n-chains", "3", "--truncation", "7", "--no-update-hyper",
              "--inference", "cvb", "--beta", "0.25"],
     {"prior": "fsd", "n_chains": 3, "truncation": 7, "update_hyper": False,
      "inference": "cvb", "beta": 0.25}),
    ("bce", ["--n-clusters", "2", "--inference", "svi", "--batch-size", "16", "--n-init", "2"],
     {"inference": "svi", "batch_size": 16, "n_init": 2, "n_clusters": 2}),
    ("kcc", ["--n-clusters", "2", "--utility", "NUH", "--weights", "0.5,1.5"],
     {"utility": "NUH", "weights": [0.5, 1.5]}),
])
def test_found_model_options_reach_the_estimator(tmp_path, monkeypatch, capsys, model, options,
                                                 expected):
    import consensuskit as ck

    cls, seen = _recording(getattr(ck, cli.MODEL_CLASSES[model]))
    monkeypatch.setattr(cli, "_import_estimator", lambda name: cls)
    src = tmp_path / "labels.csv"
    src.write_text("0,1\n1,0\n0,0\n1,1\n")
    assert _fit("--model", model, src, *options, "-q") == 0, capsys.readouterr().err
    assert {k: seen[k] for k in expected} == expected
    assert seen["random_state"] == 0


@pytest.mark.parametrize("model", sorted(cli.MODEL_CLASSES))
def test_every_hyper_parameter_is_an_option(model, capsys):
    import inspect

    import consensuskit as ck
    from consensuskit.cli.options import EXCLUDED

    cls = getattr(ck, cli.MODEL_CLASSES[model])
    with pytest.raises(SystemExit):
        cli.main(["fit", "--model", model, "--help"])
    text = capsys.readouterr().out
    for name in inspect.signature(cls.__init__).parameters:
        if name != "self" and name not in EXCLUDED:
            assert "--" + name.replace("_", "-") in text, name


def test_gbce_reads_features_split_like_the_labels(tmp_path, monkeypatch, capsys):
    import consensuskit as ck

    cls, seen = _recording(ck.GBCE)
    received = {}
    fit = cls.fit

    def fit_with_features(self, X, y=None, features=None, **kwargs):
        received["features"] = features
        return fit(self, X, y)

    cls.fit = fit_with_features
    monkeypatch.setattr(cli, "_import_estimator", lambda name: cls)
    src = tmp_path / "labels.csv"
    src.write_text("0,1\n1,0\n0,0\n1,1\n")
    feats = tmp_path / "features.csv"
    feats.write_text("a,b\n0.5,1\n1.5,2\n2.5,\n3.5,4\n")  # empty = missing feature
    assert _fit("--model", "gbce", "--n-clusters", "2", src, "--features", feats, "-q") == 0
    F = received["features"]
    assert F.shape == (4, 2) and np.isnan(F[2, 1]) and F[3, 0] == 3.5
    capsys.readouterr()
    assert _fit("--model", "gbce", "--n-clusters", "2", src) == 0  # no features: says so
    assert "GBCE without --features: no feature columns" in capsys.readouterr().err
    assert received["features"] is None
    feats.write_text("0.5,1\n1.5,2\n")
    assert _fit("--model", "gbce", "--n-clusters", "2", src, "--features", feats) == 2
    assert "has 2 lines of features but the label file has 4" in _error(capsys)
    feats.write_text("0.5,1\n1.5,x\n2,2\n3,3\n")
    assert _fit("--model", "gbce", "--n-clusters", "2", src, "--features", feats) == 2
    assert "features.csv: line 2, column 2: 'x' is not a finite number" in _error(capsys)
    feats.write_text("0.5,\n1.5,NA\n2,\n3,\n")
    assert _fit("--model", "gbce", "--n-clusters", "2", src, "--features", feats) == 2
    assert "features.csv: column 2 has no feature value" in _error(capsys)


def test_estimator_warnings_print_as_one_line_even_when_quiet(tmp_path, monkeypatch, capsys):
    import warnings

    class Warns(FirstColumn):
        def _fit(self, ensemble):
            warnings.warn("something the user should know", RuntimeWarning, stacklevel=2)
            super()._fit(ensemble)

    monkeypatch.setattr(cli, "_import_estimator", lambda name: Warns)
    src = tmp_path / "labels.csv"
    src.write_text("0,1\n1,0\n")
    assert _fit("--model", "mm", "--n-clusters", "2", src, "-q", "-o", tmp_path / "o.csv") == 0
    err = capsys.readouterr().err
    assert err == "warning: something the user should know (RuntimeWarning)\n"


def test_nbce_rejects_n_clusters_with_a_pointer_to_truncation(tmp_path, capsys):
    src = tmp_path / "labels.csv"
    src.write_text("0,1\n1,0\n")
    assert _fit("--model", "nbce", "--n-clusters", "3", src) == 2
    assert "--truncation sets its upper bound" in _error(capsys)



@pytest.mark.parametrize("model", ["pcc", "bce", "resampling"])
def test_missing_n_clusters_is_reported_with_the_fit_usage(tmp_path, capsys, model):
    src = tmp_path / "labels.csv"
    src.write_text("0,1\n1,0\n")
    with pytest.raises(SystemExit) as stop:
        _fit("--model", model, src)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: consensuskit fit ")
    assert f"consensuskit fit: error: --n-clusters is required for --model {model}" in err

def _labels_file(tmp_path, n=60, seed=0, name="labels.csv"):
    rng = np.random.default_rng(seed)
    truth = np.arange(n) % 3
    X = np.column_stack([np.where(rng.random(n) < 0.85, truth, rng.integers(0, 3, n))
                         for _ in range(6)])
    src = tmp_path / name
    pd.DataFrame(X, columns=[f"bp{j}" for j in range(6)]).to_csv(src, index=False)
    return src, X


def test_found_heldout_fraction_reports_perplexity_with_se(tmp_path, capsys):
    from consensuskit import MM
    from consensuskit.evaluation.heldout import split_rows

    src, X = _labels_file(tmp_path)
    dst = tmp_path / "out.csv"
    assert _fit("--model", "mm", "--n-clusters", "3", src, "--heldout-fraction", "0.25",
                "-o", dst, "--quiet", "--random-state", "4") == 0
    err = capsys.readouterr().err.strip()
    assert err.startswith("held-out perplexity on 15 held-out rows (0.25 of")
    ppl, se = (float(v) for v in err.split(": ")[1].split(" (")[0].split(" ± "))
    train, test = split_rows(60, 0.25, 4)
    mm = MM(3, random_state=4).fit(X[train])
    assert ppl == pytest.approx(mm.perplexity(X[test]), abs=1e-4)  # MM: exact likelihood
    assert 0 < se < ppl - 1
    df = pd.read_csv(dst)
    assert (df["split"] == "heldout").sum() == 15 and (df.index[df["split"] == "heldout"]
                                                      == test).all()
    np.testing.assert_array_equal(df.loc[test, "consensus"], mm.predict(X[test]))


def test_found_heldout_file_and_unknown_labels(tmp_path, capsys):
    src, _ = _labels_file(tmp_path)
    other, X = _labels_file(tmp_path, n=30, seed=1, name="test.csv")
    assert _fit("--model", "mm", "--n-clusters", "3", src, "--heldout", other, "-q",
                "-o", tmp_path / "o.csv") == 0
    assert capsys.readouterr().err.startswith(f"held-out perplexity on {other}: ")
    text = other.read_text().splitlines()
    text[4] = "7," + text[4].split(",", 1)[1]  # a label training never showed
    other.write_text("\n".join(text) + "\n")
    assert _fit("--model", "mm", "--n-clusters", "3", src, "--heldout", other, "-q") == 2
    err = _error(capsys)
    assert "test.csv: line 5, column 1 ('bp0'): label 7 never occurs" in err
    assert "--unknown-labels missing" in err
    assert _fit("--model", "mm", "--n-clusters", "3", src, "--heldout", other, "-q",
                "--unknown-labels", "missing", "-o", tmp_path / "o.csv") == 0
    assert "1 label(s) never seen in training counted as missing" in capsys.readouterr().err


def test_found_heldout_needs_a_generative_model(tmp_path, capsys):
    src, _ = _labels_file(tmp_path)
    assert _fit("--model", "kcc", "--n-clusters", "3", src, "--heldout-fraction", "0.2") == 2
    assert "needs a generative model" in _error(capsys)


@pytest.mark.parametrize("col", ["name", "2"])
def test_found_index_column(tmp_path, fake_model, col, capsys):
    src = tmp_path / "labels.csv"
    src.write_text("a,name,b\n0,p,1\n0,q,1\n1,r,0\n1,s,0\n1,t,1\n")
    dst = tmp_path / "out.csv"
    assert _fit("--model", "mm", "--n-clusters", "2", src, "--index-col", col, "-o", dst,
                "-q") == 0
    df = pd.read_csv(dst)
    assert list(df.columns) == ["name", "consensus", "p0", "p1"]
    assert df["name"].tolist() == list("pqrst") and df["consensus"].tolist() == [0, 0, 1, 1, 1]
    assert _fit("--model", "mm", "--n-clusters", "2", src, "--index-col", "nope") == 2
    assert "--index-col 'nope' is not a column" in _error(capsys)


@pytest.mark.parametrize("argv", [
    ["--quiet", "fit", "--model", "bce", "--n-clusters", "2", "SRC"],
    ["fit", "--quiet", "--model", "bce", "--n-clusters", "2", "SRC"],
    ["fit", "--model", "bce", "--n-clusters", "2", "SRC", "--quiet"],
    ["fit", "-q", "--model", "bce", "--n-clusters", "2", "SRC"],
])
def test_found_quiet_anywhere(tmp_path, fake_model, capsys, argv):
    src = tmp_path / "labels.csv"
    src.write_text("0,1\n1,0\n")
    assert cli.main([str(src) if a == "SRC" else a for a in argv]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[0] == "consensus,p0,p1" and err == ""


@pytest.mark.parametrize("content, message", [
    ("a,b\n0,1\n0,1.5\n1,0\n", "line 3, column 2 ('b'): '1.5' is not a label"),  # parse
    ("a,b\n0,1\n-1,-1\n1,0\n", "line 3 has no observed label"),  # validation
    ("a,b\n0,1\n-3,1\n1,0\n", "line 3, column 1 ('a'): '-3': a negative label"),
    ("0,1\n1,0\n\n1,1\n", "line 3 is blank"),
    ("0,1\n1,0\n1\n", "line 3 has 1 field(s)"),
    ("", "is empty"),
])
def test_found_one_numbering_convention(tmp_path, fake_model, capsys, content, message):
    """Parse and validation errors about the third line of the file both say 'line 3'."""
    src = tmp_path / "labels.csv"
    src.write_text(content)
    assert _fit("--model", "mm", "--n-clusters", "2", src) == 2
    assert message in _error(capsys)


def test_found_string_labels_are_recoded(tmp_path, capsys):
    src, X = _labels_file(tmp_path)
    names = np.array(["setosa", "versicolor", "virginica"])
    named = tmp_path / "named.csv"
    df = pd.read_csv(src)
    df["bp2"] = names[df["bp2"]]
    df["bp4"] = pd.Categorical(names[df["bp4"]]).astype(str)
    df.to_csv(named, index=False)
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    assert _fit("--model", "mm", "--n-clusters", "3", src, "-o", a) == 0
    capsys.readouterr()
    assert _fit("--model", "mm", "--n-clusters", "3", named, "-o", b) == 0
    err = capsys.readouterr().err
    assert "named labels recoded in column 3 ('bp2'), column 5 ('bp4')" in err
    pd.testing.assert_frame_equal(pd.read_csv(a), pd.read_csv(b))  # names sort like 0, 1, 2


def test_header_that_cannot_be_told_is_an_error(tmp_path, fake_model, capsys):
    src = tmp_path / "labels.csv"
    src.write_text("a,b\nx,b\ny,z\nx,z\n")
    assert _fit("--model", "mm", "--n-clusters", "2", src) == 2
    assert "pass --header or --no-header" in _error(capsys)
    assert _fit("--model", "mm", "--n-clusters", "2", src, "--header", "-q") == 0


def test_fit_missing_file_and_too_many_clusters(tmp_path, fake_model, capsys):
    assert _fit("--model", "mm", "--n-clusters", "2", tmp_path / "no.csv") == 2
    assert "file not found" in capsys.readouterr().err
    src = tmp_path / "labels.csv"
    src.write_text("0\n1\n")
    assert _fit("--model", "mm", "--n-clusters", "5", src) == 2
    assert "exceeds the 2 rows" in capsys.readouterr().err


def test_fit_unavailable_model(tmp_path, monkeypatch, capsys):
    def unavailable(name):
        raise ModuleNotFoundError("No module named 'consensuskit.estimators.x'")

    monkeypatch.setattr(cli, "_import_estimator", unavailable)
    src = tmp_path / "labels.csv"
    src.write_text("0,1\n1,0\n")
    assert _fit("--model", "qmi", src) == 2
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
