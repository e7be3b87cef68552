"""Fused CPU kernel for the BCE E-step (numba), used by :func:`bce_cavi.e_step` on CPU.

It computes what the torch path of :func:`bce_cavi.e_step` computes -- ``n_iter``
passes of ``phi_ij ∝ exp(E_q[log theta_i]) * beta_j(:, x_ij)`` (eq. 5) and
``gamma_i = alpha + sum_j phi_ij`` (eq. 6), the beta statistics and the entropy
scalar on the last pass -- a tile of :data:`TILE` rows at a time, all passes over the
tile before the next, so nothing of size ``(K, N)`` is streamed through memory ``M``
times per pass.  In the same pass it forms the per-row pieces of the bound and
alpha's sufficient statistic at the final gamma (the ``terms`` of :func:`run_estep`),
so an EM iteration needs no second pass over the rows.

Why it is fast:

* rows are the innermost (vector) dimension: every loop of a pass runs over the
  tile's rows with contiguous loads, so it compiles to SIMD instructions (8 or 16
  rows per instruction), including the ``M`` normalisers ``d_ij`` and their
  divisions; ``beta_j(h, x_ij)`` is gathered once per tile into a ``(M, K, TILE)``
  buffer and reused by all passes;
* ``phi`` is never stored: per row and base clustering a pass costs ``K``
  multiply-adds for ``d_ij = sum_h w_ih beta_j(h, x_ij)``, one division and ``K``
  multiply-adds for ``sum_j phi_ijh = sum_j (w_ih beta_j(h, x_ij)) / d_ij`` (products
  and sums in the order of the per-row kernel it replaced);
* digamma, log-gamma, ``exp`` and ``log`` written without a data-dependent loop or
  branch (:func:`_exp_psi`, :func:`_psi_lgamma`, and
  :mod:`consensuskit.models.vector_math`), so they
  vectorise too (numba's libm calls do not); ``sum_j ln d_ij`` of the entropy term is
  the log of a running product kept in ``[1, 2)`` by splitting off its binary
  exponent, one ``log`` per row instead of ``M``;
* the tile size is a run-time argument: a compile-time trip count would make LLVM
  unroll the row loops fully instead of vectorising them;
* ``w``, ``d_ij`` and ``1 / d_ij`` in the input dtype (float32 arithmetic for float32
  input); the sums over base clusterings, the statistics and the bound in float64
  whatever the input dtype;
* ``error_model="numpy"``: no zero-division checks, which would block vectorisation;
* gamma read and written in the engine's ``(K, N)`` layout (no transposes);
* rows split into blocks (of a size fixed by the data), runs of blocks given to
  ``n_threads`` Python threads (the kernel releases the GIL; no OpenMP pool whose
  idle threads spin and tax whatever runs next); each block accumulates into its
  own slot and the slots are summed in block order, so the result does not depend
  on the number of threads.

The torch implementation remains the reference (and the CUDA path); tests check
that both agree.
"""

from __future__ import annotations

import math
import os

import numpy as np
from numba import njit

from consensuskit.models.vector_math import exp_nonpositive, log_positive

#: fewest rows per parallel block; a block holds at least ``8 (L + 1)`` rows so that the
#: per-block beta statistics stay small.  Fixed by the data, not the thread count.
BLOCK = 2048

#: rows processed together (the vector dimension of every loop); divides BLOCK
TILE = 64

#: row terms per block after the ``K`` entries of alpha's statistic ``S_h``:
#: the entropy partial, ``Q = sum (phisum - gamma) E`` and ``LG = sum lnG(gamma) - lnG(sum)``
N_TERMS = 3

_FASTMATH = {"contract", "arcp", "reassoc", "nsz"}
_OPTS = {"cache": True, "fastmath": _FASTMATH, "error_model": "numpy", "no_cfunc_wrapper": True}
# the scalar pieces are inlined by numba (typed IR copied into the kernel), not by LLVM
# as in :mod:`consensuskit.models.nbce.gibbs`: that compiles in about 2/3 of the time
# but the kernel's loops then no longer vectorise (2.7 times slower)
_INLINE = dict(_OPTS, inline="always")
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_LN2 = math.log(2.0)


@njit(**_INLINE)
def _shift(x, lo):
    """``(x', p, q)`` with ``x'`` the first of ``x, x+1, ...`` that is ``>= lo`` (at most ``lo``
    steps) and ``p / q = sum_{x <= y < x'} 1/y``; ``q`` is the product of those ``y``.

    The recurrence ``psi(y) = psi(y+1) - 1/y``, ``lnG(y) = lnG(y+1) - ln y`` as a fixed
    number of steps with selects, not a data-dependent loop; ``lo`` is a literal, so the
    steps unroll.  The sum is one fraction (one division).
    """
    p = 0.0
    q = 1.0
    for _ in range(int(lo)):
        small = x < lo
        p = p * x + q if small else p
        q = q * x if small else q
        x = x + 1.0 if small else x
    return x, p, q


@njit(**_INLINE)
def _exp_psi(x):
    """``(exp(psi(x)), psi(x) - ln x', x')``: the phi weights need ``exp(psi)`` only.

    ``psi(x) = ln x' + c`` from the shift to ``x' >= 6`` and the asymptotic series to
    ``x'^-10`` (error < 1e-11, enough for the weights, whose normalisation it barely
    moves).  No logarithm: ``exp(psi(x)) = x' exp(c)``.
    """
    xs, p, q = _shift(x, 6.0)
    ix = 1.0 / xs
    f = ix * ix
    t = f * (1.0 / 12 - f * (1.0 / 120 - f * (1.0 / 252 - f * (1.0 / 240 - f * (1.0 / 132)))))
    c = -0.5 * ix - t - p / q
    return xs * exp_nonpositive(c), c, xs


@njit(**_INLINE)
def _psi_lgamma(x):
    """``(psi(x), lnGamma(x))`` for ``x > 0``, to about 1e-16 (the bound and alpha's statistic).

    Shift to ``x' >= 10``, then the asymptotic series of psi and Stirling's series of
    lnGamma to ``x'^-14`` (truncation error < 1e-16 at ``x' = 10``).
    """
    xs, p, q = _shift(x, 10.0)
    ix = 1.0 / xs
    f = ix * ix
    lx = log_positive(xs)
    t = f * (1.0 / 12 - f * (1.0 / 120 - f * (1.0 / 252 - f * (1.0 / 240 - f * (
        1.0 / 132 - f * (691.0 / 32760 - f * (1.0 / 12)))))))
    psi = lx - 0.5 * ix - t - p / q
    s = ix * (1.0 / 12 - f * (1.0 / 360 - f * (1.0 / 1260 - f * (1.0 / 1680 - f * (
        1.0 / 1188 - f * (691.0 / 360360 - f * (1.0 / 156)))))))
    lg = (xs - 0.5) * lx - xs + _HALF_LOG_2PI + s - log_positive(q)
    return psi, lg


# The kernel's pieces, inlined into it by numba (so its loops still vectorise).  Shared
# arguments, documented once: ``K`` clusters, ``M`` base clusterings, ``T`` rows per tile
# (the vector dimension), ``nt <= T`` of them real (a short last tile repeats its last
# row), and the tile's work arrays, allocated by :func:`estep`:
#   LAB (M, T) label index, R (M, T) 1 observed / 0 missing, B (M, K, T) beta_j(h, x_ij);
#   G (K + 1, T) gamma, then the row sums; W (K, T) exp(psi(gamma)); E (K, T) psi(gamma);
#   S (K, T) sum_j w_h beta_j(h, x_ij) / d_ij; A (K, T) the pass's phisum; D (T,) d_ij;
#   RR (M, T) 1 / d_ij (0 if missing); PM, PE (T,) running product of d_ij (mantissa in
#   [1, 2) and binary exponent); P, LG (K + 1, T) psi and lnGamma of G.
@njit(**_INLINE)
def _gather_tile(idx, mask, has_mask, unit, betaT, gamma, t0, hi, LAB, R, B, G):
    """Copy rows ``t0 .. t0 + T - 1`` (clipped to ``hi - 1``) into the tile: their labels,
    observed flags and gathered beta values, and their gamma."""
    M, K, T = B.shape
    for j in range(M):
        for u in range(T):
            i = min(t0 + u, hi - 1)
            lab = idx[i, j]
            LAB[j, u] = lab
            R[j, u] = mask[i, j] if has_mask else unit
            for h in range(K):
                B[j, h, u] = betaT[lab, h]
    for h in range(K):
        for u in range(T):
            G[h, u] = gamma[h, min(t0 + u, hi - 1)]


@njit(**_INLINE)
def _assignment_weights(G, W, E, last):
    """``W = exp(psi(gamma))`` of the tile (psi(sum gamma) cancels in phi's
    normalisation); on the last pass also ``E = psi(gamma)``."""
    K, T = W.shape
    if last:
        for h in range(K):
            for u in range(T):
                wv, c, xs = _exp_psi(G[h, u])
                W[h, u] = wv
                E[h, u] = c + log_positive(xs)
    else:
        for h in range(K):
            for u in range(T):
                W[h, u] = _exp_psi(G[h, u])[0]


@njit(**_INLINE)
def _column_sums(W, B, R, D, RR, S, PM, PE, last):
    """Over the base clusterings: ``d_j = sum_h w_h beta_jh``, ``RR_j = 1 / d_j`` (0 if
    missing) and ``S_h = sum_j w_h beta_jh / d_j``; on the last pass also the product of
    the observed ``d_j``, renormalised to ``[1, 2)`` at each step (``PM``, ``PE``)."""
    M, K, T = B.shape
    for h in range(K):
        for u in range(T):
            S[h, u] = 0.0
    for u in range(T):
        PM[u] = 1.0
        PE[u] = 0.0
    for j in range(M):
        for u in range(T):
            D[u] = W[0, u] * B[j, 0, u]
        for h in range(1, K):
            for u in range(T):
                D[u] += W[h, u] * B[j, h, u]
        for u in range(T):
            RR[j, u] = np.float64(R[j, u] / D[u])
        for h in range(K):
            for u in range(T):
                S[h, u] += np.float64(W[h, u] * B[j, h, u]) * RR[j, u]
        if last:
            for u in range(T):
                pm = PM[u] * (np.float64(D[u]) if R[j, u] > 0 else 1.0)
                bits = np.float64(pm).view(np.int64)
                PE[u] += np.float64((bits >> 52) - 1023)
                PM[u] = np.int64((bits & 0xFFFFFFFFFFFFF)
                                 | 0x3FF0000000000000).view(np.float64)


@njit(**_INLINE)
def _add_label_statistics(st, LAB, RR, W, B, nt):
    """Add the tile's ``phi_ijh`` into the beta statistics ``st`` (L + 1, K); row by row,
    so that consecutive updates hit different labels (no store-to-load chains)."""
    M, K, _ = B.shape
    for u in range(nt):
        for j in range(M):
            lab = LAB[j, u]
            rr = RR[j, u]
            for h in range(K):
                st[lab, h] += np.float64(W[h, u] * B[j, h, u]) * rr


@njit(**_INLINE)
def _tile_entropy(A, E, PM, PE, nt):
    """The tile's ``sum_h phisum_h psi(gamma_h) - sum_j ln d_j`` (w unshifted,
    unnormalised); with ``stats . ln beta`` it is ``sum_jh phi ln phi``."""
    K = A.shape[0]
    ent = 0.0
    for u in range(nt):
        ent -= log_positive(PM[u]) + PE[u] * _LN2
        for h in range(K):
            ent += A[h, u] * E[h, u]
    return ent


@njit(**_INLINE)
def _add_row_terms(G, A, P, LG, tm, nt):
    """Add the tile's row terms of the bound and alpha's statistic at its final gamma
    into ``tm``: ``tm[h] += sum_u E_uh``, ``tm[K + 1] += sum (A - G) E``, ``tm[K + 2] +=
    sum lnG(gamma) - lnG(sum gamma)``; psi and lnGamma of gamma and of its row sums in
    one loop."""
    K = A.shape[0]
    T = A.shape[1]
    for u in range(T):
        sg = 0.0
        for h in range(K):
            sg += G[h, u]
        G[K, u] = sg
    for h in range(K + 1):
        for u in range(T):
            P[h, u], LG[h, u] = _psi_lgamma(G[h, u])
    q = 0.0
    lgs = 0.0
    for u in range(nt):
        lgs -= LG[K, u]
        for h in range(K):
            ev = P[h, u] - P[K, u]
            tm[h] += ev
            q += (A[h, u] - G[h, u]) * ev
            lgs += LG[h, u]
    tm[K + 1] += q
    tm[K + 2] += lgs


@njit(nogil=True, **_OPTS)
def estep(alpha, betaT, idx, mask, has_mask, gamma, gamma_out, phisum, n_iter, collect,
          unit, block, T, stats, terms, b_lo, b_hi):
    """Run the E-step over row blocks ``b_lo .. b_hi - 1`` (arguments: :func:`run_estep`).

    ``K`` is read from gamma's shape, not fixed at compile time: the loops over clusters
    are outer loops, the vectorised ones run over the tile's rows, so one compiled kernel
    per dtype serves every ``K``.
    """
    K, N = gamma.shape
    M = idx.shape[1]
    dt = betaT.dtype
    B = np.empty((M, K, T), dt)
    R = np.empty((M, T), dt)
    LAB = np.empty((M, T), np.int64)
    G = np.empty((K + 1, T))
    W = np.empty((K, T), dt)
    S = np.empty((K, T))
    A = np.empty((K, T))
    E = np.empty((K, T))
    D = np.empty(T, dt)
    RR = np.empty((M, T))
    PM = np.empty(T)
    PE = np.empty(T)
    P = np.empty((K + 1, T))
    LG = np.empty((K + 1, T))
    for b in range(b_lo, b_hi):
        lo = b * block
        hi = min(N, lo + block)
        st = stats[b]
        tm = terms[b]
        for h in range(K + N_TERMS):
            tm[h] = 0.0
        for t0 in range(lo, hi, T):
            nt = min(T, hi - t0)
            _gather_tile(idx, mask, has_mask, unit, betaT, gamma, t0, hi, LAB, R, B, G)
            for t in range(n_iter):
                last = collect and t == n_iter - 1
                _assignment_weights(G, W, E, last)
                _column_sums(W, B, R, D, RR, S, PM, PE, last)
                if last:
                    _add_label_statistics(st, LAB, RR, W, B, nt)
                for h in range(K):
                    for u in range(T):
                        A[h, u] = S[h, u]
                        G[h, u] = alpha[h] + S[h, u]
                if last:
                    tm[K] += _tile_entropy(A, E, PM, PE, nt)
            for h in range(K):
                for u in range(nt):
                    gamma_out[h, t0 + u] = G[h, u]
                    phisum[h, t0 + u] = A[h, u]
            if collect:
                _add_row_terms(G, A, P, LG, tm, nt)


_POOL: list = []


def _pool():
    """A thread pool for the row blocks, made on first use (the kernel releases the GIL)."""
    if not _POOL:
        from concurrent.futures import ThreadPoolExecutor

        _POOL.append(ThreadPoolExecutor(max_workers=os.cpu_count() or 1,
                                        thread_name_prefix="consensuskit-bce"))
    return _POOL[0]


def run_estep(alpha, betaT, idx, mask, gamma, n_iter, collect, n_threads=1):
    """Run the E-step kernel; the arrays are numpy.

    Parameters
    ----------
    alpha : (K,) float64
    betaT : (L + 1, K) float32 or float64, row ``L`` = ones (the dummy for missing labels)
    idx : (N, M) int32, global label index, ``L`` where missing
    mask : (N, M) of betaT's dtype (1 observed / 0 missing) or None
    gamma : (K, N) of betaT's dtype, the warm start (not modified)
    n_iter : int;  collect : bool
    n_threads : int
        Threads for the row blocks: contiguous runs of blocks go to a thread pool (the
        kernel releases the GIL).  Threads that are not asked for are not started, and
        none spin when idle.  The result does not depend on it.

    Returns
    -------
    gamma_out : (K, N)
        ``alpha + phisum`` after the last pass.
    phisum : (K, N)
        ``sum_j phi_ij`` of the last pass.
    stats : (L + 1, K) float64 or None
        Expected label counts (beta statistics), dummy row last.
    terms : (K + N_TERMS,) float64 or None
        ``S_h = sum_i E_ih`` (alpha's statistic, ``E = psi(gamma) - psi(sum gamma)`` at
        ``gamma_out``); ``sum_i [sum_h phisum_ih psi(gamma_ih) - sum_j ln d_ij]`` (add
        ``sum(stats * ln beta)`` to get ``sum phi ln phi``); ``Q = sum_ih (phisum - gamma) E``;
        ``LG = sum_i [sum_h lnG(gamma_ih) - lnG(sum_h gamma_ih)]``.
    """
    K, N = gamma.shape
    dt = betaT.dtype
    gamma_out = np.empty_like(gamma)
    phisum = np.empty_like(gamma)
    block = max(BLOCK, 8 * betaT.shape[0])
    n_blocks = max(1, -(-N // block))
    stats = np.zeros((n_blocks, betaT.shape[0] if collect else 1, K))
    terms = np.zeros((n_blocks, K + N_TERMS))
    has_mask = mask is not None
    m = mask if has_mask else np.zeros((1, 1), dtype=dt)
    kern = estep
    args = (np.ascontiguousarray(alpha, dtype=np.float64), betaT, idx, m, has_mask, gamma,
            gamma_out, phisum, int(n_iter), bool(collect), dt.type(1), block, TILE, stats,
            terms)
    n_threads = max(1, min(int(n_threads), n_blocks))
    if n_threads == 1:
        kern(*args, 0, n_blocks)
    else:
        cuts = np.linspace(0, n_blocks, n_threads + 1).round().astype(int)
        futures = [_pool().submit(kern, *args, int(lo), int(hi))
                   for lo, hi in zip(cuts[:-1], cuts[1:])]
        for f in futures:
            f.result()
    if not collect:
        return gamma_out, phisum, None, None
    return gamma_out, phisum, stats.sum(0), terms.sum(0)
