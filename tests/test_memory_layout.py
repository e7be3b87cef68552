"""The narrow layouts that keep a fit's memory near the data (issue 27, must-show 2) give
the same numbers as the wide ones they replaced; peak memory itself is measured by
``experiments/bench_memory.py``, not here."""

import dataclasses

import numpy as np
import pytest
import torch

from consensuskit import BCE, NBCE
from consensuskit.base import normalised_rows, row_argmax
from consensuskit.data.ensemble import Ensemble
from consensuskit.models.bce.collapsed_gibbs import CollapsedGibbsEM
from consensuskit.models.mm import em as mm_em
from consensuskit.models.nbce.gibbs import (
    GibbsState,
    draw_counts,
    draw_memberships,
    draw_votes,
    gibbs_nbce,
    relabel_by_size,
)
from consensuskit.models.nbce.gibbs.chains import _widen_draws, draw_z_dtype
from consensuskit.models.nbce.gibbs.kernels import _seed
from consensuskit.models.nbce.gibbs.rows import sampler_rows
from consensuskit.posterior.search import _precedes


def _labels(n=3000, m=8, k=5, seed=0, missing=0.1):
    rng = np.random.default_rng(seed)
    X = rng.integers(k, size=(n, m))
    X[rng.random(X.shape) < missing] = -1
    X[:, 0] = rng.integers(k, size=n)
    return X


def test_offset_index_in_any_width_and_order_equals_int64():
    ens = Ensemble.from_labels(_labels())
    wide = ens.offset_index()
    assert wide.dtype == np.int64 and wide.flags.f_contiguous
    for dtype, order in [(np.int16, "C"), (np.int32, "C"), (np.int32, "F")]:
        narrow = ens.offset_index(dtype, order=order)
        assert narrow.dtype == dtype
        assert narrow.flags.c_contiguous if order == "C" else narrow.flags.f_contiguous
        np.testing.assert_array_equal(narrow, wide)
    many = Ensemble.from_labels(np.arange(400)[:, None] % 200 * np.ones((1, 1), int))
    with pytest.raises(ValueError, match="cannot hold"):
        many.offset_index(np.int8)


def test_bce_gibbs_fit_lays_out_no_label_data_and_keeps_narrow_chain_arrays():
    ens = Ensemble.from_labels(_labels())
    BCE(n_clusters=3, n_sweeps=10, n_init=2, random_state=0).fit(ens)
    assert not ens.__dict__.get("_label_data"), "the Gibbs fit built LabelData of every row"
    engine = CollapsedGibbsEM(ens.codes, ens.offsets, 3, lambda rng: rng.dirichlet(np.ones(40), 3),
                              n_sweeps=4, max_rows=1000, final_sweeps=3)
    state = engine.init(np.random.RandomState(0))
    for _ in range(engine.total_sweeps):
        state = engine.step(state, np.random.RandomState(1))
    chain = state.chains[0]
    assert chain.z.dtype == np.int8 and chain.nrow.dtype == np.int8
    # the pooled sums hold M * total_sweeps = 8 * 7 = 56 at most: int8 too
    assert chain.nrow_sum.dtype == np.int8 and chain.z.shape == ens.codes.shape
    assert chain.nrow_sum.max() <= 8 * chain.n_pooled
    assert engine.codes is ens.codes  # read in place, not copied


def test_gibbs_result_releases_the_chain_rows_and_keeps_its_gamma():
    """result() drops z and the row counts before forming gamma; gamma is alpha plus the
    pooled mean counts, as computed from the arrays it released."""
    ens = Ensemble.from_labels(_labels())
    engine = CollapsedGibbsEM(ens.codes, ens.offsets, 3, lambda rng: rng.dirichlet(np.ones(40), 3),
                              n_sweeps=4, max_rows=1000, final_sweeps=3)
    assert engine.V.dtype == np.int8
    np.testing.assert_array_equal(engine.V, (ens.codes >= 0).sum(1))
    state = engine.init(np.random.RandomState(0))
    for _ in range(engine.total_sweeps):
        state = engine.step(state, np.random.RandomState(1))
    chain = state.chains[0]
    want = (chain.nrow_sum / chain.n_pooled + chain.alpha).T
    res = engine.result(state)
    assert chain.z is None and chain.nrow is None and chain.nrow_sum is None
    np.testing.assert_array_equal(res.gamma.numpy(), want)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_bce_membership_is_formed_on_first_read_from_gamma(tmp_path, dtype):
    """membership_ is not formed by fit; read, it is gamma_ normalised (the same values as
    when fit formed it), the same array on every read, forgotten by a refit, and it
    survives save/load whether or not it was read."""
    X = _labels(n=400)
    est = BCE(n_clusters=3, n_sweeps=10, random_state=0, dtype=dtype).fit(X)
    assert "membership_" not in vars(est)
    est.save(tmp_path / "unread.ck")
    m = est.membership_
    np.testing.assert_array_equal(m, normalised_rows(est.gamma_))
    assert m.dtype == np.float64 and m.shape == (400, 3)
    assert est.membership_ is m
    est.save(tmp_path / "read.ck")
    for name in ("unread.ck", "read.ck"):
        back = BCE.load(tmp_path / name)
        np.testing.assert_array_equal(back.membership_, m)
    est.fit(X[:300])
    assert "membership_" not in vars(est) and est.membership_.shape == (300, 3)
    np.testing.assert_array_equal(est.membership_, normalised_rows(est.gamma_))
    assert not hasattr(BCE(n_clusters=3), "membership_")


def test_nbce_membership_is_formed_from_integer_votes_on_first_read(tmp_path):
    """A Gibbs fit keeps the draws' votes (uint16) and no offset index of the rows;
    membership_ read is the float64 share of the draws, equal to draw_memberships' (what
    fit formed before), kept, saved and loaded whether or not read; a CVB refit replaces it
    and a Gibbs refit forms its own again."""
    X = _labels(n=300, m=6, k=3)
    kw = dict(truncation=6, n_samples=20, burn_in=5, n_chains=2, random_state=0)
    est = NBCE(**kw).fit(X)
    assert "membership_" not in vars(est)
    assert est._membership_votes.dtype == np.uint16
    assert not any(isinstance(v, np.ndarray) and v.shape == X.shape and v is not est.ensemble_.codes
                   for v in vars(est).values()), "an (N, M) array is kept beside the codes"
    est.save(tmp_path / "unread.ck")
    Z = est.samples_["z"].reshape(-1, 300)
    want, _ = draw_memberships(Z, est.labels_, est.samples_["counts"].shape[-1])
    m = est.membership_
    assert m.dtype == np.float64 and m.shape == (300, est.n_clusters_)
    np.testing.assert_array_equal(m, want)
    assert est.membership_ is m
    est.save(tmp_path / "read.ck")
    for name in ("unread.ck", "read.ck"):
        np.testing.assert_array_equal(NBCE.load(tmp_path / name).membership_, m)
    est.set_params(inference="cvb").fit(X)
    assert "_membership_votes" not in vars(est)
    np.testing.assert_allclose(est.membership_.sum(1), 1.0)
    est.set_params(inference="gibbs").fit(X[:200])
    assert "membership_" not in vars(est) and est.membership_.shape[0] == 200
    assert not hasattr(NBCE(), "membership_")


def test_nbce_scores_from_z_equal_the_stored_count_tables():
    """Without stored count tables (kept only while small) the scores recount each draw
    from z and the training index, built once per call: the same LOO, in-sample and
    held-out log-likelihoods and predict_proba as from the tables."""
    X = _labels(n=120, m=5, k=3)
    est = NBCE(truncation=6, n_samples=6, burn_in=3, n_chains=2, random_state=0).fit(X)
    assert "label_counts" in est.samples_
    new = _labels(n=30, m=5, k=3, seed=1)
    want = (est._row_logliks_loo(), est._row_logliks_gibbs(est._train_index()),
            est.predict_proba(new), est._posterior_predictive_draws(np.random.RandomState(0)))
    for key in ("label_counts", "col_counts"):
        del est.samples_[key]
    got = (est._row_logliks_loo(), est._row_logliks_gibbs(est._train_index()),
           est.predict_proba(new), est._posterior_predictive_draws(np.random.RandomState(0)))
    for a, b in zip(want, got):
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=0)


def test_draw_votes_widen_past_uint16_and_count_every_draw():
    Z = np.zeros((2**16, 3), dtype=np.int64)
    Z[::2, 2] = 1
    votes, maps = draw_votes(Z, np.array([0, 0, 1]), 2)
    assert votes.dtype == np.uint32
    np.testing.assert_array_equal(votes.sum(1), 2**16)
    np.testing.assert_array_equal(votes[2], [2**15, 2**15])


def test_draw_votes_kernel_equals_the_contingency_argmax():
    """Each draw's component goes to the consensus cluster it overlaps most (the first on
    ties, as argmax), empty components to -1, and each row gets its component's vote;
    any integer type of draws."""
    rng = np.random.default_rng(3)
    for t in range(200):
        N, D = int(rng.integers(1, 80)), int(rng.integers(1, 6))
        T, K = int(rng.integers(1, 9)), int(rng.integers(1, 5))
        Z = rng.integers(0, T, (D, N)).astype([np.int16, np.int32, np.int64][t % 3])
        labels = rng.integers(0, K, N)
        Kl = int(labels.max()) + 1
        want_maps = np.full((D, T), -1)
        want_votes = np.zeros((N, Kl), dtype=np.int64)
        for s in range(D):
            cont = np.zeros((T, Kl), dtype=np.int64)
            np.add.at(cont, (Z[s], labels), 1)
            for c in range(T):
                if cont[c].sum():
                    want_maps[s, c] = int(np.argmax(cont[c]))
            want_votes[np.arange(N), want_maps[s, Z[s]]] += 1
        votes, maps = draw_votes(Z, labels, T)
        assert votes.dtype == np.uint16
        np.testing.assert_array_equal(maps, want_maps)
        np.testing.assert_array_equal(votes, want_votes)


def test_draw_counts_kernel_counts_every_observed_label():
    """N_kl and N_kj of one draw against np.add.at over the observed positions, for the
    index and assignment types the sampler stores (missing labels skipped)."""
    rng = np.random.default_rng(4)
    for t in range(100):
        N, M, T = int(rng.integers(1, 60)), int(rng.integers(1, 6)), int(rng.integers(1, 7))
        kj = rng.integers(1, 5, M)
        offsets = np.concatenate([[0], np.cumsum(kj)])
        idx = (rng.integers(0, 60, (N, M)) % kj + offsets[:-1]).astype(
            [np.int16, np.int32][t % 2])
        idx[rng.random((N, M)) < 0.25] = -1
        z = rng.integers(0, T, N).astype([np.int32, np.int64][(t // 2) % 2])
        rows, cols = np.nonzero(idx >= 0)
        want_kl = np.zeros((T, int(kj.sum())), dtype=np.int64)
        want_km = np.zeros((T, M), dtype=np.int64)
        np.add.at(want_kl, (z[rows], idx[rows, cols]), 1)
        np.add.at(want_km, (z[rows], cols), 1)
        Nkl, Nkm = draw_counts(idx, z, T, kj)
        np.testing.assert_array_equal(Nkl, want_kl)
        np.testing.assert_array_equal(Nkm, want_km)
        # the sampler's layout: per-column codes (F-ordered as the ensemble keeps them)
        codes = np.asfortranarray(np.where(idx >= 0, idx - offsets[:-1], -1).astype(np.int8))
        Nkl, Nkm = draw_counts((codes, offsets[:-1]), z, T, kj)
        np.testing.assert_array_equal(Nkl, want_kl)
        np.testing.assert_array_equal(Nkm, want_km)


@pytest.mark.parametrize("prior,truncation", [("tsb", None), ("fsd", 6), ("tsb", 5)])
def test_nbce_sampler_on_codes_and_offsets_runs_the_chain_of_the_global_index(prior,
                                                                               truncation):
    """The sampler reads the ensemble's int8 codes with the columns' offsets (one byte per
    label) where it read the int16 global index (two): every move (sweep, split-merge,
    group moves, label swaps, hyper-parameters) gives the same chain, bit for bit."""
    X = _labels(n=150, m=6, k=4, seed=3, missing=0.15)
    X[40:60] = X[40]  # a group of identical rows, for the group moves
    ens = Ensemble.from_labels(X)
    assert ens.codes.dtype == np.int8 and not ens.codes.flags.c_contiguous
    runs = {}
    for name, lab in (("index", ens.offset_index(np.int16, order="C")),
                      ("codes", (ens.codes, ens.offsets))):
        out = gibbs_nbce(lab, ens.n_labels, truncation, prior=prior, n_samples=8, burn_in=4,
                         n_chains=2, n_jobs=1, random_state=5)
        runs[name] = out
    a, b = runs["index"], runs["codes"]
    assert a["move_stats"][:, :4].sum() > 0  # split-merge proposals were made
    for key in ("z", "counts", "log_joint", "alpha0", "beta", "move_stats"):
        np.testing.assert_array_equal(b[key], a[key], err_msg=key)
    rows = sampler_rows((ens.codes, ens.offsets))
    assert rows[0].dtype == np.int8 and rows[0].flags.c_contiguous
    np.testing.assert_array_equal(np.where(rows[0] >= 0, rows[0] + rows[1], -1),
                                  ens.offset_index())


def test_sampler_rows_rejects_what_is_not_codes_and_offsets():
    codes = np.zeros((4, 3), dtype=np.int8)
    with pytest.raises(ValueError, match="signed integers"):
        sampler_rows((codes.astype(np.float64), np.zeros(3)))
    with pytest.raises(ValueError, match="3 columns need 3 offsets"):
        sampler_rows((codes, np.zeros(2)))


def test_a_gibbs_state_pickled_with_its_global_index_resumes_on_codes():
    """A chain checkpointed before the kernels read (codes, offsets) held ``idx``: it is
    read back as the index with zero offsets, and sweeps on as before."""
    ens = Ensemble.from_labels(_labels(n=80, m=4, k=3, seed=2))
    idx = ens.offset_index(np.int16, order="C")
    z0 = np.arange(80) % 3
    old = GibbsState(idx, ens.n_labels, z0, 5, 1.0, 0.5, "fsd")
    state = dict(vars(old))
    state["idx"] = state.pop("rows")[0]
    back = GibbsState.__new__(GibbsState)
    back.__setstate__(state)
    new = GibbsState((ens.codes, ens.offsets), ens.n_labels, z0, 5, 1.0, 0.5, "fsd")
    _seed(9)
    back.iterate(3, True)
    _seed(9)
    new.iterate(3, True)
    np.testing.assert_array_equal(back.z, new.z)
    np.testing.assert_array_equal(back.nlk, new.nlk)


def test_relabel_by_size_by_bincount_equals_the_np_unique_ranking():
    """Small non-negative labels take the bincount path, others np.unique's; both give
    np.unique's ranking (largest first, ties by the smaller label), int64."""
    def by_unique(z):
        _, inv, cnt = np.unique(z, return_inverse=True, return_counts=True)
        rank = np.empty(cnt.size, dtype=np.int64)
        rank[np.argsort(-cnt, kind="stable")] = np.arange(cnt.size)
        return rank[inv]

    rng = np.random.default_rng(0)
    for t in range(500):
        n = int(rng.integers(1, 60))
        z = rng.integers(0, int(rng.integers(1, 2 * n + 3)), size=n)
        z = [z, z.astype(np.int8) if z.max() < 127 else z, z * 1000, z - 3][t % 4]
        got = relabel_by_size(z)
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, by_unique(z))


def test_mm_narrow_group_codes_give_the_same_e_and_m_steps():
    ens = Ensemble.from_labels(_labels(m=10))
    narrow = mm_em.prepare(ens.codes, ens.n_labels)
    assert narrow.codes.dtype == torch.int16
    wide = dataclasses.replace(narrow, codes=narrow.codes.long(), _meta=None)
    g = torch.Generator().manual_seed(0)
    log_pi, log_theta = mm_em.init_params(narrow, 4, generator=g)
    r1, ll1, c1 = mm_em.e_step_counts(narrow, log_pi, log_theta)
    r2, ll2, c2 = mm_em.e_step_counts(wide, log_pi, log_theta)
    assert ll1 == ll2
    assert torch.equal(r1, r2) and np.array_equal(c1, c2)
    for a, b in zip(mm_em.m_step(narrow, r1), mm_em.m_step(wide, r1)):  # torch path
        assert torch.equal(a, b)
    L1 = mm_em.log_likelihood_matrix(narrow, log_pi, log_theta)
    assert torch.equal(L1, mm_em.log_likelihood_matrix(wide, log_pi, log_theta))


def test_blockwise_row_argmax_and_normalisation_equal_numpy_on_transposed_views():
    rng = np.random.default_rng(1)
    g = rng.integers(1, 4, size=(5, 1001)).astype(float)  # ties on purpose
    view = g.T  # (N, K), F-ordered, as gamma_ is
    np.testing.assert_array_equal(row_argmax(view, block_rows=64), view.argmax(1))
    np.testing.assert_array_equal(normalised_rows(view, block_rows=64),
                                  view / view.sum(1, keepdims=True))


@pytest.mark.parametrize("seed", range(20))
def test_salso_best_run_kept_as_runs_finish_is_argmins_choice(seed):
    """Runs finish in any order on threads; the run kept is np.argmin's (least loss,
    earliest on ties, first NaN)."""
    rng = np.random.default_rng(seed)
    loss = rng.integers(0, 4, size=12).astype(float)
    if seed % 3 == 0:
        loss[rng.choice(12, 2, replace=False)] = np.nan
    best = -1
    for r in rng.permutation(12):
        if _precedes(loss, r, best):
            best = r
    assert best == int(np.argmin(loss))


def test_salso_on_threads_keeps_the_same_run_as_in_turn():
    from consensuskit.posterior.losses import prepare_draws
    from consensuskit.posterior.search import salso_search

    rng = np.random.default_rng(3)
    truth = rng.integers(3, size=300)
    draws = np.where(rng.random((40, 300)) < 0.8, truth, rng.integers(5, size=(40, 300)))
    lab, k = prepare_draws(draws)
    one, info1 = salso_search(lab, k, n_runs=8, n_jobs=1, random_state=0)
    many, info3 = salso_search(lab, k, n_runs=8, n_jobs=3, random_state=0)
    np.testing.assert_array_equal(one, many)
    assert info1.best_run == info3.best_run == int(np.argmin(info1.run_losses))


def test_nbce_keeps_its_draws_of_z_as_int16_and_widens_them_past_32768_components():
    """The stored draws are most of an NBCE fit's memory at large N: z is kept as int16
    (half of int32), the same values; a table that grows past 32,768 components widens
    the draws kept so far to int32 before a larger label is stored."""
    X = _labels(n=100, m=5, k=3, seed=4)
    est = NBCE(n_samples=5, burn_in=2, n_chains=2, random_state=1).fit(X)
    z = est.samples_["z"]
    assert z.dtype == np.int16 and z.shape == (2, 5, 100)
    assert z.max() < est.truncation_
    draws = {"z": np.array([[3, 32767]], dtype=np.int16), "counts": np.zeros((1, 4))}
    _widen_draws(draws, 32768)
    assert draws["z"].dtype == np.int16
    _widen_draws(draws, 32769)
    assert draws["z"].dtype == np.int32
    np.testing.assert_array_equal(draws["z"], [[3, 32767]])
    assert draw_z_dtype(20) == np.int16 and draw_z_dtype(40000) == np.int32
