"""Steepest feasible two-coordinate descent for PCC (Lourenço et al. 2015, section 5).

The objective (paper eq. 3) over a set of observed point pairs ``P`` is

    f(Y) = sum_{{i,j} in P} N_ij d_phi(c_ij / N_ij, y_i^T y_j),

with ``y_i`` on the simplex Delta_K, ``c_ij`` the co-association count and
``N_ij`` the number of base clusterings labelling both points.  Two
divergences are implemented:

* ``"l2"``: ``N d(x, a) = N (x - a)^2 = (c - N a)^2 / N``;
* ``"kl"``: ``N d(x, a) = c log(c / (N a)) + (N - c) log((N - c) / (N (1 - a)))``,
  i.e. the negative binomial log-likelihood of ``C_ij ~ Binomial(N_ij, a)``
  plus a constant that does not depend on ``Y`` (see
  :func:`kl_objective_constant`).

Each iteration (paper Algorithm 1) picks the point ``J`` and the coordinates
``U`` (smallest gradient entry) and ``V`` (largest gradient entry on the
support of ``y_J``) with the most negative directional derivative
``g_JU - g_JV``, moves ``y_J <- y_J + eps (e_U - e_V)`` with the exact step
``eps`` in ``[0, y_VJ]`` (closed form for L2, bisection on the monotone
derivative for KL) and then updates, for every pair ``{J, i}``, the inner
product ``a_Ji = y_J^T y_i``, the gradient ``g_i`` and the per-point direction
choice in O(K) each.  One iteration costs O(n K) work in dense mode (all
pairs; a linear scan chooses ``J``) and O(l K + l log n) in pair mode (``l`` =
mean number of pairs per point; an indexed binary heap keyed by each point's
best directional derivative chooses ``J``).  No ``N x N`` array is formed in
pair mode.

The hot loops are numba-compiled (``cache=True``).  Arrays are float64.
``Y`` is stored point-major, shape ``(n, K)`` (the paper's ``K x n`` matrix
transposed) so that ``y_i`` is contiguous.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numba
import numpy as np

__all__ = [
    "PCCResult",
    "DIVERGENCES",
    "pcc_descent_dense",
    "pcc_descent_pairs",
    "pairs_objective",
    "dense_objective",
    "kl_objective_constant",
    "line_search",
    "build_adjacency",
]

#: Names of the supported divergences and their kernel codes.
DIVERGENCES = {"l2": 0, "kl": 1}

# status codes returned by the kernels
_RUNNING, _CONVERGED, _STALLED = 0, 1, 2

# numba options, chosen for the compile time of a fresh installation as well as the run
# time (as in :mod:`consensuskit.models.nbce.gibbs`, where the reasons are spelled
# out): kernels that Python calls; kernels that only kernels call, without Python or C
# wrappers (calling one from Python would jump to a null pointer) and, where they
# allocate nothing, without reference counting; the per-pair pieces inlined by LLVM.
# Integer variables passed to kernels start as ``np.int64(0)``, not ``0``: numba would
# first type them as the literal 0 and compile the callee once more for it.
_ENTRY = dict(cache=True, error_model="numpy", no_cfunc_wrapper=True)
_INNER_ALLOC = dict(_ENTRY, no_cpython_wrapper=True)
_INNER = dict(_INNER_ALLOC, _nrt=False)
_HOT = dict(_INNER, forceinline=True)


# ---------------------------------------------------------------------------
# scalar pieces
# ---------------------------------------------------------------------------
@numba.njit(**_HOT)
def _dprime(div, c, nn, a):
    """``N * d/da d_phi(c/N, a)``: the weight of ``y_i`` in ``g_j`` for pair {i, j}."""
    if div == 0:
        return 2.0 * (nn * a - c)
    r = 0.0
    if c > 0.0:
        r -= c / a
    if nn - c > 0.0:
        r += (nn - c) / (1.0 - a)
    return r


@numba.njit(**_HOT)
def _term(div, c, nn, a):
    """``N * d_phi(c/N, a)`` (zero for N = 0; +inf where the KL term is infinite)."""
    if nn <= 0.0:
        return 0.0
    if div == 0:
        r = c - nn * a
        return r * r / nn
    t = 0.0
    if c > 0.0:
        if a <= 0.0:
            return np.inf
        t += c * math.log(c / (nn * a))
    nc = nn - c
    if nc > 0.0:
        if a >= 1.0:
            return np.inf
        t += nc * math.log(nc / (nn * (1.0 - a)))
    return t


@numba.njit(**_HOT)
def _dterm(div, c, nn, aold, anew):
    """``N d(c/N, anew) - N d(c/N, aold)`` without the constant parts."""
    if div == 0:
        return _term(div, c, nn, anew) - _term(div, c, nn, aold)
    t = 0.0
    if c > 0.0:
        t += c * math.log(aold / anew)
    if nn - c > 0.0:
        t += (nn - c) * math.log((1.0 - aold) / (1.0 - anew))
    return t


@numba.njit(**_INNER)
def _rho(div, eps, a, d, c, nn, m):
    """Directional derivative ``rho(eps)`` of ``f`` along ``e_U - e_V`` at step ``eps``.

    ``a[:m]`` are the current ``a_Ji``, ``d[:m] = y_Ui - y_Vi`` (non-zero only).
    Returns +inf where the step would make a KL term infinite.
    """
    r = 0.0
    for t in range(m):
        at = a[t] + eps * d[t]
        if div == 1:
            if at <= 0.0 and c[t] > 0.0:
                return np.inf  # d < 0 here: a -> 0 with c > 0
            if at >= 1.0 and nn[t] - c[t] > 0.0:
                return np.inf  # d > 0 here
            if at < 0.0:
                at = 0.0
            elif at > 1.0:
                at = 1.0
        r += _dprime(div, c[t], nn[t], at) * d[t]
    return r


@numba.njit(**_ENTRY)
def _line_search(div, a, d, c, nn, m, ymax, xtol):
    """Exact step ``eps* in [0, ymax]`` minimising ``f(y_J + eps (e_U - e_V))`` (eq. 9).

    L2: ``f`` is quadratic in ``eps``; closed form ``-rho(0) / rho'``, clipped.
    KL: ``rho`` is non-decreasing (double convexity); if ``rho(ymax) <= 0`` the
    step is ``ymax``, else the dichotomic search of eq. (10) runs until the
    bracket is shorter than ``xtol * ymax`` and returns its left end, where
    ``rho < 0`` still holds, so that ``f`` strictly decreases.  Returns 0.0
    when no decrease is possible in floating point.
    """
    if m == 0 or ymax <= 0.0:
        return 0.0
    if div == 0:
        r0 = 0.0
        s = 0.0
        for t in range(m):
            r0 += 2.0 * (nn[t] * a[t] - c[t]) * d[t]
            s += 2.0 * nn[t] * d[t] * d[t]
        if r0 >= 0.0:
            return 0.0
        if s <= 0.0:
            return ymax
        e = -r0 / s
        return e if e < ymax else ymax
    if _rho(div, 0.0, a, d, c, nn, m) >= 0.0:
        return 0.0
    if _rho(div, ymax, a, d, c, nn, m) <= 0.0:
        return ymax
    lo = 0.0
    hi = ymax
    width = xtol * ymax
    for _ in range(200):
        if hi - lo <= width and lo > 0.0:
            break
        mid = 0.5 * (lo + hi)
        if mid <= lo or mid >= hi:
            break
        r = _rho(div, mid, a, d, c, nn, m)
        if r > 0.0:
            hi = mid
        elif r < 0.0:
            lo = mid
        else:
            return mid
    return lo


@numba.njit(**_HOT)
def _best_direction(G, Y, j, K):
    """(gap, U, V) of point j: ``U = argmin_k g_jk``, ``V = argmax_{k: y_jk > 0} g_jk`` (eq. 6)."""
    u = 0
    gu = G[j, 0]
    for k in range(1, K):
        if G[j, k] < gu:
            gu = G[j, k]
            u = k
    v = -1
    gv = -np.inf
    for k in range(K):
        if Y[j, k] > 0.0 and G[j, k] > gv:
            gv = G[j, k]
            v = k
    if v < 0 or v == u:
        return 0.0, u, u
    return gu - gv, u, v


# ---------------------------------------------------------------------------
# indexed binary min-heap (pair mode)
# ---------------------------------------------------------------------------
@numba.njit(**_INNER)
def _sift_up(heap, where, key, p):
    node = heap[p]
    kn = key[node]
    while p > 0:
        parent = (p - 1) >> 1
        q = heap[parent]
        if key[q] <= kn:
            break
        heap[p] = q
        where[q] = p
        p = parent
    heap[p] = node
    where[node] = p


@numba.njit(**_INNER)
def _sift_down(heap, where, key, p, size):
    node = heap[p]
    kn = key[node]
    while True:
        ch = 2 * p + 1
        if ch >= size:
            break
        if ch + 1 < size and key[heap[ch + 1]] < key[heap[ch]]:
            ch += 1
        q = heap[ch]
        if key[q] >= kn:
            break
        heap[p] = q
        where[q] = p
        p = ch
    heap[p] = node
    where[node] = p


@numba.njit(**_INNER)
def _heap_set(heap, where, key, node, value):
    old = key[node]
    key[node] = value
    if value < old:
        _sift_up(heap, where, key, where[node])
    elif value > old:
        _sift_down(heap, where, key, where[node], heap.size)


@numba.njit(**_INNER)
def _heap_build(heap, where, key):
    n = heap.size
    for i in range(n):
        heap[i] = i
        where[i] = i
    for p in range(n // 2 - 1, -1, -1):
        _sift_down(heap, where, key, p, n)


# ---------------------------------------------------------------------------
# dense mode: C, N and A = Y Y^T as (n, n) arrays
# ---------------------------------------------------------------------------
@numba.njit(**_HOT)
def _take_step(Y, J, u, v, eps, yold, K):
    """Move ``eps`` of row ``J``'s mass from ``v`` to ``u`` (all of ``Y[J, v]`` when ``eps``
    reaches it); keep the old row in ``yold``; return ``(du, dv)``, the changes of both."""
    for k in range(K):
        yold[k] = Y[J, k]
    if eps >= Y[J, v]:
        eps = Y[J, v]
        Y[J, v] = 0.0
    else:
        Y[J, v] -= eps
    Y[J, u] += eps
    return Y[J, u] - yold[u], Y[J, v] - yold[v]


@numba.njit(**_HOT)
def _pair_change(div, c, nn, aold, yiu, yiv, du, dv):
    """A pair (J, i) after row ``J``'s step: ``(changed, anew, wold, wnew, dterm)`` with its
    overlap clipped to [0, 1], the derivative weights before and after, and the change
    of its objective term (``changed`` False: row ``i`` has ``y_iu = y_iv``, nothing moves)."""
    wold = _dprime(div, c, nn, aold)
    if yiu - yiv == 0.0:
        return False, aold, wold, wold, 0.0
    anew = aold + du * yiu + dv * yiv
    if anew < 0.0:
        anew = 0.0
    elif anew > 1.0:
        anew = 1.0
    return True, anew, wold, _dprime(div, c, nn, anew), _dterm(div, c, nn, aold, anew)


@numba.njit(**_HOT)
def _update_gradient_row(G, i, u, v, yold, wold, wnew, du, dv, K):
    """Row ``i`` of the gradient after row ``J`` moved (``yold``: J's row before the step)."""
    dw = wnew - wold
    if dw != 0.0:
        for k in range(K):
            G[i, k] += dw * yold[k]
    G[i, u] += wnew * du
    G[i, v] += wnew * dv


@numba.njit(**_HOT)
def _record(trace, n_rec, f, it, record_every):
    """Keep the objective every ``record_every`` steps while ``trace`` has room."""
    if it % record_every == 0 and n_rec < trace.size:
        trace[n_rec] = f
        n_rec += 1
    return n_rec


@numba.njit(**_INNER_ALLOC)
def _all_directions(G, Y, n, K):
    """The best pair direction ``(gap, u, v)`` of every row, arrays (n,)."""
    gap = np.empty(n)
    U = np.empty(n, np.int64)
    V = np.empty(n, np.int64)
    for j in range(n):
        gap[j], U[j], V[j] = _best_direction(G, Y, j, K)
    return gap, U, V


@numba.njit(**_ENTRY)
def _dense_init(Y, C, NN, div):
    n, K = Y.shape
    A = np.empty((n, n))
    G = np.zeros((n, K))
    f = 0.0
    for j in range(n):
        A[j, j] = 0.0
        for i in range(j + 1, n):
            a = 0.0
            for k in range(K):
                a += Y[i, k] * Y[j, k]
            if a > 1.0:
                a = 1.0
            A[i, j] = a
            A[j, i] = a
            f += _term(div, C[j, i], NN[j, i], a)
    for j in range(n):
        for i in range(n):
            if i == j:
                continue
            w = _dprime(div, C[j, i], NN[j, i], A[j, i])
            if w != 0.0:
                for k in range(K):
                    G[j, k] += w * Y[i, k]
    gap, U, V = _all_directions(G, Y, n, K)
    return A, G, gap, U, V, f


@numba.njit(**_ENTRY)
def _dense_run(Y, C, NN, A, G, gap, U, V, div, f, n_steps, tol_abs, xtol, record_every,
               it0, trace, n_rec):
    n, K = Y.shape
    ba = np.empty(n)
    bd = np.empty(n)
    bc = np.empty(n)
    bn = np.empty(n)
    yold = np.empty(K)
    status = _RUNNING
    steps = 0
    while steps < n_steps:
        J = np.int64(0)
        best = gap[0]
        for j in range(1, n):
            if gap[j] < best:
                best = gap[j]
                J = j
        if best >= -tol_abs:
            status = _CONVERGED
            break
        u = U[J]
        v = V[J]
        m = np.int64(0)
        for i in range(n):
            if i == J:
                continue
            di = Y[i, u] - Y[i, v]
            if di != 0.0:
                ba[m] = A[J, i]
                bd[m] = di
                bc[m] = C[J, i]
                bn[m] = NN[J, i]
                m += 1
        eps = _line_search(div, ba, bd, bc, bn, m, Y[J, v], xtol)
        if eps <= 0.0:
            status = _STALLED
            break
        du, dv = _take_step(Y, J, u, v, eps, yold, K)
        df = 0.0
        for k in range(K):
            G[J, k] = 0.0
        for i in range(n):
            if i == J:
                continue
            changed, anew, wold, wnew, dterm = _pair_change(div, C[J, i], NN[J, i], A[J, i],
                                                            Y[i, u], Y[i, v], du, dv)
            if changed:
                A[J, i] = anew
                A[i, J] = anew
                df += dterm
            _update_gradient_row(G, i, u, v, yold, wold, wnew, du, dv, K)
            gap[i], U[i], V[i] = _best_direction(G, Y, i, K)
            if wnew != 0.0:
                for k in range(K):
                    G[J, k] += wnew * Y[i, k]
        gap[J], U[J], V[J] = _best_direction(G, Y, J, K)
        f += df
        steps += 1
        n_rec = _record(trace, n_rec, f, it0 + steps, record_every)
    return f, steps, status, n_rec


# ---------------------------------------------------------------------------
# pair mode: CSR adjacency over the observed pairs
# ---------------------------------------------------------------------------
@numba.njit(**_ENTRY)
def _pairs_init(Y, ec, en, indptr, nbr, div):
    """Edge-ordered state: ``ea[e] = y_J^T y_nbr[e]`` for the edges ``e`` of each ``J``."""
    n, K = Y.shape
    E = nbr.size
    ea = np.empty(E)
    G = np.zeros((n, K))
    f2 = 0.0
    for j in range(n):
        for e in range(indptr[j], indptr[j + 1]):
            i = nbr[e]
            a = 0.0
            for k in range(K):
                a += Y[i, k] * Y[j, k]
            if a > 1.0:
                a = 1.0
            ea[e] = a
            f2 += _term(div, ec[e], en[e], a)
            w = _dprime(div, ec[e], en[e], a)
            if w != 0.0:
                for k in range(K):
                    G[j, k] += w * Y[i, k]
    gap, U, V = _all_directions(G, Y, n, K)
    heap = np.empty(n, np.int64)
    where = np.empty(n, np.int64)
    _heap_build(heap, where, gap)
    return ea, G, gap, U, V, heap, where, 0.5 * f2


@numba.njit(**_ENTRY)
def _pairs_run(Y, ec, en, ea, indptr, nbr, rev, G, gap, U, V, heap, where, div, f, n_steps,
               tol_abs, xtol, record_every, it0, trace, n_rec):
    n, K = Y.shape
    maxdeg = 0
    for j in range(n):
        dj = indptr[j + 1] - indptr[j]
        if dj > maxdeg:
            maxdeg = dj
    ba = np.empty(maxdeg)
    bd = np.empty(maxdeg)
    bc = np.empty(maxdeg)
    bn = np.empty(maxdeg)
    yold = np.empty(K)
    gnew = np.empty(K)
    status = _RUNNING
    steps = 0
    while steps < n_steps:
        J = heap[0]
        if gap[J] >= -tol_abs:
            status = _CONVERGED
            break
        u = U[J]
        v = V[J]
        m = np.int64(0)
        for e in range(indptr[J], indptr[J + 1]):
            i = nbr[e]
            di = Y[i, u] - Y[i, v]
            if di != 0.0:
                ba[m] = ea[e]
                bd[m] = di
                bc[m] = ec[e]
                bn[m] = en[e]
                m += 1
        eps = _line_search(div, ba, bd, bc, bn, m, Y[J, v], xtol)
        if eps <= 0.0:
            status = _STALLED
            break
        du, dv = _take_step(Y, J, u, v, eps, yold, K)
        df = 0.0
        for k in range(K):
            gnew[k] = 0.0
        for e in range(indptr[J], indptr[J + 1]):
            i = nbr[e]
            changed, anew, wold, wnew, dterm = _pair_change(div, ec[e], en[e], ea[e], Y[i, u],
                                                            Y[i, v], du, dv)
            if changed:
                ea[e] = anew
                ea[rev[e]] = anew
                df += dterm
            _update_gradient_row(G, i, u, v, yold, wold, wnew, du, dv, K)
            gval, U[i], V[i] = _best_direction(G, Y, i, K)
            if gval != gap[i]:
                _heap_set(heap, where, gap, i, gval)
            if wnew != 0.0:
                for k in range(K):
                    gnew[k] += wnew * Y[i, k]
        for k in range(K):
            G[J, k] = gnew[k]
        gval, U[J], V[J] = _best_direction(G, Y, J, K)
        _heap_set(heap, where, gap, J, gval)
        f += df
        steps += 1
        n_rec = _record(trace, n_rec, f, it0 + steps, record_every)
    return f, steps, status, n_rec


# ---------------------------------------------------------------------------
# exact objectives (used to check the incremental bookkeeping)
# ---------------------------------------------------------------------------
@numba.njit(**_ENTRY)
def _pairs_objective(Y, pi, pj, pc, pn, div):
    K = Y.shape[1]
    f = 0.0
    for p in range(pi.size):
        a = 0.0
        for k in range(K):
            a += Y[pi[p], k] * Y[pj[p], k]
        if a > 1.0:
            a = 1.0
        f += _term(div, pc[p], pn[p], a)
    return f


def _check_div(divergence) -> int:
    if divergence not in DIVERGENCES:
        raise ValueError(f"divergence must be one of {sorted(DIVERGENCES)}; got {divergence!r}")
    return DIVERGENCES[divergence]


def pairs_objective(Y, pairs, c, n, divergence="kl") -> float:
    """Exact PCC objective ``f(Y)`` (paper eq. 3) over the given pairs.

    Parameters
    ----------
    Y : ndarray, shape (n_samples, K)
        Memberships, rows on the simplex.
    pairs : ndarray of int, shape (P, 2)
        Point pairs ``{i, j}``, each unordered pair at most once.
    c, n : ndarray, shape (P,)
        Co-association counts ``c_ij`` and co-occurrence counts ``N_ij``.
    divergence : {"kl", "l2"}
    """
    div = _check_div(divergence)
    pairs = np.asarray(pairs, dtype=np.int64)
    return float(
        _pairs_objective(
            np.ascontiguousarray(Y, dtype=np.float64),
            np.ascontiguousarray(pairs[:, 0]),
            np.ascontiguousarray(pairs[:, 1]),
            np.asarray(c, dtype=np.float64),
            np.asarray(n, dtype=np.float64),
            div,
        )
    )


def dense_objective(Y, C, N, divergence="kl") -> float:
    """Exact PCC objective over all pairs ``i < j`` from dense ``(n, n)`` counts ``C``, ``N``."""
    iu, ju = np.triu_indices(Y.shape[0], k=1)
    pairs = np.stack([iu, ju], axis=1)
    return pairs_objective(Y, pairs, np.asarray(C)[iu, ju], np.asarray(N)[iu, ju], divergence)


def kl_objective_constant(c, n) -> float:
    """The ``Y``-free constant linking the KL objective and the binomial likelihood.

    For ``C_ij ~ Binomial(N_ij, a_ij)`` over the pairs,

        -log P(C | Y) = f_KL(Y) - kappa,
        kappa = sum_ij [ log binom(N_ij, c_ij) + c_ij log(c_ij/N_ij)
                         + (N_ij - c_ij) log(1 - c_ij/N_ij) ]     (0 log 0 = 0),

    i.e. ``kappa`` is the log-likelihood of the saturated model ``a_ij = c_ij/N_ij``
    (so ``kappa <= 0``).  ``c`` and ``n`` are the per-pair counts, shape (P,).
    """
    from scipy.special import gammaln, xlogy

    c = np.asarray(c, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    keep = n > 0
    c, n = c[keep], n[keep]
    logbinom = gammaln(n + 1) - gammaln(c + 1) - gammaln(n - c + 1)
    sat = xlogy(c, c / n) + xlogy(n - c, (n - c) / n)
    return float(np.sum(logbinom + sat))


def line_search(a, d, c, n, ymax, divergence="kl", xtol=1e-12) -> float:
    """Exact step of paper eq. (9) along ``e_U - e_V`` (exposed for tests).

    Parameters
    ----------
    a : ndarray, shape (m,)
        Current ``a_Ji = y_J^T y_i`` for the pairs of the moving point ``J``.
    d : ndarray, shape (m,)
        ``y_Ui - y_Vi``: the rate of change of ``a_Ji`` with the step.
    c, n : ndarray, shape (m,)
        ``c_Ji`` and ``N_Ji``.
    ymax : float
        ``y_VJ``, the largest feasible step.
    """
    div = _check_div(divergence)
    a = np.asarray(a, dtype=np.float64)
    d = np.asarray(d, dtype=np.float64)
    c = np.asarray(c, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    nz = d != 0
    return float(
        _line_search(div, a[nz], d[nz], c[nz], n[nz], int(nz.sum()), float(ymax), float(xtol))
    )


# ---------------------------------------------------------------------------
# drivers
# ---------------------------------------------------------------------------
@dataclass
class PCCResult:
    """Outcome of one descent run.

    Attributes
    ----------
    Y : ndarray, shape (n_samples, K)
        Final memberships (rows on the simplex).
    objective : float
        Exact ``f(Y)`` recomputed at the end (not the running sum).
    objectives : ndarray, shape (n_records,)
        Running objective after every ``record_every`` iterations, starting with
        the initial value and ending with the final one.
    n_iter : int
        Coordinate steps taken.
    converged : bool
        True when the best directional derivative rose above ``-tol``.
    stalled : bool
        True when the chosen direction gave no decrease in floating point.
    """

    Y: np.ndarray
    objective: float
    objectives: np.ndarray
    n_iter: int
    converged: bool
    stalled: bool


def _prepare_y0(Y0, n):
    Y = np.array(Y0, dtype=np.float64, order="C", copy=True)
    if Y.ndim != 2 or Y.shape[0] != n:
        raise ValueError(f"Y0 must have shape ({n}, K); got {Y.shape}")
    if not np.all(np.isfinite(Y)) or (Y < 0).any():
        raise ValueError("Y0 must be finite and non-negative")
    s = Y.sum(axis=1, keepdims=True)
    if np.any(np.abs(s - 1.0) > 1e-8):
        raise ValueError("each row of Y0 must sum to 1 (lie on the simplex)")
    return Y / s


def _drive(run_chunk, f0, n, K, max_iter, record_every, verbose, desc):
    """Run the kernel in chunks so that a tqdm bar can follow; collect the trace."""
    from tqdm.auto import tqdm

    record_every = max(1, int(record_every))
    trace_parts = [np.array([f0])]
    it = 0
    status = _RUNNING
    chunk = max(record_every, min(max_iter, 50 * record_every))
    with tqdm(total=max_iter, disable=not verbose, desc=desc, unit="it") as bar:
        while it < max_iter and status == _RUNNING:
            steps = min(chunk, max_iter - it)
            trace = np.empty(steps // record_every + 1)
            f, done, status, n_rec = run_chunk(steps, it, trace)
            trace_parts.append(trace[:n_rec])
            it += done
            bar.update(done)
            bar.set_postfix(objective=f"{f:.6g}")
    return f, it, status, trace_parts


def pcc_descent_dense(C, N, Y0, divergence="kl", *, max_iter=None, tol=1e-6, xtol=1e-12,
                      record_every=None, verbose=False) -> PCCResult:
    """PCC descent over all pairs ``i < j`` of dense ``(n, n)`` counts.

    Parameters
    ----------
    C, N : ndarray, shape (n, n)
        Co-association counts ``c_ij`` and co-occurrence counts ``N_ij``
        (symmetric; the diagonal is ignored).  Memory: three ``(n, n)`` float64
        arrays (C, N and ``A = Y Y^T``).
    Y0 : ndarray, shape (n, K)
        Initial memberships, rows on the simplex.  The uniform matrix is a
        stationary point of ``f``; start from a perturbed one.
    divergence : {"kl", "l2"}
    max_iter : int or None
        Maximum number of coordinate steps (default ``20 n K``).
    tol : float
        Stop when ``max_j (g_JV - g_JU) < tol * s``, with ``s`` the mean over
        points of ``sum_i N_ij`` (gradients scale with it).
    xtol : float
        Relative bracket width at which the KL bisection stops.
    record_every : int or None
        Record the running objective every this many steps (default ``n``).
    verbose : bool
        Show a tqdm progress bar.
    """
    div = _check_div(divergence)
    C = np.ascontiguousarray(C, dtype=np.float64)
    N = np.ascontiguousarray(N, dtype=np.float64)
    n = C.shape[0]
    if C.shape != (n, n) or N.shape != (n, n):
        raise ValueError(f"C and N must be square of the same shape; got {C.shape}, {N.shape}")
    Y = _prepare_y0(Y0, n)
    K = Y.shape[1]
    max_iter = 20 * n * K if max_iter is None else int(max_iter)
    record_every = n if record_every is None else int(record_every)
    offdiag = N.sum() - np.trace(N)
    tol_abs = float(tol) * max(offdiag / n, 1e-300)
    A, G, gap, U, V, f0 = _dense_init(Y, C, N, div)
    if not np.isfinite(f0):
        raise ValueError("the objective is infinite at Y0 (KL: some y_i^T y_j = 0 with c_ij > 0)")
    state = {"f": f0}

    def run_chunk(steps, it0, trace):
        f, done, status, n_rec = _dense_run(
            Y, C, N, A, G, gap, U, V, div, state["f"], steps, tol_abs, xtol, record_every,
            it0, trace, 0,
        )
        state["f"] = f
        return f, done, status, n_rec

    f, it, status, parts = _drive(run_chunk, f0, n, K, max_iter, record_every, verbose,
                                  f"PCC-{divergence} (dense)")
    return _finish(Y, f, it, status, parts, lambda: dense_objective(Y, C, N, divergence))


def _finish(Y, f_running, it, status, parts, exact):
    f_exact = exact()
    objectives = np.concatenate(parts + [np.array([f_exact])])
    return PCCResult(
        Y=Y,
        objective=f_exact,
        objectives=objectives,
        n_iter=int(it),
        converged=status == _CONVERGED,
        stalled=status == _STALLED,
    )


def build_adjacency(pairs, n):
    """Symmetric CSR adjacency of a pair list.

    Returns ``indptr`` (n+1,), ``nbr`` (2P,), ``eid`` (2P,) and ``rev`` (2P,):
    the edges of point ``j`` are ``indptr[j]:indptr[j+1]``, sorted by
    neighbour; ``eid[e]`` is the pair edge ``e`` stands for and ``rev[e]`` the
    edge of the same pair seen from the other end.
    """
    pairs = np.asarray(pairs, dtype=np.int64)
    P = pairs.shape[0]
    src = np.concatenate([pairs[:, 0], pairs[:, 1]])
    dst = np.concatenate([pairs[:, 1], pairs[:, 0]])
    pid = np.concatenate([np.arange(P), np.arange(P)])
    order = np.lexsort((dst, src))
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=indptr[1:])
    eid = pid[order]
    pos = np.empty(2 * P, dtype=np.int64)
    pos[order] = np.arange(2 * P)  # pos[k] = edge position of directed copy k
    side = (order >= P).astype(np.int64)  # 0: stored as (i, j), 1: as (j, i)
    rev = pos[np.where(side == 0, order + P, order - P)]
    return indptr, np.ascontiguousarray(dst[order]), np.ascontiguousarray(eid), rev


def pcc_descent_pairs(pairs, c, n, Y0, divergence="kl", *, max_iter=None, tol=1e-6,
                      xtol=1e-12, record_every=None, verbose=False) -> PCCResult:
    """PCC descent over a given set of pairs (paper section 5.4), never forming ``n x n``.

    Parameters
    ----------
    pairs : ndarray of int, shape (P, 2)
        Distinct unordered pairs ``{i, j}``, ``i != j`` (e.g. from
        :func:`consensuskit.data.ensemble.sample_pairs`).
    c, n : ndarray, shape (P,)
        ``c_ij`` and ``N_ij`` per pair.  Pairs with ``N_ij = 0`` carry no
        information and are dropped.
    Y0 : ndarray, shape (n_samples, K)
        Initial memberships.  Points in no pair keep their initial row.
    divergence, max_iter, tol, xtol, record_every, verbose
        As in :func:`pcc_descent_dense`; ``tol`` is scaled by the mean over
        points of ``sum_{i in P_j} N_ij``.  The point to move is taken from an
        indexed binary heap keyed by each point's best directional derivative,
        updated for the ``O(l)`` points whose gradient changed.
    """
    div = _check_div(divergence)
    pairs = np.asarray(pairs)
    if pairs.ndim != 2 or pairs.shape[1] != 2 or pairs.dtype.kind not in "iu":
        raise ValueError(f"pairs must be an integer array of shape (P, 2); got {pairs.shape}")
    c = np.asarray(c, dtype=np.float64)
    n_ = np.asarray(n, dtype=np.float64)
    if c.shape != (pairs.shape[0],) or n_.shape != c.shape:
        raise ValueError("c and n must have shape (P,) matching pairs")
    if (c < 0).any() or (c > n_).any():
        raise ValueError("counts must satisfy 0 <= c_ij <= N_ij")
    Y0 = np.asarray(Y0, dtype=np.float64)
    if Y0.ndim != 2:
        raise ValueError(f"Y0 must have shape (n_samples, K); got {Y0.shape}")
    Y = _prepare_y0(Y0, Y0.shape[0])
    n_samples, K = Y.shape
    keep = n_ > 0
    pairs = pairs[keep].astype(np.int64)
    c = np.ascontiguousarray(c[keep])
    n_ = np.ascontiguousarray(n_[keep])
    if pairs.size and (pairs.min() < 0 or pairs.max() >= n_samples):
        raise ValueError(f"pair indices must lie in [0, {n_samples})")
    if (pairs[:, 0] == pairs[:, 1]).any():
        raise ValueError("pairs must join two different points")
    max_iter = 20 * n_samples * K if max_iter is None else int(max_iter)
    record_every = n_samples if record_every is None else int(record_every)
    tol_abs = float(tol) * max(2.0 * n_.sum() / n_samples, 1e-300)
    indptr, nbr, eid, rev = build_adjacency(pairs, n_samples)
    pi = np.ascontiguousarray(pairs[:, 0])
    pj = np.ascontiguousarray(pairs[:, 1])
    ec = np.ascontiguousarray(c[eid])
    en = np.ascontiguousarray(n_[eid])
    ea, G, gap, U, V, heap, where, f0 = _pairs_init(Y, ec, en, indptr, nbr, div)
    if not np.isfinite(f0):
        raise ValueError("the objective is infinite at Y0 (KL: some y_i^T y_j = 0 with c_ij > 0)")
    state = {"f": f0}

    def run_chunk(steps, it0, trace):
        f, done, status, n_rec = _pairs_run(
            Y, ec, en, ea, indptr, nbr, rev, G, gap, U, V, heap, where, div, state["f"], steps,
            tol_abs, xtol, record_every, it0, trace, 0,
        )
        state["f"] = f
        return f, done, status, n_rec

    f, it, status, parts = _drive(run_chunk, f0, n_samples, K, max_iter, record_every, verbose,
                                  f"PCC-{divergence} (pairs)")
    return _finish(
        Y, f, it, status, parts,
        lambda: float(_pairs_objective(Y, pi, pj, c, n_, div)),
    )
