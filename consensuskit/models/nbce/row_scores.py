"""Compiled per-row scores of one posterior draw of NBCE's collapsed Gibbs sampler.

Given a draw's counts (``N_k``, ``N_kl``, ``N_kj``) and hyper-parameters, the posterior
of (pi, theta) is conjugate, so a row's predictive probability is a sum over
components of ``E[pi_k] prod_j E[theta_kj(x_ij)]`` (:func:`draw_row_logliks`), and its
leave-one-out predictive the same sum with the row's own labels taken out of its
component's counts (:func:`draw_loo_logliks`).

Every empty component has ``E[theta_kl] = beta / (k_j beta) = 1 / k_j``, so the empty
ones are scored once, with their weights summed: the cost per row is the occupied
components times the columns, not the truncation (the untruncated sampler's tables
hold many empty components).  The values equal the sum over every component term by
term, up to rounding (``tests/test_nbce_row_scores.py`` checks them against that
sum, written with :func:`~consensuskit.models.nbce.predictive.predictive_parameters`).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from consensuskit.models.nbce.priors import get_prior

__all__ = ["draw_row_logliks", "draw_component_logliks", "draw_loo_logliks",
           "mixture_row_logliks"]


@njit(cache=True, nogil=True)
def _log_weights(Nk, a0, code, out):
    """``log p(z_new = k | N_k)`` into ``out`` (T,): the posterior-mean mixing weights of
    :class:`~consensuskit.models.nbce.priors.TSB` (code 0: the last stick is 1) or
    :class:`~consensuskit.models.nbce.priors.FSD` (code 1, ``Dir(a0 / T)``)."""
    T = Nk.shape[0]
    if code == 1:
        tot = 0.0
        for k in range(T):
            tot += Nk[k]
        a = a0 / T
        lt = math.log(a0 + tot)
        for k in range(T):
            out[k] = math.log(a + Nk[k]) - lt
        return
    ge = 0.0  # N_{>=k}
    for k in range(T - 1, -1, -1):
        ge += Nk[k]
        out[k] = ge  # kept until the forward pass below
    before = 0.0  # sum_{h<k} log E[1 - V_h]
    for k in range(T):
        ge = out[k]
        den = math.log(1.0 + a0 + ge)
        if k == T - 1:
            out[k] = before
        else:
            out[k] = math.log1p(Nk[k]) - den + before
            before += math.log(a0 + ge - Nk[k]) - den


@njit(cache=True, nogil=True)
def _logaddexp(a, b):
    if a == -math.inf:
        return b
    if b == -math.inf:
        return a
    hi = max(a, b)
    return hi + math.log(math.exp(a - hi) + math.exp(b - hi))


@njit(cache=True, nogil=True)
def _occupied_terms(Nk, Nkl, Nkm, beta, Jbeta, col_of, logw):
    """The occupied components ``occ`` (K,), the log predictive of every label per
    occupied component ``ltT`` (L, K) (label-major, so a row's labels read contiguous
    rows), the summed log weight of the empty components (``-inf`` when none) and the
    empty components' log predictive per column ``lte`` (M,)."""
    T, L = Nkl.shape
    K = 0
    for k in range(T):
        if Nk[k] > 0:
            K += 1
    occ = np.empty(K, dtype=np.int64)
    K = 0
    le = -math.inf
    for k in range(T):
        if Nk[k] > 0:
            occ[K] = k
            K += 1
        else:
            le = _logaddexp(le, logw[k])
    ltT = np.empty((L, K))
    for l in range(L):
        m = col_of[l]
        for a in range(K):
            k = occ[a]
            ltT[l, a] = math.log(beta + Nkl[k, l]) - math.log(Jbeta[m] + Nkm[k, m])
    lte = np.empty(Jbeta.shape[0])
    for m in range(Jbeta.shape[0]):
        lte[m] = math.log(beta) - math.log(Jbeta[m])
    return occ, ltT, le, lte


@njit(cache=True, nogil=True)
def _add_row(idx, i, ltT, lte, acc, e):
    """Add row ``i``'s observed labels' log predictives to ``acc`` (K,) (the occupied
    components) and return ``e`` plus those of an empty component."""
    for m in range(idx.shape[1]):
        l = idx[i, m]
        if l >= 0:
            for a in range(acc.shape[0]):
                acc[a] += ltT[l, a]
            e += lte[m]
    return e


@njit(cache=True, nogil=True)
def _log_total(acc, e, skip):
    """``log(exp(e) + sum_a exp(acc[a]))`` over ``a != skip`` (-1: none skipped)."""
    hi = e
    for a in range(acc.shape[0]):
        if a != skip:
            hi = max(hi, acc[a])
    s = math.exp(e - hi) if e > -math.inf else 0.0
    for a in range(acc.shape[0]):
        if a != skip:
            s += math.exp(acc[a] - hi)
    return hi + math.log(s)


@njit(cache=True, nogil=True)
def _row_logliks_kernel(idx, Nk, Nkl, Nkm, a0, beta, Jbeta, col_of, code, out, lj):
    """Rows' log-likelihoods into ``out`` (n,); with ``lj`` of shape (n, T) (not (0, 0)),
    each occupied component's ``log pi_k + log p(x_i | theta_k)`` into its first K
    columns.  Returns the occupied components (K,)."""
    n, M = idx.shape
    keep = lj.shape[0] > 0
    logw = np.empty(Nk.shape[0])
    _log_weights(Nk, a0, code, logw)
    occ, ltT, le, lte = _occupied_terms(Nk, Nkl, Nkm, beta, Jbeta, col_of, logw)
    K = occ.shape[0]
    lpo = np.empty(K)
    for a in range(K):
        lpo[a] = logw[occ[a]]
    acc = np.empty(K)
    for i in range(n):
        acc[:] = lpo
        e = _add_row(idx, i, ltT, lte, acc, le)
        if keep:
            lj[i, :K] = acc
        out[i] = _log_total(acc, e, -1)
    return occ


@njit(cache=True, nogil=True)
def _loo_kernel(idx, z, Nk, Nkl, Nkm, a0, beta, Jbeta, col_of, code, out):
    """Training rows' leave-one-out log-likelihoods into ``out`` (n,): row i's weights
    and its own component's counts without it, the other components as they are."""
    n, M = idx.shape
    T = Nk.shape[0]
    logw = np.empty(T)
    _log_weights(Nk, a0, code, logw)
    occ, ltT, _, lte = _occupied_terms(Nk, Nkl, Nkm, beta, Jbeta, col_of, logw)
    K = occ.shape[0]
    slot = np.full(T, -1, dtype=np.int64)
    for a in range(K):
        slot[occ[a]] = a
    # per occupied component c: the log weights of the occupied components and the
    # summed log weight of the empty ones once one point has left c
    W = np.empty((K, K))
    E = np.empty(K)
    nk = np.empty(T)
    for c in range(K):
        for k in range(T):
            nk[k] = Nk[k]
        nk[occ[c]] -= 1.0
        _log_weights(nk, a0, code, logw)
        E[c] = -math.inf
        for k in range(T):
            if nk[k] == 0.0:
                E[c] = _logaddexp(E[c], logw[k])
        for a in range(K):
            W[c, a] = logw[occ[a]]
    acc = np.empty(K)
    for i in range(n):
        c = slot[z[i]]
        kc = occ[c]
        acc[:] = W[c]
        e = _add_row(idx, i, ltT, lte, acc, E[c])
        if Nk[kc] == 1:  # c is empty without row i: scored among the empty ones
            out[i] = _log_total(acc, e, c)
            continue
        own = W[c, c]  # row i's own component, its labels taken out of the counts
        for m in range(M):
            l = idx[i, m]
            if l >= 0:
                own += math.log(beta + Nkl[kc, l] - 1.0) - math.log(Jbeta[m] + Nkm[kc, m] - 1.0)
        acc[c] = own
        out[i] = _log_total(acc, e, -1)


@njit(cache=True, nogil=True)
def _mixture_kernel(idx, lp, ltT, out):
    """``log sum_k exp(lp[k] + sum_j ltT[x_ij, k])`` of every row into ``out`` (n,)."""
    acc = np.empty(lp.shape[0])
    none = np.zeros(idx.shape[1])
    for i in range(idx.shape[0]):
        acc[:] = lp
        _add_row(idx, i, ltT, none, acc, 0.0)
        out[i] = _log_total(acc, -math.inf, -1)


def mixture_row_logliks(idx, log_pi, log_theta):
    """(n,) ``log sum_k pi_k prod_j theta_k(x_ij)`` of the rows ``idx`` (n, M) (global label
    index, -1 missing) for one draw of ``log_pi`` (T,) and ``log_theta`` (T, L): the
    variational engines' draws and point estimates."""
    lp = np.ascontiguousarray(log_pi, dtype=np.float64)
    ltT = np.ascontiguousarray(np.asarray(log_theta, dtype=np.float64).T)
    if lp.ndim != 1 or ltT.ndim != 2 or ltT.shape[1] != lp.shape[0]:
        raise ValueError(f"log_pi {lp.shape} and log_theta {ltT.shape[::-1]} do not fit")
    idx = _rows(idx, ltT.shape[0])
    out = np.empty(idx.shape[0])
    _mixture_kernel(idx, lp, ltT, out)
    return out


def _rows(idx, L):
    """``idx`` as the kernels read it (C-ordered int32, no copy when it is so already),
    checked: 2-d, every entry a label ``0 .. L-1`` or -1 (missing), since the kernels
    read without bounds checks."""
    idx = np.asarray(idx)
    if idx.ndim != 2 or idx.dtype.kind != "i":
        raise ValueError(f"idx must be a 2-d integer array; got {idx.dtype} {idx.shape}")
    if idx.size and (idx.min() < -1 or idx.max() >= L):
        raise ValueError(f"idx holds {idx.min()} .. {idx.max()}; labels are 0 .. {L - 1}, "
                         "-1 missing")
    return np.ascontiguousarray(idx, dtype=np.int32)


def _checked(idx, Nk, Nkl, Nkm, beta, n_labels):
    """The arguments in the one layout the kernels are compiled for (int32 rows and
    count tables, float64 sizes: no copy when they are so already), checked."""
    Nk = np.ascontiguousarray(Nk, dtype=np.float64)
    Nkl = np.ascontiguousarray(Nkl, dtype=np.int32)
    Nkm = np.ascontiguousarray(Nkm, dtype=np.int32)
    n_labels = np.asarray(n_labels, dtype=np.int64)
    T, L, M = Nk.shape[0], int(n_labels.sum()), n_labels.shape[0]
    idx = _rows(idx, L)
    if Nkl.shape != (T, L) or Nkm.shape != (T, M) or idx.shape[1] != M:
        raise ValueError(f"counts of shapes {Nk.shape}, {Nkl.shape}, {Nkm.shape} do not fit "
                         f"{M} columns with {L} labels and rows of shape {idx.shape}")
    col_of = np.repeat(np.arange(M), n_labels)
    return idx, Nk, Nkl, Nkm, n_labels * float(beta), col_of


def draw_row_logliks(idx, Nk, Nkl, Nkm, alpha0, beta, n_labels, prior):
    """(n,) ``log sum_k E[pi_k | z] prod_j E[theta_kj(x_ij) | z, x]`` for the rows ``idx``
    (n, M) (global label index, -1 missing) under one draw with counts ``Nk`` (T,),
    ``Nkl`` (T, L), ``Nkm`` (T, M): the posterior predictive of a new row given the
    draw, or the in-sample score of a training row."""
    return _row_logliks(idx, Nk, Nkl, Nkm, alpha0, beta, n_labels, prior, False)[2]


def draw_component_logliks(idx, Nk, Nkl, Nkm, alpha0, beta, n_labels, prior):
    """As :func:`draw_row_logliks`, with the terms of the occupied components:
    ``(lj (n, K), occ (K,), total (n,))``, ``lj[i, a] = log E[pi_k] + sum_j log
    E[theta_kj(x_ij)]`` for component ``k = occ[a]``, ``total`` the rows'
    log-likelihoods (the empty components included)."""
    return _row_logliks(idx, Nk, Nkl, Nkm, alpha0, beta, n_labels, prior, True)


def _row_logliks(idx, Nk, Nkl, Nkm, alpha0, beta, n_labels, prior, components):
    """``(lj, occ, total)`` of :func:`draw_component_logliks`; ``lj`` is (n, 0) unless
    ``components``."""
    idx, Nk, Nkl, Nkm, Jbeta, col_of = _checked(idx, Nk, Nkl, Nkm, beta, n_labels)
    out = np.empty(idx.shape[0])
    lj = np.empty((idx.shape[0], Nk.shape[0]) if components else (0, 0))
    occ = _row_logliks_kernel(idx, Nk, Nkl, Nkm, float(alpha0), float(beta), Jbeta, col_of,
                              get_prior(prior).code, out, lj)
    return lj[:, :occ.size], occ, out


def draw_loo_logliks(idx, z, Nk, Nkl, Nkm, alpha0, beta, n_labels, prior):
    """(N,) ``log p(x_i | z_{-i}, x_{-i}, alpha0, beta)`` of the training rows ``idx``
    (N, M) that one draw assigned to ``z`` (N,) (its counts ``Nk``, ``Nkl``, ``Nkm``
    include every row): row i's labels removed from its component's counts and ``z_i``
    summed out."""
    idx, Nk, Nkl, Nkm, Jbeta, col_of = _checked(idx, Nk, Nkl, Nkm, beta, n_labels)
    z = np.ascontiguousarray(z, dtype=np.int64)
    if z.shape != (idx.shape[0],) or (z.size and (z.min() < 0 or z.max() >= Nk.shape[0]
                                                  or Nk[z].min() < 1)):
        raise ValueError("z must give each of the rows a component the counts hold")
    out = np.empty(idx.shape[0])
    _loo_kernel(idx, z, Nk, Nkl, Nkm, float(alpha0), float(beta), Jbeta, col_of,
                get_prior(prior).code, out)
    return out
