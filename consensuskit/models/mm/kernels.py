"""Fused CPU kernels for MM's MAP-EM (numba), used by :class:`mm_em.EM` on CPU.

One EM iteration of :mod:`consensuskit.models.mm.em` in torch is a few dozen small
tensor operations per column group and per base clustering (group tables, gathers,
softmax, scatter, marginals, normalisation), whose fixed cost does not shrink with N.
Here an iteration is two calls:

* :func:`e_pass` builds the groups' log-probability tables, then makes one pass over
  the rows computing the responsibilities, the log-likelihood and the groups'
  joint-count tables together (nothing of size (K, N) is read back);
* :func:`m_pass` turns the joint counts into ``(log pi, log theta)``: per-column
  marginals and the MAP normalisation of :func:`mm_em.m_step`.

The arithmetic is that of the torch functions (same tables, same order of the sums
over groups, same M-step formulas); only the reductions over rows and table entries
are re-associated, so results agree to rounding.  The torch functions remain the
reference and the path for other devices.

Group metadata (see :class:`mm_em.MMLayout`): group ``g`` covers the consecutive
columns ``gstart[g]:gstart[g+1]``; column ``j`` has ``slots[j]`` table entries (its
labels, plus a leading "missing" slot when ``miss[j]``); group ``g``'s table holds
``prod slots`` rows starting at ``toff[g]`` of a flat ``(T, K)`` array (mixed radix,
last column fastest).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from consensuskit.models.vector_math import exp_nonpositive, log_positive

_OPTS = {"cache": True, "error_model": "numpy", "boundscheck": False,
         "fastmath": {"contract", "arcp", "reassoc", "nsz"}, "no_cfunc_wrapper": True}
#: kernels that only kernels call: no Python wrapper (see the compile-time notes in
#: :mod:`consensuskit.models.nbce.gibbs`)
_INNER = dict(_OPTS, no_cpython_wrapper=True)

#: rows whose responsibilities are exponentiated together (one vectorised loop)
TILE = 8


@njit(**_INNER)
def _tables(log_pi, log_theta, offsets, slots, miss, gstart, toff):
    """Flat (T, K) table of ``sum_j log theta_jk(slot_j)`` per group, ``log pi`` in group 0.

    Built like :func:`mm_em._group_table`: ``tab[t * s + r] = tab[t] + block[r]`` column
    by column (the same additions in the same order).
    """
    K = log_theta.shape[0]
    G = gstart.shape[0] - 1
    tab = np.empty((toff[G], K), dtype=log_theta.dtype)
    for g in range(G):
        base = toff[g]
        size = 1
        for j in range(gstart[g], gstart[g + 1]):
            s = slots[j]
            m = miss[j]
            if j == gstart[g]:
                for r in range(s):
                    for k in range(K):
                        tab[base + r, k] = 0.0 if (m and r == 0) else log_theta[
                            k, offsets[j] + r - m]
                size = s
                continue
            # expand in place from the back so that entries not yet read stay intact
            for t in range(size - 1, -1, -1):
                for r in range(s - 1, -1, -1):
                    for k in range(K):
                        b = 0.0 if (m and r == 0) else log_theta[k, offsets[j] + r - m]
                        tab[base + t * s + r, k] = tab[base + t, k] + b
            size *= s
        if g == 0:
            for t in range(size):
                for k in range(K):
                    tab[base + t, k] = tab[base + t, k] + log_pi[k]
    return tab


def _make_e_pass(n_clusters):
    """:func:`e_pass` with ``K = n_clusters`` fixed at compile time (cached on disk per K)."""

    @njit(**_OPTS)
    def e_pass(log_pi, log_theta, codes, offsets, slots, miss, gstart, toff, resp):
        """The kernel of :func:`e_pass` (see there)."""
        K = n_clusters  # a compile-time constant: the loops over clusters unroll
        G, N = codes.shape
        tab = _tables(log_pi, log_theta, offsets, slots, miss, gstart, toff)
        counts = np.zeros((toff[G], K), dtype=np.float64)
        TK = TILE * K
        # zeros; past the end of the last tile, rows keep finite values of the tile before
        L = np.zeros(TK, dtype=log_theta.dtype)
        mx = np.empty(TILE, dtype=log_theta.dtype)
        tot = np.empty(TILE, dtype=np.float64)
        inv = np.empty(TILE, dtype=np.float64)
        lt = np.empty(TILE, dtype=np.float64)
        loglik = 0.0
        for i0 in range(0, N, TILE):
            nt = min(TILE, N - i0)
            for t in range(nt):
                c = toff[0] + codes[0, i0 + t]
                for k in range(K):
                    L[t * K + k] = tab[c, k]
            for g in range(1, G):
                for t in range(nt):
                    c = toff[g] + codes[g, i0 + t]
                    for k in range(K):
                        L[t * K + k] += tab[c, k]
            for t in range(nt):
                m = L[t * K]
                for k in range(1, K):
                    m = max(m, L[t * K + k])
                mx[t] = m
                for k in range(K):
                    L[t * K + k] -= m
            for q in range(TK):
                L[q] = exp_nonpositive(L[q])
            for t in range(TILE):
                s = 0.0
                for k in range(K):
                    s += L[t * K + k]
                tot[t] = s
                inv[t] = 1.0 / s
                lt[t] = log_positive(s)
            for t in range(nt):
                loglik += mx[t] + lt[t]
                for k in range(K):
                    r = L[t * K + k] * inv[t]
                    resp[k, i0 + t] = r
                    L[t * K + k] = r
            for g in range(G):
                for t in range(nt):
                    c = toff[g] + codes[g, i0 + t]
                    for k in range(K):
                        counts[c, k] += L[t * K + k]
        return loglik, counts

    return e_pass


_E_PASSES: dict = {}


def e_pass(log_pi, log_theta, codes, offsets, slots, miss, gstart, toff, resp):
    """E-step, log-likelihood and joint counts in one pass over the rows.

    Parameters
    ----------
    log_pi : (K,) ; log_theta : (K, V)
    codes : int64 (G, N)
        Joint code of each row in each group.
    offsets, slots, miss, gstart, toff : int64 arrays
        Group metadata (module docstring).
    resp : (K, N)
        Output: the responsibilities.

    Returns
    -------
    loglik : float
        ``sum_i log sum_k pi_k P_k(y_i)``, accumulated in float64.
    counts : float64 (T, K)
        ``sum_{i: code_g(i) = t} resp_ki`` for every group's entry ``t``.

    One compiled kernel per K (compiled lazily, once per K and dtype).  Rows go in tiles
    of :data:`TILE`, so that the ``exp`` of a tile's ``TILE * K`` log-numerators is one
    loop without branches (:func:`~consensuskit.models.vector_math.exp_nonpositive`, which
    vectorises; numba's ``np.exp`` does not), and likewise their sums' logarithms.
    """
    K = int(log_theta.shape[0])
    kern = _E_PASSES.get(K)
    if kern is None:
        kern = _E_PASSES[K] = _make_e_pass(K)
    return kern(log_pi, log_theta, codes, offsets, slots, miss, gstart, toff, resp)


@njit(**_OPTS)
def m_pass(counts, offsets, slots, miss, gstart, toff, label_prior, weight_prior, dtype_probe):
    """MAP M-step of :func:`mm_em.m_step` from the groups' joint counts.

    Returns ``(log_pi (K,), log_theta (K, V))`` in ``dtype_probe``'s dtype.
    """
    K = counts.shape[1]
    G = gstart.shape[0] - 1
    M = slots.shape[0]
    V = offsets[M]
    C = np.zeros((K, V), dtype=np.float64)
    Nk = np.zeros(K, dtype=np.float64)
    digit = np.zeros(M, dtype=np.int64)
    for g in range(G):
        j0, j1 = gstart[g], gstart[g + 1]
        size = toff[g + 1] - toff[g]
        for j in range(j0, j1):
            digit[j] = 0
        for t in range(size):  # digit[j0:j1] is entry t's slot per column (an odometer)
            e = toff[g] + t
            if g == 0:
                for k in range(K):
                    Nk[k] += counts[e, k]
            for j in range(j0, j1):
                r = digit[j] - miss[j]
                if r >= 0:
                    for k in range(K):
                        C[k, offsets[j] + r] += counts[e, k]
            j = j1 - 1
            while j >= j0:
                digit[j] += 1
                if digit[j] < slots[j]:
                    break
                digit[j] = 0
                j -= 1
    log_pi = np.empty(K, dtype=dtype_probe.dtype)
    pi_tot = 0.0
    for k in range(K):
        Nk[k] += weight_prior - 1.0
        pi_tot += Nk[k]
    for k in range(K):
        log_pi[k] = np.log(Nk[k] / pi_tot) if pi_tot > 0 else -np.log(K)
    log_theta = np.empty((K, V), dtype=dtype_probe.dtype)
    tiny = np.finfo(np.float64).tiny
    for j in range(M):
        lo, hi = offsets[j], offsets[j + 1]
        for k in range(K):
            tot = 0.0
            for v in range(lo, hi):
                C[k, v] += label_prior - 1.0
                tot += C[k, v]
            for v in range(lo, hi):
                if tot > 0:
                    log_theta[k, v] = np.log(C[k, v] / max(tot, tiny))
                else:
                    log_theta[k, v] = np.log(1.0 / (hi - lo))
    return log_pi, log_theta
