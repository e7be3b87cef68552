"""Base-clustering generators and drop_labels."""

import numpy as np
import pytest

from consensuskit.data import generate
from consensuskit.data.ensemble import Ensemble
from consensuskit.data.generate import noisy_copies


@pytest.fixture(scope="module")
def blobs():
    rng = np.random.default_rng(0)
    centers = np.array([[0.0, 0.0], [6.0, 0.0], [0.0, 6.0]])
    X = np.vstack([c + rng.standard_normal((30, 2)) for c in centers])
    y = np.repeat(np.arange(3), 30)
    return X, y


def _check_matrix(L, n, M):
    assert L.shape == (n, M) and L.dtype == np.int64
    assert (L >= -1).all()
    for j in range(M):
        obs = L[:, j][L[:, j] >= 0]
        # labels of each column are 0..k_j-1 without gaps
        np.testing.assert_array_equal(np.unique(obs), np.arange(obs.max() + 1))
    Ensemble.from_labels(L)  # no empty row or column


def test_kmeans_partitions_k_range_and_determinism(blobs):
    X, _ = blobs
    L = generate.kmeans_partitions(X, 25, n_clusters=(2, 5), random_state=1)
    _check_matrix(L, 90, 25)
    k = L.max(axis=0) + 1
    assert k.min() >= 2 and k.max() <= 5
    assert len(set(k.tolist())) >= 3  # k really varies over the range
    assert (L >= 0).all()  # complete without subsample
    np.testing.assert_array_equal(L, generate.kmeans_partitions(X, 25, (2, 5), random_state=1))
    assert not np.array_equal(L, generate.kmeans_partitions(X, 25, (2, 5), random_state=2))


def test_kmeans_partitions_fixed_k_finds_blobs(blobs):
    from consensuskit.evaluation.metrics import accuracy

    X, y = blobs
    L = generate.kmeans_partitions(X, 5, n_clusters=3, random_state=0, n_init=3)
    assert (L.max(axis=0) == 2).all()
    assert max(accuracy(y, L[:, j]) for j in range(5)) == 1.0


def test_kmeans_partitions_subsample_incomplete(blobs):
    X, _ = blobs
    L = generate.kmeans_partitions(X, 3, n_clusters=3, subsample=0.3, random_state=0)
    _check_matrix(L, 90, 3)
    # about 27 of 90 rows per partition, plus rows given a label so none stays empty
    counts = (L >= 0).sum(axis=0)
    assert (counts >= 27).all() and counts.sum() <= 90 + 27 * 3
    assert (L >= 0).any(axis=1).all()
    assert (L < 0).mean() > 0.3


def test_uncovered_rows_get_nearest_neighbour_label():
    # two far-apart groups; a 1-partition ensemble with subsample leaves rows out,
    # which must then take the label of their nearest clustered neighbour
    X = np.vstack([np.zeros((20, 1)), np.full((20, 1), 100.0)])
    X += np.linspace(0, 1, 40)[:, None]
    L = generate.kmeans_partitions(X, 1, n_clusters=2, subsample=0.5, random_state=0)
    assert (L >= 0).all()
    assert len(set(L[:20, 0])) == 1 and len(set(L[20:, 0])) == 1 and L[0, 0] != L[-1, 0]


def test_random_feature_partitions(blobs):
    X, _ = blobs
    X4 = np.hstack([X, X[:, ::-1]])
    L = generate.random_feature_partitions(X4, 6, n_clusters=(2, 4), n_features=2,
                                           random_state=0)
    _check_matrix(L, 90, 6)
    L2 = generate.random_feature_partitions(X4, 6, (2, 4), n_features=0.5, random_state=0)
    np.testing.assert_array_equal(L, L2)  # 0.5 of 4 features = 2, same draws
    Ls = generate.random_feature_partitions(X4, 4, 3, n_features=1, subsample=0.5,
                                            random_state=0)
    _check_matrix(Ls, 90, 4)
    assert (Ls < 0).any()
    with pytest.raises(ValueError, match="n_features"):
        generate.random_feature_partitions(X4, 2, 3, n_features=5)
    with pytest.raises(ValueError, match="n_features"):
        generate.random_feature_partitions(X4, 2, 3, n_features=1.5)


def test_random_feature_partitions_use_only_chosen_features():
    # feature 0 separates two groups, feature 1 is constant: a partition using only
    # feature 1 cannot separate them (all points identical)
    X = np.column_stack([np.repeat([0.0, 10.0], 10), np.ones(20)])
    L = generate.random_feature_partitions(X, 12, 2, n_features=1, random_state=0)
    split = [len(set(L[:10, j])) == 1 and L[0, j] != L[-1, j] for j in range(12)]
    assert any(split)  # drew feature 0
    assert not all(split)  # drew feature 1 at least once


def test_mixed_partitions_all_algorithms(blobs):
    from consensuskit.evaluation.metrics import accuracy

    X, y = blobs
    algos = generate.ALGORITHMS
    L = generate.mixed_partitions(X, len(algos), n_clusters=3, random_state=0)
    _check_matrix(L, 90, len(algos))
    for j, name in enumerate(algos):
        # three well separated blobs: every algorithm finds them
        assert accuracy(y, L[:, j]) > 0.95, name
    # affinity propagation was steered to k = 3 by bisection
    assert L[:, algos.index("affinity_propagation")].max() == 2
    np.testing.assert_array_equal(L, generate.mixed_partitions(X, 7, 3, random_state=0))


def test_mixed_partitions_cycle_and_subsample(blobs):
    X, _ = blobs
    L = generate.mixed_partitions(X, 4, (2, 4), algorithms=("ward", "single"),
                                  subsample=0.6, random_state=3)
    _check_matrix(L, 90, 4)
    assert (L < 0).any()
    with pytest.raises(ValueError, match="unknown algorithm"):
        generate.mixed_partitions(X, 2, 3, algorithms=("kmeans", "dbscan"))
    with pytest.raises(ValueError, match="empty"):
        generate.mixed_partitions(X, 2, 3, algorithms=())


def test_fuzzy_cmeans(blobs):
    from consensuskit.evaluation.metrics import accuracy

    X, y = blobs
    labels, U, C = generate.fuzzy_cmeans(X, 3, random_state=0)
    assert U.shape == (90, 3) and C.shape == (3, 2)
    np.testing.assert_allclose(U.sum(axis=1), 1.0)
    np.testing.assert_array_equal(labels, U.argmax(axis=1))
    assert accuracy(y, labels) == 1.0
    # fixed point: memberships recomputed from the returned centres are unchanged
    d2 = ((X[:, None] - C[None]) ** 2).sum(-1)
    U2 = (1 / d2) / (1 / d2).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(U2, U, atol=1e-4)
    with pytest.raises(ValueError, match="fuzzifier"):
        generate.fuzzy_cmeans(X, 3, m=1.0)


@pytest.mark.parametrize(
    "kwargs, err, pattern",
    [
        (dict(n_partitions=0, n_clusters=3), ValueError, "n_partitions"),
        (dict(n_partitions=2.5, n_clusters=3), TypeError, "n_partitions"),
        (dict(n_partitions=2, n_clusters=(5, 2)), ValueError, "low <= high"),
        (dict(n_partitions=2, n_clusters=(1, 200)), ValueError, "only 90 rows"),
        (dict(n_partitions=2, n_clusters="3"), TypeError, "n_clusters"),
        (dict(n_partitions=2, n_clusters=3, subsample=0.0), ValueError, "subsample"),
        (dict(n_partitions=2, n_clusters=3, subsample=1.5), ValueError, "subsample"),
    ],
)
def test_generator_argument_checks(blobs, kwargs, err, pattern):
    X, _ = blobs
    with pytest.raises(err, match=pattern):
        generate.kmeans_partitions(X, **kwargs)


def test_feature_checks():
    with pytest.raises(ValueError, match="2-D"):
        generate.kmeans_partitions(np.zeros(5), 2, 2)
    with pytest.raises(ValueError, match=r"row 1, column 0 is not finite"):
        generate.kmeans_partitions([[0.0], [np.nan], [1.0]], 2, 2)


def test_progress_bar_shows(blobs, capsys):
    X, _ = blobs
    generate.kmeans_partitions(X, 3, 2, random_state=0, progress=True)
    assert "k-means partitions" in capsys.readouterr().err
    generate.kmeans_partitions(X, 3, 2, random_state=0)
    assert capsys.readouterr().err == ""


# -- drop_labels ------------------------------------------------------------------------


def test_drop_labels_fraction_and_no_empty_rows_or_columns(rng):
    X = rng.integers(0, 4, size=(100, 6)) + 10
    D = generate.drop_labels(X, 0.3, random_state=0)
    assert (D < 0).sum() == 180  # round(0.3 * 600)
    kept = D >= 0
    np.testing.assert_array_equal(D[kept], X[kept])  # kept labels untouched
    assert kept.any(axis=1).all() and kept.any(axis=0).all()
    np.testing.assert_array_equal(D, generate.drop_labels(X, 0.3, random_state=0))
    assert generate.drop_labels(X, 0.0).tolist() == X.tolist()


def test_drop_labels_extreme_but_feasible(rng):
    # 50 x 4 complete: at most 200 - max(50, 4) = 150 entries can go
    X = rng.integers(0, 3, size=(50, 4))
    D = generate.drop_labels(X, 0.75, random_state=1)
    assert (D < 0).sum() == 150
    assert ((D >= 0).sum(axis=1) == 1).all() and (D >= 0).any(axis=0).all()
    with pytest.raises(ValueError, match="at most 150"):
        generate.drop_labels(X, 0.8, random_state=1)


def test_drop_labels_more_columns_than_rows():
    X = np.arange(12).reshape(2, 6)  # N=2 < M=6: each column must keep its entry
    D = generate.drop_labels(X, 0.5, random_state=0)
    assert (D >= 0).any(axis=0).all() and (D >= 0).any(axis=1).all()
    assert (D < 0).sum() == 6


def test_drop_labels_on_incomplete_input(incomplete_labels):
    n_obs = (incomplete_labels >= 0).sum()
    D = generate.drop_labels(incomplete_labels, 0.25, random_state=0)
    assert (D < 0).sum() == (incomplete_labels < 0).sum() + round(0.25 * n_obs)
    Ensemble.from_labels(D)


def test_drop_labels_impossible_and_bad_input():
    with pytest.raises(ValueError, match="without emptying a row or column"):
        generate.drop_labels(np.arange(10).reshape(10, 1), 0.1)
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        generate.drop_labels(np.zeros((3, 3), dtype=int), 1.0)
    with pytest.raises(ValueError, match="2-D"):
        generate.drop_labels(np.zeros(3, dtype=int), 0.1)
    with pytest.raises(ValueError, match="not an integer"):
        generate.drop_labels(np.array([[0.5, 1.0]]), 0.1)


def test_noisy_copies_copy_the_truth_with_the_given_noise():
    """noise = 0: every column is the truth under an injective relabelling; noise = 0.3:
    the fraction of labels that differ from the column's copy of the truth is
    noise * (1 - 1/k_j) within 4 binomial SE; bad input is refused."""
    truth = np.repeat(np.arange(3), 400)
    X = noisy_copies(truth, 4, noise=0.0, n_labels=[3, 4, 5, 3], random_state=0)
    assert X.shape == (1200, 4) and X.dtype == np.int64
    for j in range(4):
        pairs = np.unique(np.column_stack([truth, X[:, j]]), axis=0)
        assert len(pairs) == 3 and len(np.unique(pairs[:, 1])) == 3
    ks = np.array([3, 4, 5, 3, 6, 4])
    X = noisy_copies(truth, 6, noise=0.3, n_labels=ks, random_state=1)
    assert X.max(0).tolist() <= (ks - 1).tolist()
    for j, k in enumerate(ks):
        copy = np.array([np.bincount(X[truth == h, j]).argmax() for h in range(3)])[truth]
        p = 0.3 * (1 - 1 / k)
        assert abs(np.mean(X[:, j] != copy) - p) < 4 * np.sqrt(p * (1 - p) / truth.size)
    assert np.array_equal(X, noisy_copies(truth, 6, noise=0.3, n_labels=ks, random_state=1))
    with pytest.raises(ValueError, match="at least K"):
        noisy_copies(truth, 2, noise=0.1, n_labels=2)
    with pytest.raises(ValueError, match="noise"):
        noisy_copies(truth, 2, noise=1.5)
    with pytest.raises(ValueError, match="truth"):
        noisy_copies(truth.astype(float), 2, noise=0.1)
