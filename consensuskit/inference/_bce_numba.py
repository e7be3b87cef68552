"""Fused CPU kernel for the BCE E-step (numba), used by :func:`bce_cavi.e_step` on CPU.

It computes exactly what the torch path computes -- ``n_iter`` passes of
``phi_ij ∝ exp(E_q[log theta_i]) * beta_j(:, x_ij)`` (eq. 5) and
``gamma_i = alpha + sum_j phi_ij`` (eq. 6), the beta statistics and the entropy
scalar on the last pass -- but one row at a time with all of a row's ``K``- and
``M``-vectors in registers, so nothing of size ``(K, N)`` is streamed through
memory ``M`` times per pass.  The row layout here is ``(N, M)`` / ``(N, K)``.
Accumulators (beta statistics, entropy) are float64 whatever the input dtype.
The torch implementation remains the reference (and the CUDA path); a test checks
that both agree.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit


@njit(cache=True, inline="always")
def _digamma_parts(x):
    """``(x', c)`` with ``psi(x) = log(x') + c``: recurrence to ``x' >= 6``, then the series.

    The recurrence terms ``-sum_k 1/(x+k)`` are accumulated as one fraction ``-p/q`` (one
    division); the asymptotic series is accurate to < 1e-12 for ``x' >= 6``.

    ``exp(psi(x)) = x' * exp(c)`` needs no logarithm; the phi update only needs
    ``exp(psi(gamma_h))`` because ``psi(sum_h gamma_h)`` cancels in the normalisation.
    """
    p = 0.0
    q = 1.0
    while x < 6.0:
        p = p * x + q
        q = q * x
        x += 1.0
    ix = 1.0 / x
    f = ix * ix
    t = f * (1.0 / 12 - f * (1.0 / 120 - f * (1.0 / 252 - f * (1.0 / 240 - f * (1.0 / 132)))))
    return x, -0.5 * ix - t - p / q


@njit(cache=True, fastmath={"contract", "arcp", "reassoc"})
def estep_rows(alpha, betaT, idx, mask, has_mask, gamma, n_iter, collect, stats, phisum):
    """Run the E-step in place.

    Parameters
    ----------
    alpha : (K,) float;  betaT : (L + 1, K) float, row L = dummy (ignored via mask)
    idx : (N, M) int, global label index, ``L`` (the dummy row of ones) where missing
    mask : (N, M) float (1 observed / 0 missing); read only when ``has_mask``
    gamma : (N, K) float, warm start, overwritten with the new gamma
    n_iter : int;  collect : bool
    stats : (L + 1, K) float64, accumulated into (beta statistics) when ``collect``
    phisum : (N, K) float, overwritten with sum_j phi_ij of the last pass

    Returns
    -------
    plogp_partial : float64
        ``sum_i [sum_h phisum_ih psi(gamma_ih) - sum_j ln d_ij]`` (``d_ij`` with the
        unshifted weights ``exp(psi(gamma_ih))``); adding
        ``sum(stats * ln beta)`` gives ``sum phi ln phi``.
    """
    N, M = idx.shape
    K = alpha.shape[0]
    w = np.empty(K)
    E = np.empty(K)
    acc = np.empty(K)
    g = np.empty(K)
    r = np.empty(M)
    total = 0.0
    for i in range(N):
        for h in range(K):
            g[h] = gamma[i, h]
        for t in range(n_iter):
            last = t == n_iter - 1
            # w_h = exp(psi(gamma_h)); psi(sum gamma) cancels in phi's normalisation
            for h in range(K):
                xs, c = _digamma_parts(g[h])
                w[h] = xs * math.exp(c)
                E[h] = c  # log(xs) added below only when the entropy is needed
                acc[h] = 0.0
                if last and collect:
                    E[h] = math.log(xs) + c
            # phase 1: normalisers d_ij = sum_h w_h beta_j(h, x_ij) (independent over j)
            for j in range(M):
                lab = idx[i, j]
                d = 0.0
                for h in range(K):
                    d += w[h] * betaT[lab, h]
                r[j] = d
            if last and collect:
                logd = 0.0
                for j in range(M):
                    if not has_mask or mask[i, j] != 0:
                        logd += math.log(r[j])
                total -= logd
            # phase 2: 1 / d_ij, zero for missing labels
            if has_mask:
                for j in range(M):
                    r[j] = mask[i, j] / r[j]
            else:
                for j in range(M):
                    r[j] = 1.0 / r[j]
            # phase 3: acc_h = w_h sum_j beta_j(h, x_ij) / d_ij  (= sum_j phi_ijh)
            for j in range(M):
                lab = idx[i, j]
                rj = r[j]
                for h in range(K):
                    acc[h] += betaT[lab, h] * rj
            if last and collect:
                for j in range(M):
                    lab = idx[i, j]
                    rj = r[j]
                    for h in range(K):
                        stats[lab, h] += w[h] * betaT[lab, h] * rj
            for h in range(K):
                acc[h] *= w[h]
                g[h] = alpha[h] + acc[h]
            if last and collect:
                # sum_j sum_h phi ln phi = sum_h phi_sum_h psi(gamma_h) + stats . ln beta
                #                           - sum_j ln d_ij   (w unshifted, unnormalised)
                for h in range(K):
                    total += acc[h] * E[h]
        for h in range(K):
            gamma[i, h] = g[h]
            phisum[i, h] = acc[h]
    return total
