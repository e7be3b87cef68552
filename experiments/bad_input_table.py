"""Print the bad-input table of docs/bad_input.md by running every case.

Each cell is the exception actually raised (``VE`` ValueError, ``TE`` TypeError,
``NF`` NotFittedError), ``-`` where the case does not apply (no such parameter or
method), or ``NONE`` if nothing was raised (a gap; tests/test_bad_input.py fails
then).  The message column quotes the message one estimator gave.

Usage: ``python experiments/bad_input_table.py`` from the repository root.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
from _factories import ESTIMATORS  # noqa: E402
from sklearn.exceptions import NotFittedError  # noqa: E402
from test_bad_input import (  # noqa: E402
    DATA_CASES,
    GOOD,
    PARAM_CASES,
    PREDICT_CASES,
    PREDICT_METHODS,
    fitted,
    make,
)


def _code(exc):
    if exc is None:
        return "NONE"
    if isinstance(exc, NotFittedError):
        return "NF"
    if isinstance(exc, ValueError):
        return "VE"
    if isinstance(exc, TypeError):
        return "TE"
    return type(exc).__name__


def _try(fn):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fn()
    except Exception as exc:  # noqa: BLE001 - we record whatever is raised
        return exc
    return None


def _row(case_id, what, cells, message):
    msg = message.replace("|", "\\|").replace("\n", " ")
    if len(msg) > 110:
        msg = msg[:107] + "..."
    return f"| `{case_id}` | {what} | " + " | ".join(cells) + f" | {msg} |"


def main():
    names = " | ".join(ESTIMATORS)
    print(f"| case | bad input | {names} | message (first) |")
    print("|" + "---|" * (len(ESTIMATORS) + 3))
    for case in DATA_CASES:
        cells, msg = [], ""
        for name in ESTIMATORS:
            exc = _try(lambda n=name, c=case: make(n).fit(c.build(n)))
            cells.append(_code(exc))
            msg = msg or (str(exc) if exc else "")
        print(_row(case.id, case.what, cells, msg))
    for case in PARAM_CASES:
        cells, msg = [], ""
        for name in ESTIMATORS:
            params = case.build(name)
            if params is None:
                cells.append("-")
                continue
            exc = _try(lambda n=name, p=params: make(n, **p).fit(GOOD))
            cells.append(_code(exc))
            msg = msg or (str(exc) if exc else "")
        print(_row(case.id, case.what, cells, msg))
    for method in PREDICT_METHODS:
        cells, msg = [], ""
        for name in ESTIMATORS:
            est = make(name)
            if not hasattr(est, method):
                cells.append("-")
                continue
            exc = _try(lambda e=est, m=method: getattr(e, m)(GOOD))
            cells.append(_code(exc))
            msg = msg or (str(exc) if exc else "")
        print(_row(f"unfitted-{method}", f"`{method}` before `fit`", cells, msg))
    for case in PREDICT_CASES:
        cells, msg = [], ""
        for name in ESTIMATORS:
            if not hasattr(make(name), "predict"):
                cells.append("-")
                continue
            codes = set()
            for method in PREDICT_METHODS:
                if hasattr(make(name), method):
                    exc = _try(lambda n=name, m=method, c=case: getattr(fitted(n), m)(c.build(n)))
                    codes.add(_code(exc))
                    msg = msg or (str(exc) if exc else "")
            cells.append("/".join(sorted(codes)))
        print(_row(case.id, case.what + " (predict, predict_proba, perplexity, score)", cells,
                   msg))
    print()
    print(f"numpy {np.__version__}; {len(DATA_CASES) + len(PARAM_CASES) + len(PREDICT_CASES) + 4}"
          " estimator rows")


if __name__ == "__main__":
    main()
