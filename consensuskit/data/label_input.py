"""Reading labels as users hold them: numpy, masked and pandas arrays, torch tensors,
lists, memoryviews; integer labels, names (strings, categories) and integers beyond int64,
with -1, NaN, None or pandas.NA as missing.  Every input is either read exactly or refused
with an error naming the row and column (``docs/bad_input.md``); nothing is guessed.

:func:`labels_to_int` turns a 2-D array into int64 labels; :func:`_labels_and_names` also
recodes columns of names.  :class:`consensuskit.data.ensemble.Ensemble` builds on them.
"""

from __future__ import annotations

import numbers

import numpy as np
import scipy.sparse as sp


def _to_numpy(X) -> np.ndarray:
    """Turn numpy / torch / pandas / nested-list input into a numpy array (an
    :class:`~consensuskit.data.ensemble.Ensemble` is handled by its callers)."""
    if sp.issparse(X):
        raise TypeError(
            "sparse input is not supported: pass the label matrix as a dense array "
            "(missing labels as -1 or NaN)"
        )
    if X is None or isinstance(X, (dict, set, frozenset)):
        raise TypeError(
            "labels must be a 2-D array-like of shape (n_samples, n_partitions); "
            f"got {type(X).__name__}"
        )
    if isinstance(X, np.ma.MaskedArray):  # masked entries are missing labels
        A = np.ma.getdata(X).astype(object)
        A[np.ma.getmaskarray(X)] = None
        return A
    if isinstance(X, memoryview):
        try:
            return np.asarray(X)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"labels given as a memoryview of format {X.format!r} that numpy "
                            f"cannot read ({exc}); pass a numpy array") from None
    if type(X).__module__.startswith("torch"):
        return _tensor_to_numpy(X)
    if hasattr(X, "to_numpy") and hasattr(X, "columns"):  # pandas DataFrame
        return X.to_numpy(dtype=object, na_value=np.nan) if _has_pandas_na(X) else X.to_numpy()
    if isinstance(X, (str, bytes)) or np.isscalar(X):
        raise ValueError(
            "labels must be a 2-D array-like of shape (n_samples, n_partitions); got a scalar"
        )
    if _is_ragged_or_mixed(X):
        _check_not_ragged(X)
        return np.asarray(X, dtype=object)
    A = np.asarray(X)
    if A.dtype.kind in "US" and not isinstance(X, np.ndarray):
        # numpy turns [[0, 1], [1, "a"]] into strings: keep the numbers numbers
        return np.asarray(X, dtype=object)
    return A


def _tensor_to_numpy(X) -> np.ndarray:
    """A torch tensor's values as numpy: on the CPU, bfloat16/float16 widened exactly to
    float32, a tensor without data (device "meta") refused."""
    import torch

    if not isinstance(X, torch.Tensor):
        return np.asarray(X)
    if X.device.type == "meta":
        raise ValueError("labels are a torch tensor on the 'meta' device, which has a shape "
                         f"{tuple(X.shape)} but no values; materialise it first")
    if X.is_sparse or X.layout != torch.strided:
        raise TypeError(f"sparse torch tensors ({X.layout}) are not supported: pass a dense "
                        "label matrix (missing labels as -1 or NaN)")
    X = X.detach().cpu()
    if X.is_complex():
        raise ValueError(f"Complex data not supported: labels must be integers; got {X.dtype}")
    if X.dtype in (torch.bfloat16, torch.float16):
        X = X.to(torch.float32)  # exact: every bfloat16/float16 value is a float32
    try:
        return X.numpy()
    except TypeError as exc:  # a dtype numpy lacks (e.g. quantized, float8)
        raise TypeError(f"labels are a torch tensor of dtype {X.dtype}, which numpy cannot "
                        f"hold ({exc}); convert it to an integer or float dtype") from None


def _check_not_ragged(X) -> None:
    """Raise if a nested sequence has rows of different lengths (numpy would make it 1-D)."""
    try:
        lengths = [len(row) for row in X]
    except TypeError:  # some rows are scalars
        lengths = [len(row) if hasattr(row, "__len__") and not isinstance(row, str) else None
                   for row in X]
    if len(set(lengths)) > 1:
        first = lengths[0]
        i = next(i for i, n in enumerate(lengths) if n != first)
        raise ValueError(
            f"labels are ragged: row 0 has {first} entries but row {i} has {lengths[i]}; "
            "every row needs one label per base clustering"
        )


def _has_pandas_na(df) -> bool:
    return any(str(t) in {"Int64", "Int32", "Int16", "Int8", "object"} for t in df.dtypes)


def _is_ragged_or_mixed(X) -> bool:
    if isinstance(X, np.ndarray):
        return False
    try:
        np.asarray(X)
    except (ValueError, TypeError):
        return True
    return False


def _is_missing_scalar(v) -> bool:
    if v is None:
        return True
    if isinstance(v, float) and np.isnan(v):
        return True
    try:
        import pandas as pd

        return v is pd.NA or v is pd.NaT
    except ImportError:  # pragma: no cover
        return False


def _object_to_float(A: np.ndarray) -> np.ndarray:
    """Convert an object array of labels to float64 (NaN = missing), refusing strings."""
    out = np.empty(A.shape, dtype=np.float64)
    for (i, j), v in np.ndenumerate(A):
        if _is_missing_scalar(v):
            out[i, j] = np.nan
        elif isinstance(v, (bool, np.bool_)):
            out[i, j] = float(v)
        elif isinstance(v, numbers.Real):
            out[i, j] = float(v)
        elif not isinstance(v, (str, bytes, np.str_, np.bytes_, numbers.Number)):
            raise TypeError(
                f"label at row {i}, column {j} is {v!r} of type {type(v).__name__}: the "
                "argument must be an integer, not a string or an object (labels are "
                "integer numbers; missing: -1, NaN or None)"
            )
        else:
            raise ValueError(
                f"label at row {i}, column {j} is {v!r} of type {type(v).__name__}; "
                "labels must be integers (missing: -1, NaN or None)"
            )
    return out


def _is_name(v) -> bool:
    return isinstance(v, (str, np.str_, bytes, np.bytes_))


def _check_name(v, i, j) -> None:
    text = v.decode("utf-8", "replace") if isinstance(v, (bytes, np.bytes_)) else str(v)
    if text == "":
        raise ValueError(f"label at row {i}, column {j} is the empty string; mark a missing "
                         "label with None, NaN or -1")
    if "\x00" in text:
        raise ValueError(f"label at row {i}, column {j} contains a NUL byte ({text!r}): not a "
                         "cluster name; check how the labels were read")
    if "\n" in text or "\r" in text:
        raise ValueError(f"label at row {i}, column {j} contains a line break ({text!r}): not "
                         "a cluster name; check how the labels were read")


def _labels_and_names(A: np.ndarray):
    """``(L, names)``: int64 labels (-1 missing) and, per column, None (integer labels,
    kept as they are) or the sorted distinct original values of a column of *names*
    (strings, or integers beyond int64), which ``L`` then holds as codes ``0..k-1``.

    Columns of names are recoded one by one, as the command line does for a CSV file:
    a pandas frame of cluster names, a string array or an object array of strings
    work.  A column that mixes names and numbers is refused (naming the first name)."""
    if A.dtype.kind == "u" and A.size and A.max() > np.iinfo(np.int64).max:
        return _recode_columns(A.astype(object), [
            bool((A[:, j] > np.iinfo(np.int64).max).any()) for j in range(A.shape[1])])
    if A.dtype.kind in "US":
        # text, as in a file (the command line's rule): a column whose every value is a
        # number written as text holds numbers (so "1.5", "inf" and "-3" are refused as
        # labels there), a column with any other text holds names, all of its values
        A = A.astype(object)
        named = []
        for j in range(A.shape[1]):
            parsed = [_number_text(v) for v in A[:, j]]
            if all(v is not None for v in parsed):
                A[:, j] = parsed
                named.append(False)
            else:
                named.append(True)
        if not any(named):
            return labels_to_int(A.astype(np.float64)), None
        return _recode_columns(A, named)
    if A.dtype == object:
        named = []
        for j in range(A.shape[1]):
            col = A[:, j]
            is_name = np.fromiter((_is_name(v) for v in col), bool, col.size)
            if is_name.any():
                not_name = np.fromiter((not _is_name(v) and not _is_missing_scalar(v)
                                        and not (isinstance(v, numbers.Integral)
                                                 and int(v) == -1)
                                        for v in col), bool, col.size)
                if not_name.any():
                    i = int(np.flatnonzero(is_name)[0])
                    raise ValueError(
                        f"label at row {i}, column {j} is {col[i]!r} of type "
                        f"{type(col[i]).__name__} in a column of numbers (row "
                        f"{int(np.flatnonzero(not_name)[0])}: {col[not_name][0]!r}); a column "
                        "holds either integer labels or names, not both")
            # integers a float64 cannot hold exactly are recoded as names, not rounded
            big = np.fromiter((isinstance(v, numbers.Integral) and not isinstance(v, bool)
                               and abs(int(v)) > 2**53 for v in col), bool, col.size)
            named.append(bool(is_name.any() or big.any()))
        if any(named):
            return _recode_columns(A, named)
    return labels_to_int(A), None


def _number_text(v):
    """The number written as text ``v`` ("3", "-1", "1.5", b"7"; "nan" is missing), or
    None for other text."""
    try:
        text = v.decode() if isinstance(v, (bytes, np.bytes_)) else str(v)
        if text.strip() != text or text == "":
            return None
        return float(text)
    except (ValueError, UnicodeDecodeError):
        return None


def _recode_columns(A: np.ndarray, named):
    """Recode the ``named`` columns of object array ``A`` to ``0..k-1`` (sorted values)."""
    N, M = A.shape
    numeric = A.copy()
    numeric[:, np.asarray(named, dtype=bool)] = 0  # placeholders: errors name true positions
    L = labels_to_int(numeric)
    names = []
    for j in range(M):
        col = A[:, j]
        if not named[j]:
            names.append(None)
            continue
        missing = np.fromiter((_is_missing_scalar(v) for v in col), bool, N)
        values = {}
        for i in np.flatnonzero(~missing):
            v = col[i]
            if _is_name(v):
                _check_name(v, i, j)
            elif isinstance(v, numbers.Integral) and int(v) < -1:
                raise ValueError(f"label at row {i}, column {j} is {v}; negative labels are "
                                 "not allowed except -1, which marks a missing label")
            elif isinstance(v, numbers.Integral) and int(v) == -1:
                missing[i] = True
                continue
            values.setdefault(v, i)
        try:
            order = sorted(values)
        except TypeError:
            kinds = sorted({type(v).__name__ for v in values})
            raise ValueError(f"column {j} mixes label types {kinds}; a column holds either "
                             "integer labels or names") from None
        lookup = {v: c for c, v in enumerate(order)}
        L[:, j] = [-1 if missing[i] else lookup[col[i]] for i in range(N)]
        arr = np.empty(len(order), dtype=object)
        arr[:] = order
        names.append(arr)
    return L, names


def labels_to_int(A: np.ndarray) -> np.ndarray:
    """Validate a 2-D label array and return int64 labels with -1 for missing."""
    if A.dtype == object:
        A = _object_to_float(A)
    if A.dtype.kind in "US":
        # name the first entry that is not even an integer written as text
        where = (0, 0)
        for (i, j), v in np.ndenumerate(A):
            try:
                int(v)
            except ValueError:
                where = (i, j)
                break
        i, j = where
        raise ValueError(
            f"labels are strings (dtype {A.dtype}): label at row {i}, column {j} is "
            f"{str(A[i, j])!r}; labels must be integers (missing: -1 or NaN)"
        )
    if A.dtype.kind == "b":
        return A.astype(np.int64)
    if A.dtype.kind == "u" and A.size and A.max() > np.iinfo(np.int64).max:
        i, j = np.unravel_index(int(np.argmax(A)), A.shape)
        raise ValueError(f"label at row {i}, column {j} is {A[i, j]}, beyond the int64 range "
                         "integer labels are held in")
    if A.dtype.kind in "iu":
        L = A.astype(np.int64)
    elif A.dtype.kind == "f":
        finite = np.isfinite(A)
        inf = np.isinf(A)
        if inf.any():
            i, j = np.argwhere(inf)[0]
            raise ValueError(f"label at row {i}, column {j} is infinite")
        frac = finite & (A != np.round(A))
        if frac.any():
            i, j = np.argwhere(frac)[0]
            raise ValueError(
                f"label at row {i}, column {j} is {float(A[i, j])!r}, not an integer; "
                "labels must be integer-valued (missing: -1 or NaN)"
            )
        L = np.where(finite, A, -1).astype(np.int64)
    else:
        what = "Complex data not supported: " if A.dtype.kind == "c" else ""
        raise ValueError(f"{what}labels must be integers; got dtype {A.dtype}")
    bad = L < -1
    if bad.any():
        i, j = np.argwhere(bad)[0]
        raise ValueError(
            f"label at row {i}, column {j} is {L[i, j]}; negative labels are not allowed "
            "except -1, which marks a missing label"
        )
    return L
