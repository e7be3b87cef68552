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
def _digamma(x):
    """psi(x) for x > 0: recurrence up to x >= 6, then the asymptotic series (|err| < 1e-12).

    The recurrence terms ``-sum_k 1/(x+k)`` are accumulated as one fraction ``-p/q`` so
    that only one division is spent on them.
    """
    p = 0.0
    q = 1.0
    while x < 6.0:
        p = p * x + q
        q = q * x
        x += 1.0
    f = 1.0 / (x * x)
    t = f * (1.0 / 12 - f * (1.0 / 120 - f * (1.0 / 252 - f * (1.0 / 240 - f * (1.0 / 132)))))
    return math.log(x) - 0.5 / x - t - p / q


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
        ``sum_i [sum_h phisum_ih E_ih - m_i V_i - sum_j ln d_ij]``; adding
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
            s = 0.0
            for h in range(K):
                s += g[h]
            ds = _digamma(s)
            for h in range(K):
                E[h] = _digamma(g[h]) - ds
            m = E[0]
            for h in range(1, K):
                if E[h] > m:
                    m = E[h]
            for h in range(K):
                w[h] = math.exp(E[h] - m)
                acc[h] = 0.0
            # phase 1: normalisers d_ij = sum_h w_h beta_j(h, x_ij) (independent over j)
            for j in range(M):
                lab = idx[i, j]
                d = 0.0
                for h in range(K):
                    d += w[h] * betaT[lab, h]
                r[j] = d
            if last and collect:
                logd = 0.0
                V = 0.0
                for j in range(M):
                    if not has_mask or mask[i, j] != 0:
                        logd += math.log(r[j])
                        V += 1.0
                total -= m * V + logd
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
                for h in range(K):
                    total += acc[h] * E[h]
        for h in range(K):
            gamma[i, h] = g[h]
            phisum[i, h] = acc[h]
    return total
