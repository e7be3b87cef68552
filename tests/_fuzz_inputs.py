"""Random label inputs with their meaning, and a judge of what an estimator made of them.

:func:`random_input` draws a small label matrix *as a user may hold it* — a numpy array
of some dtype, a list of lists, a pandas frame, a torch tensor, a masked array, a
memoryview — together with an *oracle*: the codes a correct reading gives (each
column's distinct values, sorted, coded ``0..k-1``; -1 missing) or the reason the
input must be refused.  :func:`judge` fits an estimator on it and sorts the outcome:

``correct``      the fit read the input as the oracle says
``clear error``  a refused input (the oracle agrees) with a ValueError/TypeError raised
                 by consensuskit itself
``refused valid`` a clear error on an input the oracle reads (names, big integers ...)
``unhelpful``    an error of another type, or raised inside numpy/torch/pandas
``silent``       an input that must be refused was accepted, or the codes differ
``hang``         the call took longer than the limit

Used by ``tests/test_fuzz_inputs.py`` (hypothesis drives the seeds) and by
``experiments/fuzz_inputs.py`` (the before/after table).
"""

from __future__ import annotations

import math
import os
import time
import traceback

import numpy as np

OUTCOMES = ("correct", "clear error", "refused valid", "unhelpful", "silent", "hang")

NAMES = ["a", "b", "setosa", "x y", "Z"]


def _cell(rng, kind_weights):
    """One logical entry: ("int", v) | ("name", s) | ("missing",) | ("bad", v, why)."""
    kinds = ["int", "name", "missing", "bad"]
    kind = kinds[rng.choice(4, p=kind_weights)]
    if kind == "int":
        return ("int", int(rng.integers(0, 4)))
    if kind == "name":
        return ("name", NAMES[int(rng.integers(len(NAMES)))])
    if kind == "missing":
        return ("missing",)
    bad = [("frac", 1.5), ("inf", math.inf), ("neg", -3), ("nul", "a\x00b"),
           ("newline", "a\nb"), ("empty", "")]
    why, v = bad[int(rng.integers(len(bad)))]
    return ("bad", v, why)


def random_input(rng):
    """``(X, expected, description)``: ``expected`` is an int64 code matrix or a string
    (why it must be refused)."""
    n = int(rng.integers(0, 7))
    m = int(rng.integers(0, 4))
    container = str(rng.choice(["ndarray-int", "ndarray-float", "ndarray-uint64-big",
                                "ndarray-str", "ndarray-object", "list", "pandas",
                                "pandas-categorical", "torch", "torch-bf16", "torch-meta",
                                "masked", "memoryview", "1d", "3d"]))
    numeric_only = container not in ("ndarray-str", "ndarray-object", "list", "pandas",
                                     "pandas-categorical")
    p_bad = 0.05 if rng.random() < 0.5 else 0.0
    weights = ([0.75 - p_bad, 0.0, 0.25, p_bad] if numeric_only
               else [0.45 - p_bad, 0.3, 0.25, p_bad])
    cells = [[_cell(rng, weights) for _ in range(m)] for _ in range(n)]
    if container in ("ndarray-str",):  # text holds no missing
        cells = [[c if c[0] != "missing" else ("int", 0) for c in row] for row in cells]
    if numeric_only:  # strings cannot be held
        cells = [[c if not (c[0] == "bad" and isinstance(c[1], str)) else ("int", 1)
                  for c in row] for row in cells]
    if container in ("ndarray-int", "masked", "memoryview", "ndarray-uint64-big", "torch",
                     "1d"):
        cells = [[c if not (c[0] == "bad" and c[2] in ("frac", "inf")) else ("int", 2)
                  for c in row] for row in cells]
    if container in ("ndarray-uint64-big",):  # no missing, no bad value: big integers
        cells = [[c if c[0] == "int" else ("int", 3) for c in row] for row in cells]
    X = _render(container, cells, n, m, rng)
    return X, _oracle(container, cells, n, m), f"{container} {n}x{m}"


def _render(container, cells, n, m, rng):
    def value(c, missing):
        return {"int": lambda: c[1], "name": lambda: c[1], "missing": lambda: missing,
                "bad": lambda: c[1]}[c[0]]()

    if container == "ndarray-int":
        dtype = rng.choice([np.int8, np.int16, np.int32, np.int64])
        vals = [[value(c, -1) for c in row] for row in cells]
        return np.array(vals, dtype=dtype).reshape(n, m)
    if container == "ndarray-uint64-big":
        big = np.uint64(2**63) + np.uint64(5)
        return (np.array([[c[1] for c in row] for row in cells],
                         dtype=np.uint64).reshape(n, m) + big)
    if container == "ndarray-float":
        dtype = rng.choice([np.float16, np.float32, np.float64])
        return np.array([[value(c, np.nan) for c in row] for row in cells],
                        dtype=dtype).reshape(n, m)
    if container == "ndarray-str":
        return np.array([[str(value(c, "")) for c in row] for row in cells],
                        dtype=str).reshape(n, m)
    if container == "ndarray-object":
        miss = [None, np.nan, -1]
        out = np.empty((n, m), dtype=object)
        for i, row in enumerate(cells):
            for j, c in enumerate(row):
                out[i, j] = value(c, miss[int(rng.integers(3))])
        return out
    if container == "list":
        return [[value(c, None) for c in row] for row in cells]
    if container in ("pandas", "pandas-categorical"):
        import pandas as pd

        cols = {f"c{j}": [value(cells[i][j], None) for i in range(n)] for j in range(m)}
        df = pd.DataFrame(cols, index=range(n)) if m else pd.DataFrame(index=range(n))
        if container == "pandas-categorical":
            df = df.astype("category")
        return df
    if container in ("torch", "torch-bf16", "torch-meta"):
        import torch

        if container == "torch":
            return torch.tensor([[value(c, -1) for c in row] for row in cells],
                                dtype=torch.int64).reshape(n, m)
        t = torch.tensor([[float(value(c, math.nan)) for c in row] for row in cells],
                         dtype=torch.float32).reshape(n, m)
        if container == "torch-bf16":
            return t.to(torch.bfloat16)
        return torch.empty(n, m, device="meta")
    if container == "masked":
        data = np.array([[value(c, 0) for c in row] for row in cells],
                        dtype=np.int64).reshape(n, m)
        mask = np.array([[c[0] == "missing" for c in row] for row in cells],
                        dtype=bool).reshape(n, m)
        return np.ma.masked_array(data, mask=mask)
    if container == "memoryview":
        return memoryview(np.ascontiguousarray(
            np.array([[value(c, -1) for c in row] for row in cells],
                     dtype=np.int64).reshape(n, m)))
    if container == "1d":
        return np.array([value(c, -1) for c in (cells[0] if cells else [])], dtype=np.int64)
    return np.zeros((n, m, 2), dtype=np.int64)  # 3d


def _oracle(container, cells, n, m):
    if container in ("1d", "3d"):
        return "not 2-D"
    if container == "torch-meta":
        return "a tensor without values"
    if n == 0 or m == 0:
        return "empty"
    L = np.full((n, m), -1, dtype=np.int64)
    for j in range(m):
        col = [cells[i][j] for i in range(n)]
        kinds = {c[0] for c in col if c[0] != "missing"}
        if container == "ndarray-str":
            # text, the CLI's rule: a column where some value is not a number is a column
            # of names (all its values, "-3" and "1.5" included); else numbers
            if "name" in kinds:
                col = [c if c[0] == "bad" and c[2] in ("nul", "newline", "empty")
                       else ("name", str(c[1])) for c in col]
        kinds = {c[0] for c in col if c[0] != "missing"}
        bad = [c for c in col if c[0] == "bad"]
        if bad:
            return f"bad label ({bad[0][2]})"
        if kinds >= {"int", "name"}:
            return "names and numbers mixed in a column"
        if container == "ndarray-uint64-big":
            col = [("int", c[1] + 2**63 + 5) for c in col]
        values = sorted({c[1] for c in col if c[0] != "missing"})
        lookup = {v: k for k, v in enumerate(values)}
        for i, c in enumerate(col):
            if c[0] != "missing":
                L[i, j] = lookup[c[1]]
    if (L < 0).all(axis=0).any():
        return "a column without labels"
    if (L < 0).all(axis=1).any():
        return "a row without labels"
    return L


def judge(make, X, expected, limit=20.0):
    """``(outcome, detail)`` of ``make().fit(X)`` against ``expected``."""
    est = make()
    params = est.get_params()
    k = params.get("n_clusters")
    if not isinstance(expected, str) and isinstance(k, int) and expected.shape[0] < k:
        expected = f"fewer rows than n_clusters={k}"
    if (not isinstance(expected, str) and type(est).__name__ == "MCLA" and isinstance(k, int)
            and sum(len(np.unique(c[c >= 0])) for c in expected.T) < k):
        expected = "fewer labels (hyperedges) than n_clusters"  # MCLA clusters hyperedges
    if (not isinstance(expected, str) and params.get("missing") == "error"
            and (expected < 0).any()):
        expected = "missing labels where the estimator's missing='error'"  # documented
    if not isinstance(expected, str) and "k_range" in params:  # resampling: subsamples
        n, ks = expected.shape[0], list(params["k_range"]) + ([k] if k else [])
        if n < 3 or int(round(params["item_fraction"] * n)) <= max(ks):
            expected = "too few rows for the subsamples"
    t0 = time.perf_counter()
    try:
        est.fit(X)
    except (KeyboardInterrupt, SystemExit):  # pragma: no cover
        raise
    except Exception as exc:  # noqa: BLE001 - every exception is an outcome to sort
        if time.perf_counter() - t0 > limit:
            return "hang", f"{time.perf_counter() - t0:.0f} s then {type(exc).__name__}"
        ours = _raised_by_consensuskit(exc)
        text = f"{type(exc).__name__}: {str(exc)[:160]}"
        if not isinstance(exc, (ValueError, TypeError)) or not ours:
            return "unhelpful", text
        if isinstance(expected, str):
            return "clear error", text
        return "refused valid", text
    if time.perf_counter() - t0 > limit:
        return "hang", f"{time.perf_counter() - t0:.0f} s"
    if isinstance(expected, str):
        return "silent", f"accepted although it must be refused ({expected})"
    codes = np.asarray(est.ensemble_.codes)
    if codes.shape != expected.shape or not np.array_equal(codes, expected):
        return "silent", "codes differ from the input's meaning"
    return "correct", ""


def _raised_by_consensuskit(exc) -> bool:
    """Whether the innermost frame that raised ``exc`` is consensuskit's own code (a
    message written for users, not a library's internal complaint)."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return False
    return f"{os.sep}consensuskit{os.sep}" in frames[-1].filename
