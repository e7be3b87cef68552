"""Variational EM (CAVI) for Bayesian cluster ensembles (Wang, Shan & Banerjee 2011, eqs. 5-8).

Model (paper's symbols): for each point ``i``, ``theta_i ~ Dirichlet(alpha)``; for each
observed base clustering ``j``, ``z_ij ~ Categorical(theta_i)`` and
``x_ij ~ Categorical(beta_j[z_ij])``.  Mean-field family:
``q(theta_i) = Dirichlet(gamma_i)``, ``q(z_ij) = Categorical(phi_ij)``.

Layout
------
All per-row arrays are ``(K, N)``: the row axis ``N`` is the contiguous one.
The label distributions ``beta_j`` (shape ``(K, k_j)``) are stored side by side
as one ``(K, L)`` matrix, ``L = sum_j k_j``, column ``offsets[j] + r`` holding
``beta_j(:, r)`` (the same global index as :meth:`Ensemble.offset_index`).
Engines append one *dummy* column (index ``L``) whose value is 1; missing labels
point at it and are zeroed by a per-column mask, so that gathers need no branch.

Each update of the paper is one function:

* :func:`update_phi` -- eq. 5, ``phi_ijh ∝ exp(E_q[log theta_ih]) beta_j(h, x_ij)``;
* :func:`update_gamma` -- eq. 6, ``gamma_i = alpha + sum_j phi_ij``;
* :func:`update_beta` -- eq. 7, ``beta_j(h, r) ∝ sum_{i: x_ij = r} phi_ijh`` (+ smoothing);
* :func:`update_alpha` -- eq. 8, Newton-Raphson with Minka's diagonal-plus-rank-one Hessian;
* :func:`lower_bound` -- the bound ``L(alpha, beta; phi, gamma)`` (natural log).

:func:`e_step` is the fast schedule used by the estimator: rows processed in
cache-sized chunks, warm-started ``gamma``, ``n_iter`` passes of (phi, gamma)
updates, ``phi`` formed one base clustering at a time and never stored for all
``(i, j, h)``; only ``sum_j phi_ij`` (for gamma), the beta sufficient
statistics (by ``index_add`` on the global label index) and the scalar needed
for the entropy term of the bound are accumulated.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np
import torch

__all__ = [
    "BCEData",
    "prepare_data",
    "elog_dirichlet",
    "update_phi",
    "update_gamma",
    "beta_statistics",
    "update_beta",
    "update_alpha",
    "alpha_objective",
    "lower_bound",
    "RowTerms",
    "row_terms",
    "phi_log_phi",
    "initial_gamma",
    "e_step",
    "fold_in",
    "pack_beta",
    "unpack_beta",
    "REALMIN",
    "init_beta_kmeans",
    "init_beta_random",
    "variational_em",
]

#: Smallest positive normal float64 (MATLAB's ``realmin``), used by the authors' code.
REALMIN = float(np.finfo(np.float64).tiny)


@dataclass
class BCEData:
    """Labels laid out for the engine.

    Attributes
    ----------
    idx : LongTensor, shape (M, N)
        Global label index ``offsets[j] + x_ij``; ``L`` (the dummy column) where missing.
    mask : Tensor or None, shape (M, N)
        1.0 where observed, 0.0 where missing; None when nothing is missing.
    n_observed_rows : Tensor, shape (N,)
        ``V_i``, the number of observed labels of each row.
    offsets : ndarray of int64, shape (M + 1,)
    n_labels : ndarray of int64, shape (M,)
    """

    idx: torch.Tensor
    mask: torch.Tensor | None
    n_observed_rows: torch.Tensor
    offsets: np.ndarray
    n_labels: np.ndarray

    @property
    def n_rows(self) -> int:
        return int(self.idx.shape[1])

    @property
    def n_partitions(self) -> int:
        return int(self.idx.shape[0])

    @property
    def n_total_labels(self) -> int:
        return int(self.offsets[-1])

    def row_layout(self):
        """Cached numpy ``(idx (N, M), mask (N, M) or None)`` row-major, for the CPU kernel."""
        cache = self.__dict__.setdefault("_rows_cache", {})
        if "v" not in cache:
            idx = np.ascontiguousarray(self.idx.cpu().numpy().T, dtype=np.int32)
            mask = None if self.mask is None else np.ascontiguousarray(
                self.mask.cpu().numpy().T)
            cache["v"] = (idx, mask)
        return cache["v"]

    def column(self, j: int, rows: slice = slice(None)):
        """``(idx_j, mask_j)`` of base clustering ``j`` for a slice of rows."""
        m = None if self.mask is None else self.mask[j, rows]
        return self.idx[j, rows], m


def prepare_data(ensemble, device="cpu", dtype=torch.float64) -> BCEData:
    """Turn an :class:`~consensuskit.ensemble.Ensemble` into a :class:`BCEData` on ``device``."""
    codes = ensemble.codes
    offsets = ensemble.offsets
    L = int(offsets[-1])
    gidx = ensemble.offset_index()  # (N, M), -1 missing
    gidx = np.where(gidx >= 0, gidx, L)
    idx = torch.as_tensor(np.ascontiguousarray(gidx.T), device=device)
    obs = codes >= 0
    mask = None
    if not obs.all():
        mask = torch.as_tensor(np.ascontiguousarray(obs.T), device=device, dtype=dtype)
    V = torch.as_tensor(obs.sum(axis=1), device=device, dtype=dtype)
    return BCEData(idx=idx, mask=mask, n_observed_rows=V, offsets=offsets,
                   n_labels=np.asarray(ensemble.n_labels))


def pack_beta(betas, dtype=None, device=None) -> torch.Tensor:
    """Concatenate a list of ``(K, k_j)`` label distributions into a ``(K, L)`` tensor."""
    return torch.cat([torch.as_tensor(b, dtype=dtype, device=device) for b in betas], dim=1)


def unpack_beta(beta: torch.Tensor, offsets) -> list:
    """Split a ``(K, L)`` (or ``(K, L + 1)``) beta into the list of ``(K, k_j)`` blocks."""
    return [beta[:, int(offsets[j]):int(offsets[j + 1])] for j in range(len(offsets) - 1)]


def _extend(beta: torch.Tensor) -> torch.Tensor:
    """Append the dummy column of ones (index ``L``) used for missing labels."""
    return torch.cat([beta, beta.new_ones(beta.shape[0], 1)], dim=1)


def elog_dirichlet(gamma: torch.Tensor) -> torch.Tensor:
    """``E_q[log theta_h] = psi(gamma_h) - psi(sum_h gamma_h)`` for ``gamma`` of shape (K, ...)."""
    return torch.special.digamma(gamma) - torch.special.digamma(gamma.sum(0, keepdim=True))


def _phi_from_weights(w, beta_ext, idx_j, mask_j, realmin: float = 0.0):
    """phi for one base clustering from ``w = exp(E_q[log theta] - shift)`` (K, n).

    Returns ``(phi_j (K, n), d (n,))`` with ``d = sum_h w_h beta_j(h, x_ij)`` (+ K*realmin).
    Missing rows get phi = 0 (``mask_j`` = 0) and d computed against the dummy column.
    """
    p = w * beta_ext.index_select(1, idx_j)
    d = p.sum(0)
    if realmin:
        d = d + p.shape[0] * realmin
    inv = d.reciprocal()
    if mask_j is not None:
        inv = inv * mask_j
    return p * inv, d


def update_phi(elog_theta, beta, idx, mask=None, *, realmin: float = 0.0, shift: bool = True):
    """Paper eq. 5: ``phi_ijh ∝ exp(psi(gamma_ih) - psi(sum_h gamma_ih)) * beta_j(h, x_ij)``.

    Parameters
    ----------
    elog_theta : Tensor, shape (K, N)
        ``E_q[log theta_ih]`` (see :func:`elog_dirichlet`).
    beta : Tensor, shape (K, L) or (K, L + 1)
        Concatenated label distributions; ``(K, L)`` gets the dummy column appended.
    idx : LongTensor, shape (N,) or (M, N)
        Global label indices (``L`` where missing) of one or all base clusterings.
    mask : Tensor, shape like ``idx``, optional
        1 where observed; missing entries get ``phi = 0``.
    realmin : float
        Added ``K`` times to the normaliser (the authors' code divides by
        ``sum_h (phi_h + realmin)``); 0 gives the plain normalisation.
    shift : bool
        Subtract ``max_h E_q[log theta_ih]`` before exponentiating (overflow-safe;
        it cancels in the normalisation).  The authors' code does not shift.

    Returns
    -------
    phi : Tensor, shape (K, N) or (M, K, N)
    """
    if beta.shape[1] == 0 or idx.max() >= beta.shape[1]:
        beta = _extend(beta)
    e = elog_theta - elog_theta.max(0, keepdim=True).values if shift else elog_theta
    w = torch.exp(e)
    if idx.dim() == 1:
        return _phi_from_weights(w, beta, idx, mask, realmin)[0]
    out = []
    for j in range(idx.shape[0]):
        out.append(_phi_from_weights(w, beta, idx[j], None if mask is None else mask[j],
                                     realmin)[0])
    return torch.stack(out)


def update_gamma(alpha, phi_sum):
    """Paper eq. 6: ``gamma_i = alpha + sum_j phi_ij``; ``phi_sum`` (K, N) -> gamma (K, N)."""
    return alpha[:, None] + phi_sum


def beta_statistics(phi, idx, n_total_labels: int):
    """``c[h, l] = sum_{(i, j): offsets[j] + x_ij = l} phi_ijh`` for phi (M, K, N) -> (K, L)."""
    K = phi.shape[1]
    c = phi.new_zeros(K, n_total_labels + 1)
    for j in range(idx.shape[0]):
        c.index_add_(1, idx[j], phi[j])
    return c[:, :n_total_labels]


def update_beta(stats, offsets, smoothing: float = 1e-6):
    """Paper eq. 7 with additive smoothing: ``beta_j(h, r) ∝ c_j(h, r) + smoothing``.

    Parameters
    ----------
    stats : Tensor, shape (K, L)
        Expected label counts (:func:`beta_statistics` or :func:`e_step`).
    offsets : array of int, shape (M + 1,)
    smoothing : float, default 1e-6
        Pseudo-count added to every entry (unused labels included) before each row
        of each ``beta_j`` is normalised -- the authors' ``lapParam``.  It keeps
        every ``beta_j(h, r) > 0`` so that held-out labels never get probability 0.
        Equivalently, MAP estimation under a ``Dirichlet(1 + smoothing)`` prior.

    Returns
    -------
    beta : Tensor, shape (K, L)
    """
    offsets = np.asarray(offsets)
    n_labels = np.diff(offsets)
    seg = torch.as_tensor(np.repeat(np.arange(n_labels.size), n_labels), device=stats.device)
    c = stats + smoothing
    tot = c.new_zeros(c.shape[0], n_labels.size).index_add_(1, seg, c)
    return c / tot[:, seg]


def alpha_objective(alpha, suff, n_rows):
    """Part of the bound that depends on alpha: ``N(lnG(sum a) - sum lnG(a)) + sum (a-1) S``."""
    return float(n_rows * (torch.lgamma(alpha.sum()) - torch.lgamma(alpha).sum())
                 + ((alpha - 1.0) * suff).sum())


def update_alpha(alpha, suff, n_rows, *, max_iter: int = 500, tol: float = 1e-3,
                 ensure_ascent: bool = False, alpha_cap: float = math.inf):
    """Paper eq. 8: Newton-Raphson for alpha, Minka's fixed-structure Hessian.

    The Hessian of ``f(alpha) = N(lnG(sum_h a_h) - sum_h lnG(a_h)) + sum_h (a_h - 1) S_h``
    is ``diag(l) + z 11^T`` with ``l_h = -N psi'(a_h)``, ``z = N psi'(sum_h a_h)``, so the
    Newton step is ``delta = (g - c) / l`` with ``c = sum_h(g_h/l_h) / (1/z + sum_h 1/l_h)``.
    The step ``a - eta * delta`` is halved (``eta = 1, 1/2, ...``) until every entry is
    positive (and, with ``ensure_ascent``, until ``f`` does not decrease).  Iterates
    while ``sum|a_new - a_old| / sum a_old > tol`` and at most ``max_iter`` steps.

    Parameters
    ----------
    alpha : Tensor, shape (K,)
        Starting point (the previous alpha).
    suff : Tensor, shape (K,)
        ``S_h = sum_i (psi(gamma_ih) - psi(sum_h' gamma_ih'))``.
    n_rows : int
        ``N``, the number of rows.
    alpha_cap : float
        Stop as soon as ``sum_h alpha_h`` exceeds this (degenerate-optimum guard).

    Returns
    -------
    alpha : Tensor, shape (K,), float64 internally then cast back
    info : dict with ``n_iter`` and ``n_halvings``
    """
    out_dtype = alpha.dtype
    a = alpha.detach().to(torch.float64).clone()
    S = suff.detach().to(torch.float64)
    N = float(n_rows)
    n_iter = n_halve = 0
    f_old = alpha_objective(a, S, N) if ensure_ascent else None
    while n_iter < max_iter:
        g = S + N * (torch.special.digamma(a.sum()) - torch.special.digamma(a))
        lh = -N * torch.special.polygamma(1, a)
        z = N * torch.special.polygamma(1, a.sum())
        c = (g / lh).sum() / (1.0 / z + (1.0 / lh).sum())
        delta = (g - c) / lh
        eta = 1.0
        while True:
            a_new = a - eta * delta
            ok = bool((a_new > 0).all())
            if ok and ensure_ascent:
                f_new = alpha_objective(a_new, S, N)
                ok = f_new >= f_old
            if ok:
                break
            eta *= 0.5
            n_halve += 1
            if eta < 1e-30:  # no acceptable step: stay put
                a_new = a
                break
        if ensure_ascent:
            f_old = alpha_objective(a_new, S, N)
        n_iter += 1
        rel = float((a_new - a).abs().sum() / a.sum())
        a = a_new
        if rel <= tol or float(a.sum()) > alpha_cap:
            break
    return a.to(out_dtype), {"n_iter": n_iter, "n_halvings": n_halve}


def _sum64(x) -> float:
    return float(x.sum(dtype=torch.float64))


@dataclass
class RowTerms:
    """Per-row pieces of the bound, summed over rows, at the E-step's final ``gamma``.

    With ``E_ih = psi(gamma_ih) - psi(sum_h gamma_ih)``:

    Attributes
    ----------
    suff : Tensor (K,)
        ``S_h = sum_i E_ih``, alpha's sufficient statistic (eq. 8).
    cross : float
        ``sum_ih (phi_sum_ih - gamma_ih) E_ih``.
    lgamma : float
        ``sum_i [sum_h lnG(gamma_ih) - lnG(sum_h gamma_ih)]``.
    n_rows : int
    """

    suff: torch.Tensor
    cross: float
    lgamma: float
    n_rows: int


def row_terms(gamma, phi_sum) -> RowTerms:
    """:class:`RowTerms` of ``gamma`` (K, N) and ``phi_sum`` (K, N) by torch (any device)."""
    E = elog_dirichlet(gamma)
    suff = E.sum(1, dtype=torch.float64)
    cross = _sum64((phi_sum - gamma) * E)
    lg = _sum64(torch.lgamma(gamma)) - _sum64(torch.lgamma(gamma.sum(0)))
    return RowTerms(suff=suff, cross=cross, lgamma=lg, n_rows=int(gamma.shape[1]))


def lower_bound(alpha, beta, gamma, phi_sum, stats, phi_log_phi, *, smoothing: float = 0.0,
                terms: RowTerms | None = None):
    """The variational lower bound ``L(alpha, beta; phi, gamma)`` (natural log), summed over rows.

    For each row ``i`` (``E_h = psi(gamma_ih) - psi(sum_h gamma_ih)``, observed ``j`` only)::

        lnG(sum a) - sum_h lnG(a_h) + sum_h (a_h - 1) E_h
        + sum_j sum_h phi_ijh E_h + sum_j sum_h phi_ijh ln beta_j(h, x_ij)
        - lnG(sum gamma_i) + sum_h lnG(gamma_ih) - sum_h (gamma_ih - 1) E_h
        - sum_j sum_h phi_ijh ln phi_ijh

    computed from sufficient statistics, so phi need not be stored: with the
    :class:`RowTerms` ``S``, ``cross`` and ``lgamma`` of ``(gamma, phi_sum)`` the row sums
    are ``a . S + cross + lgamma`` (since ``(a_h - 1) E_h + phi_sum E_h - (gamma - 1) E_h
    = a_h E_h + (phi_sum - gamma) E_h``).

    Parameters
    ----------
    alpha : Tensor (K,);  beta : Tensor (K, L);  gamma : Tensor (K, N)
    phi_sum : Tensor (K, N)
        ``sum_j phi_ij``.
    stats : Tensor (K, L)
        ``c[h, l]`` expected label counts (see :func:`beta_statistics`).
    phi_log_phi : float
        ``sum_ijh phi_ijh ln phi_ijh`` (0 ln 0 = 0).
    smoothing : float
        If > 0, adds ``smoothing * sum ln beta`` -- the log of the ``Dirichlet(1 + s)``
        prior on each beta row (up to a constant) that :func:`update_beta` maximises
        jointly with the bound; with it the EM objective is exactly non-decreasing.
    terms : RowTerms, optional
        The row terms of ``(gamma, phi_sum)`` when already computed (the CPU E-step
        forms them in its last pass); else they are computed here (:func:`row_terms`).
    """
    if terms is None:
        terms = row_terms(gamma, phi_sum)
    N = terms.n_rows
    a = alpha.detach().to(torch.float64).cpu()
    const = N * (float(torch.lgamma(a.sum())) - float(torch.lgamma(a).sum()))
    t = float((a * terms.suff.to(a)).sum()) + terms.cross + terms.lgamma
    logb = torch.log(beta)
    t += _sum64(stats * logb)
    val = const + t - float(phi_log_phi)
    if smoothing:
        val += smoothing * _sum64(logb)
    return val


def phi_log_phi(phi) -> float:
    """``sum phi ln phi`` with 0 ln 0 = 0 for an explicit phi tensor."""
    return _sum64(torch.special.xlogy(phi, phi))


def e_step(alpha, beta, data: BCEData, gamma, n_iter: int, *, collect: bool = True,
           tol: float = 0.0, chunk_size: int = 8192, backend: str = "auto",
           n_jobs: int | None = None, with_terms: bool = False):
    """The estimator's E-step: ``n_iter`` passes of (phi, gamma) updates, warm-started.

    Rows are processed in chunks of ``chunk_size`` (the updates are independent
    across rows), so the ``(K, chunk)`` temporaries stay in cache.  In each pass,
    for every base clustering ``j``: ``phi_j`` = :func:`update_phi` (eq. 5) is added
    into ``sum_j phi_ij``; then ``gamma = alpha + sum_j phi_ij`` (eq. 6).  On the
    last pass the beta statistics are accumulated by ``index_add`` on the global
    label index and the entropy term ``sum phi ln phi`` is formed from
    ``ln phi_ijh = E_h - m_i + ln beta_j(h, x_ij) - ln d_ij`` without storing phi.

    Parameters
    ----------
    alpha : Tensor (K,);  beta : Tensor (K, L);  data : BCEData
    gamma : Tensor (K, N)
        Warm start; not modified.
    n_iter : int
        Number of passes (with ``tol > 0``: the most).
    collect : bool
        Accumulate the beta statistics and entropy (not needed for fold-in).
    tol : float
        Stop a chunk early when ``sum|gamma_new - gamma| / sum gamma <= tol``
        (only with ``collect=False``, i.e. for fold-in).

    Returns
    -------
    gamma : Tensor (K, N)
        After the last pass (``alpha + phi_sum``).
    phi_sum : Tensor (K, N)
        ``sum_j phi_ij`` from the last pass.
    stats : Tensor (K, L) or None
    phi_log_phi : float or None
    n_passes : int
        Largest number of passes used by a chunk.
    terms : RowTerms
        Only with ``with_terms=True`` (and ``collect``): the bound's row terms and
        alpha's statistic at the returned gamma (:class:`RowTerms`), formed by the CPU
        kernel in its last pass, by :func:`row_terms` on the torch backend.

    ``backend``: ``"torch"`` (any device; the reference), ``"numba"`` (CPU only, a fused
    per-row kernel computing the same quantities, see
    :mod:`consensuskit.inference._bce_numba`), or ``"auto"`` (numba on CPU when
    ``tol == 0``, else torch).  ``n_jobs``: threads for the numba kernel's row blocks
    (None: torch's setting, ``torch.get_num_threads()``; -1: one per CPU).
    """
    if with_terms and not collect:
        raise ValueError("e_step: with_terms needs collect=True")
    if backend not in ("auto", "torch", "numba"):
        raise ValueError(f"backend must be 'auto', 'torch' or 'numba'; got {backend!r}")
    if backend == "auto":
        backend = "numba" if (gamma.device.type == "cpu" and tol == 0 and _have_numba()) \
            else "torch"
    if backend == "numba":
        out = _e_step_numba(alpha, beta, data, gamma, n_iter, collect, n_jobs)
        return out if with_terms else out[:5]
    if collect and tol > 0:
        raise ValueError("e_step: tol > 0 (early stopping) is only for collect=False")
    K, N = gamma.shape
    M = data.n_partitions
    L = data.n_total_labels
    beta_ext = _extend(beta)
    logb_ext = torch.log(beta_ext) if collect else None
    gamma_out = torch.empty_like(gamma)
    phi_sum = torch.empty_like(gamma)
    stats = beta.new_zeros(K, L + 1) if collect else None
    plogp = 0.0
    a = alpha.to(gamma.dtype)[:, None]
    max_passes = 0
    for start in range(0, N, chunk_size):
        rows = slice(start, min(N, start + chunk_size))
        g = gamma[:, rows]
        t = 0
        while t < n_iter:
            t += 1
            last = t == n_iter
            keep = collect and last
            E = elog_dirichlet(g)
            m = E.max(0, keepdim=True).values
            w = torch.exp(E - m)
            acc = torch.zeros_like(g)
            logd = g.new_zeros(g.shape[1]) if keep else None
            for j in range(M):
                idx_j, mask_j = data.column(j, rows)
                phi_j, d = _phi_from_weights(w, beta_ext, idx_j, mask_j)
                acc += phi_j
                if keep:
                    stats.index_add_(1, idx_j, phi_j)
                    ld = torch.log(d)
                    logd += ld if mask_j is None else ld * mask_j
            g_new = a + acc
            if keep:
                V = data.n_observed_rows[rows].to(g.dtype)
                plogp += _sum64(acc * E) - _sum64(m[0] * V) - _sum64(logd)
            done = last
            if tol > 0 and not last:
                done = float((g_new - g).abs().sum() / g.sum()) <= tol
            g = g_new
            if done:
                break
        max_passes = max(max_passes, t)
        gamma_out[:, rows] = g
        phi_sum[:, rows] = acc
    if collect:
        stats_L = stats[:, :L]
        plogp += _sum64(stats_L * logb_ext[:, :L])
        if with_terms:
            return (gamma_out, phi_sum, stats_L, plogp, max_passes,
                    row_terms(gamma_out, phi_sum))
        return gamma_out, phi_sum, stats_L, plogp, max_passes
    return gamma_out, phi_sum, None, None, max_passes


def _have_numba() -> bool:
    try:
        import numba  # noqa: F401
    except ImportError:  # pragma: no cover - numba is a dependency
        return False
    return True


def _e_step_numba(alpha, beta, data, gamma, n_iter, collect, n_jobs=None):
    """:func:`e_step` by the fused kernel; returns its 5 outputs and the :class:`RowTerms`."""
    from ._bce_numba import run_estep

    if gamma.device.type != "cpu":
        raise ValueError("backend='numba' needs CPU tensors")
    K, N = gamma.shape
    L = data.n_total_labels
    idx, mask = data.row_layout()
    dt = gamma.dtype
    betaT = np.ascontiguousarray(_extend(beta.detach().to(dt)).T.numpy())
    if mask is not None and mask.dtype != betaT.dtype:
        mask = mask.astype(betaT.dtype)
    if n_jobs is None:
        n_jobs = torch.get_num_threads()
    elif n_jobs < 0:
        n_jobs = os.cpu_count() or 1
    g_out, ps, stats, terms = run_estep(
        alpha.detach().to(torch.float64).numpy(), betaT, idx, mask,
        gamma.detach().contiguous().numpy(), int(n_iter), bool(collect), n_threads=n_jobs)
    gamma_out, phi_sum = torch.from_numpy(g_out), torch.from_numpy(ps)
    if not collect:
        return gamma_out, phi_sum, None, None, n_iter, None
    st = torch.from_numpy(stats[:L].T.copy())
    plogp = float(terms[K]) + float((st * torch.log(beta.detach().double())).sum())
    rt = RowTerms(suff=torch.from_numpy(terms[:K].copy()), cross=float(terms[K + 1]),
                  lgamma=float(terms[K + 2]), n_rows=N)
    return gamma_out, phi_sum, st.to(beta.dtype), plogp, n_iter, rt


def initial_gamma(alpha, data: BCEData, dtype=None):
    """``gamma_i = alpha + V_i / K`` (the authors' initialisation), shape (K, N)."""
    K = alpha.shape[0]
    V = data.n_observed_rows.to(dtype or alpha.dtype)
    return alpha.to(V.dtype)[:, None] + V[None, :] / K


def fold_in(alpha, beta, data: BCEData, *, max_iter: int = 500, tol: float = 1e-8,
            chunk_size: int = 32768):
    """Variational posterior ``gamma`` (K, N) of new rows for fixed alpha and beta."""
    g0 = initial_gamma(alpha, data, beta.dtype)
    gamma, _, _, _, _ = e_step(alpha, beta, data, g0, max_iter, collect=False, tol=tol,
                               chunk_size=chunk_size)
    return gamma


# ---------------------------------------------------------------------------------------
# initialisation and the full variational EM loop
# ---------------------------------------------------------------------------------------
def init_beta_kmeans(ensemble, n_clusters: int, random_state, *, smoothing: float = 1e-2,
                     max_rows: int = 20000, n_jobs: int | None = None):
    """Initial beta from k-means on the one-hot labels, as a ``(K, L)`` float64 array.

    k-means (``n_init=1``) runs on at most ``max_rows`` randomly chosen rows of the
    sparse one-hot matrix; each centroid's block of column ``j`` is the fraction
    of the cluster's members carrying each label of ``j``, i.e. a label
    distribution.  ``smoothing`` is added before each block is normalised, so no
    label starts at probability 0.  k-means runs on ``n_jobs`` OpenMP threads (None:
    torch's setting, ``torch.get_num_threads()``), so a user who limits torch to one
    thread is not charged for scikit-learn's thread pool (on a busy machine its
    spinning threads cost several times the work itself).
    """
    from sklearn.cluster import KMeans
    from sklearn.utils import check_random_state
    from threadpoolctl import threadpool_limits

    rs = check_random_state(random_state)
    N = ensemble.n_samples
    rows = np.arange(N) if N <= max_rows else np.sort(rs.choice(N, max_rows, replace=False))
    sub = ensemble.subset(rows)
    B = sub.onehot(dtype=np.float64)
    km = KMeans(n_clusters=n_clusters, n_init=1, random_state=rs.randint(2**31 - 1))
    with threadpool_limits(limits=n_jobs or torch.get_num_threads(), user_api="openmp"):
        lab = km.fit_predict(B)
    import scipy.sparse as sp

    assign = sp.csr_matrix((np.ones(lab.size), (lab, np.arange(lab.size))),
                           shape=(n_clusters, lab.size))
    counts = np.asarray((assign @ B).todense())
    beta = update_beta(torch.as_tensor(counts), ensemble.offsets, smoothing=smoothing)
    return beta.numpy()


def init_beta_random(ensemble, n_clusters: int, random_state):
    """Initial beta, each row of each ``beta_j`` from a flat Dirichlet (authors' default)."""
    from sklearn.utils import check_random_state

    rs = check_random_state(random_state)
    blocks = [rs.dirichlet(np.ones(k), size=n_clusters) for k in ensemble.n_labels]
    return np.concatenate(blocks, axis=1)


def variational_em(data: BCEData, n_clusters: int, beta0, alpha0=None, *, max_iter: int = 100,
                   tol: float = 1e-6, inner_iter: int = 5, smoothing: float = 1e-6,
                   alpha_cap: float | None = None, newton_tol: float = 1e-10,
                   chunk_size: int = 8192, backend: str = "auto", n_jobs: int | None = None,
                   callback=None, resume=None):
    """One run of the estimator's variational EM from ``beta0`` (K, L).

    Each iteration: :func:`e_step` (``inner_iter`` warm-started passes), then
    :func:`update_beta` and :func:`update_alpha` (with ``ensure_ascent``), then the
    objective ``L + smoothing * sum ln beta`` (:func:`lower_bound`), which never
    decreases.  Stops when its relative change is ``<= tol``, after ``max_iter``
    iterations, or when ``sum(alpha)`` passes ``alpha_cap`` (degenerate optimum:
    the prior swamps the data, every ``theta_i`` collapses onto the same mean);
    default ``alpha_cap = 10 * max_i V_i``.  ``backend`` and ``n_jobs`` are passed to
    :func:`e_step`.

    ``callback(state)``, if given, is called after every iteration with ``state`` a
    dict of ``iteration``, ``lower_bound``, ``alpha``, ``beta``, ``gamma``, ``bounds``
    and ``done`` (the run ends here anyway); returning ``False`` stops the run.
    ``resume`` takes such a state and continues from it: every later iteration is
    then identical to the uninterrupted run's.

    Returns
    -------
    dict with ``alpha`` (K,), ``beta`` (K, L), ``gamma`` (K, N), ``bounds`` (list),
    ``n_iter``, ``converged``, ``degenerate``, ``stopped`` (by the callback).
    """
    dev = data.idx.device
    dtype = data.n_observed_rows.dtype
    K = n_clusters
    beta = torch.as_tensor(beta0, dtype=dtype, device=dev)
    alpha = (torch.ones(K, dtype=dtype, device=dev) if alpha0 is None
             else torch.as_tensor(alpha0, dtype=dtype, device=dev))
    if alpha_cap is None:
        alpha_cap = 10.0 * float(data.n_observed_rows.max())
    gamma = initial_gamma(alpha, data, dtype)
    N = data.n_rows
    bounds = []
    converged = degenerate = stopped = False
    it = 0
    if resume is not None:
        alpha, beta, gamma = (torch.as_tensor(resume[k], dtype=dtype, device=dev)
                              for k in ("alpha", "beta", "gamma"))
        bounds, it = list(resume["bounds"]), int(resume["iteration"])
        converged, degenerate = bool(resume["converged"]), bool(resume["degenerate"])
    while it < max_iter and not (converged or degenerate):
        it += 1
        gamma, phi_sum, stats, plogp, _, terms = e_step(
            alpha, beta, data, gamma, inner_iter, chunk_size=chunk_size, backend=backend,
            n_jobs=n_jobs, with_terms=True)
        beta = update_beta(stats, data.offsets, smoothing)
        alpha, _ = update_alpha(alpha, terms.suff.to(alpha), N, tol=newton_tol,
                                ensure_ascent=True, alpha_cap=alpha_cap)
        lb = lower_bound(alpha, beta, gamma, phi_sum, stats, plogp, smoothing=smoothing,
                         terms=terms)
        bounds.append(lb)
        degenerate = float(alpha.sum()) > alpha_cap
        converged = (not degenerate and len(bounds) > 1
                     and abs(bounds[-1] - bounds[-2]) <= tol * abs(bounds[-1]))
        if callback is not None and callback(
            {"iteration": it, "lower_bound": lb, "alpha": alpha, "beta": beta, "gamma": gamma,
             "bounds": list(bounds), "converged": converged, "degenerate": degenerate,
             "done": converged or degenerate or it == max_iter}
        ) is False:
            stopped = True
            break
    return {"alpha": alpha, "beta": beta, "gamma": gamma, "bounds": bounds, "n_iter": it,
            "converged": converged, "degenerate": degenerate, "stopped": stopped}
