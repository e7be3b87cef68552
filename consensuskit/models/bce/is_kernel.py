"""CPU kernel (numba) of the defensive-mixture importance sampler of a row's marginal.

:func:`consensuskit.models.bce.alpha.mixture_log_weights_lik` draws, for every particle
``s`` and row ``i``, the row's assignments one column at a time from a mixture of
sequential proposals and keeps every component's log probability of the path.  In torch
that is a loop over the ``C`` columns of about twenty ``(S, n, K)`` tensor operations
each, most of whose time goes to allocating and streaming those tensors; BCE's default
fit calls it once per auditioned chain (``selection_log_marginal``) and the perplexity's
standard error calls it on every scored row.

This kernel walks the paths with the same arithmetic on the same uniforms (drawn by the
caller from its torch generator, in the order the torch loop draws them), so the two
agree to rounding and a seeded fit selects the same chain.  One row at a time, its ``S``
paths are the vector dimension of every loop, and the logarithms are
:func:`~consensuskit.models.vector_math.log_positive`, so the loops compile to SIMD
instructions; a value below the smallest normal float64 (a path through a label of
probability 0) takes ``math.log`` instead.  The torch loop stays the reference and the
path for other devices; tests check that both agree.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from consensuskit.models.vector_math import log_positive

__all__ = ["path_log_weights"]


_TINY = float(np.finfo(np.float64).tiny)  # smallest normal float64: log_positive's domain
_OPTS = {"cache": True, "nogil": True, "error_model": "numpy", "no_cfunc_wrapper": True,
         "fastmath": {"contract", "arcp", "nsz"}}


@njit(**_OPTS)
def _log_into(x, out, n):
    """``out[:n] = ln x[:n]`` (vectorised; ``math.log`` for zero or subnormal entries)."""
    rare = False
    for s in range(n):
        out[s] = log_positive(x[s])
        rare |= x[s] < _TINY
    if rare:
        for s in range(n):
            if x[s] < _TINY:
                out[s] = math.log(x[s])


@njit(**_OPTS)
def path_log_weights(alpha, alpha_sum, lik, observed, component, uniforms, log_comp_p,
                     pseudo_count):
    """``log p(row_i, z) - log sum_c w_c q_c(z)`` for each particle's path ``z``.

    Parameters (all float64 but ``component``)
    ----------
    alpha : (K,);  alpha_sum : float, ``alpha.sum()`` as the caller computed it
    lik : (n, C, K)
        ``p(value_ic | z_ic = k)``.
    observed : (n, C)
        1 where column ``c`` of row ``i`` is observed, 0 where it is missing.
    component : int64 (n, S)
        The proposal component of each path: 0 the plain sequential proposal, ``h >= 1``
        the one seeded with ``pseudo_count`` extra counts on cluster ``h - 1``.
    uniforms : (n, C, S)
        The uniform draw of each path at each column.
    log_comp_p : (n, K + 1)
        Log mixture weights of the components per row.

    Returns
    -------
    log_w : (S, n)
    log_q : (S, n)
        ``log sum_c w_c q_c(z)``, the mixture proposal's log probability of each path
        (so ``log_w + log_q`` is ``log p(row_i, z)``).
    """
    n, S = component.shape
    C, K = lik.shape[1], lik.shape[2]
    c = pseudo_count
    out = np.empty((S, n))
    out_q = np.empty((S, n))
    counts = np.empty((K, S))
    u = np.empty((K, S))
    cum = np.empty((K, S))
    log_q = np.empty((K + 1, S))
    seeded = np.empty((K, S))
    tot = np.empty(S)
    u_z = np.empty(S)
    b_z = np.empty(S)
    z = np.empty(S, dtype=np.int64)
    log_u = np.empty(S)
    log_t = np.empty(S)
    log_p = np.empty(S)
    work = np.empty(S)
    for i in range(n):
        for k in range(K):
            for s in range(S):
                counts[k, s] = 0.0
                seeded[k, s] = 1.0 if component[i, s] == k + 1 else 0.0
        log_q[:] = 0.0
        log_p[:] = 0.0
        seen = 0.0
        for j in range(C):
            m = observed[i, j]
            for s in range(S):
                tot[s] = 0.0
            for k in range(K):
                b = lik[i, j, k]
                a = alpha[k]
                for s in range(S):
                    v = (a + counts[k, s]) * b
                    u[k, s] = v
                    tot[s] += v
                    cum[k, s] = (cum[k - 1, s] if k else 0.0) + (v + c * b * seeded[k, s])
            for s in range(S):
                draw = uniforms[i, j, s] * cum[K - 1, s]
                zs = 0
                for k in range(K):
                    zs += draw > cum[k, s]
                z[s] = min(zs, K - 1)
            for s in range(S):
                u_z[s] = u[z[s], s]
                b_z[s] = lik[i, j, z[s]]
            if m > 0:
                _log_into(u_z, log_u, S)
                _log_into(tot, log_t, S)
                step = math.log(alpha_sum + seen)
                for s in range(S):
                    log_p[s] += log_u[s] - step
                    log_q[0, s] += log_u[s] - log_t[s]
                for k in range(K):
                    cb = c * lik[i, j, k]
                    for s in range(S):
                        work[s] = tot[s] + cb
                    _log_into(work, log_t, S)
                    for s in range(S):
                        log_q[k + 1, s] += log_u[s] - log_t[s]
                for s in range(S):  # the seeded component of the drawn cluster
                    work[s] = u_z[s] + c * b_z[s]
                _log_into(work, log_t, S)
                for s in range(S):
                    log_q[z[s] + 1, s] += log_t[s] - log_u[s]
            for s in range(S):
                counts[z[s], s] += m
            seen += m
        for s in range(S):
            top = -np.inf
            for k in range(K + 1):
                log_q[k, s] += log_comp_p[i, k]
                top = max(top, log_q[k, s])
            acc = 0.0
            for k in range(K + 1):
                acc += math.exp(log_q[k, s] - top)
            out_q[s, i] = math.log(acc) + top
            out[s, i] = log_p[s] - out_q[s, i]
    return out, out_q
