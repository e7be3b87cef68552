"""NBCE's predictive parameters given cluster counts, and the per-row scores built on them.

Every score of a Gibbs or variational fit (held-out rows, LOO, posterior predictive
draws) goes through the posterior of (pi, theta) given the counts of a draw.
"""
from __future__ import annotations

import numpy as np
from scipy.special import logsumexp

from consensuskit.models.nbce.priors import get_prior

__all__ = ["predictive_parameters", "log_dirichlet", "component_loglik"]


def predictive_parameters(Nk, Nkl, Nkm, alpha0, beta, n_labels, prior):
    """Posterior-mean (pi, theta) given cluster counts (posterior of pi, theta | z, x).

    Parameters
    ----------
    Nk : (..., T), Nkl : (..., T, L), Nkm : (..., T, M)
        Cluster sizes, label counts, per-column observed counts (may be expected counts);
        leading dimensions are a batch of draws.
    alpha0 : float or (..., 1);  beta : float or (..., 1, 1)
    n_labels : (M,)
    prior : {"tsb", "fsd"}

    Returns
    -------
    log_pi : (..., T), log_theta : (..., T, L)
        ``theta_kl = (beta + N_kl) / (k_j beta + N_kj)``; ``pi`` is the Dirichlet
        posterior mean (FSD) or the product of posterior stick means (TSB).
    """
    Nk = np.asarray(Nk, dtype=np.float64)
    n_labels = np.asarray(n_labels)
    col_of = np.repeat(np.arange(n_labels.size), n_labels)
    theta = (beta + np.asarray(Nkl, dtype=np.float64)) / (
        n_labels[col_of] * beta + np.asarray(Nkm, dtype=np.float64)[..., col_of]
    )
    with np.errstate(divide="ignore"):
        return get_prior(prior).conditional_log_weights(Nk, alpha0), np.log(theta)


def log_dirichlet(rng, conc):
    """Log of Dirichlet draws with concentrations ``conc`` (..., k) over the last axis, on
    the log scale (``Gamma(a) = Gamma(a + 1) U^(1/a)``) so that small concentrations do not
    underflow to exact zeros."""
    conc = np.asarray(conc, dtype=np.float64)
    logg = np.log(rng.standard_gamma(conc + 1.0)) + np.log(rng.random(conc.shape)) / conc
    return logg - logsumexp(logg, axis=-1, keepdims=True)


def component_loglik(idx, log_theta):
    """sum_{j observed} log theta[k, idx_ij] -> (n, T); idx (n, M) global, -1 missing."""
    n, M = idx.shape
    out = np.zeros((n, log_theta.shape[0]))
    for j in range(M):
        col = idx[:, j]
        obs = col >= 0
        out[obs] += log_theta[:, col[obs]].T
    return out
