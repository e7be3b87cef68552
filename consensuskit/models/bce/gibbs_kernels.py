"""Numba kernels of BCE's collapsed Gibbs sampler (:mod:`consensuskit.models.bce.collapsed_gibbs`).

BCE is latent Dirichlet allocation with the rows as documents and each base clustering
as its own vocabulary.  With ``theta_i`` and ``beta`` integrated out (``beta_jh ~
Dirichlet(eta)``, symmetric), the conditional of one assignment given all others is
(Griffiths & Steyvers 2004)::

    p(z_ij = h | z_-ij, x) ∝ (alpha_h + n_ih^-) (c_{x_ij, h}^- + eta) / (c_jh^- + k_j eta)

``n_ih`` counts row ``i``'s labels assigned to ``h``; ``c_{r,h}`` the labels ``r`` (a
global label index ``offsets[j] + r``) assigned to ``h``; ``c_jh`` all labels of column
``j`` assigned to ``h``; ``-`` means without ``z_ij`` itself.

Arrays (counts updated in place; any signed integer type that holds their values, so
that a fit at 1e7 rows keeps the labels, assignments and row counts in int8 where K and M
allow):

===========  ========  ===================================================
``codes``    (N, M)    label code ``r`` within column ``j``, -1 where missing
                       (:attr:`consensuskit.data.ensemble.Ensemble.codes`, read in place)
``offsets``  (M + 1,)  start of column ``j``'s labels: global label ``offsets[j] + r``
``z``        (N, M)    assignments, -1 where missing
``nrow``     (N, K)    ``n_ih``
``clab``     (L, K)    ``c_{r,h}`` (int32)
``ccol``     (M, K)    ``c_jh`` (int32)
===========  ========  ===================================================

Every kernel seeds numba's generator from its ``seed`` argument, so a call is a
deterministic function of its inputs (callers draw the seed from their own
``RandomState``: fits are reproducible and exactly resumable).
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["initial_assignments", "sweep", "feature_sweep", "add_rows", "count_histogram",
           "minka_alpha_tails", "digamma", "trigamma", "eta_gradients",
           "minka_eta_newton"]


@njit(cache=True)
def draw_cumulative(p, tot):
    """An index ``h`` drawn with probability proportional to the increments of the
    cumulative weights ``p`` (K,) whose last entry is ``tot`` (numba's generator)."""
    u = np.random.random() * tot  # noqa: NPY002 - numba RNG, seeded by the caller
    h = 0
    while h < p.shape[0] - 1 and p[h] <= u:
        h += 1
    return h


@njit(cache=True)
def initial_assignments(codes, offsets, log_beta, mix, seed, z, nrow, clab, ccol):
    """Draw a first ``z``: ``z_ij ∝ beta0(x_ij, h) q_ih``, ``q_i`` the row's mixture posterior.

    ``q_ih ∝ prod_j beta0(x_ij, h)`` (uniform weights), mixed with the uniform
    distribution in proportion ``mix`` so that rows start with some spread.  ``log_beta``
    (L, K) the initial label distributions (``log beta0``).  Fills ``z``, ``nrow``,
    ``clab``, ``ccol`` (zeroed first).
    """
    np.random.seed(seed)  # noqa: NPY002 - numba's own generator, seeded per call
    N, M = codes.shape
    K = log_beta.shape[1]
    nrow[:] = 0
    clab[:] = 0
    ccol[:] = 0
    q = np.empty(K)
    p = np.empty(K)
    for i in range(N):
        for h in range(K):
            q[h] = 0.0
        for j in range(M):
            x = codes[i, j]
            if x >= 0:
                x += offsets[j]
                for h in range(K):
                    q[h] += log_beta[x, h]
        top = q.max()
        tot = 0.0
        for h in range(K):
            q[h] = np.exp(q[h] - top)
            tot += q[h]
        for h in range(K):
            q[h] = (1.0 - mix) * q[h] / tot + mix / K
        for j in range(M):
            x = codes[i, j]
            if x < 0:
                z[i, j] = -1
                continue
            x += offsets[j]
            tot = 0.0
            for h in range(K):
                tot += q[h] * np.exp(log_beta[x, h])
                p[h] = tot
            h = draw_cumulative(p, tot)
            z[i, j] = h
            nrow[i, h] += 1
            clab[x, h] += 1
            ccol[j, h] += 1


@njit(cache=True)
def sweep(codes, offsets, z, nrow, clab, ccol, alpha, eta, n_labels, seed):
    """One systematic-scan sweep of the collapsed conditionals (module docstring).

    ``alpha`` (K,), ``eta`` float, ``n_labels`` (M,) float64 (``k_j``).  Updates the
    state in place.
    """
    np.random.seed(seed)  # noqa: NPY002 - numba's own generator, seeded per call
    N, M = codes.shape
    K = alpha.shape[0]
    p = np.empty(K)
    inv = np.empty((M, K))  # 1 / (c_jh + k_j eta), kept current as counts move
    for j in range(M):
        for h in range(K):
            inv[j, h] = 1.0 / (ccol[j, h] + n_labels[j] * eta)
    for i in range(N):
        for j in range(M):
            x = codes[i, j]
            if x < 0:
                continue
            x += offsets[j]
            h = z[i, j]
            nrow[i, h] -= 1
            clab[x, h] -= 1
            ccol[j, h] -= 1
            inv[j, h] = 1.0 / (ccol[j, h] + n_labels[j] * eta)
            tot = 0.0
            for k in range(K):
                tot += (alpha[k] + nrow[i, k]) * (clab[x, k] + eta) * inv[j, k]
                p[k] = tot
            h = draw_cumulative(p, tot)
            z[i, j] = h
            nrow[i, h] += 1
            clab[x, h] += 1
            ccol[j, h] += 1
            inv[j, h] = 1.0 / (ccol[j, h] + n_labels[j] * eta)


@njit(cache=True)
def count_histogram(nrow, max_count, hist):
    """``hist[h, c] +=`` the number of rows with ``n_ih = c`` (``hist`` (K, max_count + 1))."""
    N, K = nrow.shape
    for i in range(N):
        for h in range(K):
            hist[h, nrow[i, h]] += 1


@njit(cache=True)
def feature_sweep(values, observed, zf, nrow, mu, sigma2, alpha, seed):
    """One sweep over GBCE's feature assignments ``z_if`` (the labels' are :func:`sweep`).

    ``p(z_if = h | rest) ∝ (alpha_h + n_ih^-) Normal(o_if | mu_hf, sigma2_hf)`` with the
    Gaussians held at their current point estimates.  ``values`` (N, D) float64,
    ``observed`` (N, D) bool, ``zf`` (N, D) int32 (-1 where not observed), ``nrow``
    (N, K) counts labels and features together; ``mu``, ``sigma2`` (K, D).
    """
    np.random.seed(seed)  # noqa: NPY002 - numba's own generator, seeded per call
    N, D = values.shape
    K = alpha.shape[0]
    logp = np.empty(K)
    p = np.empty(K)
    half_log_s2 = 0.5 * np.log(sigma2)
    inv_s2 = 1.0 / sigma2
    for i in range(N):
        for f in range(D):
            if not observed[i, f]:
                continue
            h = zf[i, f]
            nrow[i, h] -= 1
            o = values[i, f]
            top = -np.inf
            for k in range(K):
                d = o - mu[k, f]
                logp[k] = -0.5 * d * d * inv_s2[k, f] - half_log_s2[k, f]
                if logp[k] > top:
                    top = logp[k]
            tot = 0.0
            for k in range(K):
                tot += (alpha[k] + nrow[i, k]) * np.exp(logp[k] - top)
                p[k] = tot
            h = draw_cumulative(p, tot)
            zf[i, f] = h
            nrow[i, h] += 1


@njit(cache=True)
def add_rows(codes, offsets, rows, z, nrow, clab, ccol, alpha, eta, n_labels, seed):
    """Give rows ``rows`` (int64 indices into ``codes``) their first assignments, one label at a
    time from the collapsed conditional given everything assigned so far, and count them
    (the sequential initialisation of Griffiths & Steyvers 2004).  ``z[rows]`` and
    ``nrow[rows]`` are overwritten."""
    np.random.seed(seed)  # noqa: NPY002 - numba's own generator, seeded per call
    M = codes.shape[1]
    K = alpha.shape[0]
    p = np.empty(K)
    for t in range(rows.shape[0]):
        i = rows[t]
        for k in range(K):
            nrow[i, k] = 0
        for j in range(M):
            x = codes[i, j]
            if x < 0:
                z[i, j] = -1
                continue
            x += offsets[j]
            tot = 0.0
            for k in range(K):
                tot += ((alpha[k] + nrow[i, k]) * (clab[x, k] + eta)
                        / (ccol[j, k] + n_labels[j] * eta))
                p[k] = tot
            h = draw_cumulative(p, tot)
            z[i, j] = h
            nrow[i, h] += 1
            clab[x, h] += 1
            ccol[j, h] += 1


@njit(cache=True)
def minka_alpha_tails(tail, v_tail, alpha, n_iter, rtol, lo, hi):
    """Minka's fixed point for an asymmetric Dirichlet from tail counts, in place on ``alpha``.

    ``tail`` (K, C): ``T_ht`` = (weighted) rows with more than ``t`` labels in cluster
    ``h``; ``v_tail`` (C,): rows with more than ``t`` labels in all.  Since
    ``psi(c + a) - psi(a) = sum_{t < c} 1 / (a + t)``, Minka's update is::

        alpha_h <- alpha_h sum_t T_ht / (alpha_h + t) / sum_t V_t / (A + t)

    each entry clipped to ``[lo, hi]``; stops when no entry moves by ``rtol`` relative, or
    after ``n_iter`` updates.  (:func:`consensuskit.models.bce.collapsed_gibbs.minka_alpha`
    builds the tails; one update costs O(K C) with no digamma.)
    """
    K, C = tail.shape
    new = np.empty(K)
    for _ in range(n_iter):
        A = 0.0
        for h in range(K):
            A += alpha[h]
        den = 0.0
        for t in range(v_tail.shape[0]):
            den += v_tail[t] / (A + t)
        worst = 0.0
        for h in range(K):
            num = 0.0
            for t in range(C):
                num += tail[h, t] / (alpha[h] + t)
            v = alpha[h] * num / den
            v = min(max(v, lo), hi)
            new[h] = v
            worst = max(worst, abs(v - alpha[h]) / alpha[h])
        for h in range(K):
            alpha[h] = new[h]
        if worst < rtol:
            break


@njit(cache=True)
def digamma(x):
    """``psi(x)`` for ``x > 0``: the recurrence ``psi(x) = psi(x + 1) - 1 / x`` up to 10,
    then the asymptotic series to ``x^-14`` (absolute error below 1e-15 there)."""
    r = 0.0
    while x < 10.0:
        r -= 1.0 / x
        x += 1.0
    f = 1.0 / (x * x)
    series = f * (1.0 / 12 - f * (1.0 / 120 - f * (1.0 / 252 - f * (
        1.0 / 240 - f * (1.0 / 132 - f * (691.0 / 32760 - f / 12.0))))))
    return r + np.log(x) - 0.5 / x - series


@njit(cache=True)
def trigamma(x):
    """``psi'(x)`` for ``x > 0``: the recurrence ``psi'(x) = psi'(x + 1) + 1 / x^2`` up to
    10, then the asymptotic series to ``x^-15`` (absolute error below 1e-15 there)."""
    r = 0.0
    while x < 10.0:
        r += 1.0 / (x * x)
        x += 1.0
    f = 1.0 / (x * x)
    series = f * (1.0 / 6 - f * (1.0 / 30 - f * (1.0 / 42 - f * (
        1.0 / 30 - f * (5.0 / 66 - f * (691.0 / 2730 - f * 7.0 / 6))))))
    return r + 1.0 / x + 0.5 * f + series / x


@njit(cache=True)
def eta_gradients(clab, ccol, n_labels, e):
    """First and second derivatives in ``eta`` of the symmetric-Dirichlet log likelihood
    ``sum_rh [lgamma(c_rh + e) - lgamma(e)] - sum_jh [lgamma(c_jh + k_j e) - lgamma(k_j e)]``.

    Returns ``(num, den, curvature)``: the first derivative is ``num - den`` (Minka's
    fixed point is ``e num / den``), the second ``curvature``.  Entries with a zero count
    add nothing to either and are skipped (most of them, when clusters are pure)."""
    L, K = clab.shape
    M = ccol.shape[0]
    num, curv = 0.0, 0.0
    n_pos = 0
    for r in range(L):
        for h in range(K):
            c = clab[r, h]
            if c > 0.0:
                num += digamma(c + e)
                curv += trigamma(c + e)
                n_pos += 1
    num -= n_pos * digamma(e)
    curv -= n_pos * trigamma(e)
    den = 0.0
    for j in range(M):
        kj = n_labels[j]
        ke = kj * e
        psi0, tri0 = digamma(ke), trigamma(ke)
        for h in range(K):
            c = ccol[j, h]
            if c > 0.0:
                den += kj * (digamma(c + ke) - psi0)
                curv -= kj * kj * (trigamma(c + ke) - tri0)
    return num, den, curv


@njit(cache=True)
def minka_eta_newton(clab, ccol, n_labels, eta, n_iter, rtol, lo, hi):
    """The maximiser of the symmetric-Dirichlet likelihood in ``eta`` (Minka's fixed point's
    limit, see :func:`consensuskit.models.bce.collapsed_gibbs.minka_eta`), by Newton's
    method in ``log eta``, which converges in a few steps where the fixed point takes
    30-100 (issue 24's cost).  Where the likelihood is not concave in ``log eta`` at the
    current point, the step is Minka's fixed-point update instead (it increases the
    likelihood); a Newton step is capped at a factor ``e^2``.  ``clab`` (L, K), ``ccol``
    (M, K) float64 counts, ``n_labels`` (M,) ``k_j``; each update clipped to ``[lo, hi]``;
    stops when it moves by less than ``rtol`` relative, or after ``n_iter``.  Returns eta."""
    e = eta
    for _ in range(n_iter):
        num, den, curv = eta_gradients(clab, ccol, n_labels, e)
        if den <= 0.0:  # no labels: nothing to fit
            return e
        grad_u = e * (num - den)  # d/d(log e)
        hess_u = grad_u + e * e * curv
        if hess_u < 0.0:
            step = min(max(-grad_u / hess_u, -2.0), 2.0)
            new = e * np.exp(step)
        else:
            new = e * num / den
        new = min(max(new, lo), hi)
        done = abs(new - e) / e < rtol
        e = new
        if done:
            break
    return e
