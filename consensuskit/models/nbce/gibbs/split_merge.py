"""Sequentially-allocated split-merge Metropolis-Hastings moves of the NBCE sampler
(Dahl 2003), exact for the truncated priors over labelled components and for the
untruncated stick-breaking prior.

Arguments shared by the kernels below (documented here once):

* ``rows`` = ``(codes, offsets)``: ``codes`` (N, M) signed integers, C-ordered, the code
  of each row's label in its column, -1 missing; ``offsets`` int64 (M,): column ``m``'s
  labels are the global labels ``offsets[m] + code``
  (:func:`~consensuskit.models.nbce.gibbs.rows.sampler_rows`);
* ``z`` int64 (N,): the components; ``cnt`` int64 (T,): their sizes;
* ``nlk`` int64 (L, T), ``ckm`` int64 (M, T): label and column counts per component;
  ``num`` (L, T) = beta + nlk, ``invden`` (M, T) = 1 / (k_j beta + ckm);
* ``beta``, ``Jbeta`` (M,) = k_j beta, ``a0`` = alpha0, ``code``: 0 TSB, 1 FSD;
* ``unbounded``: TSB without truncation (the tables are a window onto infinitely many
  labels whose last component is always empty, see :func:`new_label_count`);
* ``stats`` int64 (7,): the counters of :func:`consensuskit.models.nbce.gibbs.gibbs_nbce`.
"""

from __future__ import annotations

import math
from collections import namedtuple

import numba
import numpy as np

from consensuskit.models.nbce.gibbs.kernels import (
    _ENTRY,
    _HOT,
    _INNER,
    _INNER_ALLOC,
    _add_row,
    _group_loglik,
    _group_ratio,
    _label,
    _log_prior_nb,
    _log_prior_window,
    _log_two,
    _move,
)

__all__ = []

_SM_BLOCK = 64  # split-merge members allocated in index order within blocks of this size

#: the outcome of replaying or drawing an allocation: ``log q_alloc`` and whether a merge
#: was rejected part-way (then ``logq`` is a partial sum)
Allocation = namedtuple("Allocation", ["logq", "rejected"])
#: a split's log acceptance ratio and the empty component its new group goes to
SplitProposal = namedtuple("SplitProposal", ["log_ratio", "target"])


@numba.njit(**_INNER)
def _last_occupied(cnt):
    for k in range(cnt.shape[0] - 1, -1, -1):
        if cnt[k] > 0:
            return k
    return -1


@numba.njit(**_INNER)
def new_label_count(cnt, unbounded):
    """Number of labels a split may give its new group: the empty components (truncated
    priors), or the empty labels ``0 .. last + 1`` (untruncated TSB: a finite set that is
    a function of z alone, never of the tables' current size)."""
    n_empty = 0
    lim = cnt.shape[0] if not unbounded else _last_occupied(cnt) + 2
    for k in range(lim):
        if cnt[k] == 0:
            n_empty += 1
    return n_empty


@numba.njit(**_INNER)
def _pick_new_label(cnt, r):
    """The ``r``-th empty component (0-based) in label order."""
    for k in range(cnt.shape[0]):
        if cnt[k] == 0:
            if r == 0:
                return k
            r -= 1
    return -1


@numba.njit(**_HOT)
def _n_differing(rows, i, n):
    """The number of columns in which rows ``i`` and ``n`` differ."""
    d = 0
    for m in range(rows[0].shape[1]):
        if rows[0][n, m] != rows[0][i, m]:  # same column: codes differ iff labels do
            d += 1
    return d


@numba.njit(**_INNER)
def _draw_pair(rows, local_share, near, wbuf):
    """An ordered pair of distinct rows ``(i, j)``: ``i`` uniform; ``j`` uniform, or with
    probability ``local_share`` drawn with weight ``near[d]`` where ``d`` is the number of
    columns in which rows i and j differ (``near`` (M+1,) decreasing).  The weights are a
    function of the data alone (computed once per pair into ``wbuf`` (N,)), so a split
    and its reverse merge propose the pair with
    the same probability and it cancels from the acceptance ratio; near pairs make
    merges of similar clusters, and splits along their seams, proposed far more often
    than random pairs do when there are many clusters."""
    N = rows[0].shape[0]
    i = np.random.randint(0, N)  # noqa: NPY002 - numba RNG, seeded by _seed
    if local_share > 0.0 and np.random.random() < local_share:  # noqa: NPY002
        tot = 0.0
        for n in range(N):
            v = near[_n_differing(rows, i, n)] if n != i else 0.0
            wbuf[n] = v
            tot += v
        u = np.random.random() * tot  # noqa: NPY002
        acc = 0.0
        last = -1
        for n in range(N):
            if n != i:
                acc += wbuf[n]
                last = n
                if u < acc:
                    return i, n
        return i, last
    j = np.random.randint(0, N - 1)  # noqa: NPY002
    if j >= i:
        j += 1
    return i, j


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


@numba.njit(**_INNER)
def _merge_log_base(nlk, ckm, cnt, ci, cj, Jbeta, beta, a0, code, lp_old, unbounded):
    """Log acceptance ratio of merging ``ci`` into ``cj`` without its allocation term:
    prior and likelihood ratios times ``1 / E'``, ``E'`` the new-label count of the merged
    state (:func:`new_label_count`).  ``-inf`` when the reverse split could not put the
    group back on ``ci`` (untruncated TSB: ``ci`` beyond the merged state's ``last + 1``)."""
    ni, nj = cnt[ci], cnt[cj]
    ll_sep, ll_one = _pair_loglik(nlk, ckm, ci, cj, Jbeta, beta)
    cnt[ci], cnt[cj] = 0, ni + nj
    lp_new = _log_prior_nb(cnt, a0, code)
    n_new = new_label_count(cnt, unbounded)
    reachable = not unbounded or ci <= _last_occupied(cnt) + 1
    cnt[ci], cnt[cj] = ni, nj
    if not reachable:
        return -math.inf
    return lp_new - lp_old + ll_one - ll_sep - math.log(n_new)


@numba.njit(**_INNER)
def _allocation_order(z, i, j, ci, cj, members, blocks, order):
    """The points of ``ci`` and ``cj`` but ``i`` and ``j`` into ``order``; returns their
    number.  Members in index order, cut into blocks of ``_SM_BLOCK``, the blocks in
    random order (random at the scale of the data, sequential in memory within a block;
    the same set gives the same distribution of orders for a split and its reverse)."""
    ns = 0
    for n in range(z.shape[0]):
        if n != i and n != j and (z[n] == ci or z[n] == cj):
            members[ns] = n
            ns += 1
    nb = (ns + _SM_BLOCK - 1) // _SM_BLOCK
    for b in range(nb):
        blocks[b] = b
    for a in range(nb - 1, 0, -1):
        b = np.random.randint(0, a + 1)  # noqa: NPY002 - numba RNG, seeded by _seed
        blocks[a], blocks[b] = blocks[b], blocks[a]
    t = 0
    for b in range(nb):
        for s in range(blocks[b] * _SM_BLOCK, min(ns, (blocks[b] + 1) * _SM_BLOCK)):
            order[t] = members[s]
            t += 1
    return ns


@numba.njit(**_INNER)
def _allocate(rows, z, order, ns, i, j, ci, split, gl, gm, size, grp, beta, Jbeta, logu, base):
    """Allocate ``order[:ns]`` to group 0 (``i``'s) or 1 (``j``'s): drawn for a split,
    replayed from ``z`` for a merge.  Each point's probability is proportional to the
    group's size times the Dirichlet-multinomial predictive of its labels given the
    points allocated so far (``gl`` (2, L), ``gm`` (2, M), ``size`` (2,) are filled in;
    ``grp[s]`` records the group of ``order[s]``).  Returns :data:`Allocation`.

    The probabilities are multiplied in linear space (a logarithm when the product gets
    small).  A merge is rejected as soon as ``logu >= base + log q_alloc``: ``log q_alloc
    <= 0`` only decreases as points are allocated, so this is the decision of the full
    ratio, reached without replaying the rest.
    """
    gl[:] = 0
    gm[:] = 0
    size[0] = 1
    size[1] = 1
    _add_row(rows, i, gl[0], gm[0])
    _add_row(rows, j, gl[1], gm[1])
    logq = 0.0
    qprod = 1.0
    thresh = 0.0 if split else math.exp(logu - base)
    for s in range(ns):
        n = order[s]
        rat, d = _group_ratio(rows, n, gl, gm, beta, Jbeta)
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
            return Allocation(logq, True)
        grp[s] = g
        size[g] += 1
        _add_row(rows, n, gl[g], gm[g])
    return Allocation(logq + math.log(qprod), False)


@numba.njit(**_HOT)
def _remove_row(rows, n, gl, gm):
    """Take row ``n``'s labels out of one group's counts (the inverse of ``_add_row``)."""
    for m in range(rows[0].shape[1]):
        l = _label(rows, n, m)
        if l >= 0:
            gl[l] -= 1
            gm[m] -= 1


@numba.njit(**_INNER)
def _restricted_scan(rows, z, order, ns, ci, mode, gl, gm, size, grp, beta, Jbeta, logu, base):
    """One restricted Gibbs scan (Jain & Neal 2004) over ``order[:ns]``: each point is
    taken out of its group (``grp``) and put back in group 0 or 1 with probability
    proportional to the group's size times the Dirichlet-multinomial predictive of its
    labels, as in :func:`_allocate`.  ``mode`` 0: drawn (an intermediate scan); 1: drawn,
    its log probability summed (a split's final scan); 2: replayed from ``z`` (group 0
    is ``ci``), its log probability summed, and the merge rejected as soon as
    ``logu >= base + log q`` (``log q`` only decreases).  Returns :data:`Allocation`."""
    logq = 0.0
    for s in range(ns):
        n = order[s]
        g_old = grp[s]
        _remove_row(rows, n, gl[g_old], gm[g_old])
        size[g_old] -= 1
        rat, d = _group_ratio(rows, n, gl, gm, beta, Jbeta)
        lp0, lp1 = _log_two(d + math.log(rat) + math.log(size[1] / size[0]))
        if mode == 2:
            g = 0 if z[n] == ci else 1
        else:
            g = 0 if np.random.random() < math.exp(lp0) else 1  # noqa: NPY002
        if mode > 0:
            logq += lp0 if g == 0 else lp1
            if mode == 2 and logu >= base + logq:
                return Allocation(logq, True)
        grp[s] = g
        size[g] += 1
        _add_row(rows, n, gl[g], gm[g])
    return Allocation(logq, False)


@numba.njit(**_INNER)
def _launch_and_scan(rows, z, order, ns, i, j, ci, split, gl, gm, size, grp, beta, Jbeta,
                     n_scans, logu, base):
    """The proposal of a split or the reverse-split probability of a merge with
    restricted Gibbs scans (Jain & Neal 2004): a *launch* state drawn by sequential
    allocation (:func:`_allocate`, drawn for a split and for a merge alike, so it
    depends only on the merged set, ``i`` and ``j``), ``n_scans - 1`` intermediate
    scans, then a final scan (:func:`_restricted_scan`) whose probability of reaching
    the proposed split (split) or the current split (merge) is ``q``: the launch is an
    auxiliary variable drawn the same way in both directions, so ``q`` alone enters the
    acceptance ratio in place of the sequential allocation's."""
    _allocate(rows, z, order, ns, i, j, ci, True, gl, gm, size, grp, beta, Jbeta, 0.0, 0.0)
    for _ in range(n_scans - 1):
        _restricted_scan(rows, z, order, ns, ci, 0, gl, gm, size, grp, beta, Jbeta, 0.0, 0.0)
    return _restricted_scan(rows, z, order, ns, ci, 1 if split else 2, gl, gm, size, grp,
                            beta, Jbeta, logu, base)


@numba.njit(**_INNER_ALLOC)
def _split_proposal(cnt, gl, gm, size, ci, n_new, logq, Jbeta, beta, a0, code, lp_old,
                    unbounded):
    """The split's new label (uniform among the ``n_new`` allowed ones, label order) and
    its log acceptance ratio: prior and likelihood ratios times ``n_new / q_alloc``."""
    ll_sep = (_group_loglik(gl[0], gm[0], Jbeta, beta)
              + _group_loglik(gl[1], gm[1], Jbeta, beta))
    ll_one = _group_loglik(gl[0] + gl[1], gm[0] + gm[1], Jbeta, beta)
    e = _pick_new_label(cnt, np.random.randint(0, n_new))  # noqa: NPY002
    cnt[e], cnt[ci] = size[0], size[1]
    lp_new = _log_prior_window(cnt, a0, code, unbounded)  # e may be the tables' last
    cnt[e], cnt[ci] = 0, size[0] + size[1]
    return SplitProposal(lp_new - lp_old + ll_sep - ll_one + math.log(n_new) - logq, e)


@numba.njit(**_INNER)
def _move_group(rows, z, i, order, ns, grp, src, dst, cnt, nlk, num, ckm, invden, beta, Jbeta):
    """Move ``i`` and the allocated points of group 0 from ``src`` to ``dst``."""
    _move(i, src, -1, rows, cnt, nlk, num, ckm, invden, beta, Jbeta)
    _move(i, dst, 1, rows, cnt, nlk, num, ckm, invden, beta, Jbeta)
    z[i] = dst
    for s in range(ns):
        if grp[s] == 0:
            n = order[s]
            _move(n, src, -1, rows, cnt, nlk, num, ckm, invden, beta, Jbeta)
            _move(n, dst, 1, rows, cnt, nlk, num, ckm, invden, beta, Jbeta)
            z[n] = dst


@numba.njit(**_INNER_ALLOC)
def _split_merge_workspace(N, L, M):
    """members, order, blocks, grp (N-sized), gl (2, L), gm (2, M), size (2,), and the
    near-pair weights (N,)."""
    return (np.empty(N, dtype=np.int64), np.empty(N, dtype=np.int64),
            np.empty(N // _SM_BLOCK + 1, dtype=np.int64), np.empty(N, dtype=np.int64),
            np.zeros((2, L), dtype=np.int64), np.zeros((2, M), dtype=np.int64),
            np.zeros(2, dtype=np.int64), np.empty(N))


@numba.njit(**_ENTRY, nogil=True)
def _split_merge(rows, z, cnt, nlk, num, ckm, invden, beta, Jbeta, a0, code, n_prop, stats,
                 unbounded, local_share, near, log_ratio_error, n_scans):
    """``n_prop`` sequentially-allocated split-merge Metropolis-Hastings moves (Dahl 2003).

    Two distinct points ``i``, ``j`` are drawn (:func:`_draw_pair`: uniformly, or near
    pairs with probability ``local_share``).  If they share component ``c`` a
    *split* is proposed: ``i`` starts a new group on a new label drawn uniformly from the
    ``E`` allowed ones (:func:`new_label_count`), ``j`` stays in ``c``, and the other
    points of ``c`` are allocated one by one (:func:`_allocate`).  Otherwise a *merge* of
    ``i``'s component into ``j``'s is proposed; its reverse is the split of the merged
    component that puts ``i``'s group back on its old label, whose probability the same
    allocation, replayed, gives.  The acceptance ratio is the collapsed posterior ratio
    times ``E / q_alloc`` (split) or ``q_alloc / E'`` (merge, ``E'`` of the merged
    state), so the move keeps ``p(z | x, alpha0, beta)`` invariant.  A merge is decided
    from the count tables before anything is allocated when it can be (see
    :func:`_allocate`).

    Returns the number of proposals made: fewer than ``n_prop`` only when an accepted
    split used the tables' last component under ``unbounded`` (the caller enlarges the
    tables and asks for the rest).  ``stats`` accumulates accepted splits, accepted
    merges, proposed splits, proposed merges and splits with no allowed label.
    ``log_ratio_error`` is added to every split's log acceptance ratio and subtracted
    from every merge's: 0 for the sampler; the tests' negative controls set it to check
    that a wrong ratio is caught.  ``n_scans`` > 0 replaces the sequential allocation's
    probability by that of restricted Gibbs scans from a sequentially allocated launch
    state (:func:`_launch_and_scan`, Jain & Neal 2004); 0: Dahl's sequential allocation.
    """
    N, M = rows[0].shape
    L, K = nlk.shape
    if N < 2:
        return n_prop
    members, order, blocks, grp, gl, gm, size, wbuf = _split_merge_workspace(N, L, M)
    lp_old = _log_prior_nb(cnt, a0, code)  # a function of the sizes: kept until a move
    for p in range(n_prop):
        i, j = _draw_pair(rows, local_share, near, wbuf)
        ci, cj = z[i], z[j]
        split = ci == cj
        n_new = new_label_count(cnt, unbounded) if split else 0
        if split and n_new == 0:
            stats[4] += 1
            continue
        stats[2 if split else 3] += 1
        logu = 0.0
        base = 0.0
        if not split:
            base = _merge_log_base(nlk, ckm, cnt, ci, cj, Jbeta, beta, a0, code, lp_old,
                                   unbounded) - log_ratio_error
            u = np.random.random()  # noqa: NPY002
            logu = math.log(u) if u > 0.0 else -math.inf
            if logu >= base:  # rejected whatever log q_alloc (<= 0) is
                continue
        ns = _allocation_order(z, i, j, ci, cj, members, blocks, order)
        if n_scans > 0:
            alloc = _launch_and_scan(rows, z, order, ns, i, j, ci, split, gl, gm, size, grp,
                                     beta, Jbeta, n_scans, logu, base)
        else:
            alloc = _allocate(rows, z, order, ns, i, j, ci, split, gl, gm, size, grp, beta,
                              Jbeta, logu, base)
        if alloc.rejected:
            continue
        dst = cj
        if split:
            prop = _split_proposal(cnt, gl, gm, size, ci, n_new, alloc.logq, Jbeta, beta, a0,
                                   code, lp_old, unbounded)
            lr = prop.log_ratio + log_ratio_error
            if not (lr >= 0.0 or np.random.random() < math.exp(lr)):  # noqa: NPY002
                continue
            dst = prop.target
        stats[0 if split else 1] += 1
        _move_group(rows, z, i, order, ns, grp, ci, dst, cnt, nlk, num, ckm, invden, beta, Jbeta)
        lp_old = _log_prior_nb(cnt, a0, code)
        if unbounded and cnt[K - 1] > 0:
            return p + 1
    return n_prop
