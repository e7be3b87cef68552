"""Collapsed Gibbs sampling for NBCE (paper section 5.1, eq. 5), compiled with numba.

The sampler works on the collapsed space: mixing weights ``pi`` and cluster
parameters ``theta*`` are integrated out (see
:func:`consensuskit.models.nbce.collapsed_log_joint`) and only the indicators
``z`` are sampled.  The conditional of ``z_i`` given the rest is

    p(z_i = k | z_-i, x) ∝ p(z_i = k | z_-i) * prod_{j observed in row i}
                            (beta + N^{-i}_{k, x_ij}) / (k_j beta + N^{-i}_{k j})

where ``N_{kj}`` counts the points of cluster k that column j labels (with no
missing labels it is the cluster size; the paper's eq. 5 writes a product over
all ``j_m``, but only the observed label's factor depends on ``k`` — this is the
correct Dirichlet-multinomial ratio) and

    TSB:  p(z_i=k | z_-i) = (1 + N_k)/(1 + a0 + N_{>=k}) prod_{h<k} (a0 + N_{>h})/(1 + a0 + N_{>=h})
          (for the last component k = T only the product: its stick is 1)
    FSD:  p(z_i=k | z_-i) ∝ a0/T + N_k.

Numerical safety and speed
--------------------------
The weights are computed in *rescaled linear space*: each factor
``(beta + N_{k,x_ij}) / (k_j beta + N_{kj})`` and each prior factor is at most 1,
so nothing overflows, and every 16 columns the running weights are divided by
their maximum when it falls below 1e-100, so M can be in the thousands without
underflow (tested at M = 1000 against the log-space collapsed joint).  The
sampler keeps ``num[l, k] = beta + N_{kl}`` (global label l, contiguous over k)
and ``invden[j, k] = 1/(k_j beta + N_{kj})``; moving one point changes ``2M``
entries of each.  During a sweep these tables are held in *slot* order
(:func:`_pack_slots`): the occupied components fill the first slots, so the
likelihood of a point is ``M`` contiguous, vectorised multiply passes over the
occupied components plus one empty representative (all empty components share
the likelihood factor ``prod_j 1/k_j``), whatever the truncation.  A component
that empties or fills swaps slots (:func:`_slot_vacate`, :func:`_slot_occupy`).
FSD's empty components then share one summed weight (a new cluster picks one
uniformly), and TSB's empty components after the last occupied one have
geometric prior weights, sampled
exactly as a truncated geometric.  No logarithm and no exponential per point.
Missing labels simply skip their column.

Group moves
-----------
With ``beta`` sampled, ``beta`` drifts to about 0.01 on ensembles of k-means
partitions; every ``z_i`` is then nearly determined by its cluster, and single-site
moves cannot change the number of clusters (chains sat at 6-9 clusters, 30 nats
apart).  Each iteration therefore adds moves of whole groups, both exact for the
truncated priors over *labelled* components:

* sequentially-allocated split-merge Metropolis-Hastings (Dahl 2003,
  :func:`_split_merge`): a split puts a new group on an empty component chosen
  uniformly, a merge keeps the second point's component; the acceptance ratio has
  the prior ratio (:func:`_log_prior_nb`), the two groups' Dirichlet-multinomial
  likelihoods, the allocation probability and the number of empty components;
* Gibbs moves of groups of identical rows (:func:`_block_moves`): a group that sits
  in one component is moved as a whole, from its exact conditional.

Both are checked by exact enumeration (``tests/test_nbce_moves.py``) and by SBC
(``tests/test_sbc_nbce.py``); ``experiments/nbce_mixing.py`` measures the mixing.

Hyper-parameters
----------------
``alpha0`` and ``beta`` are either fixed or updated once per sweep by
univariate slice sampling (Neal 2003: stepping out by at most 50 intervals, on the
log scale; compiled, :func:`_slice_log_nb`) from their conditional given ``z``:
``p(alpha0 | z) ∝ p(z | alpha0) Gamma(alpha0; a, b)`` and ``p(beta | x, z) ∝
p(x | z, beta) Gamma(beta; a, b)``, with Gamma(shape=1, rate=1) priors by default
(``hyper_prior``).  An update whose shrinkage finds no point in 200 steps keeps the
old value and is counted (``move_stats``; the estimator warns).

Chains
------
Each chain has its own generator, seeded once from ``random_state``, so the chains
run on threads (``n_jobs``; the compiled moves release the GIL) and give the same
draws for any number of threads.
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numba
import numpy as np
from scipy.special import gammaln
from sklearn.utils import check_random_state

from ..models.nbce_priors import get_prior
from .driver import Engine
from .driver import fit as drive

__all__ = [
    "GibbsState",
    "Chain",
    "GibbsChains",
    "gibbs_step",
    "gibbs_nbce",
    "conditional_probs",
    "co_clustering",
    "point_consensus",
    "draw_counts",
]



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
def _slot_update(n, k, s, delta, idx, nlk, ckm, snum, sinv, beta, Jbeta):
    """Counts of component k (in slot s) after adding (+1) or removing (-1) row n."""
    for m in range(idx.shape[1]):
        l = idx[n, m]
        if l >= 0:
            c = nlk[l, k] + delta
            nlk[l, k] = c
            snum[l, s] = beta + c
            cm = ckm[m, k] + delta
            ckm[m, k] = cm
            sinv[m, s] = 1.0 / (Jbeta[m] + cm)


@numba.njit(**_INNER)
def _move(n, k, delta, idx, cnt, nlk, num, ckm, invden, beta, Jbeta):
    """Add (delta=+1) or remove (delta=-1) point n to/from cluster k (tables in
    component order: slot k is component k)."""
    cnt[k] += delta
    _slot_update(n, k, k, delta, idx, nlk, ckm, num, invden, beta, Jbeta)


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
def _slot_likelihood(n, idx, snum, sinv, ns, lik):
    """Rescaled likelihood of row ``n``'s labels under slots ``0..ns-1`` into ``lik``.

    Every factor ``(beta + N_{k,x_nj}) / (k_j beta + N_{kj})`` is at most 1; every
    ``_BLOCK`` columns the products are divided by their maximum if it fell below
    ``_TINY`` (a common factor), so no weight that matters underflows for any M.
    """
    M = idx.shape[1]
    for s in range(ns):
        lik[s] = 1.0
    for m0 in range(0, M, _BLOCK):
        for m in range(m0, min(M, m0 + _BLOCK)):
            l = idx[n, m]
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
def _slot_draw(ns, head, tail, w, comp_of, n_occ, last, a0, inv1a, prior):
    """A component drawn from the weights of :func:`_slot_weights`."""
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
def _slot_conditional(n, idx, cnt, snum, sinv, slot_of, comp_of, occ, n_rest, inv1a, a0, afsd,
                      prior, w, lik):
    """Conditional of the removed row ``n`` (:func:`_slot_likelihood` then
    :func:`_slot_weights`); returns ``(ns, head, tail)``."""
    K = cnt.shape[0]
    n_occ = occ[0]
    _slot_likelihood(n, idx, snum, sinv, n_occ + 1 if n_occ < K else K, lik)
    if prior == 0 and n_occ < K:
        e = lik[n_occ]
        for s in range(n_occ + 1, K):
            lik[s] = e
    return _slot_weights(n_rest, cnt, comp_of, slot_of, n_occ, occ[1], lik, inv1a, a0, afsd,
                         prior, w)


@numba.njit(**_ENTRY, nogil=True)
def _sweeps(idx, z, cnt, nlk, num, ckm, invden, beta, Jbeta, inv1a, a0, afsd, prior, n_sweeps):
    """``n_sweeps`` systematic-scan Gibbs sweeps over the points, in the slot layout."""
    N, M = idx.shape
    K = cnt.shape[0]
    slot_of, comp_of, snum, sinv, occ, w, lik = _slot_workspace(num.shape[0], M, K)
    _pack_slots(cnt, num, invden, slot_of, comp_of, snum, sinv, occ)
    out, into = np.int64(-1), np.int64(1)  # not literals: see _HOT
    for _ in range(n_sweeps):
        for n in range(N):
            # the per-point kernels are inlined by LLVM (_HOT): a call passing a dozen
            # arrays would cost more than the update itself
            k = z[n]
            cnt[k] -= 1
            _slot_update(n, k, slot_of[k], out, idx, nlk, ckm, snum, sinv, beta, Jbeta)
            if cnt[k] == 0:
                _slot_vacate(k, cnt, snum, sinv, slot_of, comp_of, occ)
            ns, head, tail = _slot_conditional(n, idx, cnt, snum, sinv, slot_of, comp_of, occ,
                                               N - 1, inv1a, a0, afsd, prior, w, lik)
            knew = _slot_draw(ns, head, tail, w, comp_of, occ[0], occ[1], a0, inv1a, prior)
            z[n] = knew
            if cnt[knew] == 0:
                _slot_occupy(knew, slot_of, comp_of, occ)
            cnt[knew] += 1
            _slot_update(n, knew, slot_of[knew], into, idx, nlk, ckm, snum, sinv, beta, Jbeta)
    _unpack_slots(slot_of, snum, sinv, num, invden)


@numba.njit(**_ENTRY)
def _conditional_nb(n, k0, n_draws, idx, cnt, nlk, num, ckm, invden, beta, Jbeta, inv1a, a0,
                    afsd, prior):
    """The sweep's conditional of z_n (row n, now in component k0), shape (T,)
    unnormalised, and ``n_draws`` draws from it, by the sweep's own kernels; the
    counts are restored afterwards (for tests)."""
    M = idx.shape[1]
    K = cnt.shape[0]
    slot_of, comp_of, snum, sinv, occ, w, lik = _slot_workspace(num.shape[0], M, K)
    _pack_slots(cnt, num, invden, slot_of, comp_of, snum, sinv, occ)
    cnt[k0] -= 1
    _slot_update(n, k0, slot_of[k0], np.int64(-1), idx, nlk, ckm, snum, sinv, beta, Jbeta)
    if cnt[k0] == 0:
        _slot_vacate(k0, cnt, snum, sinv, slot_of, comp_of, occ)
    n_occ, last = occ[0], occ[1]
    ns, head, tail = _slot_conditional(n, idx, cnt, snum, sinv, slot_of, comp_of, occ, cnt.sum(),
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
        draws[i] = _slot_draw(ns, head, tail, w, comp_of, n_occ, last, a0, inv1a, prior)
    if cnt[k0] == 0:
        _slot_occupy(k0, slot_of, comp_of, occ)
    cnt[k0] += 1
    _slot_update(n, k0, slot_of[k0], np.int64(1), idx, nlk, ckm, snum, sinv, beta, Jbeta)
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
def _tsb_swaps(cnt, nlk, num, ckm, invden, a0, perm):
    """Metropolis label swaps of adjacent components k <-> k+1 (TSB only).

    The likelihood is invariant to relabelling; only p(z | alpha0) changes, so the
    acceptance ratio needs only three counts.  ``perm`` (T,) accumulates the
    relabelling old -> new to apply to z afterwards.
    """
    K = cnt.shape[0]
    rest = 0
    for k in range(K):
        rest += cnt[k]
    inv = np.empty(K, dtype=np.int64)
    for k in range(K):
        inv[perm[k]] = k
    for k in range(K - 1):
        rest -= cnt[k]
        r = rest - cnt[k + 1]  # N_{>k+1}
        a, b = cnt[k], cnt[k + 1]
        if a == b:
            continue
        last = k + 1 == K - 1
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


@numba.njit(**_INNER)
def _log_prior_nb(cnt, a0, code):
    """``log p(z | alpha0)`` from the sizes (the kernel's branch of
    :class:`~consensuskit.models.nbce_priors.TSB` (code 0) / ``FSD`` (code 1))."""
    K = cnt.shape[0]
    v = 0.0
    if code == 1:
        a = a0 / K
        tot = 0.0
        for k in range(K):
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
def _loglik_nb(nlk, ckm, n_labels, beta):
    """``log p(x | z, beta)``, theta integrated out, from ``nlk`` (L, T) and ``ckm`` (M, T)."""
    v = 0.0
    lgb = math.lgamma(beta)
    for l in range(nlk.shape[0]):
        for k in range(nlk.shape[1]):
            c = nlk[l, k]
            if c > 0:
                v += math.lgamma(beta + c) - lgb
    for m in range(ckm.shape[0]):
        jb = n_labels[m] * beta
        lg = math.lgamma(jb)
        for k in range(ckm.shape[1]):
            c = ckm[m, k]
            if c > 0:
                v += lg - math.lgamma(jb + c)
    return v


@numba.njit(**_ENTRY, nogil=True)
def _log_joint_nb(cnt, nlk, ckm, n_labels, a0, beta, code):
    """Collapsed ``log p(x, z | alpha0, beta)`` from the counts."""
    return _log_prior_nb(cnt, a0, code) + _loglik_nb(nlk, ckm, n_labels, beta)


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
def _add_row(idx, n, gl, gm):
    for m in range(idx.shape[1]):
        l = idx[n, m]
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
def _group_ratio(idx, n, gl, gm, beta, Jbeta):
    """``p(x_n | group 1) / p(x_n | group 0)`` as ``(rat, d)``, the ratio being
    ``rat * exp(d)``: the Dirichlet-multinomial predictives of row n given the label
    counts ``gl`` (2, L) and column counts ``gm`` (2, M) of two groups.

    Numerators and denominators are multiplied in linear space, one division per
    ``_RATIO_BLOCK`` columns; ``rat`` is folded into ``d`` (one logarithm) only when
    it leaves [1e-100, 1e100], and a block whose products leave the safe range
    (extreme beta) is summed in log space, so the value is right for any beta and
    ``d`` is 0 unless the ratio is extreme.
    """
    M = idx.shape[1]
    rat = 1.0
    d = 0.0
    for m0 in range(0, M, _RATIO_BLOCK):
        m1 = min(M, m0 + _RATIO_BLOCK)
        num = 1.0
        den = 1.0
        for m in range(m0, m1):
            l = idx[n, m]
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
                l = idx[n, m]
                if l >= 0:
                    d += (math.log((beta + gl[1, l]) / (Jbeta[m] + gm[1, m]))
                          - math.log((beta + gl[0, l]) / (Jbeta[m] + gm[0, m])))
    return rat, d


_RATIO_BLOCK = 8  # columns per division in _group_ratio
_SM_BLOCK = 64  # split-merge members allocated in index order within blocks of this size


@numba.njit(**_INNER)
def _pair_loglik(nlk, ckm, a, b, Jbeta, beta):
    """``(ll_a + ll_b, ll_ab)``: the Dirichlet-multinomial log-likelihoods of components
    ``a`` and ``b`` apart and merged, from the count tables (as :func:`_group_loglik`)."""
    sep = 0.0
    one = 0.0
    lgb = math.lgamma(beta)
    for l in range(nlk.shape[0]):
        na, nb = nlk[l, a], nlk[l, b]
        if na > 0:
            sep += math.lgamma(beta + na) - lgb
        if nb > 0:
            sep += math.lgamma(beta + nb) - lgb
        if na + nb > 0:
            one += math.lgamma(beta + na + nb) - lgb
    for m in range(ckm.shape[0]):
        na, nb = ckm[m, a], ckm[m, b]
        lj = math.lgamma(Jbeta[m])
        if na > 0:
            sep += lj - math.lgamma(Jbeta[m] + na)
        if nb > 0:
            sep += lj - math.lgamma(Jbeta[m] + nb)
        if na + nb > 0:
            one += lj - math.lgamma(Jbeta[m] + na + nb)
    return sep, one


@numba.njit(**_ENTRY, nogil=True)
def _split_merge(idx, z, cnt, nlk, num, ckm, invden, beta, Jbeta, a0, code, n_prop, stats):
    """``n_prop`` sequentially-allocated split-merge Metropolis-Hastings moves (Dahl 2003).

    Two distinct points ``i``, ``j`` are drawn.  If they share component ``c`` a
    *split* is proposed: ``i`` starts a new group on an empty component ``e``
    (uniform among the ``E`` empty ones), ``j`` stays in ``c``, and the other points
    of ``c`` are allocated one by one to either group with probability proportional
    to the group's size times the Dirichlet-multinomial predictive of the point's
    labels given the points allocated so far.  Otherwise a *merge* of ``i``'s
    component into ``j``'s is proposed; its reverse is the split of the merged
    component that puts ``i``'s group back on its old label, whose probability the
    same allocation, replayed, gives.  The acceptance ratio is the collapsed
    posterior ratio (truncated prior over labelled components, :func:`_log_prior_nb`,
    times the likelihood of the two groups) times ``E / q_alloc`` (split) or
    ``q_alloc / (E + 1)`` (merge), so the move keeps ``p(z | x, alpha0, beta)``
    invariant under both priors.

    The allocation order is the members in index order cut into blocks of
    ``_SM_BLOCK``, the blocks in random order: random at the scale of the data,
    sequential in memory within a block (a full shuffle made every row a cache miss
    at large N).  It depends only on the set of members, the same for a split and
    its reverse merge.  A merge is decided without allocating when it can be: all
    of its log ratio but ``log q_alloc`` comes from the count tables and
    ``log q_alloc <= 0`` only decreases as points are allocated, so the uniform
    variate is drawn first and the replay stops as soon as the ratio falls below it
    (the same decision as the full ratio; a merge of two well-separated clusters
    then costs O(L + M + T) instead of their sizes).

    ``stats`` (int64, 5) accumulates: accepted splits, accepted merges, proposed
    splits, proposed merges, splits not proposable (no empty component).
    """
    N, M = idx.shape
    L, K = nlk.shape
    if N < 2:
        return
    members = np.empty(N, dtype=np.int64)
    order = np.empty(N, dtype=np.int64)
    blocks = np.empty(N // _SM_BLOCK + 1, dtype=np.int64)
    grp = np.empty(N, dtype=np.int64)
    gl = np.zeros((2, L), dtype=np.int64)
    gm = np.zeros((2, M), dtype=np.int64)
    size = np.zeros(2, dtype=np.int64)
    for _ in range(n_prop):
        i = np.random.randint(0, N)  # noqa: NPY002 - numba RNG, seeded by _seed
        j = np.random.randint(0, N - 1)  # noqa: NPY002
        if j >= i:
            j += 1
        ci, cj = z[i], z[j]
        split = ci == cj
        n_empty = 0
        for k in range(K):
            if cnt[k] == 0:
                n_empty += 1
        if split and n_empty == 0:
            stats[4] += 1
            continue
        stats[2 if split else 3] += 1
        lp_old = _log_prior_nb(cnt, a0, code)
        logu = 0.0
        base = 0.0
        if not split:
            # the merge's log ratio without its allocation term, from the counts
            ni, nj = cnt[ci], cnt[cj]
            ll_sep, ll_one = _pair_loglik(nlk, ckm, ci, cj, Jbeta, beta)
            cnt[ci], cnt[cj] = 0, ni + nj
            lp_new = _log_prior_nb(cnt, a0, code)
            cnt[ci], cnt[cj] = ni, nj
            base = lp_new - lp_old + ll_one - ll_sep - math.log(n_empty + 1)
            u = np.random.random()  # noqa: NPY002
            logu = math.log(u) if u > 0.0 else -math.inf
            if logu >= base:  # rejected whatever log q_alloc (<= 0) is
                continue
        ns = 0
        for n in range(N):
            if n != i and n != j and (z[n] == ci or z[n] == cj):
                members[ns] = n
                ns += 1
        nb = (ns + _SM_BLOCK - 1) // _SM_BLOCK
        for b in range(nb):
            blocks[b] = b
        for a in range(nb - 1, 0, -1):
            b = np.random.randint(0, a + 1)  # noqa: NPY002
            blocks[a], blocks[b] = blocks[b], blocks[a]
        t = 0
        for b in range(nb):
            for s in range(blocks[b] * _SM_BLOCK, min(ns, (blocks[b] + 1) * _SM_BLOCK)):
                order[t] = members[s]
                t += 1
        gl[:] = 0
        gm[:] = 0
        size[0] = 1
        size[1] = 1
        _add_row(idx, i, gl[0], gm[0])
        _add_row(idx, j, gl[1], gm[1])
        # log q_alloc = logq + log(qprod): the probabilities of the allocation are
        # multiplied in linear space (a logarithm when the product gets small); a merge
        # is rejected as soon as logu >= base + log q_alloc, i.e. qprod <= thresh
        logq = 0.0
        qprod = 1.0
        thresh = 0.0 if split else math.exp(logu - base)
        rejected = False
        for s in range(ns):
            n = order[s]
            rat, d = _group_ratio(idx, n, gl, gm, beta, Jbeta)
            r = rat * (size[1] / size[0])  # P(group 1) / P(group 0)
            if d == 0.0 and 1e-50 < r < 1e50:
                p0 = 1.0 / (1.0 + r)
                if split:
                    g = 0 if np.random.random() < p0 else 1  # noqa: NPY002
                else:
                    g = 0 if z[n] == ci else 1
                qprod *= p0 if g == 0 else r * p0
                if qprod < 1e-200:
                    logq += math.log(qprod)
                    qprod = 1.0
                    if not split:
                        thresh = math.exp(logu - base - logq)
            else:  # an extreme ratio: in log space
                lp0, lp1 = _log_two(d + math.log(r))
                if split:
                    g = 0 if np.random.random() < math.exp(lp0) else 1  # noqa: NPY002
                else:
                    g = 0 if z[n] == ci else 1
                logq += lp0 if g == 0 else lp1
                if not split:
                    thresh = math.exp(logu - base - logq)
            if not split and qprod <= thresh:
                rejected = True
                break
            grp[s] = g
            size[g] += 1
            _add_row(idx, n, gl[g], gm[g])
        if rejected:
            continue
        logq += math.log(qprod)
        if split:
            ll_sep = (_group_loglik(gl[0], gm[0], Jbeta, beta)
                      + _group_loglik(gl[1], gm[1], Jbeta, beta))
            ll_one = _group_loglik(gl[0] + gl[1], gm[0] + gm[1], Jbeta, beta)
            r = np.random.randint(0, n_empty)  # noqa: NPY002
            e = -1
            for k in range(K):
                if cnt[k] == 0:
                    if r == 0:
                        e = k
                        break
                    r -= 1
            cnt[e], cnt[ci] = size[0], size[1]
            lp_new = _log_prior_nb(cnt, a0, code)
            cnt[e], cnt[ci] = 0, size[0] + size[1]
            logr = lp_new - lp_old + ll_sep - ll_one + math.log(n_empty) - logq
            if not (logr >= 0.0 or np.random.random() < math.exp(logr)):  # noqa: NPY002
                continue
            src, dst = ci, e
        else:
            src, dst = ci, cj  # logu < base + logq: accepted
        stats[0 if split else 1] += 1
        _move(i, src, -1, idx, cnt, nlk, num, ckm, invden, beta, Jbeta)
        _move(i, dst, 1, idx, cnt, nlk, num, ckm, invden, beta, Jbeta)
        z[i] = dst
        for s in range(ns):
            if grp[s] == 0:
                n = order[s]
                _move(n, src, -1, idx, cnt, nlk, num, ckm, invden, beta, Jbeta)
                _move(n, dst, 1, idx, cnt, nlk, num, ckm, invden, beta, Jbeta)
                z[n] = dst


@numba.njit(**_INNER)
def _block_prior_deltas(cnt, a, a0, code, out):
    """``out[k] = log p(z with a more points in k) - log p(z)`` for every component k."""
    K = cnt.shape[0]
    if code == 1:
        aa = a0 / K
        for k in range(K):
            out[k] = math.lgamma(aa + cnt[k] + a) - math.lgamma(aa + cnt[k])
        return
    # TSB: adding a to k raises N_{>h} for h < k and N_k itself
    ge = 0.0
    for k in range(K):
        ge += cnt[k]
    acc = 0.0  # sum over h < k of the change of stick h's term
    for k in range(K):
        nk = cnt[k]
        gt = ge - nk  # N_{>k}
        if k < K - 1:
            out[k] = acc + (math.lgamma(1.0 + nk + a) - math.lgamma(1.0 + nk)
                            - math.lgamma(1.0 + a0 + ge + a) + math.lgamma(1.0 + a0 + ge))
            acc += (math.lgamma(a0 + gt + a) - math.lgamma(a0 + gt)
                    - math.lgamma(1.0 + a0 + ge + a) + math.lgamma(1.0 + a0 + ge))
        else:
            out[k] = acc
        ge = gt


@numba.njit(**_ENTRY, nogil=True)
def _block_moves(idx, z, cnt, nlk, num, ckm, invden, beta, Jbeta, a0, code, bptr, brows,
                 n_moves, stats):
    """Gibbs moves of whole groups of identical rows (same labels, same missing entries).

    Group ``g`` holds rows ``brows[bptr[g]:bptr[g+1]]``.  When all its ``a`` rows sit in
    one component, their common component is redrawn from ``p(k | z_-group, x)``
    restricted to "all together": the prior of adding ``a`` points to k
    (:func:`_block_prior_deltas`) times the Dirichlet-multinomial likelihood of ``a``
    copies of the row.  This is the Gibbs kernel of z given the rest and the event that
    the group is together, so it keeps the posterior invariant; when ``beta`` is small it
    moves groups that single-site moves cannot split.  ``n_moves`` groups are drawn
    at random (all of them, in order, when ``n_moves`` >= the number of groups);
    ``stats[6]`` counts the moves that changed a group's component.
    """
    G = bptr.shape[0] - 1
    if G <= 0:
        return
    K = cnt.shape[0]
    M = idx.shape[1]
    lw = np.empty(K)
    for t in range(n_moves if n_moves < G else G):
        g = t if n_moves >= G else np.random.randint(0, G)  # noqa: NPY002 - numba RNG
        r0 = brows[bptr[g]]
        a = bptr[g + 1] - bptr[g]
        c = z[r0]
        together = True
        for q in range(bptr[g] + 1, bptr[g + 1]):
            if z[brows[q]] != c:
                together = False
                break
        if not together:
            continue
        for q in range(bptr[g], bptr[g + 1]):
            _move(brows[q], c, -1, idx, cnt, nlk, num, ckm, invden, beta, Jbeta)
        _block_prior_deltas(cnt, float(a), a0, code, lw)
        v_empty = 0.0  # the likelihood term is the same for every empty component
        for m in range(M):
            l = idx[r0, m]
            if l >= 0:
                v_empty += (math.lgamma(beta + a) - math.lgamma(beta)
                            - math.lgamma(Jbeta[m] + a) + math.lgamma(Jbeta[m]))
        for k in range(K):
            if cnt[k] == 0:
                lw[k] += v_empty
                continue
            v = 0.0
            for m in range(M):
                l = idx[r0, m]
                if l >= 0:
                    v += (math.lgamma(beta + nlk[l, k] + a) - math.lgamma(beta + nlk[l, k])
                          - math.lgamma(Jbeta[m] + ckm[m, k] + a)
                          + math.lgamma(Jbeta[m] + ckm[m, k]))
            lw[k] += v
        mx = lw[0]
        for k in range(1, K):
            if lw[k] > mx:
                mx = lw[k]
        for k in range(K):
            lw[k] = math.exp(lw[k] - mx)
        knew = _sample_index(lw, K)
        if knew != c:
            stats[6] += 1
        for q in range(bptr[g], bptr[g + 1]):
            z[brows[q]] = knew
            _move(brows[q], knew, 1, idx, cnt, nlk, num, ckm, invden, beta, Jbeta)


_ROW_HASH_WEIGHTS = np.random.default_rng(20261124).integers(
    1, 2**62, size=4096, dtype=np.int64) | 1  # odd multipliers of the row hash


def identical_row_groups(idx):
    """Groups of >= 2 identical rows of ``idx`` (N, M) as CSR arrays ``(ptr, rows)``.

    Groups are in the lexicographic order of their rows, and a group's rows ascend (the
    order of ``np.unique(idx, axis=0)``).  Rows are grouped by a 64-bit hash (one
    integer sort instead of a sort of whole rows: about 10x faster at 1e6 rows) and every
    row is checked against its group's first row; a hash collision falls back to the
    exact grouping (:func:`_identical_row_groups_exact`).
    """
    idx = np.ascontiguousarray(idx)
    N, M = idx.shape
    if N < 2:
        return np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int64)
    if M > _ROW_HASH_WEIGHTS.size:
        return _identical_row_groups_exact(idx)
    h = idx.astype(np.int64) @ _ROW_HASH_WEIGHTS[:M]  # wraps modulo 2^64
    order = np.argsort(h, kind="stable")
    hs = h[order]
    new = np.concatenate([[True], hs[1:] != hs[:-1]])
    starts = np.flatnonzero(new)
    counts = np.diff(np.append(starts, N))
    first = order[starts][np.cumsum(new) - 1]  # each sorted row's group representative
    if not np.array_equal(idx[order], idx[first]):
        return _identical_row_groups_exact(idx)
    keep = np.flatnonzero(counts >= 2)
    if not keep.size:
        return np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int64)
    reps = idx[order[starts[keep]]]
    keep = keep[np.lexsort(reps.T[::-1])]  # column 0 most significant, as np.unique
    lens = counts[keep]
    ptr = np.concatenate([[0], np.cumsum(lens)])
    pos = np.repeat(starts[keep] - ptr[:-1], lens) + np.arange(ptr[-1])
    return ptr.astype(np.int64), order[pos].astype(np.int64)


def _identical_row_groups_exact(idx):
    """:func:`identical_row_groups` by ``np.unique`` on whole rows (the reference)."""
    idx = np.asarray(idx)
    if idx.shape[0] < 2:
        return np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int64)
    _, inv, counts = np.unique(idx, axis=0, return_inverse=True, return_counts=True)
    inv = inv.reshape(-1)
    order = np.argsort(inv, kind="stable")
    starts = np.concatenate([[0], np.cumsum(counts)])
    keep = np.flatnonzero(counts >= 2)
    rows = np.concatenate([order[starts[g]:starts[g + 1]] for g in keep]) if keep.size else \
        np.zeros(0, dtype=np.int64)
    ptr = np.concatenate([[0], np.cumsum(counts[keep])])
    return ptr.astype(np.int64), rows.astype(np.int64)


@numba.njit(**_INNER)
def _hyper_logpdf(which, x, cnt, nlk, ckm, n_labels, code, shape, rate):
    """Log conditional density of alpha0 (which=0) or beta (1) at ``x`` (Gamma prior)."""
    if not (x > 0.0) or not math.isfinite(x):
        return -math.inf
    if which == 0:
        v = _log_prior_nb(cnt, x, code)
    else:
        v = _loglik_nb(nlk, ckm, n_labels, x)
    return v + (shape - 1.0) * math.log(x) - rate * x


@numba.njit(**_INNER)
def _slice_log_nb(which, x0, cnt, nlk, ckm, n_labels, code, shape, rate, width, max_steps):
    """One slice-sampling update (Neal 2003: stepping out by at most ``max_steps``
    intervals, split at random between the two sides, then shrinkage) of ``log x``.

    Returns ``(x, failed)``; ``failed`` is 1 when 200 shrinkage steps found no point
    (the old value is kept: counted by the caller, never silent).
    """
    u0 = math.log(x0)
    gy = _hyper_logpdf(which, x0, cnt, nlk, ckm, n_labels, code, shape, rate) + u0
    gy += math.log(1.0 - np.random.random())  # noqa: NPY002 - in (0, 1]
    lo = u0 - width * np.random.random()  # noqa: NPY002
    hi = lo + width
    nl = int(max_steps * np.random.random())  # noqa: NPY002
    nh = max_steps - 1 - nl
    while nl > 0 and _hyper_logpdf(which, math.exp(lo), cnt, nlk, ckm, n_labels, code, shape,
                                   rate) + lo > gy:
        lo -= width
        nl -= 1
    while nh > 0 and _hyper_logpdf(which, math.exp(hi), cnt, nlk, ckm, n_labels, code, shape,
                                   rate) + hi > gy:
        hi += width
        nh -= 1
    for _ in range(200):
        u = lo + (hi - lo) * np.random.random()  # noqa: NPY002
        if _hyper_logpdf(which, math.exp(u), cnt, nlk, ckm, n_labels, code, shape, rate) + u > gy:
            return math.exp(u), 0
        if u < u0:
            lo = u
        else:
            hi = u
    return x0, 1


@numba.njit(**_ENTRY)
def _refresh_tables(nlk, ckm, num, invden, Jbeta, inv1a, n_labels, a0, beta):
    """Rebuild the tables that depend on alpha0 and beta."""
    for m in range(ckm.shape[0]):
        Jbeta[m] = n_labels[m] * beta
        for k in range(ckm.shape[1]):
            invden[m, k] = 1.0 / (Jbeta[m] + ckm[m, k])
    for l in range(nlk.shape[0]):
        for k in range(nlk.shape[1]):
            num[l, k] = beta + nlk[l, k]
    for n in range(inv1a.shape[0]):
        inv1a[n] = 1.0 / (1.0 + a0 + n)


@numba.njit(**_ENTRY, nogil=True)
def _label_swaps(z, cnt, nlk, num, ckm, invden, a0):
    """TSB's adjacent label swaps (:func:`_tsb_swaps`), then ``z`` relabelled in place."""
    perm = np.arange(cnt.shape[0])
    _tsb_swaps(cnt, nlk, num, ckm, invden, a0, perm)
    for n in range(z.shape[0]):
        z[n] = perm[z[n]]


@numba.njit(**_ENTRY, nogil=True)
def _update_hyper(cnt, nlk, num, ckm, invden, Jbeta, inv1a, hyp, n_labels, code, hyper_prior,
                  stats):
    """Slice updates of alpha0 | z and beta | x, z (:func:`_slice_log_nb`), then the tables
    that depend on them.

    ``hyp`` (2,) holds alpha0, beta and is updated in place; ``hyper_prior`` (4,) the
    Gamma shape and rate of alpha0 then of beta; ``stats[5]`` counts the updates that
    kept the old value.
    """
    # np.int64(...): a plain constant would compile a specialisation of the callee per value
    a0, f0 = _slice_log_nb(np.int64(0), hyp[0], cnt, nlk, ckm, n_labels, code, hyper_prior[0],
                           hyper_prior[1], 1.0, np.int64(50))
    beta, f1 = _slice_log_nb(np.int64(1), hyp[1], cnt, nlk, ckm, n_labels, code,
                             hyper_prior[2], hyper_prior[3], 1.0, np.int64(50))
    stats[5] += f0 + f1
    hyp[0], hyp[1] = a0, beta
    _refresh_tables(nlk, ckm, num, invden, Jbeta, inv1a, n_labels, a0, beta)


# ---------------------------------------------------------------------------
# state
# ---------------------------------------------------------------------------
class GibbsState:
    """Sufficient statistics of one chain plus the tables the kernels read.

    Attributes
    ----------
    z : int64 (N,)            indicators
    cnt : int64 (T,)          N_k
    nlk : int64 (L, T)        N_{k l}, global label l (offset index)
    ckm : int64 (M, T)        N_{k j}: points of cluster k labelled by column j
    num : float64 (L, T)      beta + N_{k l}
    invden : float64 (M, T)   1 / (k_j beta + N_{k j})
    """

    def __init__(self, idx, n_labels, z, truncation, alpha0, beta, prior):
        self.idx = np.ascontiguousarray(idx, dtype=np.int32)
        self.n_labels = np.asarray(n_labels, dtype=np.int64)
        self.T = int(truncation)
        self.prior_obj = get_prior(prior)
        self.prior = self.prior_obj.name
        N, M = self.idx.shape
        self.L = int(self.n_labels.sum())
        self.col_of = np.repeat(np.arange(M), self.n_labels)
        self.z = np.ascontiguousarray(z, dtype=np.int64).copy()
        if self.z.shape != (N,) or self.z.min() < 0 or self.z.max() >= self.T:
            raise ValueError(f"initial z must have shape ({N},) with values in [0, {self.T})")
        self.cnt = np.bincount(self.z, minlength=self.T).astype(np.int64)
        self.nlk = np.zeros((self.L, self.T), dtype=np.int64)
        self.ckm = np.zeros((M, self.T), dtype=np.int64)
        rows, cols = np.nonzero(self.idx >= 0)
        np.add.at(self.nlk, (self.idx[rows, cols], self.z[rows]), 1)
        np.add.at(self.ckm, (cols, self.z[rows]), 1)
        #: split-merge and slice counters, see :meth:`iterate`
        self.stats = np.zeros(7, dtype=np.int64)
        #: groups of identical rows, moved together (:func:`_block_moves`)
        self.group_ptr, self.group_rows = identical_row_groups(self.idx)
        self.hyp = np.empty(2)
        self.Jbeta = np.empty(M)
        self.num = np.empty((self.L, self.T))
        self.invden = np.empty((M, self.T))
        self.inv1a = np.empty(N + 1)
        self.set_hyper(alpha0, beta)

    @property
    def alpha0(self):
        return float(self.hyp[0])

    @property
    def beta(self):
        return float(self.hyp[1])

    @property
    def afsd(self):
        return self.alpha0 / self.T

    def set_hyper(self, alpha0, beta):
        """Set alpha0 and beta and rebuild the derived tables."""
        self.hyp[0], self.hyp[1] = float(alpha0), float(beta)
        _refresh_tables(self.nlk, self.ckm, self.num, self.invden, self.Jbeta, self.inv1a,
                        self.n_labels, self.alpha0, self.beta)

    @property
    def prior_code(self):
        return self.prior_obj.code

    def _move_args(self):
        return (self.idx, self.cnt, self.nlk, self.num, self.ckm, self.invden, self.beta,
                self.Jbeta)

    def iterate(self, n_split_merge=0, update_hyper=False,
                hyper_prior=((1.0, 1.0), (1.0, 1.0))):
        """One iteration of the chain: a systematic Gibbs sweep over the points, then
        ``n_split_merge`` split-merge moves and as many moves of groups of identical
        rows, then (TSB) adjacent label swaps, then (if ``update_hyper``) slice updates
        of alpha0 | z and beta | x, z; ``stats`` accumulates their counts (see
        :func:`gibbs_nbce`).

        Each move is its own compiled kernel, called from here (microseconds each),
        so a run compiles only the moves it uses and no kernel links all of them:
        one fused kernel cost about 1.5 s more CPU to compile in a fresh installation.
        Draws from numba's generator of the calling thread (seed it with ``_seed``).
        """
        n_split_merge = int(n_split_merge)
        self.sweep(1)
        if n_split_merge > 0:
            self.split_merge(n_split_merge)
            self.group_moves(n_split_merge)
        self.label_swaps()
        if update_hyper:
            hp = np.asarray(hyper_prior, dtype=np.float64).reshape(4)
            _update_hyper(self.cnt, self.nlk, self.num, self.ckm, self.invden, self.Jbeta,
                          self.inv1a, self.hyp, self.n_labels, self.prior_code, hp, self.stats)

    def sweep(self, n_sweeps=1):
        """Run ``n_sweeps`` systematic-scan sweeps over all points (compiled)."""
        _sweeps(
            self.idx, self.z, self.cnt, self.nlk, self.num, self.ckm, self.invden, self.beta,
            self.Jbeta, self.inv1a, self.alpha0, self.afsd, self.prior_code, int(n_sweeps),
        )

    def split_merge(self, n_proposals=1):
        """``n_proposals`` split-merge Metropolis-Hastings moves (:func:`_split_merge`)."""
        _split_merge(self.idx, self.z, self.cnt, self.nlk, self.num, self.ckm, self.invden,
                     self.beta, self.Jbeta, self.alpha0, self.prior_code, int(n_proposals),
                     self.stats)

    def group_moves(self, n_moves=None):
        """Gibbs moves of groups of identical rows (:func:`_block_moves`); all groups
        in turn by default."""
        n = self.group_ptr.size - 1 if n_moves is None else int(n_moves)
        _block_moves(self.idx, self.z, self.cnt, self.nlk, self.num, self.ckm, self.invden,
                     self.beta, self.Jbeta, self.alpha0, self.prior_code, self.group_ptr,
                     self.group_rows, n, self.stats)

    def label_swaps(self):
        """One pass of adjacent label-swap Metropolis moves (TSB; no-op for FSD).

        TSB is not exchangeable, so the order of the components matters and plain
        single-site Gibbs changes it only slowly; these moves keep the posterior
        invariant and let large clusters move to the front.
        """
        if self.prior_code != 0:
            return
        _label_swaps(self.z, self.cnt, self.nlk, self.num, self.ckm, self.invden, self.alpha0)

    def log_prior(self, alpha0=None):
        a0 = self.alpha0 if alpha0 is None else alpha0
        return self.prior_obj.log_prior(self.cnt, a0)

    def log_lik(self, beta=None):
        b = self.beta if beta is None else beta
        # same value as models.nbce.log_likelihood_collapsed, from the kept N_kj
        Jb = self.n_labels[:, None] * b
        nz = self.nlk[self.nlk > 0]
        return float(
            np.sum(gammaln(Jb) - gammaln(Jb + self.ckm)) + np.sum(gammaln(b + nz) - gammaln(b))
        )

    def log_joint(self):
        """Collapsed log p(x, z | alpha0, beta) of the current state (compiled)."""
        return _log_joint_nb(self.cnt, self.nlk, self.ckm, self.n_labels, self.alpha0,
                             self.beta, self.prior_code)


def _conditional(state: GibbsState, n: int, n_draws: int):
    return _conditional_nb(int(n), int(state.z[n]), int(n_draws), state.idx, state.cnt,
                           state.nlk, state.num, state.ckm, state.invden, state.beta,
                           state.Jbeta, state.inv1a, state.alpha0, state.afsd,
                           state.prior_code)


def conditional_probs(state: GibbsState, n: int) -> np.ndarray:
    """The sweep's conditional p(z_n = k | z_-n, x), shape (T,), computed by the
    kernels the sweep uses (slot layout, empty components scored once, TSB tail as a
    truncated geometric).  Leaves ``state`` unchanged.  Used to test the kernel
    against brute force."""
    full, _ = _conditional(state, n, 0)
    return full / full.sum()


def sample_conditional(state: GibbsState, n: int, n_draws: int) -> np.ndarray:
    """``n_draws`` samples of z_n by the sweep's sampling kernel (for tests; numba's
    generator, seeded by ``_seed``).  Leaves ``state`` unchanged."""
    return _conditional(state, n, n_draws)[1]


# ---------------------------------------------------------------------------
# one iteration, and the chains as an engine of the fit driver
# ---------------------------------------------------------------------------
def gibbs_step(state: GibbsState, rng, n_split_merge=0, update_hyperparameters=True,
               hyper_prior=((1.0, 1.0), (1.0, 1.0))) -> GibbsState:
    """One iteration of the sampler (:meth:`GibbsState.iterate`): every ``z_i`` once,
    ``n_split_merge`` split-merge and group moves, the TSB label swaps, then (if asked)
    alpha0 and beta.  numba's generator is re-seeded from ``rng`` first, so the chain is
    a function of ``rng``'s state."""
    _seed(int(rng.randint(0, 2**31 - 1)))
    state.iterate(n_split_merge, update_hyperparameters, hyper_prior)
    return state


@dataclass
class Chain:
    """One chain's state for the driver: the sampler, its own generator, sweeps done,
    the draws kept so far.

    ``draws`` maps a name to an array over the chain's ``n_samples`` draws (see
    :func:`gibbs_nbce`); entries past ``n_draws`` are not filled yet.  Each chain draws
    only from ``rng`` (seeded from the run's generator once, before any chain starts),
    so chains can run in any order, or at the same time, with the same result.
    """

    gibbs: GibbsState
    rng: np.random.RandomState
    sweeps: int
    draws: dict
    n_draws: int = 0
    log_joint: float = math.nan


class GibbsChains(Engine):
    """Collapsed Gibbs chains as an engine of :func:`consensuskit.inference.driver.fit`.

    A step is :func:`gibbs_step` with the chain's own generator; after ``burn_in``
    sweeps every ``thin``-th state is kept; the objective is the collapsed log joint.
    Arguments as :func:`gibbs_nbce`; ``chain_seeds`` (n_chains,) seeds the chains.
    """

    def __init__(self, idx, n_labels, truncation, *, prior, alpha0, beta,
                 update_hyperparameters, hyper_prior, n_samples, burn_in, thin, init,
                 store_z, store_counts, n_split_merge, chain_seeds):
        self.idx = idx
        self.n_labels = n_labels
        self.T = int(truncation)
        self.prior = prior
        self.alpha0, self.beta = alpha0, beta
        self.update_hyperparameters = bool(update_hyperparameters)
        self.hyper_prior = hyper_prior
        self.S, self.burn_in, self.thin = int(n_samples), int(burn_in), int(thin)
        self.z0 = None if init is None else np.asarray(init)
        self.store_z, self.store_counts = store_z, store_counts
        self.n_split_merge = int(n_split_merge)
        self.chain_seeds = np.asarray(chain_seeds)

    def _empty_draws(self):
        N, M = self.idx.shape
        S, T, L = self.S, self.T, int(np.sum(self.n_labels))
        d = {"counts": np.zeros((S, T), dtype=np.int64), "log_joint": np.zeros(S),
             "n_occupied": np.zeros(S, dtype=np.int64), "alpha0": np.zeros(S),
             "beta": np.zeros(S)}
        if self.store_counts:
            d["label_counts"] = np.zeros((S, T, L), dtype=np.int32)
            d["col_counts"] = np.zeros((S, T, M), dtype=np.int32)
        if self.store_z:
            d["z"] = np.zeros((S, N), dtype=np.int32)
        return d

    def init(self, rng=None, run=0):
        crng = np.random.RandomState(int(self.chain_seeds[run]))
        if self.z0 is None:
            z0 = crng.randint(0, self.T, size=self.idx.shape[0])
        else:
            z0 = self.z0[run] if self.z0.ndim == 2 else self.z0
        g = GibbsState(self.idx, self.n_labels, z0, self.T, self.alpha0, self.beta, self.prior)
        return Chain(g, crng, 0, self._empty_draws())

    def step(self, state: Chain, rng=None) -> Chain:
        g = gibbs_step(state.gibbs, state.rng, self.n_split_merge,
                       self.update_hyperparameters, self.hyper_prior)
        it = state.sweeps
        state.sweeps += 1
        state.log_joint = g.log_joint()
        if it >= self.burn_in and (it - self.burn_in + 1) % self.thin == 0:
            s, d = state.n_draws, state.draws
            d["counts"][s] = g.cnt
            if self.store_counts:
                d["label_counts"][s] = g.nlk.T
                d["col_counts"][s] = g.ckm.T
            d["log_joint"][s] = state.log_joint
            d["n_occupied"][s] = np.count_nonzero(g.cnt)
            d["alpha0"][s] = g.alpha0
            d["beta"][s] = g.beta
            if self.store_z:
                d["z"][s] = g.z
            state.n_draws += 1
        return state

    def objective(self, state: Chain) -> float:
        return state.log_joint

    def info(self, state: Chain) -> dict:
        return {"draws": state.n_draws, "gibbs": state.gibbs, "chain_seeds": self.chain_seeds}


class _OneChain(Engine):
    """Chain ``c`` of ``engine`` as a single-run engine (for running chains on threads)."""

    def __init__(self, engine, c):
        self.engine, self.c = engine, c

    def init(self, rng=None, run=0):
        return self.engine.init(rng, self.c)

    def step(self, state, rng=None):
        return self.engine.step(state, rng)

    def objective(self, state):
        return self.engine.objective(state)


def _default_split_merge(n_points):
    """Split-merge proposals (and group moves) per sweep for ``n_split_merge=None``: 20.

    The count does not depend on N, so the work per sweep is linear in N: a split
    allocates the points of one cluster, a merge is decided from the count tables
    (O(L + M + T)) unless the tables leave it open, and then allocates at most the
    points of its two clusters (:func:`_split_merge`).  Twenty is what the cluster-level
    moves need to mix on the benchmark ensembles (``experiments/nbce_mixing.py``) and
    to leave a merged start within a few sweeps (``experiments/nbce_schedule.py``).
    The count is fixed for the whole run: a count chosen from the current state (say
    the occupied components) would make the iteration's kernel depend on the state
    and no longer keep the posterior invariant.
    """
    return 0 if n_points < 2 else 20


def _numba_thread_setting():
    """numba's thread count, without starting numba's threading layer.

    ``numba.get_num_threads()`` starts that layer, and its OpenMP start-up resets the
    OpenMP thread count that torch shares, so a user's ``torch.set_num_threads(1)``
    would silently become numba's count (every later torch op then runs on all
    cores).  The chains run on a Python thread pool and need no numba threads, so the
    layer is left alone unless something else started it.
    """
    from numba.np.ufunc import parallel

    if parallel._is_initialized:
        return numba.get_num_threads()
    return int(numba.config.NUMBA_NUM_THREADS)


def _resolve_n_jobs(n_jobs, n_chains):
    """Threads to run chains on: ``None`` means numba's thread setting
    (``numba.get_num_threads()``, i.e. ``NUMBA_NUM_THREADS``); -1 all cores."""
    if n_jobs is None:
        n = _numba_thread_setting()
    elif n_jobs == -1:
        n = os.cpu_count() or 1
    else:
        n = int(n_jobs)
        if n < 1:
            raise ValueError(f"n_jobs must be a positive int, -1 or None; got {n_jobs!r}")
    return max(1, min(n, n_chains))


def gibbs_nbce(
    idx,
    n_labels,
    truncation,
    *,
    prior="tsb",
    alpha0=1.0,
    beta=0.5,
    update_hyperparameters=True,
    hyper_prior=((1.0, 1.0), (1.0, 1.0)),
    n_samples=200,
    burn_in=100,
    thin=1,
    n_chains=2,
    n_split_merge=None,
    n_jobs=None,
    init=None,
    random_state=None,
    store_z=True,
    store_counts="auto",
    verbose=False,
    callback=None,
    checkpoint=None,
    checkpoint_every=10,
    resume=None,
):
    """Run ``n_chains`` collapsed Gibbs chains for NBCE (:class:`GibbsChains` under the driver).

    Each iteration of a chain is a systematic Gibbs sweep over the points,
    ``n_split_merge`` split-merge Metropolis-Hastings moves (whole clusters split or
    merged, so the chain can change its number of clusters even when ``beta`` is
    small and single points cannot leave their cluster) and as many moves of groups
    of identical rows, adjacent label swaps (TSB) and slice updates of
    ``alpha0 | z`` and ``beta | x, z``.

    Parameters
    ----------
    idx : int array, shape (N, M)
        Global label index (:meth:`Ensemble.offset_index`), ``-1`` missing.
    n_labels : int array, shape (M,)
        ``k_j``.
    truncation : int
        T, the number of components.
    prior : {"tsb", "fsd"} or a :class:`~consensuskit.models.nbce_priors.PartitionPrior`
    alpha0, beta : float
        Fixed values, or starting values when ``update_hyperparameters``.
    update_hyperparameters : bool
        Slice-sample alpha0 and beta once per sweep (see module docstring).
    n_samples, burn_in, thin : int
        Per chain: ``burn_in`` discarded sweeps, then ``n_samples`` retained draws,
        one every ``thin`` sweeps.
    n_chains : int
    n_split_merge : int or None
        Split-merge proposals per sweep, and as many moves of groups of identical
        rows (None: :func:`_default_split_merge`; 0: single-site Gibbs only).
    n_jobs : int, -1 or None
        Threads the chains run on (the compiled moves release the GIL).  ``None``
        follows numba's thread setting (``numba.set_num_threads`` /
        ``NUMBA_NUM_THREADS``).  The draws do not depend on it.  With a ``callback``,
        ``checkpoint`` or ``resume`` the chains run one after the other.
    init : None or int array (N,) or (n_chains, N)
        Initial indicators; default uniform at random over the T components.
    random_state : None, int or RandomState
        Draws one seed per chain; each chain then has its own generator.
    store_counts : bool or "auto"
        Keep each draw's ``label_counts`` / ``col_counts`` (T x L and T x M per
        draw).  "auto": only if they take at most 256 MB; otherwise they can be
        recomputed from ``z`` with :func:`draw_counts`.
    store_z : bool
        Keep the retained indicator vectors (needed for co-clustering and the
        point consensus).
    callback, checkpoint, checkpoint_every, resume
        As in :func:`consensuskit.inference.driver.fit`: the snapshot after every sweep
        has ``chain``, ``iteration`` (sweeps done in this chain), ``draws`` (retained so
        far in it), ``gibbs`` (the :class:`GibbsState`), ``state`` (the :class:`Chain`),
        ``chain_seeds`` and ``rng`` (the generator's state).  A resumed run's later
        sweeps are those of the uninterrupted run.

    Returns
    -------
    dict with arrays over (chain, draw):
        ``z`` (C, S, N) int32 (if store_z), ``counts`` (C, S, T) int64,
        ``label_counts`` (C, S, T, L) int32, ``col_counts`` (C, S, T, M) int32
        (if stored, see ``store_counts``),
        ``log_joint`` (C, S), ``n_occupied`` (C, S), ``alpha0`` (C, S), ``beta`` (C, S);
        ``log_joint_trace`` (C, sweeps) (every sweep, burn-in included);
        ``n_draws`` (C,) draws retained per chain; ``move_stats`` (C, 7) int64: accepted
        splits, accepted merges, proposed splits, proposed merges, splits impossible for
        want of an empty component, slice updates that kept the old value, group moves
        that changed a component; ``stopped`` (the callback stopped the run); and
        ``prior``, ``truncation``, ``n_labels``.
    """
    prior_obj = get_prior(prior)
    rng = check_random_state(random_state)
    idx = np.ascontiguousarray(idx, dtype=np.int32)
    N, M = idx.shape
    T = int(truncation)
    if T < 2:
        raise ValueError(f"truncation must be >= 2; got {truncation}")
    L = int(np.sum(n_labels))
    C, S = int(n_chains), int(n_samples)
    n_sm = _default_split_merge(N) if n_split_merge is None else int(n_split_merge)
    if n_sm < 0:
        raise ValueError(f"n_split_merge must be >= 0 or None; got {n_split_merge!r}")
    workers = _resolve_n_jobs(n_jobs, C)
    if store_counts == "auto":
        store_counts = C * S * T * (L + M) * 4 <= 256 * 2**20
    chain_seeds = rng.randint(0, 2**31 - 1, size=C)
    if resume is not None and "chain_seeds" in resume:
        chain_seeds = np.asarray(resume["chain_seeds"])
    engine = GibbsChains(idx, n_labels, T, prior=prior_obj, alpha0=alpha0, beta=beta,
                         update_hyperparameters=update_hyperparameters,
                         hyper_prior=hyper_prior, n_samples=S, burn_in=burn_in, thin=thin,
                         init=init, store_z=store_z, store_counts=store_counts,
                         n_split_merge=n_sm, chain_seeds=chain_seeds)
    total = burn_in + S * thin
    sequential = (workers == 1 or callback is not None or checkpoint is not None
                  or resume is not None)
    if sequential:
        fit = drive(engine, max_iter=total, n_runs=C, tol=None, rng=rng, select="all",
                    callback=callback, checkpoint=checkpoint,
                    checkpoint_every=checkpoint_every, resume=resume, progress=verbose,
                    desc="NBCE Gibbs", run_name="chain", unit="sweep")
        runs, stopped = fit.runs, fit.stopped
    else:
        def one(c):
            return drive(_OneChain(engine, c), max_iter=total, n_runs=1, tol=None,
                         select="all", progress=verbose, desc=f"NBCE Gibbs chain {c + 1}",
                         unit="sweep").runs[0]

        with ThreadPoolExecutor(max_workers=workers) as pool:
            runs = list(pool.map(one, range(C)))
        stopped = False
    empty = engine._empty_draws()
    out = {key: np.zeros((C,) + v.shape, dtype=v.dtype) for key, v in empty.items()}
    out["log_joint_trace"] = np.full((C, total), np.nan)
    out["n_draws"] = np.zeros(C, dtype=np.int64)
    out["move_stats"] = np.zeros((C, 7), dtype=np.int64)
    for c, run in enumerate(runs):
        for key, v in run.params.draws.items():
            out[key][c] = v
        out["log_joint_trace"][c, :len(run.objectives)] = run.objectives
        out["n_draws"][c] = run.params.n_draws
        out["move_stats"][c] = run.params.gibbs.stats
    out.update(stopped=stopped, prior=prior_obj.name, truncation=T,
               n_labels=np.asarray(n_labels, dtype=np.int64))
    return out


def draw_counts(idx, z, truncation, n_labels):
    """Label counts ``N_kl`` (T, L) and per-column counts ``N_kj`` (T, M) of one draw."""
    idx = np.asarray(idx)
    z = np.asarray(z, dtype=np.int64)
    T = int(truncation)
    L = int(np.sum(n_labels))
    M = idx.shape[1]
    rows, cols = np.nonzero(idx >= 0)
    zr = z[rows]
    Nkl = np.bincount(zr * L + idx[rows, cols], minlength=T * L).reshape(T, L)
    Nkm = np.bincount(zr * M + cols, minlength=T * M).reshape(T, M)
    return Nkl, Nkm


# ---------------------------------------------------------------------------
# posterior summaries
# ---------------------------------------------------------------------------
def _pairs_for(N, max_pairs, rng):
    from ..ensemble import sample_pairs

    total = N * (N - 1) // 2
    if total <= max_pairs:
        i, j = np.triu_indices(N, k=1)
        return np.stack([i, j], axis=1)
    return sample_pairs(N, max_pairs, rng)


def co_clustering(z_draws, pairs=None):
    """Posterior co-clustering probabilities P(z_i = z_j | x).

    Parameters
    ----------
    z_draws : int array, shape (S, N)
        Retained draws (all chains stacked).
    pairs : None or int array (P, 2)
        None: the dense (N, N) matrix (N <= 5000 only); otherwise the
        probabilities of these pairs only, shape (P,), in O(S P) time.
    """
    Z = np.asarray(z_draws)
    S, N = Z.shape
    if pairs is None:
        if N > 5_000:
            raise ValueError(
                f"dense co-clustering for N={N} needs an {N}x{N} array; pass pairs= "
                "(e.g. consensuskit.ensemble.sample_pairs) for N > 5000"
            )
        P = np.zeros((N, N))
        for s in range(S):
            P += Z[s][:, None] == Z[s][None, :]
        return P / S
    pairs = np.asarray(pairs)
    return (Z[:, pairs[:, 0]] == Z[:, pairs[:, 1]]).mean(axis=0)


def point_consensus(z_draws, max_pairs=200_000, random_state=None):
    """Label-switching-free point estimate: the retained draw closest to the posterior
    co-clustering matrix in squared loss (Dahl's least-squares clustering).

    For ``N(N-1)/2 > max_pairs`` the loss is evaluated on ``max_pairs`` sampled pairs.

    Returns
    -------
    labels : int64 (N,), relabelled to 0..K-1 by decreasing cluster size
    best : int, index of the chosen draw in ``z_draws``
    """
    Z = np.asarray(z_draws)
    S, N = Z.shape
    rng = check_random_state(random_state)
    pairs = _pairs_for(N, max_pairs, rng)
    same = Z[:, pairs[:, 0]] == Z[:, pairs[:, 1]]  # (S, P)
    p = same.mean(axis=0)
    loss = ((same - p[None, :]) ** 2).sum(axis=1)
    best = int(np.argmin(loss))
    return relabel_by_size(Z[best]), best


def relabel_by_size(z):
    """Relabel a partition to 0..K-1 with cluster 0 the largest."""
    uniq, inv, cnt = np.unique(z, return_inverse=True, return_counts=True)
    order = np.argsort(-cnt, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return rank[inv].astype(np.int64)
