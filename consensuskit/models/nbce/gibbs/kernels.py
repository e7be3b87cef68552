"""Compiled kernels of the NBCE collapsed Gibbs sampler: compile options, the slot
layout of the count tables, the single-site sweep and its conditional, the TSB stick
swaps, the log joint and the group likelihood ratios (see the package docstring)."""

from __future__ import annotations

import math

import numba
import numpy as np

__all__ = []


# ---------------------------------------------------------------------------
# compiled kernels
# ---------------------------------------------------------------------------
# Compilation cost.  In a fresh installation (no numba cache) these kernels are
# compiled on first use, so their structure is chosen for compile time as well as run
# time (``experiments/compile_times.py`` measures it):
#
# * every kernel is compiled once and linked into its callers; LLVM inlines the
#   per-point ones (``_HOT``: ``forceinline``).  numba's ``inline='always'`` instead
#   copies the callee's typed IR into every caller, and typing the copies costs more
#   than it saves (all of them inlined: 30 s of compilation);
# * kernels that only other kernels call get no Python or C entry point (wrappers cost
#   compile time per function) and no reference counting (``_nrt=False``: they
#   allocate nothing, and the atomic reference-count updates that numba puts around
#   every array view made the sweep up to 1.8 times slower);
# * integer constants passed to a kernel are wrapped as ``np.int64(...)``: a literal
#   argument compiles one specialisation of the callee per value;
# * the moves of an iteration are separate kernels called from Python
#   (:meth:`GibbsState.iterate`), not one kernel that links them all: its final
#   optimisation re-processed every move's code once more.
#: kernels that Python calls
_ENTRY = dict(cache=True, no_cfunc_wrapper=True)
#: kernels that only other kernels call; calling one from Python would jump to a null
#: pointer (no Python entry point)
_INNER_ALLOC = dict(_ENTRY, no_cpython_wrapper=True)
#: ... and that allocate nothing
_INNER = dict(_INNER_ALLOC, _nrt=False)
#: the per-point kernels of the sweep and of the split-merge allocation
_HOT = dict(_INNER, forceinline=True)


@numba.njit(**_ENTRY)
def _seed(s):
    np.random.seed(s)  # noqa: NPY002 - numba's own per-thread generator


_TINY = 1e-100  # rescale the running weights when their maximum drops below this
_BLOCK = 16  # columns between underflow checks


@numba.njit(**_HOT)
def _label(rows, n, m):
    """The global label of row ``n`` in column ``m`` (``offsets[m] + code``), -1 where
    missing; ``rows = (codes (N, M), offsets (M,))`` as :func:`~consensuskit.models.nbce.
    gibbs.rows.sampler_rows` builds it."""
    c = rows[0][n, m]
    if c < 0:
        return np.int64(-1)
    return rows[1][m] + c


@numba.njit(**_HOT)
def _slot_update(n, k, s, delta, rows, nlk, ckm, snum, sinv, beta, Jbeta):
    """Counts of component k (in slot s) after adding (+1) or removing (-1) row n."""
    for m in range(rows[0].shape[1]):
        l = _label(rows, n, m)
        if l >= 0:
            c = nlk[l, k] + delta
            nlk[l, k] = c
            snum[l, s] = beta + c
            cm = ckm[m, k] + delta
            ckm[m, k] = cm
            sinv[m, s] = 1.0 / (Jbeta[m] + cm)


@numba.njit(**_INNER)
def _move(n, k, delta, rows, cnt, nlk, num, ckm, invden, beta, Jbeta):
    """Add (delta=+1) or remove (delta=-1) point n to/from cluster k (tables in
    component order: slot k is component k)."""
    cnt[k] += delta
    _slot_update(n, k, k, delta, rows, nlk, ckm, num, invden, beta, Jbeta)


@numba.njit(**_INNER, fastmath=True)
def _sample_index(w, n):
    """Index ``k < n`` drawn with probability ``w[k] / sum(w[:n])`` (numba's generator)."""
    tot = 0.0
    for k in range(n):
        tot += w[k]
    u = np.random.random() * tot  # noqa: NPY002 - numba RNG, seeded by _seed
    acc = 0.0
    for k in range(n):
        acc += w[k]
        if u < acc:
            return k
    return n - 1


# The sweep keeps the tables in *slots*: slot s holds component comp_of[s]
# (slot_of is the inverse), the occupied components fill slots 0..n_occ-1 and the
# empty ones the rest.  snum (L, T) and sinv (M, T) are num and invden with their
# columns in slot order, so the likelihood of a point under every occupied
# component plus one empty representative (slot n_occ; all empty columns hold the
# same values beta and 1/(k_j beta)) is a contiguous, vectorised product over the
# first n_occ + 1 slots.  ``occ`` (2,) holds n_occ and the last occupied component.
@numba.njit(**_INNER)
def _pack_slots(cnt, num, invden, slot_of, comp_of, snum, sinv, occ):
    """Order the components into slots (occupied first, each group in label order)."""
    K = cnt.shape[0]
    s = 0
    last = -1
    for k in range(K):
        if cnt[k] > 0:
            comp_of[s] = k
            slot_of[k] = s
            s += 1
            last = k
    occ[0] = s
    occ[1] = last
    for k in range(K):
        if cnt[k] == 0:
            comp_of[s] = k
            slot_of[k] = s
            s += 1
    for l in range(num.shape[0]):
        for k in range(K):
            snum[l, slot_of[k]] = num[l, k]
    for m in range(invden.shape[0]):
        for k in range(K):
            sinv[m, slot_of[k]] = invden[m, k]


@numba.njit(**_INNER)
def _unpack_slots(slot_of, snum, sinv, num, invden):
    """Write the slot tables back in component order."""
    K = slot_of.shape[0]
    for l in range(num.shape[0]):
        for k in range(K):
            num[l, k] = snum[l, slot_of[k]]
    for m in range(invden.shape[0]):
        for k in range(K):
            invden[m, k] = sinv[m, slot_of[k]]


@numba.njit(**_INNER)
def _slot_vacate(k, cnt, snum, sinv, slot_of, comp_of, occ):
    """Component k just emptied: it swaps slots with the last occupied one (``L + M``
    entries; rare, kept out of the inlined hot path)."""
    s = slot_of[k]
    t = occ[0] - 1
    if s != t:
        for l in range(snum.shape[0]):
            v = snum[l, s]
            snum[l, s] = snum[l, t]
            snum[l, t] = v
        for m in range(sinv.shape[0]):
            v = sinv[m, s]
            sinv[m, s] = sinv[m, t]
            sinv[m, t] = v
        kt = comp_of[t]
        comp_of[s] = kt
        slot_of[kt] = s
        comp_of[t] = k
        slot_of[k] = t
    occ[0] = t
    if k == occ[1]:
        j = k - 1
        while j >= 0 and cnt[j] == 0:
            j -= 1
        occ[1] = j


@numba.njit(**_INNER)
def _slot_occupy(k, slot_of, comp_of, occ):
    """Empty component k is about to be filled: it takes slot n_occ (the columns of
    empty slots are equal, so only the slot indices change)."""
    s = slot_of[k]
    t = occ[0]
    if s != t:
        kt = comp_of[t]
        comp_of[s] = kt
        slot_of[kt] = s
        comp_of[t] = k
        slot_of[k] = t
    occ[0] = t + 1
    if k > occ[1]:
        occ[1] = k


@numba.njit(**_HOT)
def _slot_likelihood(n, rows, snum, sinv, ns, lik):
    """Rescaled likelihood of row ``n``'s labels under slots ``0..ns-1`` into ``lik``.

    Every factor ``(beta + N_{k,x_nj}) / (k_j beta + N_{kj})`` is at most 1; every
    ``_BLOCK`` columns the products are divided by their maximum if it fell below
    ``_TINY`` (a common factor), so no weight that matters underflows for any M.
    """
    M = rows[0].shape[1]
    for s in range(ns):
        lik[s] = 1.0
    for m0 in range(0, M, _BLOCK):
        for m in range(m0, min(M, m0 + _BLOCK)):
            l = _label(rows, n, m)
            if l >= 0:
                a = snum[l]
                b = sinv[m]
                for s in range(ns):
                    lik[s] *= a[s] * b[s]
        if m0 + _BLOCK < M:
            mx = 0.0
            for s in range(ns):
                if lik[s] > mx:
                    mx = lik[s]
            if mx < _TINY:
                sc = 1.0 / mx
                for s in range(ns):
                    lik[s] *= sc


@numba.njit(**_HOT)
def _slot_weights(n_rest, cnt, comp_of, slot_of, n_occ, last, lik, inv1a, a0, afsd, prior, w):
    """Unnormalised conditional of a removed point from the slot likelihoods ``lik``.

    Returns ``(ns, head, tail)``: the weights ``w[:ns]``, their sum ``head`` and the
    summed weight ``tail`` of the rest.  FSD: entry s is occupied slot s, the tail
    all empty components (``a0/T`` each).  TSB: entry k is component k for
    ``k <= last`` (interior empty components included) and the tail holds the
    components after ``last``, whose prior weights are geometric: component
    ``last+1+j`` has share ``(1-q) q^j`` of it and the final one ``q^t``
    (``q = alpha0/(1+alpha0)``, ``t = T-2-last``).  ``n_rest`` is the number of
    points in the components (``sum(cnt)``).  ``lik`` must hold the empty value in
    every slot from ``n_occ`` on (TSB reads it through ``slot_of``, without a branch).
    """
    K = cnt.shape[0]
    e = lik[n_occ] if n_occ < K else 0.0
    head = 0.0
    if prior == 1:  # FSD (the constant 1/(alpha0 + N - 1) is dropped)
        for s in range(n_occ):
            v = (afsd + cnt[comp_of[s]]) * lik[s]
            w[s] = v
            head += v
        return n_occ, head, (K - n_occ) * afsd * e
    # TSB prior weights, two sticks per step so the running product's chain of
    # multiplications is half as long: p_k = acc (1 + N_k) r_k, acc *= (a0 + N_{>k}) r_k
    kend = min(last + 1, K - 1)
    acc = 1.0
    ge = n_rest
    k = 0
    while k + 1 < kend:
        n0 = cnt[k]
        r0 = inv1a[ge]
        g1 = ge - n0
        n1 = cnt[k + 1]
        r1 = inv1a[g1]
        g2 = g1 - n1
        f0 = (a0 + g1) * r0
        w[k] = acc * ((1.0 + n0) * r0)
        w[k + 1] = acc * (f0 * ((1.0 + n1) * r1))
        acc *= f0 * ((a0 + g2) * r1)
        ge = g2
        k += 2
    if k < kend:
        nk = cnt[k]
        r = inv1a[ge]
        w[k] = acc * ((1.0 + nk) * r)
        acc *= (a0 + (ge - nk)) * r
    if last == K - 1:  # the last component's stick is 1
        w[K - 1] = acc
    ns = last + 1
    for k in range(ns):
        v = w[k] * lik[slot_of[k]]
        w[k] = v
        head += v
    return ns, head, (acc * e if last < K - 1 else 0.0)


@numba.njit(**_HOT)
def _slot_draw(ns, head, tail, w, comp_of, n_occ, last, a0, inv1a, prior, unbounded):
    """A component drawn from the weights of :func:`_slot_weights`.

    TSB with ``unbounded`` (the untruncated stick-breaking prior): the tail after
    ``last`` is the whole geometric series over labels ``last+1, last+2, ...``, so the
    label returned can be ``>= T - 1``, past the tables' last empty component; the
    caller then enlarges the tables before adding the point (:func:`_sweeps`).
    """
    K = comp_of.shape[0]
    u = np.random.random() * (head + tail)  # noqa: NPY002 - numba RNG, seeded by _seed
    if u < head:
        acc = 0.0
        for s in range(ns):
            acc += w[s]
            if u < acc:
                return s if prior == 0 else comp_of[s]
        return ns - 1 if prior == 0 else comp_of[ns - 1]  # rounding at the very end
    if tail <= 0.0:  # rounding at the very end of the entries
        return ns - 1 if prior == 0 else comp_of[ns - 1]
    if prior == 0 and unbounded:
        q = a0 * inv1a[0]
        if q <= 0.0:
            return last + 1
        v = 1.0 - np.random.random()  # noqa: NPY002 - in (0, 1]
        jj = min(math.log(v) / math.log(q), 1e12)  # failures before a success: P(>=j)=q^j
        return last + 1 + int(jj)
    if prior == 0:
        t = K - 2 - last
        if t <= 0:
            return K - 1
        q = a0 * inv1a[0]
        v = np.random.random()  # noqa: NPY002
        if v <= 0.0 or q <= 0.0:
            return last + 1 if q <= 0.0 else K - 1
        jj = math.log(v) / math.log(q)
        if jj >= t:
            return K - 1
        return last + 1 + int(jj)
    n_empty = K - n_occ
    return comp_of[n_occ + min(int(np.random.random() * n_empty), n_empty - 1)]  # noqa: NPY002


@numba.njit(**_INNER_ALLOC)
def _slot_workspace(L, M, K):
    """Work arrays of the slot layout: slot_of, comp_of, snum, sinv, occ, w, lik."""
    return (np.empty(K, dtype=np.int64), np.empty(K, dtype=np.int64), np.empty((L, K)),
            np.empty((M, K)), np.empty(2, dtype=np.int64), np.empty(K), np.empty(K))


@numba.njit(**_HOT)
def _slot_conditional(n, rows, cnt, snum, sinv, slot_of, comp_of, occ, n_rest, inv1a, a0, afsd,
                      prior, w, lik):
    """Conditional of the removed row ``n`` (:func:`_slot_likelihood` then
    :func:`_slot_weights`); returns ``(ns, head, tail)``."""
    K = cnt.shape[0]
    n_occ = occ[0]
    _slot_likelihood(n, rows, snum, sinv, n_occ + 1 if n_occ < K else K, lik)
    if prior == 0 and n_occ < K:
        e = lik[n_occ]
        for s in range(n_occ + 1, K):
            lik[s] = e
    return _slot_weights(n_rest, cnt, comp_of, slot_of, n_occ, occ[1], lik, inv1a, a0, afsd,
                         prior, w)


@numba.njit(**_ENTRY, nogil=True)
def _sweeps(rows, z, cnt, nlk, num, ckm, invden, beta, Jbeta, inv1a, a0, afsd, prior, n_sweeps,
            start, unbounded):
    """``n_sweeps`` systematic-scan Gibbs sweeps over the points, in the slot layout; the
    first starts at row ``start``.

    Returns -1 when done.  With ``unbounded`` (TSB without truncation, one sweep per call)
    a row whose draw is a label ``>= T - 1`` stops the sweep: its label is written to
    ``z``, the row is left out of the counts, and its index is returned, so that the
    caller enlarges the tables, adds the row and continues at the next row.
    """
    N, M = rows[0].shape
    K = cnt.shape[0]
    slot_of, comp_of, snum, sinv, occ, w, lik = _slot_workspace(num.shape[0], M, K)
    _pack_slots(cnt, num, invden, slot_of, comp_of, snum, sinv, occ)
    out, into = np.int64(-1), np.int64(1)  # not literals: see _HOT
    for sw in range(n_sweeps):
        for n in range(start if sw == 0 else 0, N):
            # the per-point kernels are inlined by LLVM (_HOT): a call passing a dozen
            # arrays would cost more than the update itself
            k = z[n]
            cnt[k] -= 1
            _slot_update(n, k, slot_of[k], out, rows, nlk, ckm, snum, sinv, beta, Jbeta)
            if cnt[k] == 0:
                _slot_vacate(k, cnt, snum, sinv, slot_of, comp_of, occ)
            ns, head, tail = _slot_conditional(n, rows, cnt, snum, sinv, slot_of, comp_of, occ,
                                               N - 1, inv1a, a0, afsd, prior, w, lik)
            knew = _slot_draw(ns, head, tail, w, comp_of, occ[0], occ[1], a0, inv1a, prior,
                              unbounded)
            z[n] = knew
            if knew >= K - 1 and unbounded:
                _unpack_slots(slot_of, snum, sinv, num, invden)
                return n
            if cnt[knew] == 0:
                _slot_occupy(knew, slot_of, comp_of, occ)
            cnt[knew] += 1
            _slot_update(n, knew, slot_of[knew], into, rows, nlk, ckm, snum, sinv, beta, Jbeta)
    _unpack_slots(slot_of, snum, sinv, num, invden)
    return -1


@numba.njit(**_ENTRY)
def _conditional_nb(n, k0, n_draws, rows, cnt, nlk, num, ckm, invden, beta, Jbeta, inv1a, a0,
                    afsd, prior):
    """The sweep's conditional of z_n (row n, now in component k0), shape (T,)
    unnormalised, and ``n_draws`` draws from it, by the sweep's own kernels; the
    counts are restored afterwards (for tests)."""
    M = rows[0].shape[1]
    K = cnt.shape[0]
    slot_of, comp_of, snum, sinv, occ, w, lik = _slot_workspace(num.shape[0], M, K)
    _pack_slots(cnt, num, invden, slot_of, comp_of, snum, sinv, occ)
    cnt[k0] -= 1
    _slot_update(n, k0, slot_of[k0], np.int64(-1), rows, nlk, ckm, snum, sinv, beta, Jbeta)
    if cnt[k0] == 0:
        _slot_vacate(k0, cnt, snum, sinv, slot_of, comp_of, occ)
    n_occ, last = occ[0], occ[1]
    ns, head, tail = _slot_conditional(n, rows, cnt, snum, sinv, slot_of, comp_of, occ, cnt.sum(),
                                 inv1a, a0, afsd, prior, w, lik)
    full = np.zeros(K)
    if prior == 1:
        for s in range(ns):
            full[comp_of[s]] = w[s]
        for s in range(n_occ, K):
            full[comp_of[s]] = tail / (K - n_occ)
    else:
        for k in range(ns):
            full[k] = w[k]
        if last < K - 1:
            q = a0 * inv1a[0]
            t = K - 2 - last
            for j in range(t):
                full[last + 1 + j] = tail * (1.0 - q) * q**j
            full[K - 1] = tail * q**t
    draws = np.empty(n_draws, dtype=np.int64)
    for i in range(n_draws):
        draws[i] = _slot_draw(ns, head, tail, w, comp_of, n_occ, last, a0, inv1a, prior,
                              False)
    if cnt[k0] == 0:
        _slot_occupy(k0, slot_of, comp_of, occ)
    cnt[k0] += 1
    _slot_update(n, k0, slot_of[k0], np.int64(1), rows, nlk, ckm, snum, sinv, beta, Jbeta)
    return full, draws


@numba.njit(**_ENTRY)
def _tsb_stick_pair(nk, nk1, rest, a0, last):
    """log-prior terms of sticks k and k+1 given N_k, N_{k+1}, N_{>k+1}."""
    v = (math.lgamma(1.0 + nk) + math.lgamma(a0 + nk1 + rest)
         - math.lgamma(1.0 + a0 + nk + nk1 + rest))
    if not last:
        v += math.lgamma(1.0 + nk1) + math.lgamma(a0 + rest) - math.lgamma(1.0 + a0 + nk1 + rest)
    return v


@numba.njit(**_INNER_ALLOC)
def _tsb_swaps(cnt, nlk, num, ckm, invden, a0, perm, start, unbounded):
    """Metropolis label swaps of adjacent components k <-> k+1 (TSB only), for
    ``k = start, start+1, ...``.

    The likelihood is invariant to relabelling; only p(z | alpha0) changes, so the
    acceptance ratio needs only three counts.  ``perm`` (T,) accumulates the
    relabelling old -> new to apply to z afterwards.  Returns -1 when the pass is done.
    With ``unbounded`` (no truncation: the last component is an ordinary stick) a pass
    that reaches the pair ``(T-2, T-1)`` with ``T-2`` occupied stops before it and
    returns ``T-2``: the caller enlarges the tables and continues from there, so the
    pass is that of the untruncated prior (pairs of two empty components are no-ops).
    """
    K = cnt.shape[0]
    rest = 0
    for k in range(start, K):
        rest += cnt[k]
    inv = np.empty(K, dtype=np.int64)
    for k in range(K):
        inv[perm[k]] = k
    for k in range(start, K - 1):
        if unbounded and k == K - 2 and cnt[k] > 0:
            return k
        rest -= cnt[k]
        r = rest - cnt[k + 1]  # N_{>k+1}
        a, b = cnt[k], cnt[k + 1]
        if a == b:
            continue
        last = k + 1 == K - 1 and not unbounded
        d = _tsb_stick_pair(b, a, r, a0, last) - _tsb_stick_pair(a, b, r, a0, last)
        if d >= 0.0 or np.random.random() < math.exp(d):  # noqa: NPY002 - numba RNG
            cnt[k], cnt[k + 1] = b, a
            for l in range(nlk.shape[0]):
                t = nlk[l, k]
                nlk[l, k] = nlk[l, k + 1]
                nlk[l, k + 1] = t
                u = num[l, k]
                num[l, k] = num[l, k + 1]
                num[l, k + 1] = u
            for m in range(ckm.shape[0]):
                t = ckm[m, k]
                ckm[m, k] = ckm[m, k + 1]
                ckm[m, k + 1] = t
                u = invden[m, k]
                invden[m, k] = invden[m, k + 1]
                invden[m, k + 1] = u
            # the components now at slots k, k+1 came from old slots inv[k+1], inv[k]
            o1, o2 = inv[k], inv[k + 1]
            inv[k], inv[k + 1] = o2, o1
            perm[o2] = k
            perm[o1] = k + 1
        rest = cnt[k + 1] + r  # N_{>k} after a possible swap
    return -1


@numba.njit(**_INNER)
def _log_prior_nb(cnt, a0, code):
    """``log p(z | alpha0)`` from the sizes (the kernel's branch of
    :class:`~consensuskit.models.nbce.priors.TSB` (code 0) / ``FSD`` (code 1))."""
    K = cnt.shape[0]
    v = 0.0
    if code == 1:
        # an empty component's term is exactly 0, so only the occupied ones are summed
        # (the same value, bit for bit, at a cost that does not grow with T)
        a = a0 / K
        tot = 0.0
        for k in range(K):
            if cnt[k] > 0:
                v += math.lgamma(a + cnt[k]) - math.lgamma(a)
                tot += cnt[k]
        return v + math.lgamma(a0) - math.lgamma(a0 + tot)
    gt = 0.0  # N_{>k}
    la = math.log(a0)
    for k in range(K - 1, -1, -1):
        nk = cnt[k]
        if k < K - 1:
            v += la + math.lgamma(1.0 + nk) + math.lgamma(a0 + gt) - math.lgamma(1.0 + a0 + nk + gt)
        gt += nk
    return v


@numba.njit(**_INNER)
def _log_prior_window(cnt, a0, code, unbounded):
    """:func:`_log_prior_nb`, or with ``unbounded`` the untruncated stick-breaking prior
    of labels ``0 .. T-1`` (the last component an ordinary stick: equal unless it is
    occupied)."""
    v = _log_prior_nb(cnt, a0, code)
    K = cnt.shape[0]
    if unbounded and cnt[K - 1] > 0:
        n = cnt[K - 1]
        v += math.log(a0) + math.lgamma(1.0 + n) + math.lgamma(a0) - math.lgamma(1.0 + a0 + n)
    return v


@numba.njit(**_INNER_ALLOC)
def _occupied(cnt):
    """The occupied components (``cnt > 0``) in label order."""
    occ = np.empty(cnt.shape[0], dtype=np.int64)
    n = 0
    for k in range(cnt.shape[0]):
        if cnt[k] > 0:
            occ[n] = k
            n += 1
    return occ[:n]


@numba.njit(**_INNER)
def _loglik_nb(occ, nlk, ckm, n_labels, beta):
    """``log p(x | z, beta)``, theta integrated out, from ``nlk`` (L, T) and ``ckm`` (M, T).

    Only the occupied components ``occ`` (:func:`_occupied`) are read: an empty one has
    no nonzero count, so the sum is the one over all T, term for term in the same order,
    at a cost of ``(L + M) x occupied`` instead of ``(L + M) x T`` (the slice update of
    beta evaluates it many times per sweep).
    """
    v = 0.0
    lgb = math.lgamma(beta)
    for l in range(nlk.shape[0]):
        for i in range(occ.shape[0]):
            c = nlk[l, occ[i]]
            if c > 0:
                v += math.lgamma(beta + c) - lgb
    for m in range(ckm.shape[0]):
        jb = n_labels[m] * beta
        lg = math.lgamma(jb)
        for i in range(occ.shape[0]):
            c = ckm[m, occ[i]]
            if c > 0:
                v += lg - math.lgamma(jb + c)
    return v


@numba.njit(**_ENTRY, nogil=True)
def _log_joint_nb(cnt, nlk, ckm, n_labels, a0, beta, code):
    """Collapsed ``log p(x, z | alpha0, beta)`` from the counts."""
    return _log_prior_nb(cnt, a0, code) + _loglik_nb(_occupied(cnt), nlk, ckm, n_labels, beta)


@numba.njit(**_INNER)
def _group_loglik(gl, gm, Jbeta, beta):
    """Dirichlet-multinomial log-likelihood of one cluster: counts ``gl`` (L,), ``gm`` (M,)."""
    v = 0.0
    lgb = math.lgamma(beta)
    for l in range(gl.shape[0]):
        if gl[l] > 0:
            v += math.lgamma(beta + gl[l]) - lgb
    for m in range(gm.shape[0]):
        if gm[m] > 0:
            v += math.lgamma(Jbeta[m]) - math.lgamma(Jbeta[m] + gm[m])
    return v


@numba.njit(**_HOT)
def _add_row(rows, n, gl, gm):
    for m in range(rows[0].shape[1]):
        l = _label(rows, n, m)
        if l >= 0:
            gl[l] += 1
            gm[m] += 1


@numba.njit(**_HOT)
def _log_two(d):
    """``(log p0, log p1)`` of the two-way choice with ``log(p1/p0) = d``."""
    if d > 0.0:
        t = math.log1p(math.exp(-d))
        return -d - t, -t
    t = math.log1p(math.exp(d))
    return -t, d - t


@numba.njit(**_HOT)
def _group_ratio(rows, n, gl, gm, beta, Jbeta):
    """``p(x_n | group 1) / p(x_n | group 0)`` as ``(rat, d)``, the ratio being
    ``rat * exp(d)``: the Dirichlet-multinomial predictives of row n given the label
    counts ``gl`` (2, L) and column counts ``gm`` (2, M) of two groups.

    Numerators and denominators are multiplied in linear space, one division per
    ``_RATIO_BLOCK`` columns; ``rat`` is folded into ``d`` (one logarithm) only when
    it leaves [1e-100, 1e100], and a block whose products leave the safe range
    (extreme beta) is summed in log space, so the value is right for any beta and
    ``d`` is 0 unless the ratio is extreme.
    """
    M = rows[0].shape[1]
    rat = 1.0
    d = 0.0
    for m0 in range(0, M, _RATIO_BLOCK):
        m1 = min(M, m0 + _RATIO_BLOCK)
        num = 1.0
        den = 1.0
        for m in range(m0, m1):
            l = _label(rows, n, m)
            if l >= 0:
                num *= (beta + gl[1, l]) * (Jbeta[m] + gm[0, m])
                den *= (beta + gl[0, l]) * (Jbeta[m] + gm[1, m])
        if 1e-280 < num < 1e280 and 1e-280 < den < 1e280:
            rat *= num / den
            if not 1e-100 < rat < 1e100:
                d += math.log(rat)
                rat = 1.0
        else:
            for m in range(m0, m1):
                l = _label(rows, n, m)
                if l >= 0:
                    d += (math.log((beta + gl[1, l]) / (Jbeta[m] + gm[1, m]))
                          - math.log((beta + gl[0, l]) / (Jbeta[m] + gm[0, m])))
    return rat, d


_RATIO_BLOCK = 8  # columns per division in _group_ratio
