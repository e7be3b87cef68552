"""Metrics against small hand-worked examples (arithmetic in the comments)."""

import itertools

import numpy as np
import pytest

from consensuskit.evaluation import metrics

LN2 = np.log(2.0)


def test_contingency_table():
    T = metrics.contingency([5, 5, 7, 7, 7, 9], [1, 1, 0, 0, 0, 0])
    # rows = classes 5, 7, 9; columns = clusters 0, 1
    np.testing.assert_array_equal(T, [[0, 2], [3, 0], [1, 0]])


def test_micro_precision_hand_worked():
    # classes  0 0 0 1 1 2 ; clusters 0 0 1 1 1 1
    # cluster 0 = {0,0} -> majority class 0 with 2 points
    # cluster 1 = {0,1,1,2} -> majority class 1 with 2 points
    # MP = (2 + 2) / 6 = 2/3
    y = [0, 0, 0, 1, 1, 2]
    p = [0, 0, 1, 1, 1, 1]
    assert metrics.micro_precision(y, p) == pytest.approx(2 / 3)
    # several clusters may map to the same class: splitting class 1 into two pure
    # clusters keeps MP = 1
    assert metrics.micro_precision([0, 0, 1, 1], [0, 0, 1, 2]) == 1.0


def test_f1_measure_hand_worked():
    # A (clusters): A0 = {x0, x1} (both class 0), A1 = {x2..x5} (classes 0, 1, 1, 2)
    # B (classes):  |B0| = 3, |B1| = 2, |B2| = 1
    # precision: max_j |A0&Bj|/|A0| = 2/2 = 1 ; max_j |A1&Bj|/|A1| = 2/4
    #            P = (1 + 1/2) / 2 = 3/4
    # recall:    max_j |A0&Bj|/|Bj| = 2/3 ; max_j |A1&Bj|/|Bj| = max(1/3, 2/2, 1/1) = 1
    #            R = (2/3 + 1) / 2 = 5/6
    # F1 = 2 (3/4)(5/6) / (3/4 + 5/6) = (5/4) / (19/12) = 15/19
    y = [0, 0, 0, 1, 1, 2]
    p = [0, 0, 1, 1, 1, 1]
    assert metrics.f1_measure(y, p) == pytest.approx(15 / 19)
    assert metrics.f1_measure(y, y) == pytest.approx(1.0)


def test_accuracy_hand_worked_differs_from_micro_precision():
    # classes 0 0 1 1 1 1 ; clusters 0 0 0 0 0 1
    # T = [[2, 0], [3, 1]]; matchings: c0->0, c1->1 gives 2 + 1 = 3;
    #                                  c0->1, c1->0 gives 3 + 0 = 3  -> H = 3/6
    # MP instead maps both clusters to class 1: (3 + 1)/6 = 4/6
    y = [0, 0, 1, 1, 1, 1]
    p = [0, 0, 0, 0, 0, 1]
    assert metrics.accuracy(y, p) == pytest.approx(0.5)
    assert metrics.micro_precision(y, p) == pytest.approx(4 / 6)


def test_accuracy_with_different_numbers_of_clusters():
    # classes 0 0 1 1 ; clusters 0 1 2 2 ; T = [[1, 1, 0], [0, 0, 2]]
    # best one-to-one matching: class 0 <- cluster 0 (1), class 1 <- cluster 2 (2): 3/4
    assert metrics.accuracy([0, 0, 1, 1], [0, 1, 2, 2]) == pytest.approx(0.75)
    # and the other way round (fewer clusters than classes)
    assert metrics.accuracy([0, 1, 2, 2], [0, 0, 1, 1]) == pytest.approx(0.75)
    # invariant to relabeling
    assert metrics.accuracy([0, 0, 1, 1], [7, 7, 3, 3]) == 1.0


def test_accuracy_matches_bruteforce_over_permutations(rng):
    for _ in range(10):
        y = rng.integers(0, 4, size=30)
        p = rng.integers(0, 4, size=30)
        best = max(
            np.mean(np.asarray(perm)[p] == y) for perm in itertools.permutations(range(4))
        )
        # labels that never occur still count as empty clusters, so this is exact
        assert metrics.accuracy(y, p) == pytest.approx(best)


def test_adjusted_rand_hand_worked():
    # classes 0 0 1 1 ; clusters 0 0 1 2 ; n = 4, C(4,2) = 6 pairs
    # sum_ij C(n_ij, 2) = C(2,2) = 1 ; rows: C(2,2)+C(2,2) = 2 ; columns: C(2,2) = 1
    # expected = 2 * 1 / 6 = 1/3 ; max = (2 + 1) / 2 = 3/2
    # ARI = (1 - 1/3) / (3/2 - 1/3) = (2/3) / (7/6) = 4/7
    assert metrics.adjusted_rand([0, 0, 1, 1], [0, 0, 1, 2]) == pytest.approx(4 / 7)


def test_nmi_hand_worked():
    # same example: H(true) = ln 2 ; H(pred) = -(1/2 ln 1/2 + 2 * 1/4 ln 1/4) = 1.5 ln 2
    # pred determines true, so I = H(true) = ln 2
    # geometric: ln2 / sqrt(ln2 * 1.5 ln2) = 1/sqrt(1.5) ; arithmetic: ln2 / (1.25 ln2) = 0.8
    y, p = [0, 0, 1, 1], [0, 0, 1, 2]
    assert metrics.nmi(y, p) == pytest.approx(1 / np.sqrt(1.5))
    assert metrics.nmi(y, p, average_method="arithmetic") == pytest.approx(0.8)
    assert metrics.nmi(y, p, average_method="max") == pytest.approx(1 / 1.5)
    with pytest.raises(ValueError, match="average_method"):
        metrics.nmi(y, p, average_method="median")


def test_variation_of_information_hand_worked():
    # VI = H(true) + H(pred) - 2 I = ln2 + 1.5 ln2 - 2 ln2 = 0.5 ln2  (= 0.5 bit)
    y, p = [0, 0, 1, 1], [0, 0, 1, 2]
    assert metrics.variation_of_information(y, p) == pytest.approx(0.5 * LN2)
    assert metrics.variation_of_information(y, p, base=2) == pytest.approx(0.5)
    # symmetric, zero for a relabeling
    assert metrics.variation_of_information(p, y) == pytest.approx(0.5 * LN2)
    assert metrics.variation_of_information(y, [5, 5, 3, 3]) == pytest.approx(0.0, abs=1e-12)


def test_vi_agrees_with_entropies_and_sklearn_mutual_info(rng):
    from sklearn.metrics import mutual_info_score

    y = rng.integers(0, 3, size=50)
    p = rng.integers(0, 5, size=50)

    def H(a):
        q = np.bincount(a) / a.size
        q = q[q > 0]
        return -np.sum(q * np.log(q))

    expected = H(y) + H(p) - 2 * mutual_info_score(y, p)
    assert metrics.variation_of_information(y, p) == pytest.approx(expected)


def test_js_criterion_hand_worked():
    # JS((1,0) || (1/2,1/2)) in bits: m = (3/4, 1/4)
    #   KL(p||m) = log2(4/3) = 0.415037 ; KL(q||m) = 1/2 log2(2/3) + 1/2 log2(2) = 0.207519
    #   JS = (0.415037 + 0.207519) / 2 = 0.311278
    js = 0.5 * (np.log2(4 / 3) + 0.5 * np.log2(2 / 3) + 0.5)
    assert metrics.js_criterion([[1.0, 0.0]], [[0.5, 0.5]]) == pytest.approx(js)
    # U = rows (1,0),(1,0); V = rows (0,1),(1/2,1/2)
    # identity: JS = 1 + 0.311278 -> /2 = 0.655639 ; swapped columns: 0 + 0.311278 -> /2
    U = [[1.0, 0.0], [1.0, 0.0]]
    V = [[0.0, 1.0], [0.5, 0.5]]
    assert metrics.js_criterion(U, V) == pytest.approx(js / 2)
    # permuted copy -> 0
    W = np.array([[0.2, 0.3, 0.5], [0.6, 0.4, 0.0]])
    assert metrics.js_criterion(W, W[:, [2, 0, 1]]) == pytest.approx(0.0, abs=1e-12)


def test_js_criterion_pads_and_accepts_hard_labels():
    # hard [0,0] vs [0,1]: U = (1,0),(1,0) after padding ; V = (1,0),(0,1)
    # either matching leaves one row with disjoint distributions (JS = 1 bit): J = 1/2
    assert metrics.js_criterion([0, 0], [0, 1]) == pytest.approx(0.5)
    assert metrics.js_criterion(np.ones((3, 1)), [[0.5, 0.5]] * 3) == pytest.approx(
        0.5 * (np.log2(4 / 3) + 0.5 * np.log2(2 / 3) + 0.5)
    )


def test_js_criterion_equals_bruteforce_minimum(rng):
    def js(p, q):
        m = (p + q) / 2

        def kl(a, b):
            nz = a > 0
            return np.sum(a[nz] * np.log2(a[nz] / b[nz]))

        return 0.5 * (kl(p, m) + kl(q, m))

    U = rng.dirichlet(np.ones(3) * 0.5, size=20)
    V = rng.dirichlet(np.ones(3) * 0.5, size=20)
    brute = min(
        np.mean([js(U[i], V[i, list(perm)]) for i in range(20)])
        for perm in itertools.permutations(range(3))
    )
    got = metrics.js_criterion(U, V)
    assert got == pytest.approx(brute)
    assert 0.0 <= got <= 1.0


def test_normalized_vi_hand_worked():
    # same example: H(true) + H(pred) = ln2 + 1.5 ln2 = 2.5 ln2 ; I = ln2
    # VI_n = 1 - 2 ln2 / (2.5 ln2) = 1 - 0.8 = 0.2  (= VI / (H1 + H2) = 0.5 / 2.5)
    y, p = [0, 0, 1, 1], [0, 0, 1, 2]
    assert metrics.normalized_variation_of_information(y, p) == pytest.approx(0.2)
    assert metrics.normalized_variation_of_information(p, y) == pytest.approx(0.2)
    # independent partitions: I = 0 -> 1
    assert metrics.normalized_variation_of_information([0, 0, 1, 1], [0, 1, 0, 1]) == (
        pytest.approx(1.0))


def test_normalized_vi_identical_partitions_give_zero():
    y = [3, 3, 1, 0, 0, 2]
    assert metrics.normalized_variation_of_information(y, [9, 9, 8, 7, 7, 6]) == 0.0
    # both single-cluster: H1 + H2 = 0, defined as 0 (identical partitions)
    assert metrics.normalized_variation_of_information([1, 1, 1], [0, 0, 0]) == 0.0


def test_normalized_vi_is_vi_over_joint_entropies(rng):
    y = rng.integers(0, 3, size=60)
    p = rng.integers(0, 4, size=60)

    def H(a):
        q = np.bincount(a) / a.size
        q = q[q > 0]
        return -np.sum(q * np.log(q))

    expected = metrics.variation_of_information(y, p) / (H(y) + H(p))
    assert metrics.normalized_variation_of_information(y, p) == pytest.approx(expected)


def test_van_dongen_hand_worked():
    # classes 0 0 0 1 1 2 ; clusters 0 0 1 1 1 1 ; n = 6
    # T = [[2, 1], [0, 2], [0, 1]]
    # sum_i max_j n_ij = 2 + 2 + 1 = 5 ; sum_j max_i n_ij = 2 + 2 = 4
    # numerator = 2n - 5 - 4 = 12 - 9 = 3
    # VD   = 3 / (2n) = 3/12 = 1/4
    # VD_n = 3 / (2n - max_i n_i. - max_j n_.j) = 3 / (12 - 3 - 4) = 3/5
    y = [0, 0, 0, 1, 1, 2]
    p = [0, 0, 1, 1, 1, 1]
    assert metrics.van_dongen(y, p) == pytest.approx(3 / 5)
    assert metrics.van_dongen(p, y) == pytest.approx(3 / 5)  # symmetric
    assert metrics.van_dongen(y, p, normalized=False) == pytest.approx(1 / 4)
    # second example: T = [[2, 0, 0], [0, 1, 1]], n = 4: numerator 8 - 3 - 4 = 1,
    # VD_n = 1 / (8 - 2 - 2) = 1/4, VD = 1/8
    assert metrics.van_dongen([0, 0, 1, 1], [0, 0, 1, 2]) == pytest.approx(1 / 4)
    assert metrics.van_dongen([0, 0, 1, 1], [0, 0, 1, 2], normalized=False) == (
        pytest.approx(1 / 8))
    with pytest.raises(TypeError, match="normalized must be a bool"):
        metrics.van_dongen(y, p, normalized="yes")


def test_van_dongen_identical_partitions_give_zero():
    y = [3, 3, 1, 0, 0, 2]
    assert metrics.van_dongen(y, [9, 9, 8, 7, 7, 6]) == 0.0
    assert metrics.van_dongen(y, [9, 9, 8, 7, 7, 6], normalized=False) == 0.0
    # both single-cluster: the VD_n denominator 2n - n - n is 0; defined as 0
    assert metrics.van_dongen([1, 1, 1], [0, 0, 0]) == 0.0


def test_vin_vdn_reproduce_kcc_exmeasure():
    # Rows of the authors' exMeasure output (VIn, VDn of a KCC consensus partition
    # against ground truth), copied from the reference consensus_runs.csv /
    # consensus_labels.csv (tests/data/kcc/exmeasure_vin_vdn.csv).
    import csv
    from pathlib import Path

    data = Path(__file__).parent / "data" / "kcc"
    with open(data / "exmeasure_vin_vdn.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 7
    for row in rows:
        with open(data / f"truth_{row['ensemble']}.csv", newline="") as f:
            truth = np.array([int(r["label"]) for r in csv.DictReader(f)])
        pred = np.array(row["labels"].split(), dtype=np.int64)
        # VD_n is a ratio of integers: exact.  VI_n to floating-point rounding
        # (the file itself holds 0.43793950911867285 and ...296 for two relabelings
        # of the same iris partition).
        assert metrics.van_dongen(truth, pred) == float(row["vdn"]), row["ensemble"]
        assert metrics.normalized_variation_of_information(truth, pred) == pytest.approx(
            float(row["vin"]), rel=0, abs=1e-14), row["ensemble"]


HARD = [
    metrics.micro_precision,
    metrics.f1_measure,
    metrics.accuracy,
    metrics.adjusted_rand,
    metrics.nmi,
    metrics.variation_of_information,
    metrics.normalized_variation_of_information,
    metrics.van_dongen,
]


@pytest.mark.parametrize("fn", HARD)
def test_hard_metrics_validate_input(fn):
    with pytest.raises(ValueError, match="different lengths: 3 and 2"):
        fn([0, 1, 1], [0, 1])
    with pytest.raises(ValueError, match="1-D"):
        fn([[0, 1]], [[0, 1]])
    with pytest.raises(ValueError, match="empty"):
        fn([], [])
    with pytest.raises(ValueError, match="not an integer"):
        fn([0.5, 1.0], [0, 1])


@pytest.mark.parametrize("fn", HARD[:4])
def test_perfect_agreement_gives_one(fn):
    assert fn([0, 0, 1, 2], [4, 4, 9, 1]) == pytest.approx(1.0)


def test_js_criterion_validates_input():
    with pytest.raises(ValueError, match="different numbers of rows"):
        metrics.js_criterion([[1.0, 0.0]], [[1.0, 0.0], [0.0, 1.0]])
    with pytest.raises(ValueError, match="sums to"):
        metrics.js_criterion([[0.5, 0.4]], [[1.0, 0.0]])
    with pytest.raises(ValueError, match="negative"):
        metrics.js_criterion([[1.5, -0.5]], [[1.0, 0.0]])
    with pytest.raises(ValueError, match="non-finite"):
        metrics.js_criterion([[np.nan, 1.0]], [[1.0, 0.0]])
