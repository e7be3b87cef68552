"""Ensemble: validation, re-coding, missing values, fold-in coding, co-association."""

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import random_incomplete_labels

from consensuskit.data.ensemble import (
    DENSE_COASSOCIATION_LIMIT,
    Ensemble,
    as_ensemble,
    sample_pairs,
)

# -- bad input: each raises ValueError naming the problem --------------------------


@pytest.mark.parametrize(
    "X, pattern",
    [
        (np.array([0, 1, 2]), r"2-D.*1-D.*reshape"),
        (np.zeros((2, 2, 2), dtype=int), r"2-D.*3-D"),
        (np.zeros((0, 3), dtype=int), r"empty"),
        (np.zeros((3, 0), dtype=int), r"empty"),
        ([[0, 1], [-1, -1], [1, 0]], r"row 1 has no observed label"),
        ([[0, -1], [1, -1], [1, -1]], r"column\) 1 has no observed label"),
        (np.array([[0.0, 1.0], [1.0, 2.5]]), r"row 1, column 1 is 2.5, not an integer"),
        ([[0, 1], [1, "a"]], r"row 1, column 1 is 'a'"),
        (np.array([["a", "b"], ["c\x00x", "d"]]), r"row 1, column 0 contains a NUL byte"),
        (np.array([[0, 1], [2, "x"]], dtype=object), r"row 1, column 1 is 'x' of type str"),
        (pd.DataFrame({"a": [0, 1], "b": [1, "y"]}), r"row 1, column 1 is 'y'"),
        ([[0, 1], [-3, 0]], r"row 1, column 0 is -3; negative labels"),
        (np.array([[0.0, 1.0], [np.inf, 0.0]]), r"row 1, column 0 is infinite"),
        (5, r"scalar"),
    ],
)
def test_bad_input_raises_naming_the_problem(X, pattern):
    with pytest.raises(ValueError, match=pattern):
        Ensemble.from_labels(X)


def test_all_missing_row_allowed_only_on_request():
    X = [[0, 1], [-1, -1], [1, 0]]
    ens = Ensemble.from_labels(X, allow_missing_rows=True)
    assert (ens.codes[1] == -1).all()


# -- re-coding ------------------------------------------------------------------------


def test_recoding_arbitrary_integers_per_column():
    X = np.array([[10, 7], [-1, 7], [30, 2], [10, 100]])
    ens = Ensemble.from_labels(X)
    # column 0: {10, 30} -> {0, 1}; column 1: {2, 7, 100} -> {0, 1, 2}
    np.testing.assert_array_equal(ens.codes, [[0, 1], [-1, 1], [1, 0], [0, 2]])
    np.testing.assert_array_equal(ens.n_labels, [2, 3])
    assert ens.codes.dtype == np.int8 and ens.codes.flags.f_contiguous  # smallest type
    np.testing.assert_array_equal(ens.decode(), X)
    assert ens.n_observed == 7 and ens.has_missing


@pytest.mark.parametrize("missing", [np.nan, None, pd.NA])
def test_nan_none_pandas_na_are_missing(missing):
    X = [[0, 5], [missing, 6], [2, missing]]
    ens = Ensemble.from_labels(X)
    np.testing.assert_array_equal(ens.mask, [[True, True], [False, True], [True, False]])


def test_pandas_nullable_int_frame():
    df = pd.DataFrame({"a": pd.array([1, None, 3], dtype="Int64"), "b": [0, 0, 1]})
    ens = Ensemble.from_labels(df)
    np.testing.assert_array_equal(ens.codes, [[0, 0], [-1, 0], [1, 1]])


def test_torch_pandas_list_numpy_agree():
    X = np.array([[3, 1], [3, 0], [4, 1]])
    ref = Ensemble.from_labels(X).codes
    for variant in (torch.tensor(X), pd.DataFrame(X), X.tolist(), X.astype(float)):
        np.testing.assert_array_equal(Ensemble.from_labels(variant).codes, ref)
    assert as_ensemble(X).n_samples == 3
    ens = Ensemble.from_labels(X)
    assert as_ensemble(ens) is ens


# -- fold-in coding and subsets -------------------------------------------------------


def test_encode_new_rows_uses_fit_coding():
    ens = Ensemble.from_labels([[10, 7], [30, 2], [10, 100]])
    new = ens.encode([[30, 100], [-1, 2]])
    np.testing.assert_array_equal(new.codes, [[1, 2], [-1, 0]])
    np.testing.assert_array_equal(new.n_labels, ens.n_labels)


def test_encode_unknown_label_error_or_missing():
    ens = Ensemble.from_labels([[10, 7], [30, 2]])
    with pytest.raises(ValueError, match=r"label 99 at row 0, column 1 was not seen"):
        ens.encode([[10, 99]])
    got = ens.encode([[10, 99], [5, 2]], unknown="missing")
    np.testing.assert_array_equal(got.codes, [[0, -1], [-1, 0]])
    with pytest.raises(ValueError, match="columns"):
        ens.encode([[1, 2, 3]])
    with pytest.raises(ValueError, match="unknown must be"):
        ens.encode([[10, 7]], unknown="skip")


def test_subset_keeps_coding():
    ens = Ensemble.from_labels([[10, 7], [30, 2], [10, 100]])
    sub = ens.subset([2, 0])
    np.testing.assert_array_equal(sub.codes, [[0, 2], [0, 1]])
    np.testing.assert_array_equal(sub.n_labels, ens.n_labels)
    sub2 = ens.subset(np.array([True, False, True]))
    assert sub2.n_samples == 2


def test_offset_index_and_onehot():
    ens = Ensemble.from_labels([[0, 1], [1, -1], [0, 0]])
    # offsets: column 0 has 2 labels, so column 1 starts at 2
    np.testing.assert_array_equal(ens.offsets, [0, 2, 4])
    np.testing.assert_array_equal(ens.offset_index(), [[0, 3], [1, -1], [0, 2]])
    B = ens.onehot().toarray()
    np.testing.assert_array_equal(B, [[1, 0, 0, 1], [0, 1, 0, 0], [1, 0, 1, 0]])


def test_label_data_is_the_offset_index_with_a_dummy_label_built_once():
    import pickle

    ens = Ensemble.from_labels([[0, 1], [1, -1], [0, 0]])
    d = ens.label_data(dtype=torch.float32)
    # (M, N) global index, the dummy label L = 4 where missing, a mask zeroing it
    np.testing.assert_array_equal(d.idx.numpy(), [[0, 1, 0], [3, 4, 2]])
    np.testing.assert_array_equal(d.mask.numpy(), [[1, 1, 1], [1, 0, 1]])
    assert d.mask.dtype == torch.float32
    np.testing.assert_array_equal(d.n_observed_rows.numpy(), [2, 1, 2])
    np.testing.assert_array_equal(d.column_of, [0, 0, 1, 1])
    np.testing.assert_array_equal(d.weighted_rows(torch.tensor([2.0, 0.5])).numpy(),
                                  [2.5, 2.0, 2.5])
    idx_rows, mask_rows = d.row_layout()
    np.testing.assert_array_equal(idx_rows, d.idx.numpy().T)
    assert idx_rows.flags.c_contiguous and mask_rows.shape == (3, 2)
    # cached per device and dtype, and not written into a pickled ensemble
    assert ens.label_data(dtype=torch.float32) is d
    assert ens.label_data() is not d and ens.label_data().mask.dtype == torch.float64
    back = pickle.loads(pickle.dumps(ens))
    assert "_label_data" not in back.__dict__
    assert Ensemble.from_labels([[0, 1], [1, 0]]).label_data().mask is None


# -- co-association -------------------------------------------------------------------


def _coassoc_bruteforce(codes, w=None):
    N, M = codes.shape
    w = np.ones(M) if w is None else w
    c = np.zeros((N, N))
    n = np.zeros((N, N))
    for j in range(M):
        a = codes[:, j]
        both = (a[:, None] >= 0) & (a[None, :] >= 0)
        n += w[j] * both
        c += w[j] * (both & (a[:, None] == a[None, :]))
    return c, n


def test_coassociation_dense_matches_bruteforce(incomplete_labels):
    ens = Ensemble.from_labels(incomplete_labels)
    c, n = ens.coassociation()
    cb, nb = _coassoc_bruteforce(ens.codes)
    np.testing.assert_array_equal(c, cb)
    np.testing.assert_array_equal(n, nb)
    assert c.dtype == np.int64
    assert (np.diag(n) == ens.mask.sum(axis=1)).all()


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("weighted", [False, True])
def test_coassociation_dense_and_pairs_agree(seed, weighted):
    rng = np.random.default_rng(seed)
    X = random_incomplete_labels(rng, n=60, m=7, k=(2, 6), missing=0.3)
    ens = Ensemble.from_labels(X)
    w = rng.random(7) if weighted else None
    c, n = ens.coassociation(weights=w)
    pairs = sample_pairs(60, 500, random_state=seed)
    cp, np_ = ens.coassociation(pairs, weights=w)
    np.testing.assert_allclose(cp, c[pairs[:, 0], pairs[:, 1]], rtol=0, atol=1e-12)
    np.testing.assert_allclose(np_, n[pairs[:, 0], pairs[:, 1]], rtol=0, atol=1e-12)
    if weighted:
        cb, nb = _coassoc_bruteforce(ens.codes, w)
        np.testing.assert_allclose(c, cb, atol=1e-12)
        np.testing.assert_allclose(n, nb, atol=1e-12)


def test_coassociation_pairs_complete_ensemble():
    rng = np.random.default_rng(3)
    X = rng.integers(0, 4, size=(50, 5))
    ens = Ensemble.from_labels(X)
    c, n = ens.coassociation()
    pairs = sample_pairs(50, 300, random_state=1)
    cp, np_ = ens.coassociation(pairs)
    np.testing.assert_array_equal(cp, c[pairs[:, 0], pairs[:, 1]])
    assert (np_ == 5).all()


def test_coassociation_input_checks():
    ens = Ensemble.from_labels([[0, 1], [1, 0], [0, 0]])
    with pytest.raises(ValueError, match="weights must have shape"):
        ens.coassociation(weights=[1.0])
    with pytest.raises(ValueError, match="non-negative"):
        ens.coassociation(weights=[1.0, -1.0])
    with pytest.raises(ValueError, match=r"shape \(n_pairs, 2\)"):
        ens.coassociation(np.array([0, 1]))
    with pytest.raises(ValueError, match="lie in"):
        ens.coassociation(np.array([[0, 3]]))
    big = Ensemble.from_labels(np.zeros((DENSE_COASSOCIATION_LIMIT + 1, 1), dtype=int))
    with pytest.raises(ValueError, match="pairs="):
        big.coassociation()


@pytest.mark.parametrize("n, n_pairs", [(2, 1), (10, 45), (1000, 5000), (200_000, 20_000)])
def test_sample_pairs_distinct_and_in_range(n, n_pairs):
    P = sample_pairs(n, n_pairs, random_state=0)
    assert P.shape == (n_pairs, 2) and P.dtype == np.int64
    assert (P[:, 0] >= 0).all() and (P[:, 1] < n).all() and (P[:, 0] < P[:, 1]).all()
    assert np.unique(P[:, 0] * n + P[:, 1]).size == n_pairs
    np.testing.assert_array_equal(P, sample_pairs(n, n_pairs, random_state=0))


def test_sample_pairs_covers_all_pairs_and_rejects_too_many():
    P = sample_pairs(10, 45, random_state=1)  # every pair of 10 points
    expected = np.array([(i, j) for i in range(10) for j in range(i + 1, 10)])
    np.testing.assert_array_equal(P, expected)
    with pytest.raises(ValueError, match="only 45 exist"):
        sample_pairs(10, 46)


@pytest.mark.parametrize("k, dtype", [(2, np.int8), (128, np.int8), (129, np.int16),
                                      (40000, np.int32)])
@pytest.mark.parametrize("source", ["int64", "uint16", "float"])
def test_codes_stored_in_smallest_integer_type(k, dtype, source):
    """Codes -1..k-1 take the smallest signed type; same codes from every input type."""
    rng = np.random.default_rng(k)
    X = np.stack([rng.permutation(np.arange(k) * 3 + 1), np.arange(k) % 2], axis=1)
    if source == "uint16" and X.max() > np.iinfo(np.uint16).max:
        pytest.skip("labels do not fit uint16")
    Y = X.astype(np.float64 if source == "float" else source)
    if source != "uint16" and k > 2:  # k = 2: row 0 holds column 1's only label 0
        Y[0, 1] = -1
        X = X.copy()
        X[0, 1] = -1
    ens = Ensemble.from_labels(Y)
    assert ens.codes.dtype == dtype and ens.codes.flags.f_contiguous
    np.testing.assert_array_equal(ens.decode(), X)
    np.testing.assert_array_equal(ens.n_labels, [k, 2])
    assert ens.encode(X).codes.dtype == dtype


def test_offset_index_and_label_data_from_small_codes_do_not_overflow():
    """int8 codes with offsets beyond 127: the global index is computed in int64."""
    rng = np.random.default_rng(0)
    X = np.stack([rng.permutation(100) for _ in range(3)], axis=1)
    X[5, 1] = -1
    ens = Ensemble.from_labels(X)
    assert ens.codes.dtype == np.int8
    codes = ens.codes.astype(np.int64)
    want = np.where(codes >= 0, codes + np.array([0, 100, 199]), -1)  # k = 100, 99, 100
    assert want.max() == 298
    np.testing.assert_array_equal(ens.offset_index(), want)
    data = ens.label_data()
    np.testing.assert_array_equal(data.idx.numpy().T, np.where(want >= 0, want, 299))
    np.testing.assert_array_equal(data.mask.numpy().T, (X >= 0).astype(float))
    np.testing.assert_array_equal(data.n_observed_rows.numpy(), (X >= 0).sum(1))
