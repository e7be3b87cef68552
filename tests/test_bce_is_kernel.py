"""The importance sampler's numba kernel (:mod:`consensuskit.models.bce.is_kernel`) against
the torch loop it replaces on the CPU: the same weights to rounding on the same generator,
which it leaves in the same state, with missing labels, tiny alpha, zero likelihoods and
every proposal component; and the one call that must refuse it."""

import numpy as np
import pytest
import torch

from consensuskit.models.bce.alpha import mixture_log_weights_lik, selection_log_marginal
from consensuskit.models.bce.estimator import BCE


def _case(n, C, K, seed, alpha_scale=0.5, missing=0.1):
    g = torch.Generator().manual_seed(seed)
    lik = torch.rand(n, C, K, generator=g, dtype=torch.float64) ** 3 + 1e-4
    obs = (torch.rand(n, C, generator=g) > missing).double()
    alpha = torch.rand(K, generator=g, dtype=torch.float64) * alpha_scale + 1e-9
    return alpha, lik, obs


def _both(alpha, lik, obs, S, **kw):
    out = []
    for use_kernel in (False, True):
        gen = torch.Generator().manual_seed(11)
        lw = mixture_log_weights_lik(alpha, lik, obs, S, gen, use_kernel=use_kernel, **kw)
        out.append((lw, torch.rand(3, generator=gen)))
    return out


@pytest.mark.parametrize("n,C,K,S,alpha_scale", [(40, 6, 3, 16, 0.5), (25, 40, 12, 32, 1.0),
                                                 (30, 10, 5, 7, 1e-7), (20, 4, 1, 5, 1.0)])
def test_kernel_matches_torch_loop(n, C, K, S, alpha_scale):
    (ref, ref_after), (got, got_after) = _both(*_case(n, C, K, 3, alpha_scale), S)
    assert got.shape == ref.shape == (S, n) and got.dtype == torch.float64
    assert torch.allclose(got, ref, rtol=1e-12, atol=1e-10)
    assert torch.equal(got_after, ref_after)  # the generator consumed the same draws


def test_kernel_and_torch_give_the_same_path_proposal_log_probability():
    """``return_log_q``: each path's log proposal probability, the same in both
    implementations, and with the weight it makes ``log p(row, z)``: along one column
    (C = 1) that is ``log(alpha_z lik_z / sum(alpha))`` of the path's cluster z."""
    alpha, lik, obs = _case(20, 5, 3, 9)
    out = []
    for use_kernel in (False, True):
        gen = torch.Generator().manual_seed(2)
        out.append(mixture_log_weights_lik(alpha, lik, obs, 12, gen, use_kernel=use_kernel,
                                           return_log_q=True))
    (w0, q0), (w1, q1) = out
    assert q1.shape == (12, 20) and bool((q1 <= 1e-12).all())
    assert torch.allclose(q1, q0, rtol=1e-12, atol=1e-10)
    assert torch.allclose(w1, w0, rtol=1e-12, atol=1e-10)
    one = torch.ones(20, 1, dtype=torch.float64)
    gen = torch.Generator().manual_seed(2)
    w, q = mixture_log_weights_lik(alpha, lik[:, :1], one, 7, gen, use_kernel=True,
                                   return_log_q=True)
    z_prob = (alpha * lik[:, 0]) / alpha.sum()  # p(x, z) of the one column, (20, K)
    # log p(x, z) = log w + log q; its value is one of the row's p(x, z = k)
    lp = w + q
    hit = (lp[..., None] - torch.log(z_prob)[None]).abs().min(-1).values
    assert float(hit.max()) < 1e-10


def test_kernel_seeded_components_and_pseudo_count():
    alpha, lik, obs = _case(30, 8, 4, 5)
    for kw in (dict(seed_weight=0.0), dict(seed_weight=0.99, pseudo_count=3.0)):
        (ref, _), (got, _) = _both(alpha, lik, obs, 9, **kw)
        assert torch.allclose(got, ref, rtol=1e-12, atol=1e-10)


def test_kernel_with_labels_impossible_under_some_clusters():
    """Zeros in ``lik``: a path never enters such a cluster there, in both implementations."""
    alpha, lik, obs = _case(12, 5, 3, 7, missing=0.0)
    lik[2, 1, :2] = 0.0
    lik[5, :, 0] = 0.0
    (ref, _), (got, _) = _both(alpha, lik, obs, 8)
    assert torch.isfinite(got).all()
    assert torch.allclose(got, ref, rtol=1e-12, atol=1e-10)


def test_rows_that_no_single_cluster_explains_against_enumeration():
    """GBCE on binary features (chess_krvskp): a row's feature densities underflow to 0
    under cluster 0 in one column and under cluster 1 in another, so no single cluster
    explains the row and the proposal's ``alpha -> 0`` weights were 0/0 (the fit raised
    "invalid multinomial distribution"); a missing column with a zero likelihood made them
    NaN.  Now such rows seed the components uniformly, and the estimate agrees with the
    exact enumeration within its own SE."""
    from consensuskit.inference.pointwise import logmeanexp_rows
    from consensuskit.models.bce.marginal import collapsed_log_marginal

    alpha, lik, obs = _case(8, 5, 2, 4, missing=0.0)
    lik[:4, 0, 0] = 0.0
    lik[:4, 1, 1] = 0.0  # rows 0-3: each cluster ruled out by one column
    lik[4:, 2, :] = 0.0
    obs[4:, 2] = 0.0  # rows 4-7: a missing column whose likelihood underflowed
    exact = collapsed_log_marginal(alpha, lik, obs > 0)
    for use_kernel in (False, True):
        lw = mixture_log_weights_lik(alpha, lik, obs, 4000, torch.Generator().manual_seed(1),
                                     use_kernel=use_kernel)
        est, var = logmeanexp_rows(lw)
        assert torch.isfinite(est).all()
        z = (est - exact) / var.sqrt()
        assert float(z.abs().max()) < 4.0, z


def test_kernel_refused_off_float64():
    alpha, lik, obs = _case(5, 3, 2, 1)
    with pytest.raises(ValueError, match="float64 CPU"):
        mixture_log_weights_lik(alpha.float(), lik.float(), obs.float(), 4,
                                torch.Generator().manual_seed(0), use_kernel=True)


def test_selection_score_unchanged_by_the_kernel(monkeypatch):
    """The audition score with and without the kernel, on a fitted BCE where C(M+K, K) is
    beyond exact enumeration (so the importance sampler runs)."""
    from consensuskit.models.bce import alpha as bce_alpha

    rng = np.random.default_rng(0)
    X = rng.integers(0, 3, size=(120, 12))
    X[rng.random(X.shape) < 0.05] = -1
    est = BCE(6, n_sweeps=20, n_init=2, random_state=0).fit(X)
    a, b = torch.as_tensor(est.alpha_), est.beta_
    from consensuskit.models.bce.cavi import pack_beta

    ens = est.encode(X)
    beta = torch.as_tensor(pack_beta(b) if isinstance(b, list) else b)
    real = bce_alpha.mixture_log_weights_lik
    scores = []
    for flag in (False, True):
        monkeypatch.setattr(bce_alpha, "mixture_log_weights_lik",
                            lambda *args, _f=flag, **kw: real(*args, use_kernel=_f, **kw))
        scores.append(selection_log_marginal(a, beta, ens, seed=4, exact_max_states=10))
    monkeypatch.setattr(bce_alpha, "mixture_log_weights_lik", real)
    assert np.isfinite(scores[0]) and abs(scores[1] - scores[0]) < 1e-9 * abs(scores[0])
