"""Benchmark datasets shipped with consensuskit, a CSV reader and synthetic generators.

The small benchmark tables of the cluster-ensemble papers ship inside the package
as gzip-compressed CSV files (see ``data/SOURCES.md`` for origins and checksums).
Every loader returns ``(features, labels)``: ``features`` is a float64 array of
shape ``(n_samples, n_features)`` and ``labels`` an int64 array of shape
``(n_samples,)`` with 0-based class ids.

Examples
--------
>>> from consensuskit import datasets
>>> X, y = datasets.load("iris")
>>> X.shape, y.shape
((150, 4), (150,))
"""

from __future__ import annotations

import numbers
import os
from importlib import resources

import numpy as np

__all__ = ["load", "names", "load_csv", "make_half_rings", "make_two_spirals", "EXTERNAL"]

_DATA_PACKAGE = "consensuskit.data.datasets"
_SUFFIX = ".csv.gz"

#: Datasets documented by the project but too large to ship in the wheel; they are
#: read from a path the user gives.  Maps accepted names to the canonical name.
EXTERNAL = {
    "kdd99_10pct_sample120k": "kdd99_10pct_sample120k",
    "kdd99": "kdd99_10pct_sample120k",
}


def _data_dir():
    return resources.files(_DATA_PACKAGE).joinpath("data")


def names() -> list[str]:
    """Sorted names of the datasets shipped inside the package.

    The external ``kdd99_10pct_sample120k`` (alias ``kdd99``) is not listed; it
    needs ``load(name, path=...)``.
    """
    out = [
        entry.name[: -len(_SUFFIX)]
        for entry in _data_dir().iterdir()
        if entry.name.endswith(_SUFFIX)
    ]
    return sorted(out)


def load(name: str, *, path=None):
    """Load a benchmark dataset by name.

    Parameters
    ----------
    name : str
        One of :func:`names`, or ``"kdd99_10pct_sample120k"`` (alias ``"kdd99"``),
        which is not shipped and needs ``path``.
    path : str or os.PathLike, optional
        For the external kdd99 sample: the ``kdd99_10pct_sample120k.csv.gz`` file.
        For a shipped name it overrides the packaged copy (same format).

    Returns
    -------
    features : ndarray of float64, shape (n_samples, n_features)
    labels : ndarray of int64, shape (n_samples,)
        0-based class ids.

    Raises
    ------
    ValueError
        Unknown name (the message lists the available ones), or the kdd99 sample
        requested without ``path``.
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a string; got {type(name).__name__}")
    key = name.strip()
    if key in EXTERNAL:
        canonical = EXTERNAL[key]
        if path is None:
            raise ValueError(
                f"dataset {name!r} is not shipped with consensuskit (it is too large for the "
                f"package); pass the path of your copy: "
                f"datasets.load({name!r}, path='/path/to/{canonical}{_SUFFIX}')"
            )
        return _load_checked(path, name)
    available = names()
    if key not in available:
        raise ValueError(
            f"unknown dataset {name!r}; available: {', '.join(available)} "
            f"(and {', '.join(sorted(EXTERNAL))} with path=...)"
        )
    if path is not None:
        return _load_checked(path, name)
    with resources.as_file(_data_dir().joinpath(key + _SUFFIX)) as p:
        return _load_checked(p, name)


def _load_checked(path, name):
    path = os.fspath(path)
    if not os.path.exists(path):
        raise ValueError(f"dataset file for {name!r} not found: {path}")
    features, labels = load_csv(path, label_column="label")
    return features, labels


def load_csv(path, label_column="label", **read_csv_kwargs):
    """Read your own data: a CSV (optionally gzip'd) with a header row.

    Parameters
    ----------
    path : str or os.PathLike
        CSV file; compression is inferred from the suffix (``.gz``, ``.zip``, ...).
    label_column : str, int or None, default "label"
        Column holding the class labels (name, or position if an int).  Labels
        may be any values; they are mapped to ``0..C-1`` in sorted order.
        ``None`` means the file has no labels: every column is a feature.
    **read_csv_kwargs
        Passed to :func:`pandas.read_csv` (e.g. ``sep=";"``).

    Returns
    -------
    features : ndarray of float64, shape (n_samples, n_features)
    labels : ndarray of int64, shape (n_samples,), or None
        ``None`` when ``label_column`` is None.

    Raises
    ------
    ValueError
        Missing label column, missing labels, non-numeric or empty feature
        columns; the message names the column (and row).
    """
    import pandas as pd

    path = os.fspath(path)
    if not os.path.exists(path):
        raise ValueError(f"file not found: {path}")
    try:
        df = pd.read_csv(path, **read_csv_kwargs)
    except pd.errors.EmptyDataError as exc:
        raise ValueError(f"{path} is empty") from exc
    if df.shape[0] == 0:
        raise ValueError(f"{path} has a header but no data rows")
    labels = None
    if label_column is not None:
        if isinstance(label_column, numbers.Integral) and not isinstance(label_column, bool):
            if not -df.shape[1] <= label_column < df.shape[1]:
                raise ValueError(
                    f"label_column={label_column} is out of range for {df.shape[1]} columns"
                )
            label_column = df.columns[label_column]
        if label_column not in df.columns:
            raise ValueError(
                f"label column {label_column!r} not found in {path}; columns are "
                f"{list(df.columns)} (pass label_column=None if the file has no labels)"
            )
        y = df[label_column]
        if y.isna().any():
            i = int(np.flatnonzero(y.isna().to_numpy())[0])
            raise ValueError(f"label column {label_column!r} is missing a value at row {i}")
        _, labels = np.unique(y.to_numpy(), return_inverse=True)
        labels = labels.astype(np.int64).reshape(-1)
        df = df.drop(columns=[label_column])
    if df.shape[1] == 0:
        raise ValueError(f"{path} has no feature columns")
    for col in df.columns:
        if not pd.api.types.is_numeric_dtype(df[col]) or pd.api.types.is_bool_dtype(df[col]):
            values = df[col]
            bad = pd.to_numeric(values, errors="coerce").isna() & values.notna()
            row = int(np.flatnonzero(bad.to_numpy())[0]) if bad.any() else 0
            raise ValueError(
                f"feature column {col!r} is not numeric (e.g. {values.iloc[row]!r} at row {row}); "
                "encode categorical features as numbers first"
            )
    features = df.to_numpy(dtype=np.float64)
    return np.ascontiguousarray(features), labels


# -- synthetic data of the MM paper ------------------------------------------------


def _class_sizes(n_samples, default_ratio, name):
    """Turn an int total (split by ``default_ratio``) or a per-class tuple into sizes."""
    if isinstance(n_samples, numbers.Integral) and not isinstance(n_samples, bool):
        total = int(n_samples)
        if total < len(default_ratio):
            raise ValueError(f"{name}: n_samples must be >= {len(default_ratio)}; got {total}")
        ratio = np.asarray(default_ratio, dtype=np.float64)
        sizes = np.floor(total * ratio / ratio.sum()).astype(np.int64)
        sizes[-1] += total - sizes.sum()
        if (sizes == 0).any():
            raise ValueError(f"{name}: n_samples={total} leaves a class empty")
        return sizes
    try:
        sizes = np.asarray(n_samples, dtype=np.int64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name}: n_samples must be an int or a pair of ints") from exc
    if sizes.shape != (len(default_ratio),) or (sizes < 1).any():
        raise ValueError(
            f"{name}: n_samples as a sequence must hold {len(default_ratio)} positive "
            f"class sizes; got {n_samples!r}"
        )
    return sizes


def _check_noise(noise):
    if isinstance(noise, bool) or not isinstance(noise, numbers.Real) or not noise >= 0:
        raise ValueError(f"noise must be a real number >= 0; got {noise!r}")
    return float(noise)


def make_half_rings(n_samples=400, noise=0.1, random_state=None):
    """Two interleaved half rings of unequal size (the MM paper's "half-rings").

    Topchy, Jain & Punch (2004, Table 2) use 400 points in 2-D with 100 and 300
    points per class; centroid-based clustering does poorly on it (k-means error
    about 26 %).  Here the first class lies on the upper half of the unit circle
    centred at (0, 0), the second on the lower half of the unit circle centred
    at (1, 0.5); points are spread uniformly in angle and perturbed with
    isotropic Gaussian noise of standard deviation ``noise``.  The paper gives no
    noise level; 0.1 gives well separated but not linearly separable rings.

    Parameters
    ----------
    n_samples : int or (int, int), default 400
        Total number of points (split 1:3 as in the paper) or the two class sizes.
    noise : float, default 0.1
        Standard deviation of the Gaussian noise added to each coordinate.
    random_state : int, RandomState or None

    Returns
    -------
    features : ndarray of float64, shape (n_samples, 2)
    labels : ndarray of int64, shape (n_samples,)
        0 for the upper (smaller) ring, 1 for the lower ring.
    """
    from sklearn.utils import check_random_state

    sizes = _class_sizes(n_samples, (1, 3), "make_half_rings")
    noise = _check_noise(noise)
    rng = check_random_state(random_state)
    t0 = rng.uniform(0.0, np.pi, size=sizes[0])
    t1 = rng.uniform(0.0, np.pi, size=sizes[1])
    upper = np.column_stack([np.cos(t0), np.sin(t0)])
    lower = np.column_stack([1.0 - np.cos(t1), 0.5 - np.sin(t1)])
    X = np.vstack([upper, lower]) + noise * rng.standard_normal((sizes.sum(), 2))
    y = np.repeat(np.arange(2, dtype=np.int64), sizes)
    return X, y


def make_two_spirals(n_samples=200, noise=0.05, n_turns=1.5, random_state=None):
    """Two interleaved Archimedean spirals (the MM paper's "2-spirals").

    Topchy, Jain & Punch (2004, Table 2) use 200 points in 2-D, 100 per class
    (k-means error about 44 %).  Spiral ``c`` is ``r(t) (cos(t + c*pi),
    sin(t + c*pi))`` with ``r(t) = t / (2*pi*n_turns)`` and ``t`` uniform on
    ``[pi/2, 2*pi*n_turns]`` (so that the centre, where the arms meet, is left
    out); Gaussian noise of standard deviation ``noise`` is added.

    Parameters
    ----------
    n_samples : int or (int, int), default 200
        Total number of points (split evenly) or the two class sizes.
    noise : float, default 0.05
    n_turns : float, default 1.5
        Number of turns of each arm.
    random_state : int, RandomState or None

    Returns
    -------
    features : ndarray of float64, shape (n_samples, 2)
    labels : ndarray of int64, shape (n_samples,)
    """
    from sklearn.utils import check_random_state

    sizes = _class_sizes(n_samples, (1, 1), "make_two_spirals")
    noise = _check_noise(noise)
    if isinstance(n_turns, bool) or not isinstance(n_turns, numbers.Real) or not n_turns > 0.25:
        raise ValueError(f"n_turns must be a real number > 0.25; got {n_turns!r}")
    rng = check_random_state(random_state)
    t_max = 2.0 * np.pi * float(n_turns)
    parts = []
    for c, size in enumerate(sizes):
        t = rng.uniform(np.pi / 2.0, t_max, size=size)
        r = t / t_max
        parts.append(np.column_stack([r * np.cos(t + c * np.pi), r * np.sin(t + c * np.pi)]))
    X = np.vstack(parts) + noise * rng.standard_normal((sizes.sum(), 2))
    y = np.repeat(np.arange(2, dtype=np.int64), sizes)
    return X, y
