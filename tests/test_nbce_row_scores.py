"""The compiled per-draw row scores of NBCE (:mod:`consensuskit.models.nbce.row_scores`)
against the plain sum over every component, written with the numpy predictive
parameters, on count tables with empty components, singletons and missing labels."""

import numpy as np
import pytest
from scipy.special import logsumexp

from consensuskit.models.nbce.gibbs import draw_counts
from consensuskit.models.nbce.predictive import component_loglik, predictive_parameters
from consensuskit.models.nbce.row_scores import (
    draw_loo_logliks,
    draw_row_logliks,
    mixture_row_logliks,
)


def _draw(seed, N=40, M=5, T=9, missing=0.15):
    """A random draw: global index (N, M) with missing labels, z with empty components
    and at least two singletons, its counts and hyper-parameters."""
    rng = np.random.default_rng(seed)
    n_labels = rng.integers(2, 5, M)
    off = np.concatenate([[0], np.cumsum(n_labels)[:-1]])
    codes = np.stack([rng.integers(0, k, N) for k in n_labels], axis=1)
    idx = np.where(rng.random((N, M)) < missing, -1, codes + off)
    z = rng.choice([0, 2, 3, 6], N)  # 1, 4, 5, 7, 8 empty
    z[:2] = [5, 8]  # singletons, one of them the last component
    Nk = np.bincount(z, minlength=T)
    Nkl, Nkm = draw_counts(idx, z, T, n_labels)
    return idx, z, Nk, Nkl, Nkm, float(rng.uniform(0.3, 4)), float(rng.uniform(0.05, 2)), n_labels


def _reference(idx_rows, Nk, Nkl, Nkm, a0, b, n_labels, prior):
    lp, lt = predictive_parameters(Nk, Nkl, Nkm, a0, b, n_labels, prior)
    return logsumexp(lp[None, :] + component_loglik(idx_rows, lt), axis=1)


@pytest.mark.parametrize("prior", ["tsb", "fsd"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_row_logliks_equal_sum_over_every_component(prior, seed):
    idx, z, Nk, Nkl, Nkm, a0, b, n_labels = _draw(seed)
    got = draw_row_logliks(idx, Nk, Nkl, Nkm, a0, b, n_labels, prior)
    want = _reference(idx, Nk, Nkl, Nkm, a0, b, n_labels, prior)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    # stored count tables are int32: the same values
    got32 = draw_row_logliks(idx.astype(np.int16), Nk, Nkl.astype(np.int32),
                             Nkm.astype(np.int32), a0, b, n_labels, prior)
    np.testing.assert_allclose(got32, want, rtol=1e-12)


@pytest.mark.parametrize("prior", ["tsb", "fsd"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_loo_logliks_equal_predictive_of_the_counts_without_the_row(prior, seed):
    idx, z, Nk, Nkl, Nkm, a0, b, n_labels = _draw(seed)
    T = Nk.size
    got = draw_loo_logliks(idx, z, Nk, Nkl, Nkm, a0, b, n_labels, prior)
    for i in range(idx.shape[0]):
        keep = np.arange(idx.shape[0]) != i
        kl, km = draw_counts(idx[keep], z[keep], T, n_labels)
        want = _reference(idx[i:i + 1], np.bincount(z[keep], minlength=T), kl, km, a0, b,
                          n_labels, prior)[0]
        assert got[i] == pytest.approx(want, rel=1e-12), i
    # the negative control: the row kept in its own counts is a different number
    kept = draw_row_logliks(idx, Nk, Nkl, Nkm, a0, b, n_labels, prior)
    assert np.all(kept[:2] > got[:2] + 1e-3)  # a singleton predicts itself far better


def test_bad_input_is_refused():
    idx, z, Nk, Nkl, Nkm, a0, b, n_labels = _draw(0)
    with pytest.raises(ValueError, match="do not fit"):
        draw_row_logliks(idx[:, :3], Nk, Nkl, Nkm, a0, b, n_labels, "tsb")
    with pytest.raises(ValueError, match="component the counts hold"):
        draw_loo_logliks(idx, np.full_like(z, 1), Nk, Nkl, Nkm, a0, b, n_labels, "tsb")
    with pytest.raises(ValueError, match="prior"):
        draw_row_logliks(idx, Nk, Nkl, Nkm, a0, b, n_labels, "dp")
    for bad in (-2, int(n_labels.sum())):
        wrong = idx.copy()
        wrong[3, 1] = bad
        with pytest.raises(ValueError, match="labels are 0"):
            draw_row_logliks(wrong, Nk, Nkl, Nkm, a0, b, n_labels, "tsb")
        with pytest.raises(ValueError, match="labels are 0"):
            mixture_row_logliks(wrong, np.zeros(9), np.zeros((9, int(n_labels.sum()))))
    with pytest.raises(ValueError, match="component the counts hold"):
        draw_loo_logliks(idx, np.full_like(z, 9), Nk, Nkl, Nkm, a0, b, n_labels, "tsb")


def test_estimator_says_which_draws_a_score_needs():
    """Without the draws of z the LOO log-likelihood is refused; the held-out scores still
    run from the stored count tables, and are refused once those are gone too."""
    from consensuskit import NBCE

    X = np.random.default_rng(0).integers(0, 3, (30, 4))
    m = NBCE(5, n_samples=3, burn_in=2, n_chains=1, random_state=0).fit(X)
    del m.samples_["z"]
    with pytest.raises(ValueError, match="leave-one-out log-likelihood"):
        m.log_likelihood_draws()
    assert np.isfinite(m.perplexity(X))
    del m.samples_["label_counts"]
    with pytest.raises(ValueError, match="count tables"):
        m.perplexity(X)


def test_mixture_row_logliks_equal_the_numpy_sum():
    """One draw of (pi, theta) (the variational engines'): the compiled sum equals the
    numpy one, missing labels included; shapes that do not fit are refused."""
    idx, z, Nk, Nkl, Nkm, a0, b, n_labels = _draw(4)
    lp, lt = predictive_parameters(Nk, Nkl, Nkm, a0, b, n_labels, "fsd")
    want = logsumexp(lp[None] + component_loglik(idx, lt), axis=1)
    np.testing.assert_allclose(mixture_row_logliks(idx, lp, lt), want, rtol=1e-12)
    with pytest.raises(ValueError, match="do not fit"):
        mixture_row_logliks(idx, lp[:-1], lt)


@pytest.mark.parametrize("inference", ["vb", "cvb"])
def test_variational_log_likelihood_draws_equal_the_numpy_sum(inference):
    from consensuskit import NBCE

    X = np.random.default_rng(1).integers(0, 3, (40, 5))
    X[::7, 2] = -1
    m = NBCE(6, inference=inference, prior="fsd", n_samples=5, n_chains=2,
             random_state=0).fit(X)
    lp, lt = m._seeded_variational_draws()
    idx = m.ensemble_.offset_index()
    want = np.stack([logsumexp(a[None] + component_loglik(idx, t), axis=1)
                     for a, t in zip(lp, lt)])
    np.testing.assert_allclose(m.log_likelihood_draws()[0], want, rtol=1e-12)
