"""The validated, re-coded label matrix that every consensus method consumes.

An ensemble of ``M`` base clusterings of ``N`` points is an ``(N, M)`` matrix of
labels.  :class:`Ensemble` validates it once, re-codes each column to
``0..k_j-1`` (``-1`` marks a missing label) and offers the two representations
the models need:

* the *offset index* (the KCC paper's sparse ``binIDX``): label ``r`` of column
  ``j`` becomes the global index ``offsets[j] + r`` into the concatenated
  one-hot vocabulary of size ``sum_j k_j``; memory is O(N*M);
* :class:`LabelData` (:meth:`Ensemble.label_data`), the offset index laid out once as
  torch tensors for the engines (BCE, GBCE, distributed BCE), with lazily built copies
  in the layouts a kernel wants;
* co-association counts ``c_ij`` (partitions putting i and j together) and
  co-occurrence counts ``N_ij`` (partitions labelling both), either dense for
  small N or for a given set of pairs, never forming an N x N array.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from consensuskit.data.label_input import _labels_and_names, _to_numpy

__all__ = [
    "Ensemble", "LabelData", "as_ensemble", "sample_pairs", "code_dtype", "MISSING",
    "DENSE_COASSOCIATION_LIMIT",
]

#: Code of a missing label in :attr:`Ensemble.codes`.
MISSING = -1
#: Largest N for which :meth:`Ensemble.coassociation` builds dense N x N arrays.
DENSE_COASSOCIATION_LIMIT = 20_000


def code_dtype(n_labels) -> np.dtype:
    """Smallest signed integer type holding codes ``-1..max(n_labels)-1`` (int8 up to 128
    labels per column): the type :attr:`Ensemble.codes` is stored in."""
    top = int(np.max(n_labels)) - 1 if np.size(n_labels) else 0
    for t in (np.int8, np.int16, np.int32):
        if top <= np.iinfo(t).max:
            return np.dtype(t)
    return np.dtype(np.int64)


def _code_integer_columns(A: np.ndarray):
    """Re-code an integer (N, M) array one column at a time (no (N, M) int64 copy).

    Returns ``(codes, n_labels, categories)`` with ``codes`` Fortran-ordered in
    :func:`code_dtype`; raises like :func:`labels_to_int` on labels below -1.
    Peak extra memory: the codes plus a few columns' temporaries.
    """
    N, M = A.shape
    cats = []
    n_labels = np.empty(M, dtype=np.int64)
    # pass 1: the categories of every column (needed for the codes' type)
    for j in range(M):
        col = A[:, j]
        if A.dtype.kind == "i":
            bad = col < -1
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise ValueError(
                    f"label at row {i}, column {j} is {col[i]}; negative labels are not "
                    "allowed except -1, which marks a missing label")
            obs = col >= 0
        else:
            obs = None
        vals = col if obs is None else col[obs]
        uniq = np.unique(vals).astype(np.int64)
        cats.append(uniq)
        n_labels[j] = uniq.size
    dtype = code_dtype(n_labels)
    codes = np.empty((N, M), dtype=dtype, order="F")
    for j in range(M):
        col = A[:, j]
        uniq = cats[j]
        if A.dtype.kind == "i":
            obs = col >= 0
            pos = np.searchsorted(uniq, col).astype(dtype, copy=False)
            codes[:, j] = np.where(obs, pos, dtype.type(MISSING))
        else:
            codes[:, j] = np.searchsorted(uniq, col)
    return codes, n_labels, tuple(cats)


def _check_observed(codes: np.ndarray, allow_missing_rows: bool) -> None:
    """Raise on a column (always) or a row (unless allowed) with no observed label."""
    empty_cols = [j for j in range(codes.shape[1]) if not (codes[:, j] >= 0).any()]
    if empty_cols:
        raise ValueError(
            f"base clustering (column) {empty_cols[0]} has no observed label "
            f"({len(empty_cols)} such column(s)); remove it"
        )
    if not allow_missing_rows:
        seen = np.zeros(codes.shape[0], dtype=bool)
        for j in range(codes.shape[1]):
            seen |= codes[:, j] >= 0
        if not seen.all():
            empty_rows = np.flatnonzero(~seen)
            raise ValueError(
                f"row {empty_rows[0]} has no observed label in any base clustering "
                f"({empty_rows.size} such row(s)); remove it or give it a label"
            )


@dataclass(frozen=True, eq=False)
class Ensemble:
    """A validated ensemble of base clusterings.

    Build one with :meth:`from_labels`; do not call the constructor directly.

    Attributes
    ----------
    codes : ndarray of signed integers, shape (n_samples, n_partitions)
        Label of point ``i`` in base clustering ``j``, re-coded to
        ``0..n_labels[j]-1``; ``-1`` where missing.  Stored once, in the smallest
        signed integer type that holds the codes (:func:`code_dtype`: int8 up to 128
        labels per column), column-major (Fortran order) so that each base clustering
        is contiguous over N.  Cast (``codes.astype(np.int64)``) where an int64 copy is
        needed.
    n_labels : ndarray of int64, shape (n_partitions,)
        Number of distinct labels ``k_j`` of each base clustering.
    categories : tuple of ndarray
        ``categories[j][r]`` is the original label that code ``r`` of column
        ``j`` stands for.
    """

    codes: np.ndarray
    n_labels: np.ndarray
    categories: tuple = field(repr=False)

    def __getstate__(self):  # the engines' cached layouts are not part of the data
        return {k: v for k, v in self.__dict__.items() if k != "_label_data"}

    # -- construction -------------------------------------------------------
    @classmethod
    def from_labels(cls, X, *, allow_missing_rows: bool = False) -> Ensemble:
        """Validate and re-code a label matrix.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_partitions)
            numpy array, torch tensor, pandas DataFrame or nested list of integer
            labels.  ``-1``, NaN, None or ``pandas.NA`` mark a missing label.
        allow_missing_rows : bool, default False
            Accept rows whose labels are all missing (used when folding in new
            rows; never for fitting).

        Raises
        ------
        ValueError
            Wrong rank, empty input, non-integer or string labels, negative
            labels other than -1, an all-missing row or column; the message
            names the offending row or column.
        """
        if isinstance(X, Ensemble):
            return X
        A = _to_numpy(X)
        if A.ndim != 2:
            hint = (
                " (Reshape your data with X.reshape(-1, 1) if it holds a single base clustering)"
                if A.ndim == 1
                else ""
            )
            raise ValueError(
                f"labels must be 2-D of shape (n_samples, n_partitions); got {A.ndim}-D "
                f"with shape {A.shape}{hint}"
            )
        if A.shape[0] == 0 or A.shape[1] == 0:
            what = (
                f"0 sample(s) (shape={A.shape}) while a minimum of 1 is required"
                if A.shape[0] == 0
                else f"0 feature(s) (shape={A.shape}) while a minimum of 1 is required"
            )
            raise ValueError(
                f"labels are empty: {what}; need at least one sample and one base clustering"
            )
        if A.dtype.kind in "iu" and A.dtype != np.uint64:
            # integer input: re-coded a column at a time, no (N, M) int64 copy
            codes, n_labels, cats = _code_integer_columns(A)
            _check_observed(codes, allow_missing_rows)
            return cls(codes=codes, n_labels=n_labels, categories=cats)
        L, names = _labels_and_names(A)
        _check_observed(L, allow_missing_rows)
        N, M = L.shape
        cats, uniqs = [], []
        n_labels = np.empty(M, dtype=np.int64)
        for j in range(M):
            uniq = np.unique(L[L[:, j] >= 0, j])
            uniqs.append(uniq)
            # a column of names holds their codes in L; its categories are the names
            cats.append(uniq if names is None or names[j] is None else names[j][uniq])
            n_labels[j] = uniq.size
        codes = np.full((N, M), MISSING, dtype=code_dtype(n_labels), order="F")
        for j in range(M):
            obs = L[:, j] >= 0
            codes[obs, j] = np.searchsorted(uniqs[j], L[obs, j])
        return cls(codes=codes, n_labels=n_labels, categories=tuple(cats))

    def encode(self, X, *, unknown: str = "error") -> Ensemble:
        """Re-code new rows with this ensemble's per-column label coding.

        Used to fold in rows not seen in ``fit``.  ``unknown="error"`` raises on a
        label never seen in that column; ``unknown="missing"`` treats it as missing.
        Rows whose labels are all missing are allowed here.
        """
        if unknown not in ("error", "missing"):
            raise ValueError(f"unknown must be 'error' or 'missing'; got {unknown!r}")
        if isinstance(X, Ensemble):
            if X is self:
                return self
            X = X.decode()
        A = _to_numpy(X)
        if A.ndim != 2:
            hint = " (Reshape your data with X.reshape(1, -1) for one row)" if A.ndim == 1 else ""
            raise ValueError(f"labels must be 2-D; got {A.ndim}-D with shape {A.shape}{hint}")
        if A.shape[1] != self.n_partitions:
            raise ValueError(
                f"X has {A.shape[1]} base clusterings (columns); the fitted ensemble has "
                f"{self.n_partitions}"
            )
        if A.shape[0] == 0:
            raise ValueError("X has no rows")
        L, names = _labels_and_names(A)
        codes = np.full(L.shape, MISSING, dtype=self.codes.dtype, order="F")
        for j in range(self.n_partitions):
            col = L[:, j]
            obs = np.flatnonzero(col >= 0)
            cats = self.categories[j]
            if cats.dtype == object or (names is not None and names[j] is not None):
                self._encode_named(codes, col, obs, j, names, unknown)
                continue
            pos = np.searchsorted(cats, col[obs])
            pos_c = np.minimum(pos, cats.size - 1)
            hit = cats[pos_c] == col[obs]
            if not hit.all():
                if unknown == "error":
                    i = obs[np.flatnonzero(~hit)[0]]
                    raise ValueError(
                        f"label {col[i]} at row {i}, column {j} was not seen in this column "
                        "during fit (pass unknown='missing' to treat it as missing)"
                    )
            codes[obs[hit], j] = pos_c[hit]
        return Ensemble(codes=codes, n_labels=self.n_labels.copy(), categories=self.categories)

    def _encode_named(self, codes, col, obs, j, names, unknown) -> None:
        """Codes of column ``j`` of new rows where the fitted or the new column holds names
        (matched by value: the name "3" is not the integer 3)."""
        values = col if names is None or names[j] is None else None
        lookup = {v: c for c, v in enumerate(self.categories[j].tolist())}
        for i in obs:
            v = int(values[i]) if values is not None else names[j][col[i]]
            c = lookup.get(v)
            if c is None:
                if unknown == "error":
                    raise ValueError(
                        f"label {v!r} at row {i}, column {j} was not seen in this column "
                        "during fit (pass unknown='missing' to treat it as missing)")
                continue
            codes[i, j] = c

    def decode(self) -> np.ndarray:
        """The labels in their original values (int64, -1 missing; an object array, None
        missing, when a column holds names)."""
        if any(c.dtype == object for c in self.categories):
            out = np.full(self.codes.shape, None, dtype=object)
            for j, cats in enumerate(self.categories):
                obs = self.codes[:, j] >= 0
                out[obs, j] = cats[self.codes[obs, j]]
            return out
        out = np.full(self.codes.shape, MISSING, dtype=np.int64)
        for j, cats in enumerate(self.categories):
            obs = self.codes[:, j] >= 0
            out[obs, j] = cats[self.codes[obs, j]]
        return out

    # -- shape and masks ------------------------------------------------------
    @property
    def n_samples(self) -> int:
        """Number of points N (rows)."""
        return int(self.codes.shape[0])

    @property
    def n_partitions(self) -> int:
        """Number of base clusterings M (columns)."""
        return int(self.codes.shape[1])

    @property
    def shape(self) -> tuple[int, int]:
        """``(n_samples, n_partitions)``."""
        return self.codes.shape

    def __len__(self) -> int:
        return self.n_samples

    def __repr__(self) -> str:
        miss = 1.0 - self.mask.mean()
        return (
            f"Ensemble(n_samples={self.n_samples}, n_partitions={self.n_partitions}, "
            f"n_labels={self.n_labels.tolist() if self.n_partitions <= 12 else '...'}, "
            f"missing={miss:.1%})"
        )

    @property
    def mask(self) -> np.ndarray:
        """Boolean (n_samples, n_partitions): True where the label is observed."""
        return self.codes >= 0

    @property
    def n_observed(self) -> int:
        """Number of observed labels (the denominator of perplexity)."""
        return int(np.count_nonzero(self.codes >= 0))

    @property
    def has_missing(self) -> bool:
        """True if any label is missing."""
        return bool((self.codes < 0).any())

    def subset(self, rows) -> Ensemble:
        """The ensemble restricted to ``rows`` (indices or boolean mask), same coding."""
        codes = np.asfortranarray(self.codes[rows])
        return Ensemble(codes=codes, n_labels=self.n_labels.copy(), categories=self.categories)

    # -- one-hot / offset-index representation -------------------------------
    @property
    def offsets(self) -> np.ndarray:
        """Start of each column's block in the concatenated one-hot vocabulary, (M+1,)."""
        return np.concatenate([[0], np.cumsum(self.n_labels)]).astype(np.int64)

    @property
    def n_total_labels(self) -> int:
        """Size of the concatenated one-hot vocabulary, ``sum_j k_j``."""
        return int(self.n_labels.sum())

    def offset_index(self, dtype=np.int64, order="F") -> np.ndarray:
        """``(n_samples, n_partitions)`` global one-hot index, ``-1`` where missing.

        This is the KCC paper's ``binIDX``: O(N*M) memory instead of the
        ``N x sum_j k_j`` binary matrix.  ``dtype`` (a signed integer type that holds
        ``sum_j k_j``) and ``order`` ("F" or "C") of the result, built directly in them
        (the NBCE sampler reads int32 rows: no int64 copy on the way).
        """
        dtype = np.dtype(dtype)
        if dtype.kind != "i" or self.n_total_labels > np.iinfo(dtype).max:
            raise ValueError(f"offset_index: {dtype} cannot hold {self.n_total_labels} labels")
        out = np.empty(self.codes.shape, dtype=dtype, order=order)
        for j, off in enumerate(self.offsets[:-1]):  # a column at a time: no temporaries
            col = self.codes[:, j]
            np.add(col, np.int64(off), out=out[:, j], casting="unsafe")  # int64 arithmetic
            out[col < 0, j] = MISSING
        return out

    def label_data(self, device="cpu", dtype=None) -> LabelData:
        """The labels laid out for the engines (built once per device and dtype, cached).

        ``dtype`` is the floating dtype of the mask and row counts (default float64).
        """
        import torch

        dtype = torch.float64 if dtype is None else dtype
        cache = self.__dict__.setdefault("_label_data", {})
        key = (str(torch.device(device)), dtype)
        if key not in cache:
            cache[key] = LabelData.build(self, device, dtype)
        return cache[key]

    def onehot(self, dtype=np.float64) -> sp.csr_matrix:
        """Sparse ``(n_samples, sum_j k_j)`` one-hot matrix of the observed labels."""
        idx = self.offset_index()
        rows, cols = np.nonzero(idx >= 0)
        data = np.ones(rows.size, dtype=dtype)
        return sp.csr_matrix(
            (data, (rows, idx[rows, cols])), shape=(self.n_samples, self.n_total_labels)
        )

    # -- co-association -------------------------------------------------------
    def coassociation(self, pairs=None, *, weights=None):
        """Co-association counts ``c`` and co-occurrence counts ``n``.

        ``c_ij`` counts the base clusterings that put i and j in the same cluster;
        ``n_ij`` counts those that label both (``n_ij = M`` for complete
        ensembles).  With ``weights`` (shape (M,)) each base clustering counts
        with its weight instead of 1.

        Parameters
        ----------
        pairs : None or array-like of int, shape (n_pairs, 2)
            None: dense ``(N, N)`` arrays (only for N <= DENSE_COASSOCIATION_LIMIT).
            Otherwise the counts for these pairs only, computed one base
            clustering at a time in O(n_pairs * M) time and O(n_pairs) memory.

        Returns
        -------
        c, n : ndarray
            Shape (N, N) each when ``pairs`` is None, else (n_pairs,) each;
            int64 without weights, float64 with.
        """
        w = None
        if weights is not None:
            w = np.asarray(weights, dtype=np.float64)
            if w.shape != (self.n_partitions,):
                raise ValueError(
                    f"weights must have shape ({self.n_partitions},); got {w.shape}"
                )
            if not np.all(np.isfinite(w)) or (w < 0).any():
                raise ValueError("weights must be finite and non-negative")
        if pairs is None:
            return self._coassociation_dense(w)
        return self._coassociation_pairs(pairs, w)

    def _coassociation_dense(self, w):
        N = self.n_samples
        if N > DENSE_COASSOCIATION_LIMIT:
            raise ValueError(
                f"dense co-association for N={N} would need {N}x{N} arrays; pass "
                f"pairs=... (e.g. from sample_pairs) for N > {DENSE_COASSOCIATION_LIMIT}"
            )
        B = self.onehot(dtype=np.float64)
        obs = sp.csr_matrix(self.mask.astype(np.float64))
        if w is not None:
            B = B @ sp.diags(np.repeat(w, self.n_labels))
            c = (B @ self.onehot(dtype=np.float64).T).toarray()
            n = (obs @ sp.diags(w) @ obs.T).toarray()
            return c, n
        c = np.rint((B @ B.T).toarray()).astype(np.int64)
        n = np.rint((obs @ obs.T).toarray()).astype(np.int64)
        return c, n

    def _coassociation_pairs(self, pairs, w):
        P = np.asarray(pairs)
        if P.ndim != 2 or P.shape[1] != 2:
            raise ValueError(f"pairs must have shape (n_pairs, 2); got {P.shape}")
        if P.dtype.kind not in "iu":
            raise ValueError(f"pairs must be integer indices; got dtype {P.dtype}")
        if P.size and (P.min() < 0 or P.max() >= self.n_samples):
            raise ValueError(f"pair indices must lie in [0, {self.n_samples})")
        a = np.ascontiguousarray(P[:, 0], dtype=np.intp)
        b = np.ascontiguousarray(P[:, 1], dtype=np.intp)
        dtype = np.int64 if w is None else np.float64
        c = np.zeros(a.size, dtype=dtype)
        n = np.zeros(a.size, dtype=dtype)
        complete = not self.has_missing
        for j in range(self.n_partitions):
            col = self.codes[:, j]  # contiguous: Fortran order
            ca = col.take(a)
            cb = col.take(b)
            same = ca == cb
            if complete:
                both = None
            else:
                both = (ca >= 0) & (cb >= 0)
                same &= both
            if w is None:
                c += same
                n += 1 if complete else both
            else:
                c += w[j] * same
                n += w[j] if complete else w[j] * both
        return c, n


def sample_pairs(n_samples: int, n_pairs: int, random_state=None) -> np.ndarray:
    """Draw ``n_pairs`` distinct unordered pairs ``i < j`` uniformly, without an N x N array.

    Returns int64 array of shape (n_pairs, 2), sorted lexicographically.
    """
    from sklearn.utils import check_random_state

    total = n_samples * (n_samples - 1) // 2
    if n_pairs > total:
        raise ValueError(f"asked for {n_pairs} pairs; only {total} exist for N={n_samples}")
    rng = check_random_state(random_state)
    chosen = np.empty(0, dtype=np.int64)
    while chosen.size < n_pairs:
        need = n_pairs - chosen.size
        draw = rng.randint(0, total, size=int(need * 1.1) + 16, dtype=np.int64)
        merged = np.sort(np.concatenate([chosen, draw]))
        # sorted distinct values (same result as np.unique, several times faster here)
        keep = np.empty(merged.size, dtype=bool)
        keep[:1] = True
        np.not_equal(merged[1:], merged[:-1], out=keep[1:])
        chosen = merged[keep]
    chosen = rng.permutation(chosen)[:n_pairs]
    chosen.sort()
    # invert the linear index k -> (i, j), i < j, rows of the strict upper triangle
    n = n_samples
    i = (n - 2 - np.floor(np.sqrt(-8.0 * chosen + 4.0 * n * (n - 1) - 7) / 2.0 - 0.5)).astype(
        np.int64
    )
    start = i * (2 * n - i - 1) // 2
    # guard against floating rounding at the boundaries
    over = chosen < start
    while over.any():
        i[over] -= 1
        start = i * (2 * n - i - 1) // 2
        over = chosen < start
    under = chosen >= start + (n - 1 - i)
    while under.any():
        i[under] += 1
        start = i * (2 * n - i - 1) // 2
        under = chosen >= start + (n - 1 - i)
    j = chosen - start + i + 1
    return np.stack([i, j], axis=1)


@dataclass(eq=False)
class LabelData:
    """The label layout every engine reads, built once from an :class:`Ensemble`.

    The vocabulary is the offset index: label ``r`` of column ``j`` is global label
    ``offsets[j] + r``; ``L = sum_j k_j``.  A missing label points at a *dummy* global
    label ``L`` (whose parameters engines fix to 1) and is zeroed by ``mask``, so
    gathers need no branch.  Per-row arrays keep ``N`` last (contiguous).

    Attributes
    ----------
    idx : LongTensor (M, N)
        Global label index of ``x_ij``; ``L`` where missing.
    mask : Tensor (M, N) or None
        1.0 where observed, 0.0 where missing; None when nothing is missing.
    n_observed_rows : Tensor (N,)
        ``V_i``, the number of observed labels of row ``i``.
    offsets : ndarray of int64 (M + 1,)
    n_labels : ndarray of int64 (M,)
    """

    idx: object
    mask: object
    n_observed_rows: object
    offsets: np.ndarray
    n_labels: np.ndarray

    @classmethod
    def build(cls, ensemble: Ensemble, device="cpu", dtype=None) -> LabelData:
        import torch

        dtype = torch.float64 if dtype is None else dtype
        L = ensemble.n_total_labels
        codes = ensemble.codes
        N, M = codes.shape
        # filled a column at a time: no (N, M) temporaries beside the two results
        gidx = np.empty((M, N), dtype=np.int64)
        counts = np.zeros(N, dtype=np.int32)
        missing = ensemble.has_missing
        mask_np = np.empty((M, N), dtype=torch.empty(0, dtype=dtype).numpy().dtype) \
            if missing else None
        for j, off in enumerate(ensemble.offsets[:-1]):
            col = codes[:, j]
            obs = col >= 0
            np.add(col, np.int64(off), out=gidx[j])
            gidx[j, ~obs] = L
            counts += obs
            if missing:
                mask_np[j] = obs
        idx = torch.as_tensor(gidx, device=device)
        mask = None if mask_np is None else torch.as_tensor(mask_np, device=device)
        V = torch.as_tensor(counts, device=device, dtype=dtype)
        return cls(idx=idx, mask=mask, n_observed_rows=V, offsets=ensemble.offsets,
                   n_labels=np.asarray(ensemble.n_labels))

    @property
    def n_rows(self) -> int:
        return int(self.idx.shape[1])

    @property
    def n_partitions(self) -> int:
        return int(self.idx.shape[0])

    @property
    def n_total_labels(self) -> int:
        return int(self.offsets[-1])

    @property
    def column_of(self) -> np.ndarray:
        """Column ``j`` of each global label, int64 (L,)."""
        return np.repeat(np.arange(self.n_labels.size), self.n_labels)

    def column(self, j: int, rows: slice = slice(None)):
        """``(idx_j, mask_j)`` of base clustering ``j`` for a slice of rows."""
        m = None if self.mask is None else self.mask[j, rows]
        return self.idx[j, rows], m

    def weighted_rows(self, weights=None):
        """``sum_j w_j [x_ij observed]`` (N,); ``V_i`` when ``weights`` is None."""
        if weights is None:
            return self.n_observed_rows
        obs = (self.idx < self.n_total_labels).to(self.n_observed_rows.dtype)
        return (weights.to(obs.dtype)[:, None] * obs).sum(0)

    def row_layout(self):
        """Cached numpy ``(idx (N, M) int32, mask (N, M) or None)``, row-major (CPU kernels)."""
        cache = self.__dict__.setdefault("_rows_cache", {})
        if "v" not in cache:
            idx = np.ascontiguousarray(self.idx.cpu().numpy().T, dtype=np.int32)
            mask = None if self.mask is None else np.ascontiguousarray(
                self.mask.cpu().numpy().T)
            cache["v"] = (idx, mask)
        return cache["v"]


def as_ensemble(X) -> Ensemble:
    """Return ``X`` if it is an :class:`Ensemble`, else ``Ensemble.from_labels(X)``."""
    return X if isinstance(X, Ensemble) else Ensemble.from_labels(X)

