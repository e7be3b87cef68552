"""Comparison consensus functions: CSPA, HGPA, MCLA, HBGF, EAC, QMI (and KCC)."""

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

from consensuskit.consensus import coassociation
from consensuskit.consensus.eac import EAC
from consensuskit.consensus.graph import CSPA, HBGF, HGPA, MCLA
from consensuskit.consensus.kcc import KCC
from consensuskit.consensus.qmi import QMI
from consensuskit.models import simulate
from consensuskit.models.mm import spec as mm


def planted(rng, n_per=60, k=3, m=10, noise=0.15, missing=0.0):
    """k planted groups; m base clusterings with k + 1 labels simulated from MM's spec
    with z = truth and fixed label distributions: group h gets label perm_j(h) with prob
    1 - noise, else a uniform one; every third column over-splits one group g between
    perm_j(g) and the spare label perm_j(k)."""
    y = np.repeat(np.arange(k), n_per)
    params = {"pi": np.full(k, 1.0 / k), "z": y}
    for j in range(m):
        perm = rng.permutation(k + 1)
        theta = np.full((k, k + 1), noise / (k + 1))
        theta[np.arange(k), perm[:k]] += 1 - noise
        if j % 3 == 0:  # over-split one group
            g = rng.integers(k)
            theta[g, perm[g]] -= (1 - noise) / 2
            theta[g, perm[k]] += (1 - noise) / 2
        params[f"theta_{j}"] = theta
    X, _ = simulate(mm, n_rows=y.size, n_labels=[k + 1] * m, n_clusters=k, params=params,
                    seed=int(rng.integers(2**31)))
    if missing:
        drop = rng.random(X.shape) < missing
        drop[np.arange(X.shape[0]), rng.integers(0, m, X.shape[0])] = False
        X[drop] = -1
    return X, y


FACTORIES = {
    "CSPA": lambda rs: CSPA(3, random_state=rs),
    "CSPA_metis": lambda rs: CSPA(3, partitioner="metis", random_state=rs),
    "CSPA_sparse": lambda rs: CSPA(3, max_exact=10, n_neighbors=20, random_state=rs),
    "HGPA": lambda rs: HGPA(3, random_state=rs),
    "MCLA": lambda rs: MCLA(3, random_state=rs),
    "HBGF": lambda rs: HBGF(3, random_state=rs),
    "EAC_single": lambda rs: EAC(3, linkage="single"),
    "EAC_average": lambda rs: EAC(3, linkage="average"),
    "EAC_ward": lambda rs: EAC(3, linkage="ward"),
    "QMI": lambda rs: QMI(3, random_state=rs),
    "KCC": lambda rs: KCC(3, utility="Uc", random_state=rs),
}
# single linkage chains through noisy pairs when labels are missing; the others must cope.
# HGPA minimises the number of cut hyperedges: with 10% noise every base cluster holds
# points of every group, so the planted partition cuts them all and is no better than
# others; HGPA is tested on noise-free hypergraphs below instead.
HANDLES_MISSING = [k for k in FACTORIES if k not in ("EAC_single", "HGPA")]
RECOVERS_NOISY = [k for k in FACTORIES if k != "HGPA"]


@pytest.mark.parametrize("name", RECOVERS_NOISY)
def test_recovers_planted_consensus(name, rng):
    X, y = planted(rng, noise=0.1)
    labels = FACTORIES[name](0).fit_predict(X)
    assert adjusted_rand_score(y, labels) > 0.95


@pytest.mark.parametrize("name", HANDLES_MISSING)
def test_recovers_planted_consensus_with_missing_labels(name, rng):
    X, y = planted(rng, noise=0.1, missing=0.3)
    assert (X == -1).mean() > 0.2
    labels = FACTORIES[name](0).fit_predict(X)
    assert adjusted_rand_score(y, labels) > 0.9


@pytest.mark.parametrize("name", list(FACTORIES))
def test_labels_are_consecutive_ints(name, rng):
    X, _ = planted(rng, missing=0.2)
    m = FACTORIES[name](1).fit(X)
    lab = m.labels_
    assert lab.shape == (X.shape[0],)
    assert lab.dtype.kind == "i"
    assert set(np.unique(lab)) == set(range(lab.max() + 1))
    assert lab.max() + 1 <= 3


@pytest.mark.parametrize("name", list(FACTORIES))
def test_deterministic_given_random_state(name, rng):
    X, _ = planted(rng, noise=0.4)  # noisy: randomness would show
    a = FACTORIES[name](7).fit_predict(X)
    b = FACTORIES[name](7).fit_predict(X)
    np.testing.assert_array_equal(a, b)


def test_cspa_sparse_mode_never_builds_exact_graph(rng, monkeypatch):
    X, y = planted(rng, n_per=100)

    def boom(*a, **k):
        raise AssertionError("exact co-association graph built")

    monkeypatch.setattr(CSPA, "_exact_graph", staticmethod(boom))
    m = CSPA(3, max_exact=50, n_neighbors=15, random_state=0).fit(X)
    assert m.sparse_mode_
    assert m.n_edges_ <= X.shape[0] * 15
    assert adjusted_rand_score(y, m.labels_) > 0.95


@pytest.mark.parametrize("missing", [0.0, 0.3])
def test_hgpa_cuts_a_clean_hypergraph_exactly(rng, missing):
    X, y = planted(rng, noise=0.0, missing=missing)
    m = HGPA(3, random_state=0).fit(X)
    assert m.partitioner_ == "kahypar" and m.fallback_reason_ is None
    assert m.edge_cut_ == 0  # the planted partition cuts no base cluster
    assert adjusted_rand_score(y, m.labels_) == 1.0


def test_hgpa_cut_no_worse_than_planted(rng):
    """On noisy data KaHyPar's balanced cut is at most the planted partition's."""
    X, y = planted(rng, noise=0.1)
    m = HGPA(3, random_state=0).fit(X)
    ens = m.ensemble_
    planted_cut = sum(
        len(np.unique(y[ens.codes[:, j] == c])) > 1
        for j in range(ens.n_partitions) for c in range(ens.n_labels[j])
        if np.count_nonzero(ens.codes[:, j] == c) > 1
    )
    assert m.edge_cut_ <= planted_cut
    assert np.bincount(m.labels_).max() <= 1.05 * X.shape[0] / 3


def _brute_force_cut_and_km1(X, labels):
    """Cut hyperedges and sum of (parts spanned - 1), one base cluster at a time."""
    cut = km1 = 0
    for j in range(X.shape[1]):
        for c in np.unique(X[X[:, j] >= 0, j]):
            spanned = len(np.unique(labels[X[:, j] == c]))
            cut += spanned > 1
            km1 += spanned - 1
    return cut, km1


@pytest.mark.parametrize("objective", ["cut", "km1"])
@pytest.mark.parametrize("k,missing", [(2, 0.0), (3, 0.2), (4, 0.3)])
def test_hgpa_parts_within_stated_balance(rng, objective, k, missing):
    """Every part holds at most max_part_size_ = floor((1 + imbalance) ceil(n / K)) points,
    and edge_cut_ is the brute-force count of cut base clusters of labels_."""
    from consensuskit.consensus.graph import _connectivity_minus_one

    X, y = planted(rng, n_per=50 + 7 * k, k=k, noise=0.3, missing=missing)
    m = HGPA(k, objective=objective, imbalance=0.03, n_init=2, random_state=0).fit(X)
    n = X.shape[0]
    assert m.max_part_size_ == int(np.floor(1.03 * np.ceil(n / k)))
    assert np.bincount(m.labels_).max() <= m.max_part_size_
    cut, km1 = _brute_force_cut_and_km1(X, m.labels_)
    assert m.edge_cut_ == cut
    assert _connectivity_minus_one(m.ensemble_, m.labels_) == km1


def test_hgpa_leaves_out_only_hyperedges_no_balanced_partition_keeps_whole(rng):
    """A base cluster larger than a part is cut by every balanced partition: HGPA leaves it
    out of KaHyPar's input; the clean smaller ones must still be cut exactly zero times."""
    y = np.repeat(np.arange(4), 40)
    big = np.where(y < 2, 0, 1)  # two clusters of 80 points: larger than 1.05 * 40
    X = np.column_stack([y, (y + 1) % 4, big, 1 - big, (y * 3) % 4])
    m = HGPA(4, random_state=0).fit(X)
    assert m.n_always_cut_ == 4 and m.n_hyperedges_ == 16
    assert m.edge_cut_ == 4  # only the four unavoidable ones
    assert adjusted_rand_score(y, m.labels_) == 1.0
    assert m.uncut_label_fraction_ == pytest.approx(3 / 5)


def test_hgpa_reports_a_saturated_objective(rng):
    """On a noisy ensemble the planted partition cuts every hyperedge; HGPA's partition
    keeps whole far less than one base clustering's labels (uncut_label_fraction_ < 1/M),
    while on a clean one it keeps all of them."""
    from consensuskit.consensus.graph import hyperedge_cut

    X, y = planted(rng, noise=0.5)
    m = HGPA(3, random_state=0).fit(X)
    assert hyperedge_cut(m.ensemble_, y) == m.n_hyperedges_
    assert m.edge_cut_ <= m.n_hyperedges_
    assert m.uncut_label_fraction_ < 1 / X.shape[1]
    clean = HGPA(3, random_state=0).fit(planted(rng, noise=0.0)[0])
    assert clean.uncut_label_fraction_ == 1.0


def test_hgpa_falls_back_to_metis_with_warning(rng, monkeypatch):
    from consensuskit.consensus import graph

    def broken(*a, **k):
        raise RuntimeError("partitioner crashed")

    monkeypatch.setattr(graph, "kahypar_partition", broken)
    X, y = planted(rng, noise=0.1)
    with pytest.warns(RuntimeWarning, match="fell back to METIS"):
        m = HGPA(3, random_state=0).fit(X)
    assert m.partitioner_ == "metis"
    assert "partitioner crashed" in m.fallback_reason_
    assert adjusted_rand_score(y, m.labels_) > 0.95


def test_hgpa_config_ships_with_package():
    from importlib import resources

    ini = resources.files("consensuskit.consensus").joinpath("data", "hgpa_kahypar.ini")
    text = ini.read_text()
    assert "objective=cut" in text and "i-bp-algorithm" in text


def test_cspa_normalises_by_pairs_labelled_in_both(rng, monkeypatch):
    """With missing labels the graph weight is c_ij / n_ij, not c_ij / M."""
    from consensuskit.consensus import graph

    X, _ = planted(rng, n_per=10, missing=0.4)
    seen = {}

    def capture(W, k, rs):
        seen["W"] = W.toarray()
        return np.arange(W.shape[0]) % k

    monkeypatch.setattr(graph, "spectral_partition", capture)
    CSPA(3).fit(X)
    obs = (X >= 0).astype(float)
    same = sum(np.equal.outer(X[:, j], X[:, j]) & (X[:, j] >= 0)[:, None] & (X[:, j] >= 0)[None]
               for j in range(X.shape[1]))
    n_ij = obs @ obs.T
    want = np.where(n_ij > 0, same / np.maximum(n_ij, 1), 0.0)
    np.testing.assert_allclose(seen["W"], want, atol=1e-12)


def test_cspa_refuses_exact_mode_above_limit():
    X = np.zeros((10, 2), dtype=int)
    X[5:] = 1
    with pytest.raises(ValueError, match="max_exact=30000 exceeds 20000"):
        CSPA(2, max_exact=30_000).fit(X)


def test_eac_refuses_dense_above_limit():
    # N = 20,001 fails before any N^2 allocation
    X = np.column_stack([np.arange(20_001) % 2, np.arange(20_001) % 3])
    with pytest.raises(ValueError, match="N=20001 exceeds 20000"):
        EAC(2).fit(X)


def test_eac_limit_is_the_shared_constant(rng, monkeypatch):
    X, _ = planted(rng, n_per=30)
    monkeypatch.setattr(coassociation, "DENSE_COASSOCIATION_LIMIT", 50)
    with pytest.raises(ValueError, match="exceeds 50"):
        EAC(3).fit(X)


def test_eac_distance_matches_coassociation(rng):
    from scipy.spatial.distance import squareform

    from consensuskit.data.ensemble import Ensemble

    X, _ = planted(rng, n_per=20, missing=0.3)
    ens = Ensemble.from_labels(X)
    c, n = ens.coassociation()
    want = np.where(n > 0, 1 - c / np.maximum(n, 1), 1.0)
    np.fill_diagonal(want, 0)
    got = squareform(coassociation.condensed_coassociation_distance(ens, block=7))
    np.testing.assert_allclose(got, want, atol=1e-12)


def test_ward_distance_is_euclidean_in_onehot_space(rng):
    from scipy.spatial.distance import pdist

    from consensuskit.data.ensemble import Ensemble

    X, _ = planted(rng, n_per=10)
    ens = Ensemble.from_labels(X)
    d = coassociation.condensed_coassociation_distance(ens, sqrt=True)
    e = pdist(ens.onehot().toarray()) / np.sqrt(2 * ens.n_partitions)
    np.testing.assert_allclose(d, e, atol=1e-12)


def test_qmi_features_are_centred_and_missing_is_zero(rng):
    from consensuskit.data.ensemble import Ensemble

    X, _ = planted(rng, n_per=20, missing=0.3)
    ens = Ensemble.from_labels(X)
    F = QMI.features(ens)
    mask = np.repeat(ens.mask, ens.n_labels, axis=1)
    assert np.all(F[~mask] == 0)
    np.testing.assert_allclose(F.sum(axis=0), 0.0, atol=1e-10)


def test_mcla_association_and_meta_labels(rng):
    X, y = planted(rng)
    m = MCLA(3, random_state=0).fit(X)
    T = m.ensemble_.n_total_labels
    assert m.meta_labels_.shape == (T,)
    assert m.association_.shape == (X.shape[0], 3)
    assert np.all((m.association_ >= 0) & (m.association_ <= 1))


def test_bad_inputs():
    X = np.tile(np.array([[0, 1], [1, 0]]), (5, 1))
    with pytest.raises(ValueError, match="linkage must be one of"):
        EAC(2, linkage="median").fit(X)
    with pytest.raises(ValueError, match="n_clusters"):
        HBGF(50).fit(X)
    with pytest.raises(ValueError, match="more than the number of base clusters"):
        MCLA(5).fit(X)
    with pytest.raises(TypeError, match="n_neighbors"):
        CSPA(2, n_neighbors=1.5).fit(X)
    with pytest.raises(ValueError, match="partitioner must be"):
        CSPA(2, partitioner="hmetis").fit(X)
    with pytest.raises(ValueError, match="imbalance"):
        HGPA(2, imbalance=0).fit(X)
    with pytest.raises(ValueError, match="objective must be one of"):
        HGPA(2, objective="soed").fit(X)
    with pytest.raises(ValueError, match="labels must be 2-D"):
        QMI(2).fit(np.arange(10))


def test_lazy_exports():
    import consensuskit

    for name in ["KCC", "CSPA", "HGPA", "MCLA", "HBGF", "EAC", "QMI", "ResamplingConsensus",
                 "MajorityVote", "IVC", "IPVC", "MedoidConsensus", "LeastSquaresConsensus"]:
        assert getattr(consensuskit, name).__name__ == name
