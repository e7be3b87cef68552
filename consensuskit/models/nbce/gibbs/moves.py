"""Moves of the NBCE sampler besides the sweep and split-merge: Gibbs moves of groups of
identical rows, label swaps and the slice-sampled hyper-parameters (argument names as
in :mod:`consensuskit.models.nbce.gibbs.split_merge`)."""

from __future__ import annotations

import math
from collections import namedtuple

import numba
import numpy as np

from consensuskit.models.nbce.gibbs.kernels import (
    _ENTRY,
    _HOT,
    _INNER,
    _label,
    _log_prior_nb,
    _loglik_nb,
    _move,
    _occupied,
    _sample_index,
    _tsb_swaps,
)

__all__ = ["identical_row_groups", "GroupStop"]

#: where a pass of group moves stopped for larger tables (untruncated TSB): the move's
#: index in the pass, the group, and the label drawn for it
GroupStop = namedtuple("GroupStop", ["move", "group", "label"])


# Log-gamma tables of a pass of group moves: row r holds log Γ(shift_r + n) by count n,
# filled as met (NaN until then).  The shifts are fixed during a pass: β, each distinct
# k_jβ (a column class), and the prior's α0 terms.
_ROW_BETA, _ROW_ONE, _ROW_A0, _ROW_ONE_A0, _ROW_FSD, _ROW_CLASS = 0, 1, 2, 3, 4, 5
_LGAMMA_TABLE = 1 << 16  # most entries per row
_LGAMMA_ENTRIES = 1 << 21  # most entries in all (16 MiB: many k_j classes at large N)


@numba.njit(**_HOT)
def _lgamma_at(table, shifts, r, n):
    """``log Γ(shifts[r] + n)`` for a count ``n`` (past the table's end: computed each
    time)."""
    if n >= table.shape[1]:
        return math.lgamma(shifts[r] + n)
    v = table[r, n]
    if v != v:
        v = math.lgamma(shifts[r] + n)
        table[r, n] = v
    return v


@numba.njit(**_INNER)
def _block_prior_deltas(cnt, a, code, out, unbounded, table, shifts):
    """``out[k] = log p(z with a more points in k) - log p(z)`` for every component k
    (``a`` an integer; log-gammas from ``table``, see :func:`_lgamma_at`).

    With ``unbounded`` (untruncated TSB, the last component empty) ``out[T-1]`` is the
    summed weight of all labels ``>= T-1``: each empty stick passed multiplies the
    weight by ``q_a = alpha0 / (alpha0 + a)``, so the tail is a geometric series.
    """
    K = cnt.shape[0]
    if code == 1:  # symmetric Dirichlet(α0 / K): log Γ(α0/K + n) in row _ROW_FSD
        empty = (_lgamma_at(table, shifts, _ROW_FSD, a)
                 - _lgamma_at(table, shifts, _ROW_FSD, 0))  # every empty component
        for k in range(K):
            if cnt[k] > 0:
                out[k] = (_lgamma_at(table, shifts, _ROW_FSD, cnt[k] + a)
                          - _lgamma_at(table, shifts, _ROW_FSD, cnt[k]))
            else:
                out[k] = empty
        return
    # TSB: adding a to k raises N_{>h} for h < k and N_k itself
    ge = 0
    for k in range(K):
        ge += cnt[k]
    acc = 0.0  # sum over h < k of the change of stick h's term
    # an empty component's two terms depend only on N_{>=k}, the same along a run of
    # empty components: computed once per run (most of a large table is empty)
    run_ge, run_own, run_acc = -1, 0.0, 0.0
    for k in range(K):
        nk = cnt[k]
        gt = ge - nk  # N_{>k}
        if k < K - 1 or unbounded:
            if nk == 0 and ge == run_ge:
                own, step = run_own, run_acc
            else:
                up = _lgamma_at(table, shifts, _ROW_ONE_A0, ge + a)
                at = _lgamma_at(table, shifts, _ROW_ONE_A0, ge)
                own = (_lgamma_at(table, shifts, _ROW_ONE, nk + a)
                       - _lgamma_at(table, shifts, _ROW_ONE, nk) - up + at)
                step = (_lgamma_at(table, shifts, _ROW_A0, gt + a)
                        - _lgamma_at(table, shifts, _ROW_A0, gt) - up + at)
                if nk == 0:
                    run_ge, run_own, run_acc = ge, own, step
            out[k] = acc + own
            acc += step
        else:
            out[k] = acc
        ge = gt
    if unbounded:
        a0 = shifts[_ROW_A0]
        out[K - 1] -= math.log1p(-a0 / (a0 + a))


@numba.njit(**_INNER)
def _copies_loglik(rows, r0, k, a, nlk, ckm, cls, table, shifts):
    """Log Dirichlet-multinomial likelihood of ``a`` copies of row ``r0`` joining
    component ``k``: the sum over observed columns of ``log Γ(β + N_kl + a) - log Γ(β +
    N_kl) - log Γ(k_jβ + N_kj + a) + log Γ(k_jβ + N_kj)``, each log-gamma from ``table``
    (:func:`_lgamma_at`; column ``m``'s ``k_jβ`` in row ``_ROW_CLASS + cls[m]``).  On a
    segmentation ensemble (M = 20, 57 clusters, 208 groups) a pass took 3.5 ms with the
    former rising products ``prod_t (β + N_kl + t) / (k_jβ + N_kj + t)`` for groups of up
    to 8 rows and four computed log-gammas above, 2.7 ms with the tables for all."""
    v = 0.0
    for m in range(rows[0].shape[1]):
        l = _label(rows, r0, m)
        if l >= 0:
            n = nlk[l, k]
            c = ckm[m, k]
            r = _ROW_CLASS + cls[m]
            v += (_lgamma_at(table, shifts, _ROW_BETA, n + a)
                  - _lgamma_at(table, shifts, _ROW_BETA, n)
                  - _lgamma_at(table, shifts, r, c + a) + _lgamma_at(table, shifts, r, c))
    return v


@numba.njit(**_ENTRY, nogil=True)
def _block_moves(rows, z, cnt, nlk, num, ckm, invden, beta, Jbeta, a0, code, bptr, brows,
                 start, n_moves, stats, unbounded):
    """Gibbs moves of whole groups of identical rows (same labels, same missing entries).

    Group ``g`` holds rows ``brows[bptr[g]:bptr[g+1]]``.  When all its ``a`` rows sit in
    one component, their common component is redrawn from ``p(k | z_-group, x)``
    restricted to "all together": the prior of adding ``a`` points to k
    (:func:`_block_prior_deltas`) times the Dirichlet-multinomial likelihood of ``a``
    copies of the row.  This is the Gibbs kernel of z given the rest and the event that
    the group is together, so it keeps the posterior invariant; when ``beta`` is small it
    moves groups that single-site moves cannot split.  ``n_moves`` groups are drawn
    at random (all of them, in order, when ``n_moves`` >= the number of groups), from
    move ``start`` on; ``stats[6]`` counts the moves that changed a group's component.

    Returns a :data:`GroupStop`, all -1 when done.  With ``unbounded`` (untruncated
    TSB) a group whose draw is a label ``>= T-1`` (the geometric tail of
    :func:`_block_prior_deltas`) stops the pass: its rows keep their old ``z`` but are
    out of the counts, and the move, group and label are returned for the caller to
    enlarge the tables, add the rows there and continue with the next move.
    """
    G = bptr.shape[0] - 1
    if G <= 0:
        return GroupStop(-1, -1, -1)
    K = cnt.shape[0]
    M = rows[0].shape[1]
    lw = np.empty(K)
    # columns with equal k_j beta share a class, and a row of the log-gamma table
    cls = np.empty(M, dtype=np.int64)
    shifts = np.empty(_ROW_CLASS + M)
    n_cls = 0
    for m in range(M):
        q = 0
        while q < n_cls and shifts[_ROW_CLASS + q] != Jbeta[m]:
            q += 1
        if q == n_cls:
            shifts[_ROW_CLASS + q] = Jbeta[m]
            n_cls += 1
        cls[m] = q
    shifts[_ROW_BETA], shifts[_ROW_ONE] = beta, 1.0
    shifts[_ROW_A0], shifts[_ROW_ONE_A0], shifts[_ROW_FSD] = a0, 1.0 + a0, a0 / K
    # counts up to the rows plus the largest group, at most _LGAMMA_TABLE entries a row
    # and _LGAMMA_ENTRIES in all (larger counts: computed each time)
    a_max = 0
    for g in range(G):
        a_max = max(a_max, bptr[g + 1] - bptr[g])
    n_rows = _ROW_CLASS + n_cls
    size = min(rows[0].shape[0] + a_max + 1, _LGAMMA_TABLE, _LGAMMA_ENTRIES // n_rows)
    table = np.full((n_rows, size), np.nan)
    for t in range(start, n_moves if n_moves < G else G):
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
            _move(brows[q], c, -1, rows, cnt, nlk, num, ckm, invden, beta, Jbeta)
        _block_prior_deltas(cnt, a, code, lw, unbounded, table, shifts)
        v_empty = 0.0  # the likelihood term is the same for every empty component
        for m in range(M):
            l = _label(rows, r0, m)
            if l >= 0:
                r = _ROW_CLASS + cls[m]
                v_empty += (_lgamma_at(table, shifts, _ROW_BETA, a)
                            - _lgamma_at(table, shifts, _ROW_BETA, 0)
                            - _lgamma_at(table, shifts, r, a) + _lgamma_at(table, shifts, r, 0))
        for k in range(K):
            if cnt[k] == 0:
                lw[k] += v_empty
            else:
                lw[k] += _copies_loglik(rows, r0, k, a, nlk, ckm, cls, table, shifts)
        mx = lw[0]
        for k in range(1, K):
            if lw[k] > mx:
                mx = lw[k]
        # FSD: every empty component has the same log weight; one exponential for all
        e_empty = -1.0
        for k in range(K):
            if code == 1 and cnt[k] == 0 and e_empty >= 0.0:
                lw[k] = e_empty
                continue
            lw[k] = math.exp(lw[k] - mx)
            if code == 1 and cnt[k] == 0:
                e_empty = lw[k]
        knew = _sample_index(lw, K)
        if knew != c:
            stats[6] += 1
        if unbounded and knew == K - 1:
            qa = a0 / (a0 + a)
            v = 1.0 - np.random.random()  # noqa: NPY002 - in (0, 1]
            return GroupStop(t, g, K - 1 + int(min(math.log(v) / math.log(qa), 1e12)))
        for q in range(bptr[g], bptr[g + 1]):
            z[brows[q]] = knew
            _move(brows[q], knew, 1, rows, cnt, nlk, num, ckm, invden, beta, Jbeta)
    return GroupStop(-1, -1, -1)


_ROW_HASH_WEIGHTS = np.random.default_rng(20261124).integers(
    1, 2**62, size=4096, dtype=np.int64) | 1  # odd multipliers of the row hash


def identical_row_groups(idx):
    """Groups of >= 2 identical rows of ``idx`` (N, M) as CSR arrays ``(ptr, rows)``.

    Groups are in the lexicographic order of their rows, and a group's rows ascend (the
    order of ``np.unique(idx, axis=0)``).  Rows are grouped by a 64-bit hash (one
    integer sort instead of a sort of whole rows: about 10x faster at 1e6 rows) and every
    row is checked against the one before it in its group (so against the group's first);
    a hash collision falls back to the exact grouping (:func:`_identical_row_groups_exact`).
    """
    idx = np.ascontiguousarray(idx)
    N, M = idx.shape
    if N < 2:
        return np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int64)
    if M > _ROW_HASH_WEIGHTS.size:
        return _identical_row_groups_exact(idx)
    # the hashes and the runs of equal hashes in compiled passes: the (N,) int64 and bool
    # temporaries of the vectorised version (about 40 B per row) were an NBCE fit's peak
    # at 1e7 rows (issue 27); what is held is the hashes and the sort order
    h = np.empty(N, dtype=np.int64)
    _row_hashes(idx, _ROW_HASH_WEIGHTS, h)
    order = np.argsort(h, kind="stable")
    none = np.zeros(0, dtype=np.int64)
    n_runs = _equal_hash_runs(h, order, none, none)  # count them, then fill them in
    if not n_runs:
        return np.zeros(1, dtype=np.int64), none
    starts = np.empty(n_runs, dtype=np.int64)
    counts = np.empty(n_runs, dtype=np.int64)
    _equal_hash_runs(h, order, starts, counts)
    del h
    # every row of a run equal to the run's first (a hash collision: the exact grouping)
    if not _runs_identical(idx, order, starts, counts):
        return _identical_row_groups_exact(idx)
    reps = idx[order[starts]]
    keep = np.lexsort(reps.T[::-1])  # column 0 most significant, as np.unique
    lens = counts[keep]
    ptr = np.concatenate([[0], np.cumsum(lens)])
    pos = np.repeat(starts[keep] - ptr[:-1], lens) + np.arange(ptr[-1])
    return ptr.astype(np.int64), order[pos].astype(np.int64)


@numba.njit(**_ENTRY)
def _row_hashes(idx, weights, h):
    """``h[i] = sum_j idx[i, j] * weights[j]`` in int64, wrapping modulo 2^64."""
    N, M = idx.shape
    for i in range(N):
        acc = np.int64(0)
        for j in range(M):
            acc += np.int64(idx[i, j]) * weights[j]
        h[i] = acc


@numba.njit(**_ENTRY)
def _equal_hash_runs(h, order, starts, counts):
    """The runs of >= 2 equal hashes in the order ``order``: returns how many there are,
    and writes each one's start (a position in ``order``) and length to ``starts`` and
    ``counts`` when they have room for all of them (empty arrays: count only)."""
    fill = starts.shape[0] > 0
    r = 0
    first = 0
    N = order.shape[0]
    for t in range(1, N + 1):
        if t < N and h[order[t]] == h[order[first]]:
            continue
        if t - first >= 2:
            if fill:
                starts[r] = first
                counts[r] = t - first
            r += 1
        first = t
    return r


@numba.njit(**_ENTRY)
def _runs_identical(idx, order, starts, counts):
    """Whether every row of each run equals the run's first row."""
    M = idx.shape[1]
    for r in range(starts.shape[0]):
        a = order[starts[r]]
        for t in range(starts[r] + 1, starts[r] + counts[r]):
            b = order[t]
            for j in range(M):
                if idx[b, j] != idx[a, j]:
                    return False
    return True


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
def _hyper_logpdf(which, x, cnt, occ, nlk, ckm, n_labels, code, shape, rate):
    """Log conditional density of alpha0 (which=0) or beta (1) at ``x`` (Gamma prior);
    ``occ``: the occupied components (:func:`_occupied`)."""
    if not (x > 0.0) or not math.isfinite(x):
        return -math.inf
    if which == 0:
        v = _log_prior_nb(cnt, x, code)
    else:
        v = _loglik_nb(occ, nlk, ckm, n_labels, x)
    return v + (shape - 1.0) * math.log(x) - rate * x


@numba.njit(**_INNER)
def _slice_log_nb(which, x0, cnt, occ, nlk, ckm, n_labels, code, shape, rate, width,
                  max_steps):
    """One slice-sampling update (Neal 2003: stepping out by at most ``max_steps``
    intervals, split at random between the two sides, then shrinkage) of ``log x``.

    Returns ``(x, failed)``; ``failed`` is 1 when 200 shrinkage steps found no point
    (the old value is kept: counted by the caller, never silent).
    """
    u0 = math.log(x0)
    gy = _hyper_logpdf(which, x0, cnt, occ, nlk, ckm, n_labels, code, shape, rate) + u0
    gy += math.log(1.0 - np.random.random())  # noqa: NPY002 - in (0, 1]
    lo = u0 - width * np.random.random()  # noqa: NPY002
    hi = lo + width
    nl = int(max_steps * np.random.random())  # noqa: NPY002
    nh = max_steps - 1 - nl
    while nl > 0 and _hyper_logpdf(which, math.exp(lo), cnt, occ, nlk, ckm, n_labels, code, shape,
                                   rate) + lo > gy:
        lo -= width
        nl -= 1
    while nh > 0 and _hyper_logpdf(which, math.exp(hi), cnt, occ, nlk, ckm, n_labels, code, shape,
                                   rate) + hi > gy:
        hi += width
        nh -= 1
    for _ in range(200):
        u = lo + (hi - lo) * np.random.random()  # noqa: NPY002
        if _hyper_logpdf(which, math.exp(u), cnt, occ, nlk, ckm, n_labels, code, shape,
                         rate) + u > gy:
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
def _label_swaps(z, cnt, nlk, num, ckm, invden, a0, start, unbounded):
    """TSB's adjacent label swaps from pair ``start`` on (:func:`_tsb_swaps`), then ``z``
    relabelled in place; returns where the pass stopped for a larger table, or -1."""
    perm = np.arange(cnt.shape[0])
    stop = _tsb_swaps(cnt, nlk, num, ckm, invden, a0, perm, start, unbounded)
    for n in range(z.shape[0]):
        z[n] = perm[z[n]]
    return stop


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
    occ = _occupied(cnt)  # z is fixed during both updates
    a0, f0 = _slice_log_nb(np.int64(0), hyp[0], cnt, occ, nlk, ckm, n_labels, code,
                           hyper_prior[0], hyper_prior[1], 1.0, np.int64(50))
    beta, f1 = _slice_log_nb(np.int64(1), hyp[1], cnt, occ, nlk, ckm, n_labels, code,
                             hyper_prior[2], hyper_prior[3], 1.0, np.int64(50))
    stats[5] += f0 + f1
    hyp[0], hyp[1] = a0, beta
    _refresh_tables(nlk, ckm, num, invden, Jbeta, inv1a, n_labels, a0, beta)
