"""Bad input against every estimator and the CLI (issue 7, item 1).

Each case in :data:`DATA_CASES`, :data:`PARAM_CASES` and :data:`PREDICT_CASES`
is tried on every estimator it applies to and must raise a ``ValueError`` or
``TypeError`` (``NotFittedError`` for an unfitted estimator) whose message
matches a pattern naming the problem.  A case that does not apply to an
estimator (it has no such parameter or method) is skipped with the reason.
The table in ``docs/bad_input.md`` lists the same cases; it is printed by
``python experiments/bad_input_table.py``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
from _factories import ESTIMATORS, K_PARAM
from _factories import make_fast as make
from sklearn.exceptions import NotFittedError

# a tiny valid ensemble: 8 points, 3 base clusterings, two clear groups
GOOD = np.array(
    [[0, 1, 5], [0, 1, 5], [0, 1, 5], [0, 1, 7], [1, 0, 7], [1, 0, 7], [1, 0, 7], [1, 2, 7]]
)


def _with(value, i=0, j=0, dtype=float):
    X = GOOD.astype(dtype)
    X[i, j] = value
    return X


def _names_with(value, i, j):
    """GOOD as cluster names ("c0", "c1", ...) with ``value`` at ``(i, j)``."""
    X = np.array([[f"c{v}" for v in row] for row in GOOD], dtype=object)
    X[i, j] = value
    return X


def _torch():
    import torch

    return torch


@dataclass
class Case:
    """One kind of bad input: what is passed, and what the error must say."""

    id: str
    what: str
    error: type | tuple
    match: str
    build: Callable[[str], Any] = field(repr=False)  # name -> X or params or None (= n/a)


def _param_case(id, what, param, value, match, error=(ValueError, TypeError), only=None):
    """A case setting hyper-parameter ``param`` (a callable of the estimator name) to ``value``."""

    def build(name):
        p = param.get(name) if isinstance(param, dict) else param
        if p is None or (only is not None and name not in only):
            return None
        est = make(name)
        if p not in est.get_params():
            return None
        return {p: value}

    return Case(id, what, error, match, build)


DATA_CASES = [
    Case("sparse", "a scipy sparse matrix", TypeError, r"sparse input is not supported",
         lambda n: sp.csr_matrix(GOOD)),
    Case(
        "1d",
        "1-D array instead of (n_samples, n_partitions)",
        ValueError,
        r"2-D.*1-D",
        lambda n: GOOD[:, 0],
    ),
    Case("3d", "3-D array", ValueError, r"2-D.*3-D", lambda n: GOOD[:, :, None]),
    Case("scalar", "a scalar", ValueError, r"2-D.*scalar", lambda n: 3),
    Case("none", "None instead of an array", TypeError, r"2-D array-like.*got NoneType",
         lambda n: None),
    Case("no-rows", "zero rows, shape (0, 3)", ValueError, r"empty", lambda n: np.zeros((0, 3))),
    Case("no-cols", "zero columns, shape (8, 0)", ValueError, r"empty", lambda n: np.zeros((8, 0))),
    Case(
        "missing-row",
        "a row whose labels are all missing",
        ValueError,
        r"row 2 has no observed label",
        lambda n: np.where(np.arange(8)[:, None] == 2, -1, GOOD),
    ),
    Case(
        "missing-col",
        "a column whose labels are all missing",
        ValueError,
        r"column\) 1 has no observed label",
        lambda n: np.where(np.arange(3)[None, :] == 1, -1, GOOD),
    ),
    Case(
        "all-nan",
        "every label NaN",
        ValueError,
        r"no observed label",
        lambda n: np.full((8, 3), np.nan),
    ),
    Case(
        "frac",
        "a non-integer float label (1.5)",
        ValueError,
        r"row 3, column 1.*not an integer",
        lambda n: _with(1.5, 3, 1),
    ),
    Case(
        "string-nul",
        "a cluster name with a NUL byte",
        ValueError,
        r"row 2, column 1 contains a NUL byte",
        lambda n: _names_with("b\x00", 2, 1),
    ),
    Case(
        "string-newline",
        "a cluster name with a line break",
        ValueError,
        r"row 3, column 0 contains a line break",
        lambda n: _names_with("a\nb", 3, 0),
    ),
    Case(
        "string-empty",
        "an empty string as a cluster name",
        ValueError,
        r"row 1, column 2 is the empty string",
        lambda n: _names_with("", 1, 2),
    ),
    Case(
        "torch-meta",
        "a torch tensor on the meta device (no values)",
        ValueError,
        r"'meta' device",
        lambda n: _torch().empty(8, 3, device="meta"),
    ),
    Case(
        "memoryview-1d",
        "a 1-D memoryview",
        ValueError,
        r"2-D.*1-D",
        lambda n: memoryview(np.ascontiguousarray(GOOD[:, 0])),
    ),
    Case(
        "mixed-string",
        "one string among integer labels (object array)",
        ValueError,
        r"row 4, column 2.*'x'",
        lambda n: _with("x", 4, 2, dtype=object),
    ),
    Case(
        "negative",
        "a negative label other than -1",
        ValueError,
        r"row 5, column 0.*-3.*negative",
        lambda n: _with(-3, 5, 0, dtype=np.int64),
    ),
    Case(
        "inf",
        "an infinite label",
        ValueError,
        r"row 1, column 2.*infinite",
        lambda n: _with(np.inf, 1, 2),
    ),
    Case("-inf", "a -inf label", ValueError, r"infinite", lambda n: _with(-np.inf, 0, 0)),
    Case(
        "ragged",
        "a ragged nested list",
        ValueError,
        r"ragged|same length|row",
        lambda n: [[0, 1, 5], [0, 1], [1, 0, 7]],
    ),
    Case(
        "complex",
        "complex-valued labels",
        ValueError,
        r"complex|integers",
        lambda n: GOOD.astype(complex),
    ),
    Case(
        "datetime",
        "datetime labels",
        ValueError,
        r"integers|datetime",
        lambda n: np.full((8, 3), np.datetime64("2020-01-01")),
    ),
    Case("bytes", "a bytes object", ValueError, r"2-D|scalar", lambda n: b"0,1,2"),
    Case(
        "dict",
        "a dict",
        TypeError,
        r"2-D array-like.*got dict",
        lambda n: {"a": [0, 1], "b": [1, 0]},
    ),
]

PARAM_CASES = [
    _param_case("k-zero", "number of clusters 0", K_PARAM, 0, r"(n_clusters|truncation).*>="),
    _param_case(
        "k-negative", "number of clusters negative", K_PARAM, -2, r"(n_clusters|truncation).*>="
    ),
    _param_case(
        "k-float",
        "number of clusters a float (2.5)",
        K_PARAM,
        2.5,
        r"(n_clusters|truncation).*integer",
    ),
    _param_case(
        "k-bool",
        "number of clusters a bool (True)",
        K_PARAM,
        True,
        r"(n_clusters|truncation).*integer",
    ),
    _param_case(
        "k-string",
        "number of clusters a string ('3')",
        K_PARAM,
        "3",
        r"(n_clusters|truncation).*integer",
    ),
    _param_case(
        "k-too-many",
        "n_clusters larger than n_samples",
        "n_clusters",
        9,
        r"n_clusters=9.*number of samples",
    ),
    _param_case("tol-negative", "negative tol", "tol", -1e-3, r"tol"),
    _param_case("tol-nan", "NaN tol", "tol", float("nan"), r"tol"),
    _param_case("max-iter-zero", "max_iter 0", "max_iter", 0, r"max_iter"),
    _param_case("max-iter-float", "max_iter a float", "max_iter", 10.5, r"max_iter"),
    _param_case("n-init-zero", "n_init 0", "n_init", 0, r"n_init"),
    _param_case("inference", "unknown inference string", "inference", "mcmc", r"inference"),
    _param_case("prior", "unknown prior string", "prior", "dp", r"prior"),
    _param_case(
        "divergence", "unknown divergence string", "divergence", "hellinger", r"divergence"
    ),
    _param_case("utility", "unknown utility string", "utility", "XYZ", r"utility"),
    _param_case("linkage", "unknown linkage string", "linkage", "ward2", r"linkage"),
    _param_case("init", "unknown init string", "init", "spectral", r"init"),
    _param_case(
        "weights-shape", "partition weights of the wrong shape", "weights", np.ones(5), r"weights"
    ),
    _param_case(
        "weights-negative",
        "negative partition weights",
        "weights",
        np.array([1.0, -1.0, 1.0]),
        r"weights",
    ),
    _param_case(
        "label-weight-shape",
        "label_weight of the wrong shape",
        "label_weight",
        np.ones(5),
        r"label_weight",
    ),
    _param_case(
        "label-prior", "Dirichlet prior below 1 (MAP undefined)", "label_prior", 0.5, r"label_prior"
    ),
    _param_case("concentration", "non-positive concentration", "alpha0", 0.0, r"alpha0"),
    _param_case(
        "random-state",
        "random_state that is not a seed",
        "random_state",
        "seed",
        r"random_state|RandomState|seed",
    ),
    _param_case(
        "random-state-neg",
        "negative random_state",
        "random_state",
        -1,
        r"random_state|seed|between",
    ),
    _param_case(
        "device-cuda", "device='cuda' on a machine without CUDA", "device", "cuda", r"device|CUDA"
    ),
    _param_case("device-unknown", "unknown device string", "device", "tpu", r"device"),
    _param_case("dtype", "an integer dtype for a torch-backed model", "dtype", "int32", r"dtype"),
    _param_case(
        "sparse-pairs",
        "sparse_pairs fraction > 1 given as float",
        "sparse_pairs",
        1.5,
        r"sparse_pairs",
    ),
]


def _cuda_available():
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:  # pragma: no cover
        return False


@pytest.mark.parametrize("case", DATA_CASES, ids=lambda c: c.id)
@pytest.mark.parametrize("name", ESTIMATORS)
def test_bad_data(name, case):
    X = case.build(name)
    with pytest.raises(case.error, match=case.match):
        make(name).fit(X)


def _applicable_params():
    return [
        pytest.param(name, case, id=f"{name}-{case.id}")
        for name in ESTIMATORS
        for case in PARAM_CASES
        if case.build(name) is not None
    ]


@pytest.mark.parametrize("name, case", _applicable_params())
def test_bad_parameter(name, case):
    params = case.build(name)
    if case.id == "device-cuda" and _cuda_available():
        pytest.skip("CUDA is available here")
    est = make(name, **params)
    before = {k: v for k, v in est.get_params().items()}
    with pytest.raises(case.error, match=case.match):
        est.fit(GOOD)
    # hyper-parameters are left untouched, even by a failed fit
    after = est.get_params()
    for k, v in before.items():
        assert after[k] is v, k


# ---------------------------------------------------------------- prediction
_FITTED: dict = {}


def fitted(name):
    if name not in _FITTED:
        _FITTED[name] = make(name).fit(GOOD)
    return _FITTED[name]


PREDICT_METHODS = ["predict", "predict_proba", "perplexity", "score"]


def _with_methods():
    """(estimator, method) pairs that exist: PCC, KCC and the comparison functions only fit."""
    return [
        pytest.param(name, method, id=f"{name}-{method}")
        for name in ESTIMATORS
        for method in PREDICT_METHODS
        if hasattr(make(name), method)
    ]


@pytest.mark.parametrize("name, method", _with_methods())
def test_unfitted(name, method):
    est = make(name)
    with pytest.raises(NotFittedError, match="not fitted"):
        getattr(est, method)(GOOD)


PREDICT_CASES = [
    Case(
        "wrong-n-columns",
        "new rows with a different number of partitions",
        ValueError,
        r"X has 2 (features|base clusterings).*(expecting|fitted ensemble has) 3",
        lambda n: GOOD[:, :2],
    ),
    Case(
        "unseen-label",
        "a label the column never showed in fit",
        ValueError,
        r"label 9 at row 0, column 1 was not seen",
        lambda n: _with(9, 0, 1, dtype=np.int64),
    ),
    Case(
        "predict-frac",
        "non-integer float in new rows",
        ValueError,
        r"not an integer",
        lambda n: _with(0.5, 0, 0),
    ),
    Case("predict-1d", "1-D new rows", ValueError, r"2-D", lambda n: GOOD[0]),
    Case(
        "predict-inf",
        "infinite label in new rows",
        ValueError,
        r"infinite",
        lambda n: _with(np.inf, 2, 2),
    ),
]


@pytest.mark.parametrize("case", PREDICT_CASES, ids=lambda c: c.id)
@pytest.mark.parametrize("name, method", _with_methods())
def test_bad_new_rows(name, method, case):
    with pytest.raises(case.error, match=case.match):
        getattr(fitted(name), method)(case.build(name))


def test_all_missing_new_rows_perplexity():
    est = fitted("MM")
    with pytest.raises(ValueError, match="no observed label"):
        est.perplexity(np.full((3, 3), -1))


# ---------------------------------------------------------------- GBCE features
FEATURES = np.random.default_rng(0).normal(size=(8, 2))


@pytest.mark.parametrize(
    "features, match",
    [
        (np.where(np.arange(2)[None, :] == 1, np.nan, FEATURES), r"feature column 1.*NaN"),
        (FEATURES[:5], r"features has 5 rows.*8"),
        (FEATURES[:, 0], r"2-D"),
        (np.where(np.arange(8)[:, None] == 3, np.inf, FEATURES), r"row 3.*infinite"),
        (np.array([["a", "b"]] * 8), r"numeric"),
        (np.zeros((8, 0)), r"no columns"),
    ],
    ids=["nan-column", "row-mismatch", "1d", "inf", "strings", "no-columns"],
)
def test_gbce_bad_features(features, match):
    with pytest.raises((ValueError, TypeError), match=match):
        make("GBCE").fit(GOOD, features=features)


def test_gbce_predict_features_wrong_width():
    est = make("GBCE").fit(GOOD, features=FEATURES)
    with pytest.raises(ValueError, match=r"features has 3 columns.*2"):
        est.predict(GOOD, features=np.zeros((8, 3)))


# ---------------------------------------------------------------- CLI
def _cli(args, capsys):
    from consensuskit.cli.commands import main

    code = main(args)
    err = capsys.readouterr().err
    return code, err


def _write(tmp_path, text, name="x.csv"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


FIT = ["fit", "--model", "mm", "--n-clusters", "2"]
CLI_CASES = [
    ("missing-file", lambda t: [*FIT, str(t / "nope.csv")], r"not found.*nope\.csv"),
    (
        "bad-model",
        lambda t: ["fit", "--model", "xyz", "--n-clusters", "2", _write(t, "0,1\n1,0\n0,1\n")],
        r"invalid choice: 'xyz'",
    ),
    (
        "id-column",
        lambda t: [*FIT, _write(t, "".join(f"{i},{i % 2}\n" for i in range(6)))],
        r"column 1 has a different value on each of its 6 lines.*--index-col 1",
    ),
    ("fraction", lambda t: [*FIT, _write(t, "0,1\n1,0.5\n0,1\n")],
     r"line 2, column 2: '0.5' is not a label"),
    ("negative", lambda t: [*FIT, _write(t, "0,1\n1,-4\n0,1\n")], r"-4.*negative"),
    ("inf", lambda t: [*FIT, _write(t, "0,1\n1,inf\n0,1\n")], r"'inf' is not a label"),
    ("empty-file", lambda t: [*FIT, _write(t, "")], r"empty"),
    ("header-only", lambda t: [*FIT, _write(t, "a,b\n")], r"header but no lines of labels"),
    (
        "all-missing-row",
        lambda t: [*FIT, _write(t, "0,1\n,\n0,1\n")],
        r"line 2 has no observed label",
    ),
    ("ragged-csv", lambda t: [*FIT, _write(t, "0,1\n1\n0,1,2\n")],
     r"line 2 has 1 field\(s\) but line 1 has 2"),
    (
        "k-zero",
        lambda t: ["fit", "--model", "mm", "--n-clusters", "0", _write(t, "0,1\n1,0\n0,1\n")],
        r"--n-clusters must be >= 1",
    ),
    (
        "k-too-many",
        lambda t: ["fit", "--model", "mm", "--n-clusters", "9", _write(t, "0,1\n1,0\n0,1\n")],
        r"--n-clusters 9 exceeds",
    ),
    (
        "k-not-int",
        lambda t: ["fit", "--model", "mm", "--n-clusters", "two", _write(t, "0,1\n1,0\n0,1\n")],
        r"invalid int value: 'two'",
    ),
    ("directory", lambda t: [*FIT, str(t)], r"directory|not a file|Is a directory"),
    ("latin1", lambda t: [*FIT, _write_bytes(t, b"a,b\n0,1\n1,caf\xe9\n0,1\n")],
     r"x\.csv: line 3, byte 6 of the line: not UTF-8 text \(byte 0xe9\)"),
    ("nul-byte", lambda t: [*FIT, _write_bytes(t, b"0,1\n1,0\x00\n0,1\n")],
     r"line 2 holds a NUL byte"),
    ("quoted-newline", lambda t: [*FIT, _write(t, '0,1\n1,"a\nb"\n0,1\n1,c\n')],
     r"line 2, column 2: a quoted field spans several lines"),
    ("uneven-semicolons", lambda t: [*FIT, _write(t, "0;1\n1;0;2\n0;1\n1;2\n")],
     r"hold ';' a different number of times"),
]


def _write_bytes(tmp_path, data, name="x.csv"):
    p = tmp_path / name
    p.write_bytes(data)
    return str(p)


@pytest.mark.parametrize("build, match", [c[1:] for c in CLI_CASES], ids=[c[0] for c in CLI_CASES])
def test_cli_bad_input(tmp_path, capsys, build, match):
    try:
        code, err = _cli(build(tmp_path), capsys)
    except SystemExit as exc:  # argparse errors
        code, err = exc.code, capsys.readouterr().err
    assert code != 0
    assert re.search(match, err), err
    assert "Traceback" not in err


# ---------------------------------------------------------------- read correctly
def _same_partitions(a, b):
    from sklearn.metrics import adjusted_rand_score

    return adjusted_rand_score(a, b) == 1.0


@pytest.mark.parametrize("kind", ["names", "pandas-str", "pandas-categorical", "uint64-big",
                                  "masked", "bfloat16", "memoryview", "object-big-int"])
def test_labels_as_users_hold_them_are_read_correctly(kind):
    """Inputs that were refused or silently misread now mean what they say: each gives
    the same codes as the integer matrix GOOD (missing where the input says missing)."""
    import pandas as pd
    import torch

    from consensuskit import Ensemble

    want = GOOD.copy()
    names = np.array([[f"c{v}" for v in row] for row in GOOD], dtype=object)
    if kind == "names":
        X = names.astype(str)
    elif kind == "pandas-str":
        X = pd.DataFrame(names, columns=["a", "b", "c"])
        X.iloc[2, 1] = None
        want = np.where((np.arange(8)[:, None] == 2) & (np.arange(3) == 1), -1, want)
    elif kind == "pandas-categorical":
        X = pd.DataFrame({c: pd.Categorical(names[:, j]) for j, c in enumerate("abc")})
    elif kind == "uint64-big":
        X = GOOD.astype(np.uint64) + np.uint64(2**63)
    elif kind == "masked":
        X = np.ma.masked_array(GOOD, mask=np.arange(24).reshape(8, 3) == 7)
        want = np.where(np.arange(24).reshape(8, 3) == 7, -1, want)
    elif kind == "bfloat16":
        X = torch.tensor(GOOD, dtype=torch.bfloat16)
    elif kind == "memoryview":
        X = memoryview(np.ascontiguousarray(GOOD))
    else:  # Python ints beyond float64's exact range: not rounded together
        X = GOOD.astype(object) * (2**60) + 1
    got = Ensemble.from_labels(X)
    ref = Ensemble.from_labels(want)
    np.testing.assert_array_equal(got.codes, ref.codes)
    if kind == "pandas-str":  # the fit works and predicts the frame's own rows
        est = make("BCE").fit(X)
        np.testing.assert_array_equal(est.predict(X), est.labels_)
        assert list(est.ensemble_.categories[0]) == ["c0", "c1"]


def test_named_new_rows_unseen_and_mixed():
    names = np.array([[f"c{v}" for v in row] for row in GOOD], dtype=object)
    est = make("MM").fit(names)
    with pytest.raises(ValueError, match="label 'zz' at row 0, column 1 was not seen"):
        est.predict(np.array([["c0", "zz", "c5"]], dtype=object))
    with pytest.raises(ValueError, match="was not seen"):  # the integer 0 is not the name c0
        est.predict(np.array([[0, "c1", "c5"]], dtype=object))
    with pytest.raises(ValueError, match="row 4, column 2 is 'x'.*column of numbers"):
        make("MM").fit(_with("x", 4, 2, dtype=object))


# ---------------------------------------------------------------- CLI: read correctly
@pytest.mark.parametrize("sep", [";", "\t", "|"])
def test_cli_sniffs_the_separator(tmp_path, capsys, sep):
    """A ';'- or tab-separated file is read as its columns, not one column of names."""
    import pandas as pd

    rows = ["a,b,c"] + [",".join(str(v) for v in r) for r in GOOD]
    comma = _write(tmp_path, "\n".join(rows) + "\n", "comma.csv")
    other = _write(tmp_path, "\n".join(r.replace(",", sep) for r in rows) + "\n", "o.csv")
    outs = []
    for path in (comma, other):
        out = tmp_path / f"out-{len(outs)}.csv"
        code, err = _cli(["fit", "--model", "mm", "--n-clusters", "2", path, "-o", str(out)],
                         capsys)
        assert code == 0, err
        outs.append(pd.read_csv(out))
    assert f"separator {sep!r}" in err
    pd.testing.assert_frame_equal(outs[0], outs[1])


def test_cli_output_is_safe_in_a_spreadsheet(tmp_path, capsys):
    """Index values that a spreadsheet would run as formulas are written as text."""
    import pandas as pd

    ids = ['=HYPERLINK("http://x","y")', "+1+1", "@SUM(A1)", "-3", "p4", "=1", "p6", "p7"]
    lines = ["id,a,b,c"] + [f"{i},{r[0]},{r[1]},{r[2]}" for i, r in zip(ids, GOOD)]
    path = _write(tmp_path, "\n".join(lines).replace('=HYPERLINK("http://x","y")',
                                                     '"=HYPERLINK(""http://x"",""y"")"')
                  + "\n")
    out = tmp_path / "out.csv"
    code, err = _cli(["fit", "--model", "mm", "--n-clusters", "2", "--index-col", "id", path,
                      "-o", str(out)], capsys)
    assert code == 0, err
    got = pd.read_csv(out, dtype=str)["id"].tolist()
    assert got == ["'" + ids[0], "'+1+1", "'@SUM(A1)", "-3", "p4", "'=1", "p6", "p7"]


def test_cli_training_perplexity_only_when_asked(tmp_path, capsys):
    rows = "\n".join(",".join(str(v) for v in r) for r in GOOD) + "\n"
    path = _write(tmp_path, rows)
    code, err = _cli(["fit", "--model", "mm", "--n-clusters", "2", path, "-o",
                      str(tmp_path / "o.csv")], capsys)
    assert code == 0 and "training perplexity" not in err
    code, err = _cli(["fit", "--model", "mm", "--n-clusters", "2", "--training-perplexity",
                      path, "-o", str(tmp_path / "o.csv")], capsys)
    assert code == 0 and re.search(r"training perplexity \d+\.\d{4}", err), err
