"""Reproduce the authors' BCE code (learnBCE/bceEstep/bceMstep) trajectories.

The fixtures in tests/data/bce come from running the authors' MATLAB code under
Octave for 30 EM iterations from fixed initialisations (see
/work/shared/reference/README.md).  Here the engine's own update functions
(update_phi, update_gamma, update_beta, update_alpha, lower_bound) are composed
in exactly that code's schedule:

* E-step per point, re-initialised every EM iteration with phi = 1/K and
  gamma = alpha + V/K; passes (phi, then gamma) while e > 0.01 and t < 500 with
  e = max(rel. change of phi, rel. change of gamma) per point; phi normalised
  in linear space with ``realmin`` added K times to the denominator;
* M-step: beta from expected counts + 1e-6, then alpha by Newton with step
  halving to positivity, stopping when the relative L1 change is <= 1e-3 or
  after 500 steps.

Tolerance: ``TOL`` = 1e-10 (largest deviation seen 1.1e-11, float64); the bound is compared to a
relative 1e-10 (its magnitude is ~1e3), alpha, beta, gamma and phi absolutely; the inner-pass
counts, Newton steps and halvings must match exactly.
"""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from consensuskit.data.ensemble import Ensemble
from consensuskit.models.bce.cavi import (
    REALMIN,
    beta_statistics,
    elog_dirichlet,
    lower_bound,
    phi_log_phi,
    update_alpha,
    update_beta,
    update_gamma,
    update_phi,
)

DATA = Path(__file__).parent / "data" / "bce"
K = 3
N_EM = 30
TOL = 1e-10  # largest deviation seen: 1.1e-11 (alpha, iris/unif); bound rel. 1.2e-12


def _load(ens_name):
    X = pd.read_csv(DATA / f"{ens_name}.csv").to_numpy()
    ens = Ensemble.from_labels(X)
    # the fixtures use K_j = max label + 1 and every label is present
    assert np.array_equal(ens.n_labels, X.max(axis=0) + 1)
    b = pd.read_csv(DATA / f"init_beta_{ens_name}.csv").sort_values("cluster")
    cols = [f"bp{j}_r{r}" for j in range(X.shape[1]) for r in range(ens.n_labels[j])]
    beta0 = torch.tensor(b[cols].to_numpy(), dtype=torch.float64)
    return ens, beta0, cols


def _authors_estep(alpha, beta, idx, mask, V):
    """bceEstep for all points at once, each point keeping its own stopping rule."""
    M, N = idx.shape
    phi = mask[:, None, :].expand(M, K, N) / K
    gamma = alpha[:, None] + V[None, :] / K
    active = torch.ones(N, dtype=torch.bool)
    passes = torch.zeros(N, dtype=torch.long)
    t = 1
    while active.any() and t < 500:
        phi_new = update_phi(elog_dirichlet(gamma), beta, idx, mask, realmin=REALMIN,
                             shift=False)
        gamma_new = update_gamma(alpha, phi_new.sum(0))
        e1 = (phi_new - phi).abs().sum((0, 1)) / phi.sum((0, 1))
        e2 = (gamma_new - gamma).abs().sum(0) / gamma.sum(0)
        e = torch.maximum(e1, e2)
        phi = torch.where(active[None, None, :], phi_new, phi)
        gamma = torch.where(active[None, :], gamma_new, gamma)
        passes += active
        active = active & (e > 0.01)
        t += 1
    return phi, gamma, passes


def _bound(alpha, beta, gamma, phi, idx, L):
    stats = beta_statistics(phi, idx, L)
    return lower_bound(alpha, beta, gamma, phi.sum(0), stats, phi_log_phi(phi))


@pytest.mark.parametrize("ens_name", ["iris", "wine"])
@pytest.mark.parametrize("variant", ["ones", "unif"])
def test_authors_trajectory(ens_name, variant):
    ens, beta, cols = _load(ens_name)
    data = ens.label_data(dtype=torch.float64)
    idx = data.idx
    mask = torch.ones(idx.shape, dtype=torch.float64) if data.mask is None else data.mask
    V = data.n_observed_rows
    L = data.n_total_labels
    N = ens.n_samples
    a0 = pd.read_csv(DATA / "init_alpha.csv")
    a0 = a0[(a0.ensemble == ens_name) & (a0.variant == variant)]
    alpha = torch.tensor(a0[[f"alpha_{h}" for h in range(K)]].to_numpy()[0], dtype=torch.float64)
    traj = pd.read_csv(DATA / f"trajectory_{ens_name}_{variant}.csv").set_index("iter")
    np.testing.assert_allclose(alpha.numpy(), traj.loc[0, [f"alpha_{h}" for h in range(K)]])

    worst = {"bound": 0.0, "alpha": 0.0}
    for t in range(1, N_EM + 1):
        row = traj.loc[t]
        phi, gamma, passes = _authors_estep(alpha, beta, idx, mask, V)
        assert int(passes.sum()) == row.inner_total
        assert int(passes.max()) == row.inner_max and int(passes.min()) == row.inner_min
        lb_e = _bound(alpha, beta, gamma, phi, idx, L)
        beta_new = update_beta(beta_statistics(phi, idx, L), data.offsets, smoothing=1e-6)
        e_beta = float((beta_new - beta).abs().sum() / beta.sum())
        beta = beta_new
        suff = elog_dirichlet(gamma).sum(1)
        alpha, info = update_alpha(alpha, suff, N, max_iter=500, tol=1e-3)
        assert info["n_iter"] == row.newton_iters
        assert info["n_halvings"] == row.newton_halvings
        lb_m = _bound(alpha, beta, gamma, phi, idx, L)
        np.testing.assert_allclose(lb_e, row.elbo_after_estep, rtol=TOL, atol=0)
        np.testing.assert_allclose(lb_m, row.elbo_after_mstep, rtol=TOL, atol=0)
        np.testing.assert_allclose(e_beta, row.beta_rel_change, rtol=1e-9)
        ref_alpha = row[[f"alpha_{h}" for h in range(K)]].to_numpy(dtype=float)
        np.testing.assert_allclose(alpha.numpy(), ref_alpha, rtol=0, atol=TOL)
        worst["bound"] = max(worst["bound"], abs(lb_m - row.elbo_after_mstep) / abs(lb_m))
        worst["alpha"] = max(worst["alpha"], float(np.abs(alpha.numpy() - ref_alpha).max()))

    fb = pd.read_csv(DATA / f"final_beta_{ens_name}_{variant}.csv").sort_values("cluster")
    np.testing.assert_allclose(beta.numpy(), fb[cols].to_numpy(), rtol=0, atol=TOL)
    fg = pd.read_csv(DATA / f"final_gamma_labels_{ens_name}_{variant}.csv").sort_values("row")
    np.testing.assert_allclose(gamma.T.numpy(), fg[[f"gamma_{h}" for h in range(K)]].to_numpy(),
                               rtol=0, atol=TOL)
    assert np.array_equal(gamma.argmax(0).numpy(), fg["label"].to_numpy())
    fp = pd.read_csv(DATA / f"final_phi_{ens_name}_{variant}.csv")
    ours = phi.permute(2, 0, 1).numpy()[fp["row"].to_numpy(), fp["bp"].to_numpy()]
    np.testing.assert_allclose(ours, fp[[f"phi_{h}" for h in range(K)]].to_numpy(),
                               rtol=0, atol=TOL)
