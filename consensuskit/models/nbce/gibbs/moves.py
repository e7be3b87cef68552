"""Group moves of the NBCE sampler: split-merge Metropolis-Hastings, Gibbs moves of
groups of identical rows, label swaps and the slice-sampled hyper-parameters."""

from __future__ import annotations

import math

import numba
import numpy as np

from consensuskit.models.nbce.gibbs.kernels import (
    _ENTRY,
    _INNER,
    _add_row,
    _group_loglik,
    _group_ratio,
    _log_prior_nb,
    _log_two,
    _loglik_nb,
    _move,
    _sample_index,
    _tsb_swaps,
)

__all__ = ["identical_row_groups"]


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
