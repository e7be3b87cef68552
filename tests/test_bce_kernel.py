"""The BCE E-step kernel (inference/_bce_numba.py): its special functions, the row terms
of the bound it forms in the same pass, float32 arithmetic and thread-count invariance.

The torch E-step and :func:`bce_cavi.row_terms` (torch's digamma/lgamma) are the
references.
"""

import numpy as np
import pytest
import scipy.special as sp
import torch
from numba import njit

from consensuskit.data.ensemble import Ensemble
from consensuskit.models import vector_math
from consensuskit.models.bce import cavi, initialise
from consensuskit.models.bce import kernels as kern


@njit(cache=True, error_model="numpy")
def _special(x):
    out = np.empty((5, x.size))
    for i in range(x.size):
        out[0, i], out[1, i] = kern._psi_lgamma(x[i])
        w, c, xs = kern._exp_psi(x[i])
        out[2, i] = np.log(xs) + c
        out[3, i] = vector_math.exp_nonpositive(-x[i])
        out[4, i] = vector_math.log_positive(x[i])
    return out


def test_special_functions_match_scipy():
    """digamma/lgamma to 1e-14 of scale, the phi weights' digamma to 1e-11, exp/log to ulps."""
    x = np.concatenate([np.geomspace(1e-8, 1e12, 4001), np.linspace(0.01, 40.0, 4001)])
    psi, lg, psi_w, ex, lx = _special(x)
    scale = np.maximum(1.0, np.abs(sp.digamma(x)))
    assert np.max(np.abs(psi - sp.digamma(x)) / scale) < 1e-14
    assert np.max(np.abs(psi_w - sp.digamma(x)) / scale) < 1e-11
    assert np.max(np.abs(lg - sp.gammaln(x)) / np.maximum(1.0, np.abs(sp.gammaln(x)))) < 1e-14
    ok = x < 700
    assert np.max(np.abs(ex[ok] - np.exp(-x[ok])) / np.exp(-x[ok])) < 1e-14
    assert np.all(ex[x > 708.5] == 0.0)
    assert np.max(np.abs(lx - np.log(x)) / np.maximum(1.0, np.abs(np.log(x)))) < 1e-15


def _problem(rng, N, M=7, K=3, missing=0.2, dtype=torch.float64):
    X = rng.integers(0, 4, size=(N, M))
    X[rng.random(X.shape) < missing] = -1
    X[:, 0] = np.abs(X[:, 0])
    ens = Ensemble.from_labels(X)
    data = cavi.prepare_data(ens, dtype=dtype)
    beta = torch.tensor(initialise.init_beta_random(ens, K, 1), dtype=dtype)
    alpha = torch.tensor([0.2, 1.0, 3.0], dtype=dtype)
    g = cavi.initial_gamma(alpha, data, dtype)
    return alpha, beta, data, g


@pytest.mark.parametrize("missing", [0.0, 0.25])
def test_row_terms_and_bound_match_torch(rng, missing):
    """The kernel's alpha statistic, row terms and the bound equal the torch ones (1e-12)."""
    alpha, beta, data, g = _problem(rng, 700, missing=missing)
    gamma, phi_sum, stats, plogp, _, terms = cavi.e_step(alpha, beta, data, g, 3,
                                                         backend="numba", with_terms=True)
    ref = cavi.row_terms(gamma, phi_sum)
    np.testing.assert_allclose(terms.suff.numpy(), ref.suff.numpy(), rtol=1e-12)
    assert terms.cross == pytest.approx(ref.cross, rel=1e-12)
    assert terms.lgamma == pytest.approx(ref.lgamma, rel=1e-12)
    a_new = alpha * 1.3
    lb = cavi.lower_bound(a_new, beta, gamma, phi_sum, stats, plogp, terms=terms)
    lb_ref = cavi.lower_bound(a_new, beta, gamma, phi_sum, stats, plogp)
    assert lb == pytest.approx(lb_ref, rel=1e-12)
    # and the torch E-step reports the same terms
    out = cavi.e_step(alpha, beta, data, g, 3, backend="torch", with_terms=True)
    np.testing.assert_allclose(out[5].suff.numpy(), terms.suff.numpy(), rtol=1e-11)
    assert out[5].lgamma == pytest.approx(terms.lgamma, rel=1e-11)


def test_result_does_not_depend_on_threads(rng):
    """Rows split into blocks fixed by the data: 1, 2 and 3 threads give identical bits."""
    alpha, beta, data, g = _problem(rng, 3 * kern.BLOCK + 17)
    outs = [cavi.e_step(alpha, beta, data, g, 2, backend="numba", n_jobs=n, with_terms=True)
            for n in (1, 2, 3)]
    for o in outs[1:]:
        for a, b in zip(o[:3], outs[0][:3]):
            assert torch.equal(a, b)
        assert o[3] == outs[0][3]
        assert torch.equal(o[5].suff, outs[0][5].suff)
        assert (o[5].cross, o[5].lgamma) == (outs[0][5].cross, outs[0][5].lgamma)


def test_float32_kernel_agrees_with_float64(rng):
    """float32 phi arithmetic keeps gamma, the statistics and the entropy to 1e-6 relative."""
    a64, b64, d64, g64 = _problem(rng, 2000)
    d32 = cavi.prepare_data(Ensemble.from_labels(_codes(d64)), dtype=torch.float32)
    ref = cavi.e_step(a64, b64, d64, g64, 5, backend="torch")
    out = cavi.e_step(a64.float(), b64.float(), d32, g64.float(), 5, backend="numba")
    assert out[0].dtype == torch.float32
    np.testing.assert_allclose(out[0].double().numpy(), ref[0].numpy(), rtol=1e-6)
    np.testing.assert_allclose(out[2].double().numpy(), ref[2].numpy(), rtol=1e-6, atol=1e-6)
    assert out[3] == pytest.approx(ref[3], rel=1e-6)


def _codes(data):
    """The label matrix (N, M) back from BCEData (global index minus offsets, -1 missing)."""
    idx = data.idx.numpy().T - data.offsets[:-1][None, :]
    if data.mask is not None:
        idx = np.where(data.mask.numpy().T > 0, idx, -1)
    return idx


@pytest.mark.parametrize("N", [1, 5, kern.TILE + 3, kern.BLOCK + kern.TILE - 1])
def test_float64_kernel_matches_torch_on_short_tiles(rng, N):
    """Tiles cut short by the end of a block or of the data (the last row repeated to fill
    them) leave gamma, phisum, the beta statistics and the entropy equal to torch's (to
    1e-10: the weights' digamma is accurate to 1e-11, see the special-function test)."""
    alpha, beta, data, g = _problem(rng, N, missing=0.3 if N > 10 else 0.0)
    ref = cavi.e_step(alpha, beta, data, g, 3, backend="torch")
    out = cavi.e_step(alpha, beta, data, g, 3, backend="numba")
    for a, b in zip(out[:3], ref[:3]):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-10, atol=1e-13)
    assert out[3] == pytest.approx(ref[3], rel=1e-10)


def test_entropy_product_of_many_small_normalisers(rng):
    """``sum_j ln d_ij`` from a running product: with M = 400 base clusterings and tiny
    beta entries the plain product would underflow; the split-off exponent keeps it."""
    alpha, beta, data, g = _problem(rng, 300, M=400, missing=0.1)
    beta = beta * 1e-3
    ref = cavi.e_step(alpha, beta, data, g, 2, backend="torch")
    out = cavi.e_step(alpha, beta, data, g, 2, backend="numba")
    assert np.isfinite(out[3])
    assert out[3] == pytest.approx(ref[3], rel=1e-10)
    np.testing.assert_allclose(out[0].numpy(), ref[0].numpy(), rtol=1e-10)


@pytest.mark.parametrize("K", [1, 2, 6])
def test_any_number_of_clusters_one_compiled_kernel(rng, K):
    """K is a run-time size: every K matches torch, and no new specialisation is compiled."""
    X = rng.integers(0, 4, size=(300, 5))
    ens = Ensemble.from_labels(X)
    data = cavi.prepare_data(ens, dtype=torch.float64)

    def problem(k):
        alpha = torch.linspace(0.2, 2.0, k, dtype=torch.float64)
        beta = torch.tensor(initialise.init_beta_random(ens, k, 1))
        return alpha, beta, cavi.initial_gamma(alpha, data, torch.float64)

    cavi.e_step(*problem(3)[:2], data, problem(3)[2], 2, backend="numba")
    before = list(kern.estep.signatures)
    alpha, beta, g = problem(K)
    out = cavi.e_step(alpha, beta, data, g, 3, backend="numba")
    ref = cavi.e_step(alpha, beta, data, g, 3, backend="torch")
    assert list(kern.estep.signatures) == before
    for a, b in zip(out[:3], ref[:3]):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-10, atol=1e-13)
    assert out[3] == pytest.approx(ref[3], rel=1e-10)
