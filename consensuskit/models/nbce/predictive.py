"""NBCE's predictive parameters given cluster counts, and the per-row scores built on them.

Every score of a Gibbs or variational fit (held-out rows, LOO, posterior predictive
draws) goes through the posterior of (pi, theta) given the counts of a draw.
"""
from __future__ import annotations

import numpy as np
from scipy.special import logsumexp

from consensuskit.models.nbce.priors import get_prior

__all__ = ["predictive_parameters", "log_dirichlet", "component_loglik",
           "leave_one_out_logliks"]


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


def leave_one_out_logliks(idx, z, Nk, Nkl, Nkm, alpha0, beta, n_labels, prior,
                          block_elements=2**21):
    """(N,) ``log p(x_i | z_{-i}, x_{-i}, alpha0, beta)`` of one draw: row i's labels
    removed from its component's counts and ``z_i`` summed out.

    ``idx`` (N, M) offset index of the rows the draw assigned, ``-1`` missing; ``z`` (N,);
    ``Nk`` (T,), ``Nkl`` (T, L), ``Nkm`` (T, M) the draw's counts (all rows).  Rows are
    taken ``block_elements // (T * M)`` at a time.
    """
    n, M = idx.shape
    T = Nk.shape[0]
    prior = get_prior(prior)
    obs = idx >= 0
    safe = np.where(obs, idx, 0)
    col_of_obs = np.broadcast_to(np.arange(M), idx.shape)
    rows = max(1, min(n, block_elements // (T * max(M, 1))))
    out = np.empty(n)
    b = beta
    log_num = np.log(b + Nkl)  # (T, L)
    log_den = np.log(n_labels[None, :] * b + Nkm)  # (T, M)
    for r0 in range(0, n, rows):
        rs = slice(r0, min(n, r0 + rows))
        zi = z[rs]  # (r,)
        ob, sf, cj = obs[rs], safe[rs], col_of_obs[rs]
        # every component with the full counts: (T, r)
        full = np.where(ob[None], log_num[:, sf] - log_den[:, cj], 0.0).sum(-1)
        # the row's own component with its labels removed from the counts: (r,)
        # (unobserved entries read a dummy count: replaced by 1 before the log)
        num = np.where(ob, b + Nkl[zi[:, None], sf] - 1.0, 1.0)
        den = np.where(ob, n_labels[None, :] * b + Nkm[zi[:, None], cj] - 1.0, 1.0)
        own = (np.log(num) - np.log(den)).sum(-1)
        full[zi, np.arange(zi.size)] = own
        nk = np.repeat(Nk[None], zi.size, 0)
        nk[np.arange(zi.size), zi] -= 1.0
        lw = prior.conditional_log_weights(nk, alpha0)  # (r, T)
        out[rs] = logsumexp(lw.T + full, axis=0)
    return out
