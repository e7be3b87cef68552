"""The labels as NBCE's kernels read them: a pair ``(codes, offsets)`` (:func:`sampler_rows`),
or the (N, M) global label index (:func:`sampler_index`) that callers may still pass."""

from __future__ import annotations

import numpy as np

__all__ = ["sampler_index", "sampler_rows"]


def sampler_index(idx) -> np.ndarray:
    """The (N, M) global label index as the kernels read it: C-ordered, int16 kept as it
    is (2 bytes per label), any other integer type as int32."""
    idx = np.asarray(idx)
    dtype = np.int16 if idx.dtype == np.int16 else np.int32
    return np.ascontiguousarray(idx, dtype=dtype)


def sampler_rows(labels) -> tuple:
    """The rows as the kernels read them: ``(codes, offsets)``, ``codes`` (N, M) C-ordered
    signed integers (-1 missing) and ``offsets`` int64 (M,), row ``n``'s label in column
    ``m`` being the global label ``offsets[m] + codes[n, m]``.

    ``labels``: such a pair (the estimator passes the ensemble's codes, int8 when every
    column has under 128 labels: one byte per label, where the int16 global index took
    two; issue 27), or an (N, M) global label index (:func:`sampler_index`, offsets 0).
    """
    if isinstance(labels, tuple):
        codes, offsets = labels
        codes = np.asarray(codes)
        if codes.ndim != 2 or codes.dtype.kind != "i":
            raise ValueError("codes must be a 2-d array of signed integers; got "
                             f"{codes.dtype} with shape {codes.shape}")
        offsets = np.ascontiguousarray(offsets, dtype=np.int64)
        if offsets.shape[0] < codes.shape[1]:
            raise ValueError(f"{codes.shape[1]} columns need {codes.shape[1]} offsets; got "
                             f"{offsets.shape[0]}")
        return np.ascontiguousarray(codes), offsets[:codes.shape[1]]
    idx = sampler_index(labels)
    return idx, np.zeros(idx.shape[1], dtype=np.int64)
