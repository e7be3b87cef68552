"""Medoid and least-squares (SE) partition consensus against clue, and the voting
consensus functions (majority vote, IVC, IPVC).

Fixtures in ``tests/data/clue`` come from ``experiments/make_r_fixtures.R`` (clue
0.3-64): four ensembles of hard partitions -- clue's own CKME (50 k-means
partitions of 1000 Cassini points), and k-means ensembles of iris (k in 2..5),
wine (k in 3..5, weights 1..15) and glass (k in 2..7) -- with ``cl_medoid``,
the Euclidean dissimilarity sums, and ``cl_consensus(method = "SE")`` with 50
random starts.  clue's stored ``objval`` pairs the best start's memberships with
the last start's class matching, so the script also records the objective
recomputed from ``cl_dissimilarity``; that is the one compared.
"""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.optimize import linear_sum_assignment
from sklearn.metrics import adjusted_rand_score

from consensuskit.consensus.partition import (
    LeastSquaresConsensus,
    MedoidConsensus,
    align_labels,
    partition_dissimilarities,
    project_to_simplex,
)
from consensuskit.consensus.voting import IPVC, IVC, MajorityVote
from consensuskit.data.generate import noisy_copies

DATA = Path(__file__).parent / "data" / "clue"
ENSEMBLES = ["ckme", "iris", "wine", "glass"]


def _case(name):
    X = pd.read_csv(DATA / f"{name}_labels.csv.gz").to_numpy()
    parts = pd.read_csv(DATA / f"{name}_partitions.csv")
    result = pd.read_csv(DATA / f"{name}_result.csv").iloc[0]
    U = pd.read_csv(DATA / f"{name}_se_membership.csv.gz").to_numpy()
    return X, parts, result, U


@pytest.mark.parametrize("name", ENSEMBLES)
def test_medoid_equals_clue(name):
    X, parts, result, _ = _case(name)
    m = MedoidConsensus().fit(X)
    assert m.medoid_ == result.medoid
    np.testing.assert_allclose(m.dissimilarity_sums_, parts.dissimilarity_sum, rtol=1e-12)
    assert adjusted_rand_score(m.labels_, X[:, result.medoid]) == 1.0


@pytest.mark.parametrize("name", ENSEMBLES)
def test_least_squares_equals_clue(name):
    X, parts, result, U_r = _case(name)
    n_init = 20 if name == "ckme" else 50
    se = LeastSquaresConsensus(int(result.k), weights=parts.weight.to_numpy(), n_init=n_init,
                               random_state=0).fit(X)
    assert se.converged_
    assert se.objective_ == pytest.approx(result.se_objective, rel=1e-10, abs=1e-10)
    r, c = linear_sum_assignment(U_r.T @ se.membership_, maximize=True)
    np.testing.assert_allclose(se.membership_[:, c], U_r[:, r], atol=1e-8)


def test_dissimilarity_of_hard_partitions_by_hand():
    X = np.array([[0, 0, 1], [0, 0, 1], [1, 1, 0], [1, 2, 0]])
    D = partition_dissimilarities(__import__("consensuskit").as_ensemble(X))
    assert D[0, 2] == 0.0  # relabelled copy
    assert D[0, 1] == pytest.approx(np.sqrt(2.0))  # one point moved
    np.testing.assert_allclose(D, D.T)


def test_simplex_projection():
    rng = np.random.default_rng(0)
    Y = rng.normal(size=(200, 4))
    P = project_to_simplex(Y)
    assert np.all(P >= 0)
    np.testing.assert_allclose(P.sum(axis=1), 1.0)
    # optimality: no feasible point on a random grid is closer
    for _ in range(50):
        Q = rng.dirichlet(np.ones(4), size=200)
        assert np.all(((Y - P) ** 2).sum(1) <= ((Y - Q) ** 2).sum(1) + 1e-12)


def test_least_squares_with_missing_labels_uses_observed_only(rng):
    y = np.repeat(np.arange(3), 30)
    X = np.column_stack([rng.permutation(3)[y] for _ in range(6)])
    drop = rng.random(X.shape) < 0.3
    drop[:, 0] = False  # every row keeps a label
    X[drop] = -1
    se = LeastSquaresConsensus(3, n_init=5, random_state=0).fit(X)
    assert adjusted_rand_score(y, se.labels_) == 1.0
    # a noise-free ensemble is matched exactly on its observed labels
    assert se.objective_ == pytest.approx(0.0, abs=1e-12)
    np.testing.assert_allclose(se.membership_.sum(axis=1), 1.0)


def test_align_labels_hungarian_and_leftovers():
    ref = np.array([0, 0, 1, 1, 2, 2])
    out = align_labels(np.array([2, 2, 1, 1, 0, 3]), ref, 4, 3)
    np.testing.assert_array_equal(out, [0, 0, 1, 1, 2, 2])  # class 3 joins its best overlap
    np.testing.assert_array_equal(align_labels(np.array([1, -1, 0]), np.array([0, 0, 1]), 2, 2),
                                  [0, -1, 1])


def _noisy_ensemble(rng, k=3, n_per=40, m=15, noise=0.25, extra=2):
    y = np.repeat(np.arange(k), n_per)
    X = noisy_copies(y, m, noise=noise, n_labels=rng.integers(k, k + extra + 1, size=m),
                     random_state=int(rng.integers(2**31)))
    return X, y


@pytest.mark.parametrize("cls", [MajorityVote, IVC, IPVC])
def test_voting_recovers_planted_partition(cls, rng):
    X, y = _noisy_ensemble(rng)
    m = cls(3, random_state=0).fit(X)
    assert adjusted_rand_score(y, m.labels_) > 0.95
    assert m.n_clusters_ == 3


@pytest.mark.parametrize("cls", [MajorityVote, IVC, IPVC])
def test_voting_with_missing_labels(cls, rng):
    X, y = _noisy_ensemble(rng, noise=0.15)
    drop = rng.random(X.shape) < 0.3
    drop[np.arange(X.shape[0]), rng.integers(0, X.shape[1], X.shape[0])] = False
    X[drop] = -1
    assert adjusted_rand_score(y, cls(3, random_state=0).fit(X).labels_) > 0.9


def test_majority_vote_counts_votes(rng):
    X, y = _noisy_ensemble(rng, noise=0.0, extra=0)
    m = MajorityVote(3, random_state=0).fit(X)
    np.testing.assert_allclose(m.votes_.max(axis=1), 1.0)  # every clustering agrees
    X[0, :8] = (X[0, :8] + 1) % 3  # point 0 loses its majority in 8 of 15
    m = MajorityVote(3, random_state=0).fit(X)
    assert m.votes_[0].max() == pytest.approx(8 / 15) or m.votes_[0].max() == pytest.approx(7 / 15)


def test_ivc_objective_counts_disagreements(rng):
    X, y = _noisy_ensemble(rng, noise=0.0, extra=0)
    assert IVC(3, random_state=0).fit(X).objective_ == 0.0
    X[0, 0] = (X[0, 0] + 1) % 3
    m = IVC(3, random_state=0).fit(X)
    assert m.objective_ == 1.0  # one label disagrees with its cluster's mode


def test_ipvc_is_not_ivc():
    """IPVC's distance uses label frequencies: a point torn between two clusters whose
    modes tie under IVC is placed by the frequencies."""
    rng = np.random.default_rng(3)
    X, y = _noisy_ensemble(rng, noise=0.35, m=6)
    a = IVC(3, n_init=5, random_state=0).fit(X)
    b = IPVC(3, n_init=5, random_state=0).fit(X)
    assert not np.array_equal(a.labels_, b.labels_)


def test_automatic_k(rng):
    X, y = _noisy_ensemble(rng, k=4, n_per=30, noise=0.1)
    for cls in (MajorityVote, IVC, IPVC):
        m = cls(random_state=0).fit(X)
        assert m.n_clusters_ == 4
        assert m.auto_k_.n_clusters_ == 4
    from consensuskit import CSPA, EAC, HGPA, KCC

    for est in (CSPA(None, random_state=0), EAC(None), HGPA(None, random_state=0),
                KCC(None, random_state=0)):
        assert est.fit(X).labels_.max() + 1 == 4, type(est).__name__


def test_medoid_with_k_and_warning(rng):
    X, _ = _noisy_ensemble(rng)
    ks = np.array([len(np.unique(c)) for c in X.T])
    m = MedoidConsensus(3).fit(X)
    assert ks[m.medoid_] == 3
    with pytest.warns(RuntimeWarning, match="no base clustering has n_clusters=9"):
        m = MedoidConsensus(9).fit(X)
    assert m.n_clusters_ != 9


def test_bad_parameters(rng):
    X, _ = _noisy_ensemble(rng, m=4)
    with pytest.raises(ValueError, match="weights must be 4"):
        LeastSquaresConsensus(2, weights=[1, 2]).fit(X)
    with pytest.raises(ValueError, match="reference"):
        MajorityVote(2, reference="first").fit(X)
    with pytest.raises(ValueError, match="reference=7"):
        MajorityVote(2, reference=7).fit(X)
