"""Shipped datasets, the CSV reader and the synthetic generators."""

import gzip
import hashlib
import subprocess
import sys
from importlib import resources

import numpy as np
import pytest

from consensuskit.data import datasets

# (n, d, classes) from the project's dataset manifest, for the names API.md promises
EXPECTED = {
    "iris": (150, 4, 3),
    "wine": (178, 13, 3),
    "wdbc": (569, 30, 2),
    "glass": (214, 9, 6),
    "ecoli": (336, 7, 8),
    "pima": (768, 8, 2),
    "ionosphere": (351, 34, 2),
    "balance": (625, 4, 3),
    "bupa": (345, 6, 2),
    "segmentation": (2100, 19, 7),
}


def test_names_sorted_and_complete():
    names = datasets.names()
    assert names == sorted(names)
    assert set(EXPECTED) <= set(names)
    assert "kdd99_10pct_sample120k" not in names
    assert len(names) == 27


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_load_shapes_and_dtypes(name):
    X, y = datasets.load(name)
    n, d, c = EXPECTED[name]
    assert X.shape == (n, d) and X.dtype == np.float64 and X.flags.c_contiguous
    assert y.shape == (n,) and y.dtype == np.int64
    np.testing.assert_array_equal(np.unique(y), np.arange(c))
    assert np.isfinite(X).all()


def test_iris_class_counts():
    _, y = datasets.load("iris")
    np.testing.assert_array_equal(np.bincount(y), [50, 50, 50])


def test_shipped_files_match_sources_checksums():
    data = resources.files("consensuskit.data.datasets").joinpath("data")
    sources = data.joinpath("SOURCES.md").read_text()
    for name in datasets.names():
        digest = hashlib.sha256(data.joinpath(name + ".csv.gz").read_bytes()).hexdigest()
        assert f"| {name} |" in sources and digest in sources, name


def test_unknown_name_lists_available():
    with pytest.raises(ValueError, match=r"unknown dataset 'irsi'; available: balance, .*iris"):
        datasets.load("irsi")
    with pytest.raises(TypeError):
        datasets.load(3)


@pytest.mark.parametrize("name", ["kdd99", "kdd99_10pct_sample120k"])
def test_kdd99_needs_a_path(name):
    with pytest.raises(ValueError, match=r"not shipped.*path=.*kdd99_10pct_sample120k\.csv\.gz"):
        datasets.load(name)


def test_kdd99_loads_from_user_path(tmp_path):
    path = tmp_path / "kdd99_10pct_sample120k.csv.gz"
    with gzip.open(path, "wt") as fh:
        fh.write("a,b,label\n1,2.5,0\n3,4,22\n5,6,9\n")
    X, y = datasets.load("kdd99", path=path)
    np.testing.assert_array_equal(X, [[1, 2.5], [3, 4], [5, 6]])
    np.testing.assert_array_equal(y, [0, 2, 1])  # labels mapped to 0..C-1 in sorted order
    with pytest.raises(ValueError, match="not found"):
        datasets.load("kdd99", path=tmp_path / "nope.csv.gz")


def test_load_csv_label_column_options(tmp_path):
    path = tmp_path / "mine.csv"
    path.write_text("x,cls,z\n1,b,0.5\n2,a,1.5\n3,b,2.5\n")
    X, y = datasets.load_csv(path, label_column="cls")
    np.testing.assert_array_equal(X, [[1, 0.5], [2, 1.5], [3, 2.5]])
    np.testing.assert_array_equal(y, [1, 0, 1])
    X2, y2 = datasets.load_csv(path, label_column=1)
    np.testing.assert_array_equal(X2, X)
    np.testing.assert_array_equal(y2, y)
    path2 = tmp_path / "nolabels.csv"
    path2.write_text("x,z\n1,0.5\n2,1.5\n")
    X3, y3 = datasets.load_csv(path2, label_column=None)
    assert X3.shape == (2, 2) and y3 is None


def test_load_csv_errors(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("x,z,label\n1,0.5,0\n2,abc,1\n")
    with pytest.raises(ValueError, match=r"feature column 'z' is not numeric.*'abc' at row 1"):
        datasets.load_csv(path)
    with pytest.raises(ValueError, match=r"label column 'target' not found.*\['x', 'z', 'label'\]"):
        datasets.load_csv(path, label_column="target")
    with pytest.raises(ValueError, match="file not found"):
        datasets.load_csv(tmp_path / "missing.csv")
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(ValueError, match="empty"):
        datasets.load_csv(empty)
    nolab = tmp_path / "nolab.csv"
    nolab.write_text("x,label\n1,0\n2,\n")
    with pytest.raises(ValueError, match="missing a value at row 1"):
        datasets.load_csv(nolab)


def test_half_rings_paper_setup():
    X, y = datasets.make_half_rings(random_state=0)
    assert X.shape == (400, 2) and X.dtype == np.float64
    np.testing.assert_array_equal(np.bincount(y), [100, 300])  # MM paper, Table 2
    X2, _ = datasets.make_half_rings(random_state=0)
    np.testing.assert_array_equal(X, X2)
    X0, y0 = datasets.make_half_rings((10, 20), noise=0.0, random_state=1)
    # without noise the rings lie exactly on their unit circles
    np.testing.assert_allclose(np.hypot(*X0[y0 == 0].T), 1.0)
    np.testing.assert_allclose(np.hypot(X0[y0 == 1, 0] - 1.0, X0[y0 == 1, 1] - 0.5), 1.0)


def test_two_spirals_paper_setup():
    X, y = datasets.make_two_spirals(random_state=0)
    assert X.shape == (200, 2)
    np.testing.assert_array_equal(np.bincount(y), [100, 100])  # MM paper, Table 2
    X0, y0 = datasets.make_two_spirals(50, noise=0.0, random_state=0)
    # noise-free arm 1 is arm 0 rotated by pi: the radius is a function of the angle
    assert np.bincount(y0).tolist() == [25, 25]
    assert np.all(np.hypot(*X0.T) <= 1.0 + 1e-12)


def test_generators_hard_for_kmeans():
    # the MM paper's point: centroid-based clustering errs on these shapes
    from sklearn.cluster import KMeans

    from consensuskit.evaluation.metrics import accuracy

    for make in (datasets.make_half_rings, datasets.make_two_spirals):
        X, y = make(random_state=3)
        p = KMeans(2, n_init=5, random_state=0).fit_predict(X)
        assert accuracy(y, p) < 0.9


def test_generator_input_checks():
    with pytest.raises(ValueError, match="noise"):
        datasets.make_half_rings(noise=-1)
    with pytest.raises(ValueError, match="class sizes"):
        datasets.make_two_spirals((10, 0))
    with pytest.raises(ValueError, match="n_samples must be >= 2"):
        datasets.make_two_spirals(1)
    with pytest.raises(ValueError, match="n_turns"):
        datasets.make_two_spirals(n_turns=0)


@pytest.mark.slow
def test_wheel_contains_datasets_and_loads_outside_repo(tmp_path):
    """Build a wheel, install it into a bare directory and load glass from there."""
    import pathlib
    import zipfile

    repo = pathlib.Path(__file__).resolve().parents[1]
    wheel_dir = tmp_path / "wheel"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(wheel_dir), str(repo)],
        check=True,
        cwd=tmp_path,
    )
    (wheel,) = wheel_dir.glob("consensuskit-*.whl")
    members = zipfile.ZipFile(wheel).namelist()
    assert "consensuskit/data/datasets/data/glass.csv.gz" in members
    assert not any("kdd99" in m for m in members)
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site),
         str(wheel)],
        check=True,
        cwd=tmp_path,
    )
    out = subprocess.run(
        [sys.executable, "-c",
         "import consensuskit, sys; from consensuskit import datasets; "
         "print(datasets.load('glass')[0].shape); print(consensuskit.__file__)"],
        check=True,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
    )
    shape, where = out.stdout.split("\n")[:2]
    assert shape == "(214, 9)"
    assert where.startswith(str(site))
