"""Compiled kernels of :mod:`consensuskit.posterior` (numba, ``cache=True``, ``nogil=True``).

Conventions shared by every kernel here (stated once):

* ``lab`` is the (N, S) array of posterior draws, **item-major** (row ``i`` holds the label of
  item ``i`` in each of the S draws), each draw relabelled to ``0 .. L_s - 1``; uint16 or int32
  (unsigned indices spare numba's negative-index checks in the inner loops).
  Item-major order makes the S labels of one item contiguous, which is what the search reads
  when it moves an item.
* A partition's loss against a draw depends on the draw only through the contingency table
  ``n_{kl}`` (items in estimate cluster ``k`` and draw cluster ``l``) and its margins, through
  sums of one function ``f`` of the counts: ``E = sum_k f(n_k.)`` (the estimate),
  ``D_s = sum_l f(n_.l)`` (draw ``s``) and ``T_s = sum_kl f(n_kl)`` (their join).
  ``ftab[c] = f(c)`` is tabulated for ``c = 0 .. N + 1`` and ``fd[c] = f(c + 1) - f(c)``:
  ``f(c) = c log2 c`` for VI and NVI, ``c^2`` for Binder and ``c (c - 1)`` for omARI.
* ``code`` selects the loss: 0 VI, 1 Binder, 2 NVI, 3 omARI (see :func:`draw_loss`).
  VI and Binder are linear in (E, D_s, T_s), so the change of the expected loss when an item
  joins cluster ``k`` is ``(2 - a) S fd[n_k] - 2 sum_s fd[n_{k, l_s(i)}]`` up to terms that do
  not depend on ``k`` (Dahl, Johnson & Mueller 2022, JCGS, section 4): O(S) per candidate
  cluster.  NVI and omARI are not linear; their change is the sum over draws of the per-draw
  loss after the move, which is still O(S) per candidate because each per-draw loss is a
  function of the three sums and only ``T_s`` moves with ``k``.
* Search state of one run: ``z`` (N,) estimate labels (-1 = not allocated), ``size`` (Kcap,),
  ``cm`` (S, Lmax, Kcap) int32 counts ``n_{kl}`` per draw (laid out so that the candidate
  clusters of one item are contiguous), ``dm`` (S, Lmax) draw margins over the allocated items,
  ``T`` (S,), ``D`` (S,), and ``st`` (float64 [E, n_allocated]).  Occupied labels are kept in
  ``occ[:nocc]`` with ``pos[label]`` their index, so emptying a cluster costs O(1) (no
  relabelling pass); an empty label's ``cm`` column is all zero.
"""

# numba kernels draw from numba's per-thread legacy np.random state (seeded per run in
# salso_run); numba does not compile np.random.Generator methods used here.
# ruff: noqa: NPY002

from __future__ import annotations

import numpy as np
from numba import njit

VI, BINDER, NVI, OMARI = 0, 1, 2, 3

_JIT = dict(cache=True, nogil=True)


@njit(**_JIT)
def draw_loss(code, a, E, D, T, n):
    """Loss of the estimate against one draw from the sums E, D, T over ``n`` items.

    VI(a):     ((2 - a) E + a D - 2 T) / n                (f = c log2 c; a = 1: the VI in bits)
    Binder(a): ((2 - a) E + a D - 2 T) / n^2              (f = c^2, ordered pairs; a = 1:
               the share of ordered pairs on which the two partitions disagree)
    NVI:       (E + D - 2 T) / (n log2 n - T)             (VI over the joint entropy; 0 when both
               partitions are the one-cluster partition)
    omARI:     1 - ARI, ARI = (T - E D / Q) / ((E + D) / 2 - E D / Q), Q = n (n - 1)
               (f = c (c - 1)); 0 when the denominator vanishes, which happens only when both
               partitions are the same trivial partition.
    """
    if n <= 0:
        return 0.0
    if code == VI:
        return ((2.0 - a) * E + a * D - 2.0 * T) / n
    if code == BINDER:
        return ((2.0 - a) * E + a * D - 2.0 * T) / (n * n)
    if code == NVI:
        den = n * np.log2(n) - T
        if den <= 1e-12 * (1.0 + abs(T)):
            return 0.0
        return (E + D - 2.0 * T) / den
    q = n * (n - 1.0)
    if q <= 0.0:
        return 0.0
    off = E * D / q
    den = 0.5 * (E + D) - off
    if den <= 1e-12 * (1.0 + q):
        return 0.0
    return 1.0 - (T - off) / den


@njit(**_JIT)
def relabel_rows(draws, out, k):
    """Relabel each row of ``draws`` (S, N) non-negative ints < ``bound`` to 0..k_s-1 in order
    of first appearance, writing the item-major ``out`` (N, S) and ``k`` (S,)."""
    S, N = draws.shape
    bound = 0
    for s in range(S):
        for i in range(N):
            if draws[s, i] + 1 > bound:
                bound = draws[s, i] + 1
    mp = np.full(bound, -1, dtype=np.int64)
    for s in range(S):
        c = 0
        for i in range(N):
            v = draws[s, i]
            if mp[v] < 0:
                mp[v] = c
                c += 1
            out[i, s] = mp[v]
        k[s] = c
        for i in range(N):
            mp[draws[s, i]] = -1


@njit(**_JIT)
def table_sums(z, K, lab, L, ftab, ksum, dsum, tsum, item_mates):
    """Contingency sums of the partition ``z`` (N,) with labels 0..K-1 against every draw.

    Writes ``ksum[0] = E``, ``dsum[s] = D_s``, ``tsum[s] = T_s`` for ``f = ftab`` and, per item,
    ``item_mates[i] = sum_s n_{z_i, l_s(i)}`` (how many of its estimate-cluster mates, itself
    included, share its cluster in each draw, summed over draws).  ``lab`` (N, S); ``L`` the
    largest number of clusters of a draw.  Memory O(S L K) for the counts; time O(N S + S L K).
    """
    N, S = lab.shape
    cnt = np.zeros((S, L, K), dtype=np.int32)
    sz = np.zeros(K, dtype=np.int64)
    for i in range(N):
        k = z[i]
        sz[k] += 1
        for s in range(S):
            cnt[s, lab[i, s], k] += 1
    e = 0.0
    for k in range(K):
        e += ftab[sz[k]]
    ksum[0] = e
    for s in range(S):
        d = 0.0
        t = 0.0
        for l in range(L):
            m = 0
            for k in range(K):
                c = cnt[s, l, k]
                m += c
                t += ftab[c]
            d += ftab[m]
        dsum[s] = d
        tsum[s] = t
    for i in range(N):
        k = z[i]
        acc = 0
        for s in range(S):
            acc += cnt[s, lab[i, s], k]
        item_mates[i] = acc


@njit(**_JIT)
def psm_block(lab, rows, cols, out):
    """``out[r, c]`` = share of draws in which items ``rows[r]`` and ``cols[c]`` share a cluster."""
    S = lab.shape[1]
    for r in range(rows.shape[0]):
        i = rows[r]
        for c in range(cols.shape[0]):
            j = cols[c]
            acc = 0
            for s in range(S):
                if lab[i, s] == lab[j, s]:
                    acc += 1
            out[r, c] = acc / S


@njit(**_JIT)
def psm_pairs(lab, ii, jj, out):
    """``out[p]`` = share of draws in which items ``ii[p]`` and ``jj[p]`` share a cluster."""
    S = lab.shape[1]
    for p in range(ii.shape[0]):
        i = ii[p]
        j = jj[p]
        acc = 0
        for s in range(S):
            if lab[i, s] == lab[j, s]:
                acc += 1
        out[p] = acc / S


@njit(**_JIT)
def draw_sums(lab, L, ftab, out):
    """``out[s] = sum_l f(m_l)`` over the clusters of draw ``s`` (the draw's own sum D_s)."""
    N, S = lab.shape
    cnt = np.zeros((S, L), dtype=np.int64)
    for i in range(N):
        for s in range(S):
            cnt[s, lab[i, s]] += 1
    for s in range(S):
        acc = 0.0
        for l in range(L):
            acc += ftab[cnt[s, l]]
        out[s] = acc


# ----------------------------------------------------------------------------------------
# SALSO search state and moves
# ----------------------------------------------------------------------------------------


@njit(**_JIT)
def _add(i, k, lab, z, size, cm, dm, T, D, st, ftab, fd, occ, pos, nocc):
    """Allocate item ``i`` to cluster label ``k``; returns the new number of occupied clusters.
    The draw margins ``dm``/``D`` are tracked only when ``dm`` has rows (NVI, omARI: VI and
    Binder decisions do not depend on them)."""
    S = lab.shape[1]
    track = dm.shape[0] > 0
    if size[k] == 0:
        pos[k] = nocc
        occ[nocc] = k
        nocc += 1
    st[0] += fd[size[k]]
    size[k] += 1
    st[1] += 1.0
    for s in range(S):
        l = lab[i, s]
        T[s] += fd[cm[s, l, k]]
        cm[s, l, k] += 1
        if track:
            D[s] += fd[dm[s, l]]
            dm[s, l] += 1
    z[i] = k
    return nocc


@njit(**_JIT)
def _remove(i, lab, z, size, cm, dm, T, D, st, ftab, fd, occ, pos, nocc):
    """Un-allocate item ``i``; returns the new number of occupied clusters."""
    S = lab.shape[1]
    track = dm.shape[0] > 0
    k = z[i]
    size[k] -= 1
    st[0] -= fd[size[k]]
    st[1] -= 1.0
    for s in range(S):
        l = lab[i, s]
        cm[s, l, k] -= 1
        T[s] -= fd[cm[s, l, k]]
        if track:
            dm[s, l] -= 1
            D[s] -= fd[dm[s, l]]
    z[i] = -1
    if size[k] == 0:
        p = pos[k]
        last = occ[nocc - 1]
        occ[p] = last
        pos[last] = p
        pos[k] = -1
        nocc -= 1
    return nocc


@njit(**_JIT)
def _free_label(size, Kcap):
    for k in range(Kcap):
        if size[k] == 0:
            return k
    return -1


@njit(**_JIT)
def _draw_sum(i, k, off, lab, cm, fd, fdo, binder):
    """``sum_s fd[n_{k, l_s(i)} - off]`` (off = 1: the item's own cluster, itself left out):
    for Binder (f = c^2, fd[c] = 2c + 1) as an integer sum of the counts, otherwise by look-ups
    in ``fd`` or, for off = 1, in ``fdo`` (``fdo[c] = fd[c - 1]``, so no index is negative)."""
    S = lab.shape[1]
    if binder:
        acc = 0
        for s in range(S):
            acc += cm[s, lab[i, s], k]
        return 2.0 * (acc - off * S) + S
    tab = fdo if off else fd
    accf = 0.0
    for s in range(S):
        accf += tab[cm[s, lab[i, s], k]]
    return accf


@njit(**_JIT)
def _scores(i, code, a, lab, size, cm, dm, T, D, st, fd, cand, nc, out, tmpE):
    """Score (lower is better) of putting the unallocated item ``i`` in each candidate label
    ``cand[:nc]``: for VI/Binder the k-dependent part of the change of S x the expected loss,
    for NVI/omARI the sum over draws of the per-draw loss after the move."""
    S = lab.shape[1]
    for c in range(nc):
        out[c] = 0.0
    if code == VI or code == BINDER:
        for c in range(nc):
            k = cand[c]
            if size[k] > 0:  # an empty cluster's counts are all zero
                acc = _draw_sum(i, k, 0, lab, cm, fd, fd, code == BINDER)
            else:
                acc = S * fd[0]
            out[c] = (2.0 - a) * S * fd[size[k]] - 2.0 * acc
        return
    n1 = st[1] + 1.0
    for c in range(nc):
        tmpE[c] = st[0] + fd[size[cand[c]]]
    for s in range(S):
        l = lab[i, s]
        d1 = D[s] + fd[dm[s, l]]
        for c in range(nc):
            out[c] += draw_loss(code, a, tmpE[c], d1, T[s] + fd[cm[s, l, cand[c]]], n1)


@njit(**_JIT)
def _candidates(size, occ, nocc, maxk, cand):
    nc = 0
    for p in range(nocc):
        cand[nc] = occ[p]
        nc += 1
    if nocc < maxk:
        f = _free_label(size, maxk)
        if f >= 0:
            cand[nc] = f
            nc += 1
    return nc


@njit(**_JIT)
def _allocation_scan(items, code, a, maxk, lab, z, size, cm, dm, T, D, st, ftab, fd, occ, pos,
                     nocc, cand, sc, tmpE):
    """Sequential allocation: each of ``items`` (unallocated) in turn joins the candidate
    cluster (occupied, or a new one while fewer than ``maxk``) that minimises the loss of the
    partial partition.  Returns the number of occupied clusters."""
    for t in range(items.shape[0]):
        i = items[t]
        nc = _candidates(size, occ, nocc, maxk, cand)
        _scores(i, code, a, lab, size, cm, dm, T, D, st, fd, cand, nc, sc, tmpE)
        best = 0
        for c in range(1, nc):
            if sc[c] < sc[best]:
                best = c
        nocc = _add(i, cand[best], lab, z, size, cm, dm, T, D, st, ftab, fd, occ, pos, nocc)
    return nocc


@njit(**_JIT)
def _sweeten(perm, max_scans, scans, code, a, maxk, lab, z, size, cm, dm, T, D, st, ftab, fd,
             occ, pos, nocc, cand, sc, tmpE):
    """Sweetening scans: in a fresh random order each scan, remove each item and put it back in
    its best cluster (staying put on ties), until a scan moves nothing or ``scans[0]`` reaches
    ``max_scans``.  Returns the number of occupied clusters."""
    N = perm.shape[0]
    changed = True
    while changed and scans[0] < max_scans:
        scans[0] += 1
        changed = False
        np.random.shuffle(perm)
        for t in range(N):
            i = perm[t]
            k0 = z[i]
            nocc = _remove(i, lab, z, size, cm, dm, T, D, st, ftab, fd, occ, pos, nocc)
            nc = _candidates(size, occ, nocc, maxk, cand)
            _scores(i, code, a, lab, size, cm, dm, T, D, st, fd, cand, nc, sc, tmpE)
            best = 0
            c0 = -1
            for c in range(nc):
                if sc[c] < sc[best]:
                    best = c
                if cand[c] == k0:
                    c0 = c
            if c0 < 0:  # i was a singleton: its old cluster is the new-cluster candidate
                for c in range(nc):
                    if size[cand[c]] == 0:
                        c0 = c
            if c0 >= 0 and sc[c0] <= sc[best] + 1e-10 * (1.0 + abs(sc[best])):
                best = c0
            else:
                changed = True
            nocc = _add(i, cand[best], lab, z, size, cm, dm, T, D, st, ftab, fd, occ, pos, nocc)
    return nocc


@njit(**_JIT)
def _sweeten_linear(perm, max_scans, scans, a, maxk, lab, z, size, cm, dm, T, D, st, ftab, fd,
                    fdo, occ, pos, nocc, cand, sc, binder):
    """Sweetening scans for VI and Binder: the item's move is scored in place (its own counts
    less one for its current cluster, as in salso), and the tables are updated only when it
    moves.  Same decisions as :func:`_sweeten`."""
    N, S = lab.shape
    changed = True
    while changed and scans[0] < max_scans:
        scans[0] += 1
        changed = False
        np.random.shuffle(perm)
        for t in range(N):
            i = perm[t]
            k0 = z[i]
            nc = 0
            for p in range(nocc):
                cand[nc] = occ[p]
                nc += 1
            if nocc < maxk and size[k0] > 1:
                cand[nc] = _free_label(size, maxk)
                nc += 1
            for c in range(nc):
                k = cand[c]
                if size[k] == 0:  # the new-cluster candidate: all counts zero
                    sc[c] = S * fd[0]
                else:
                    sc[c] = _draw_sum(i, k, 1 if k == k0 else 0, lab, cm, fd, fdo, binder)
            best = -1
            c0 = -1
            for c in range(nc):
                if cand[c] == k0:
                    c0 = c
                    sc[c] = (2.0 - a) * S * fd[size[k0] - 1] - 2.0 * sc[c]
                else:
                    sc[c] = (2.0 - a) * S * fd[size[cand[c]]] - 2.0 * sc[c]
                if best < 0 or sc[c] < sc[best]:
                    best = c
            if sc[c0] <= sc[best] + 1e-10 * (1.0 + abs(sc[best])):
                continue
            changed = True
            nocc = _remove(i, lab, z, size, cm, dm, T, D, st, ftab, fd, occ, pos, nocc)
            nocc = _add(i, cand[best], lab, z, size, cm, dm, T, D, st, ftab, fd, occ, pos, nocc)
    return nocc


@njit(**_JIT)
def _sweeten_any(perm, max_scans, scans, code, a, maxk, lab, z, size, cm, dm, T, D, st, ftab,
                 fd, fdo, occ, pos, nocc, cand, sc, tmpE):
    if code == VI or code == BINDER:
        return _sweeten_linear(perm, max_scans, scans, a, maxk, lab, z, size, cm, dm, T, D, st,
                               ftab, fd, fdo, occ, pos, nocc, cand, sc, code == BINDER)
    return _sweeten(perm, max_scans, scans, code, a, maxk, lab, z, size, cm, dm, T, D, st, ftab,
                    fd, occ, pos, nocc, cand, sc, tmpE)


@njit(**_JIT)
def _state_loss(code, a, T, D, st, Dfull):
    """Expected loss of the current (complete) partition; ``Dfull`` (S,) are the draws' own
    sums, used for VI and Binder whose search does not track the margins."""
    S = T.shape[0]
    acc = 0.0
    for s in range(S):
        d = D[s] if code >= NVI else Dfull[s]
        acc += draw_loss(code, a, st[0], d, T[s], st[1])
    return acc / S


@njit(**_JIT)
def _rebuild(zsrc, lab, z, size, cm, dm, T, D, st, ftab, fd, occ, pos):
    """Reset the state to the complete partition ``zsrc``; returns the number of clusters."""
    N, S = lab.shape
    cm[:] = 0
    dm[:] = 0
    size[:] = 0
    T[:] = 0.0
    D[:] = 0.0
    st[:] = 0.0
    pos[:] = -1
    z[:] = -1
    nocc = 0
    for i in range(N):
        nocc = _add(i, zsrc[i], lab, z, size, cm, dm, T, D, st, ftab, fd, occ, pos, nocc)
    return nocc


@njit(**_JIT)
def salso_run(lab, L, code, a, ftab, fdo, Dfull, maxk, max_scans, max_zealous, prob_sequential,
              sweeten, seed, cm, z_out, info):
    """One SALSO run (Dahl, Johnson & Mueller 2022): initial partition by sequential allocation
    in a random order (probability ``prob_sequential``) or uniformly random labels in
    0..maxk-1; sweetening scans (if ``sweeten``); then up to ``max_zealous`` zealous updates:
    a cluster of two or more items is destroyed, its items re-allocated sequentially in a random
    order and the whole partition sweetened again; the change is kept only if the expected loss
    decreased.  Writes the partition to ``z_out`` (N,) and
    ``info = [expected loss, scans, zealous accepts, zealous attempts, sequential?]``.
    ``cm`` is the caller's (S, Lmax, maxk) count buffer (uint16 or uint32); ``Dfull`` (S,) the
    draws' own sums ``sum_l f(m_l)`` (see :func:`draw_sums`).
    Memory O(S Lmax maxk) for the tables; each scan costs O(N S K)."""
    np.random.seed(seed)
    N, S = lab.shape
    fd = fdo[1:]  # f(c + 1) - f(c): the same buffer (see losses.f_table)
    # the partition is built in the caller's buffer, and the random start's labels and the
    # zealous updates' saved partition share one more: each parallel run holds three (N,)
    # int32 arrays with the scan order (issue 27)
    z = z_out
    z[:] = -1
    spare = np.empty(N, dtype=np.int32)
    size = np.zeros(maxk, dtype=np.int64)
    cm[:] = 0  # (S, L, maxk) counts, uint16 when N < 65535 (half the cache footprint)
    dm = np.zeros((S if code >= NVI else 0, L), dtype=np.int32)
    T = np.zeros(S)
    D = np.zeros(S)
    st = np.zeros(2)
    occ = np.zeros(maxk, dtype=np.int64)
    pos = np.full(maxk, -1, dtype=np.int64)
    cand = np.zeros(maxk + 1, dtype=np.int64)
    sc = np.zeros(maxk + 1)
    tmpE = np.zeros(maxk + 1)
    scans = np.zeros(1, dtype=np.int64)
    # the scan order and a random start as int32, drawn element by element: the same
    # numbers as np.random.permutation(N) and randint(0, maxk, N) without their (N,) int64
    # arrays (each parallel run holds these: issue 27)
    perm = np.arange(N, dtype=np.int32)
    np.random.shuffle(perm)
    nocc = 0
    sequential = np.random.random() < prob_sequential
    if sequential:
        nocc = _allocation_scan(perm, code, a, maxk, lab, z, size, cm, dm, T, D, st, ftab, fd,
                                occ, pos, nocc, cand, sc, tmpE)
    else:
        for i in range(N):
            spare[i] = np.random.randint(0, maxk)
        nocc = _rebuild(spare, lab, z, size, cm, dm, T, D, st, ftab, fd, occ, pos)
    if sweeten:
        nocc = _sweeten_any(perm, max_scans, scans, code, a, maxk, lab, z, size, cm, dm, T, D,
                            st, ftab, fd, fdo, occ, pos, nocc, cand, sc, tmpE)
    loss = _state_loss(code, a, T, D, st, Dfull)
    accepts = 0
    attempts = 0
    order = occ[:nocc].copy()
    np.random.shuffle(order)
    saved = spare
    for t in range(order.shape[0]):
        k = order[t]
        if size[k] <= 1:
            continue
        if attempts >= max_zealous:
            break
        attempts += 1
        saved[:] = z
        items = np.empty(size[k], dtype=np.int32)
        m = 0
        for i in range(N):
            if z[i] == k:
                items[m] = i
                m += 1
        for t2 in range(m):
            nocc = _remove(items[t2], lab, z, size, cm, dm, T, D, st, ftab, fd, occ, pos, nocc)
        np.random.shuffle(items)
        nocc = _allocation_scan(items, code, a, maxk, lab, z, size, cm, dm, T, D, st, ftab, fd,
                                occ, pos, nocc, cand, sc, tmpE)
        k1 = z[items[0]]
        if size[k1] == m:
            same = True
            for t2 in range(m):
                if z[items[t2]] != k1:
                    same = False
                    break
            if same:  # the cluster came back whole: the partition did not change
                continue
        if sweeten:
            nocc = _sweeten_any(perm, max_scans, scans, code, a, maxk, lab, z, size, cm, dm, T,
                                D, st, ftab, fd, fdo, occ, pos, nocc, cand, sc, tmpE)
        new_loss = _state_loss(code, a, T, D, st, Dfull)
        if new_loss < loss - 1e-12 * (1.0 + abs(loss)):
            loss = new_loss
            accepts += 1
        else:  # undo: move every item whose label changed back to its saved label
            for i in range(N):
                if z[i] != saved[i]:
                    nocc = _remove(i, lab, z, size, cm, dm, T, D, st, ftab, fd, occ, pos, nocc)
                    nocc = _add(i, saved[i], lab, z, size, cm, dm, T, D, st, ftab, fd, occ, pos,
                                nocc)
    # final loss recomputed from the counts (no drift from the incremental sums), O(S L K)
    e = 0.0
    for p in range(nocc):
        e += ftab[size[occ[p]]]
    acc = 0.0
    for s in range(S):
        t = 0.0
        d = 0.0
        for l in range(L):
            for p in range(nocc):
                t += ftab[cm[s, l, occ[p]]]
            if code >= NVI:
                d += ftab[dm[s, l]]
        acc += draw_loss(code, a, e, d if code >= NVI else Dfull[s], t, float(N))
    info[0] = acc / S
    info[1] = scans[0]
    info[2] = accepts
    info[3] = attempts
    info[4] = 1.0 if sequential else 0.0
