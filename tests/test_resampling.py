"""Resampling consensus (Monti et al. 2003) against ConsensusClusterPlus.

Fixtures in ``tests/data/ccp`` come from ``experiments/make_r_fixtures.R``
(ConsensusClusterPlus 1.62, Debian's r-bioc-consensusclusterplus):

* ``*_resamples``: one run (50 resamples, pItem 0.8, hc average, euclidean,
  seed 1) with, for every resample and K, the items drawn and their labels;
  ``*_summary``/``*_classes``/``*_cluster_consensus``/``*_item_consensus``/
  ``*_consensus_k3``: what R computed from that run;
* ``*_runs``: five independent runs (100 resamples, seeds 1-5) with the
  built-in ``clusterAlg = "hc"``.

R's and numpy's random streams differ, so (1) the statistics are compared on R's
own resampled partitions (to rounding), (2) our subsample clustering is compared
on R's subsamples, and (3) independent runs are compared within the run-to-run
standard error.
"""

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import adjusted_rand_score

from consensuskit.consensus.resampling import (
    ResamplingConsensus,
    _feature_distance,
    _sub_condensed,
    cdf_area,
    choose_k,
    consensus_cdf,
    delta_area,
    hierarchical_labels,
    proportion_ambiguous,
)
from consensuskit.data.generate import noisy_copies

DATA = Path(__file__).parent / "data" / "ccp"
SETS = ["iris", "wine", "glass"]
KS = list(range(2, 9))


def _features(name, root=DATA):
    return pd.read_csv(root / f"{name}_features.csv.gz").to_numpy()


def _r_resamples(name, root=DATA):
    R = pd.read_csv(root / f"{name}_resamples.csv.gz")
    return {k: R[[c for c in R.columns if c.startswith(f"k{k}_")]].to_numpy() for k in KS}


def _same_partition(a, b):
    return adjusted_rand_score(a, b) == pytest.approx(1.0, abs=1e-12)


def _match_clusters(ours, theirs):
    """For each R cluster id, the id of our cluster with the same members."""
    return {r: int(np.bincount(ours[theirs == r]).argmax()) for r in np.unique(theirs)}


@pytest.mark.parametrize("name", SETS)
def test_statistics_equal_r_on_r_resamples(name):
    fit = ResamplingConsensus(data="features").fit_resamples(_r_resamples(name))
    summary = pd.read_csv(DATA / f"{name}_summary.csv")
    np.testing.assert_array_equal(fit.ks_, summary.k)
    np.testing.assert_allclose(fit.area_, summary.area, rtol=0, atol=1e-12)
    np.testing.assert_allclose(fit.delta_area_, summary.delta, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(fit.pac_, summary.pac, rtol=0, atol=1e-12)
    K3 = pd.read_csv(DATA / f"{name}_consensus_k3.csv.gz").to_numpy()
    off = ~np.eye(K3.shape[0], dtype=bool)
    np.testing.assert_allclose(fit.consensus_matrix(3)[off], K3[off], atol=1e-12)

    classes = pd.read_csv(DATA / f"{name}_classes.csv.gz").to_numpy()
    cc = pd.read_csv(DATA / f"{name}_cluster_consensus.csv")
    ic = pd.read_csv(DATA / f"{name}_item_consensus.csv.gz")
    for i, k in enumerate(KS):
        assert _same_partition(fit.labels_by_k_[k], classes[:, i]), k
        to_ours = _match_clusters(fit.labels_by_k_[k], classes[:, i])
        sub = cc[cc.k == k]
        ours = [fit.cluster_consensus_[k][to_ours[c]] for c in sub.cluster]
        np.testing.assert_allclose(ours, sub.clusterConsensus, atol=1e-12)
        sub = ic[ic.k == k]
        ours = fit.item_consensus_[k][sub.item.to_numpy(), [to_ours[c] for c in sub.cluster]]
        np.testing.assert_allclose(ours, sub.itemConsensus, atol=1e-12)


@pytest.mark.parametrize(
    "name", ["iris", *(pytest.param(n, marks=pytest.mark.slow) for n in ("wine", "glass"))])
def test_subsample_clustering_reproduces_r(name):
    """Average-linkage trees on R's subsamples cut into R's partitions, every K."""
    F = _features(name)
    full = _feature_distance(F, "euclidean")
    res = _r_resamples(name)
    for h in range(res[2].shape[1]):
        rows = np.flatnonzero(res[2][:, h] >= 0)
        ours = hierarchical_labels(_sub_condensed(full, F.shape[0], rows), KS)
        for k in KS:
            assert _same_partition(ours[k], res[k][rows, h]), (h, k)


def _independent_runs(name, seeds):
    F = _features(name)
    return [ResamplingConsensus(data="features", n_resamples=100, random_state=s).fit(F)
            for s in seeds]


@pytest.mark.parametrize(
    "name", ["iris", pytest.param("glass", marks=pytest.mark.slow),
             pytest.param("wine", marks=pytest.mark.slow)])
def test_independent_runs_agree_with_r(name):
    """CDF area per K within 4 standard errors of R's runs; PAC picks R's K.

    (wine under ``-m slow``: its delta-area K varies between seeds in R and here alike,
    but PAC's K and the areas agree as well.)
    """
    runs = pd.read_csv(DATA / f"{name}_runs.csv")
    r_area = runs.pivot(index="seed", columns="k", values="area").to_numpy()
    r_pac = runs.pivot(index="seed", columns="k", values="pac").to_numpy()
    ours = _independent_runs(name, range(5))
    area = np.array([f.area_ for f in ours])
    se = np.sqrt(area.var(axis=0, ddof=1) / len(area) + r_area.var(axis=0, ddof=1) / len(r_area))
    z = (area.mean(axis=0) - r_area.mean(axis=0)) / se
    assert np.all(np.abs(z) < 4), z
    r_chosen = [choose_k(KS, pac=p) for p in r_pac]
    assert [f.n_clusters_ for f in ours] == r_chosen


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("Rscript") is None, reason="R is not installed")
def test_fixtures_regenerate_identically(tmp_path):
    """Rerun the R script: the stored fixtures are what the R packages produce."""
    root = Path(__file__).parent.parent
    probe = subprocess.run(["Rscript", "-e", "library(ConsensusClusterPlus); library(clue)"],
                           capture_output=True)
    if probe.returncode:
        pytest.skip("ConsensusClusterPlus or clue is not installed")
    subprocess.run(["Rscript", str(root / "experiments" / "make_r_fixtures.R"), str(tmp_path)],
                   cwd=root, check=True, capture_output=True)
    for sub in ("ccp", "clue"):
        for stored in sorted((root / "tests" / "data" / sub).iterdir()):
            new = pd.read_csv(tmp_path / sub / stored.name)
            old = pd.read_csv(stored)
            pd.testing.assert_frame_equal(new, old, check_exact=False, rtol=1e-12)


# -------------------------------------------------------------------- behaviour

def test_cdf_statistics_by_hand():
    v = np.array([0.0, 0.0, 0.5, 1.0])
    edges, cdf = consensus_cdf(v)
    assert cdf[0] == 0.5 and cdf[49] == 0.75 and cdf[-1] == 1.0  # 0.5 counts at its own edge
    # bins 1-49 at 0.5, bins 50-99 at 0.75, bin 100 at 1: 0.01 * (49 * 0.5 + 50 * 0.75 + 1)
    assert cdf_area(v) == pytest.approx(0.63, abs=1e-12)
    assert proportion_ambiguous(v) == 0.25
    np.testing.assert_allclose(delta_area([0.2, 0.3, 0.3]), [0.2, 0.5, 0.0])
    assert choose_k([2, 3, 4], pac=[0.3, 0.1, 0.1]) == 4
    assert choose_k([2, 3, 4], pac=[0.3, 0.1, 0.2]) == 3
    assert choose_k([2, 3, 4, 5], delta=[0.2, 0.5, 0.05, 0.3], criterion="delta_area") == 3


def _planted_labels(rng, k=4, n_per=40, m=20, noise=0.1):
    y = np.repeat(np.arange(k), n_per)
    X = noisy_copies(y, m, noise=noise, n_labels=rng.integers(k, k + 3, size=m),
                     random_state=int(rng.integers(2**31)))
    return X, y


def test_label_ensemble_chooses_planted_k(rng):
    X, y = _planted_labels(rng)
    fit = ResamplingConsensus(n_resamples=30, random_state=0).fit(X)
    assert fit.n_clusters_ == 4
    assert adjusted_rand_score(y, fit.labels_) > 0.95
    assert fit.pac_[fit.ks_ == 4][0] < fit.pac_[fit.ks_ == 3][0]
    assert np.all(fit.cluster_consensus_[4] > 0.9)
    table = fit.summary()
    assert list(table.index) == KS and table.loc[4, "pac"] == fit.pac_[2]


def test_labels_mode_with_estimator_and_column_subsampling(rng):
    from consensuskit import KCC

    X, y = _planted_labels(rng, k=3, n_per=30, m=12)
    fit = ResamplingConsensus(k_range=(2, 4), n_resamples=10, feature_fraction=0.5,
                              clusterer=KCC(utility="Uc", n_init=2), random_state=0).fit(X)
    assert fit.n_clusters_ == 3
    assert adjusted_rand_score(y, fit.labels_) > 0.9
    drawn = fit.resamples_[3] >= 0
    np.testing.assert_array_equal(drawn.sum(axis=0), np.full(10, 72))  # 80% of 90


def test_estimator_clusterer_with_missing_labels(rng):
    from consensuskit import KCC

    X, y = _planted_labels(rng, k=3, n_per=20, m=6)
    X[rng.random(X.shape) < 0.5] = -1
    X[np.arange(60), rng.integers(0, 6, 60)] = y  # every row keeps a label
    fit = ResamplingConsensus(k_range=(2, 3), n_resamples=8, feature_fraction=0.5,
                              clusterer=KCC(n_init=1), random_state=0).fit(X)
    assert (fit.resamples_[3] == -1).sum() > 0.2 * X.shape[0] * 8  # rows left out, not guessed
    assert fit.labels_by_k_[3].shape == (60,)


def test_given_n_clusters_is_used_and_added(rng):
    X, _ = _planted_labels(rng, k=3, n_per=20, m=8)
    fit = ResamplingConsensus(n_clusters=9, k_range=(2, 3), n_resamples=5,
                              random_state=0).fit(X)
    assert list(fit.ks_) == [2, 3, 9] and fit.n_clusters_ == 9
    assert fit.labels_.max() == 8


def test_kmeans_clusterer_on_features():
    F = _features("iris")
    fit = ResamplingConsensus(data="features", clusterer="kmeans", k_range=(2, 5),
                              n_resamples=20, random_state=0).fit(F)
    assert fit.n_clusters_ in (2, 3)
    assert fit.resamples_[2].shape == (150, 20)


def test_bad_settings(rng):
    X, _ = _planted_labels(rng, k=2, n_per=5, m=4)
    with pytest.raises(ValueError, match="cannot be cut into K=8"):
        ResamplingConsensus(n_resamples=2).fit(X)
    with pytest.raises(ValueError, match="item_fraction"):
        ResamplingConsensus(item_fraction=1.5, k_range=(2, 3)).fit(X)
    with pytest.raises(ValueError, match="criterion"):
        ResamplingConsensus(criterion="gap", k_range=(2, 3)).fit(X)
    with pytest.raises(ValueError, match="kmeans.*features"):
        ResamplingConsensus(clusterer="kmeans", k_range=(2, 3)).fit(X)
    with pytest.raises(ValueError, match="data must be"):
        ResamplingConsensus(data="matrix").fit(X)
    with pytest.raises(ValueError, match="constant features"):
        ResamplingConsensus(data="features", metric="pearson", k_range=(2, 3)).fit(
            np.ones((10, 3)))


def test_plots(rng):
    import matplotlib

    matplotlib.use("Agg")
    X, _ = _planted_labels(rng, k=3, n_per=15, m=8)
    fit = ResamplingConsensus(k_range=(2, 4), n_resamples=5, random_state=0).fit(X)
    fig = fit.plot()
    assert len(fig.axes) == 5  # four panels and a colour bar
    assert fit.plot_item_consensus().axes[0].get_title() == f"item consensus, K={fit.n_clusters_}"


def test_sampled_pairs_agree_with_exact_within_their_standard_error(rng):
    """CDF, area and PAC on sampled pairs vs every pair, on the same resampled partitions."""
    X, _ = _planted_labels(rng, k=4, n_per=50, m=10, noise=0.35)
    exact = ResamplingConsensus(n_resamples=20, random_state=0).fit(X)
    z_area, z_pac = [], []
    for seed in range(3):
        est = ResamplingConsensus(n_resamples=20, n_pairs=4000, random_state=seed)
        est.fit_resamples(exact.resamples_)
        z_area.append((est.area_ - exact.area_) / est.area_se_)
        ok = est.pac_se_ > 0
        z_pac.append((est.pac_ - exact.pac_)[ok] / est.pac_se_[ok])
        cdf_ok = est.cdf_se_ > 0
        assert np.all(np.abs(est.cdf_ - exact.cdf_)[cdf_ok] < 5 * est.cdf_se_[cdf_ok])
        assert est.item_consensus_ is None
        with pytest.raises(ValueError, match="n_pairs"):
            est.consensus_matrix()
    z_area, z_pac = np.concatenate(z_area), np.concatenate(z_pac)
    assert np.all(np.abs(z_area) < 4) and np.all(np.abs(z_pac) < 4)
    # the SEs are not vacuous: K = 2 against K = 5's exact statistics is many SEs off
    wrong = (est.area_[0] - exact.area_[3]) / est.area_se_[0]
    assert abs(wrong) > 10


def test_sampled_pairs_with_estimator_partition(rng):
    from consensuskit import MM

    X, y = _planted_labels(rng, k=3, n_per=40, m=10)
    fit = ResamplingConsensus(k_range=(2, 4), n_resamples=10, n_pairs=2000,
                              clusterer=MM(n_init=1), random_state=0).fit(X)
    assert fit.n_clusters_ == 3
    assert adjusted_rand_score(y, fit.labels_) > 0.9
    assert fit.resamples_[3].dtype == np.int8
    assert np.all(fit.cluster_consensus_[3] > 0.8)
