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
from typing import NamedTuple

import numpy as np
import torch

from consensuskit.data.ensemble import LabelData
from consensuskit.inference.driver import Engine
from consensuskit.inference.driver import fit as drive

__all__ = [
    "CAVI",
    "CAVIState",
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
    "bound_at",
    "initial_gamma",
    "e_step",
    "EStep",
    "fold_in",
    "pack_beta",
    "unpack_beta",
    "REALMIN",
    "init_beta_kmeans",
    "init_beta_seeded",
    "init_beta_random",
    "variational_em",
]

#: Smallest positive normal float64 (MATLAB's ``realmin``), used by the authors' code.
REALMIN = float(np.finfo(np.float64).tiny)


def prepare_data(ensemble, device="cpu", dtype=torch.float64) -> LabelData:
    """The labels laid out for the engine: ``ensemble.label_data(device, dtype)`` (kept name)."""
    return ensemble.label_data(device, dtype)


def pack_beta(betas, dtype=None, device=None) -> torch.Tensor:
    """Concatenate a list of ``(K, k_j)`` label distributions into a ``(K, L)`` tensor."""
    return torch.cat([torch.as_tensor(b, dtype=dtype, device=device) for b in betas], dim=1)


def unpack_beta(beta: torch.Tensor, offsets) -> list:
    """Split a ``(K, L)`` (or ``(K, L + 1)``) beta into the list of ``(K, k_j)`` blocks."""
    return [beta[:, int(offsets[j]):int(offsets[j + 1])] for j in range(len(offsets) - 1)]


def with_missing_column(beta: torch.Tensor) -> torch.Tensor:
    """Packed ``beta`` (K, L) with a dummy column of ones appended (index ``L``, shape
    (K, L + 1)): a missing label gathers that column, so it contributes a factor 1."""
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
        beta = with_missing_column(beta)
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
    positive (and, with ``ensure_ascent``, until ``f`` does not decrease).  If no length
    is acceptable alpha stays put; that is reported as ``stalled`` unless the step's
    predicted gain was below the float resolution of ``f`` (converged).  Iterates
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
    info : dict with ``n_iter``, ``n_halvings`` and ``stalled`` (True when a Newton
        step found no acceptable length and alpha was left where it was)
    """
    out_dtype = alpha.dtype
    a = alpha.detach().to(torch.float64).clone()
    S = suff.detach().to(torch.float64)
    N = float(n_rows)
    n_iter = n_halve = 0
    stalled = False
    f_old = alpha_objective(a, S, N) if ensure_ascent else None
    while n_iter < max_iter:
        g = S + N * (torch.special.digamma(a.sum()) - torch.special.digamma(a))
        lh = -N * torch.special.polygamma(1, a)
        z = N * torch.special.polygamma(1, a.sum())
        c = (g / lh).sum() / (1.0 / z + (1.0 / lh).sum())
        delta = (g - c) / lh
        # predicted increase of f along the Newton step; below float resolution of f the
        # solve has converged, and a rejected step is round-off, not a failure
        converged = ensure_ascent and float((g * delta).abs().sum()) <= 1e-12 * max(1.0,
                                                                                   abs(f_old))
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
            if eta < 1e-30:  # no acceptable step: stay put (reported as "stalled")
                a_new = a
                stalled = not converged
                break
        if ensure_ascent:
            f_old = alpha_objective(a_new, S, N)
        n_iter += 1
        rel = float((a_new - a).abs().sum() / a.sum())
        a = a_new
        if rel <= tol or float(a.sum()) > alpha_cap:
            break
    return a.to(out_dtype), {"n_iter": n_iter, "n_halvings": n_halve, "stalled": stalled}


def sum64(x) -> float:
    """The sum of every entry of tensor ``x`` accumulated in float64, as a Python float (the
    bound's terms keep float64 sums whatever the engine's dtype)."""
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
    cross = sum64((phi_sum - gamma) * E)
    lg = sum64(torch.lgamma(gamma)) - sum64(torch.lgamma(gamma.sum(0)))
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
    t += sum64(stats * logb)
    val = const + t - float(phi_log_phi)
    if smoothing:
        val += smoothing * sum64(logb)
    return val


def bound_at(alpha, beta, gamma, data, *, smoothing: float = 0.0,
             block_rows: int = 16384) -> float:
    """:func:`lower_bound` at ``gamma`` (K, N) with ``phi`` from eq. 5 at that ``gamma``.

    The state a fitted estimator reports: anyone holding ``alpha``, ``beta`` and
    ``gamma`` can rebuild ``phi`` and recompute the bound independently.

    ``data``: a :class:`LabelData`, or an :class:`~consensuskit.data.ensemble.Ensemble`
    whose rows are then laid out and scored ``block_rows`` at a time (every term of the
    bound is a sum over rows), so that the collapsed sampler's fit, which reads the
    ensemble's codes, never holds the labels as LabelData (16 bytes per label at
    float64) nor (K, N) temporaries; the sums then differ from one block's only by
    rounding.
    """
    if isinstance(data, LabelData):
        out = e_step(alpha, beta, data, gamma, 1)
        return lower_bound(alpha, beta, gamma, out.phi_sum, out.stats, out.phi_log_phi,
                           smoothing=smoothing)
    N = data.n_samples
    stats, plogp, suff, cross, lgam = 0, 0.0, 0, 0.0, 0.0
    for start in range(0, N, block_rows):
        rows = slice(start, min(N, start + block_rows))
        block = LabelData.build(data.subset(rows), gamma.device, gamma.dtype)
        g = gamma[:, rows]
        out = e_step(alpha, beta, block, g, 1)
        t = row_terms(g, out.phi_sum)
        stats = stats + out.stats
        plogp += float(out.phi_log_phi)
        suff, cross, lgam = suff + t.suff, cross + t.cross, lgam + t.lgamma
    terms = RowTerms(suff=suff, cross=cross, lgamma=lgam, n_rows=N)
    return lower_bound(alpha, beta, None, None, stats, plogp, smoothing=smoothing,
                       terms=terms)


def phi_log_phi(phi) -> float:
    """``sum phi ln phi`` with 0 ln 0 = 0 for an explicit phi tensor."""
    return sum64(torch.special.xlogy(phi, phi))


class EStep(NamedTuple):
    """What :func:`e_step` returns (a named tuple: fields by name or position).

    Attributes
    ----------
    gamma : Tensor (K, N)
        After the last pass (``alpha + phi_sum``).
    phi_sum : Tensor (K, N)
        ``sum_j u_j phi_ij`` (plus the extra terms') from the last pass.
    stats : Tensor (K, L) or None
        The beta statistics ``sum_i u_j phi_ijh [x_ij = l]`` (None unless ``collect``).
    phi_log_phi : float or None
        ``sum phi ln phi`` of the last pass (None unless ``collect``).
    n_passes : int
        Largest number of passes used by a chunk of rows.
    terms : RowTerms or None
        Only with ``with_terms=True`` (and ``collect``): the bound's row terms and
        alpha's statistic at the returned gamma (:class:`RowTerms`), formed by the CPU
        kernel in its last pass, by :func:`row_terms` on the torch backend.
    """

    gamma: torch.Tensor
    phi_sum: torch.Tensor
    stats: torch.Tensor | None
    phi_log_phi: float | None
    n_passes: int
    terms: RowTerms | None = None


def e_step(alpha, beta, data: LabelData, gamma, n_iter: int, *, collect: bool = True,
           tol: float = 0.0, chunk_size: int = 8192, backend: str = "auto", weights=None,
           extra=None, n_jobs: int | None = None, with_terms: bool = False) -> EStep:
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
    alpha : Tensor (K,);  beta : Tensor (K, L);  data : LabelData
    gamma : Tensor (K, N)
        Warm start; not modified.
    n_iter : int
        Number of passes (with ``tol > 0``: the most).
    collect : bool
        Accumulate the beta statistics and entropy (not needed for fold-in).
    tol : float
        Stop a chunk early when ``sum|gamma_new - gamma| / sum gamma <= tol``
        (only with ``collect=False``, i.e. for fold-in).
    weights : Tensor (M,) or None
        Per-column weights ``u_j``: label ``j`` counts ``u_j`` times in gamma, the beta
        statistics and the entropy (GBCE's repetitions); None: all 1.
    extra : object or None
        Extra terms of the model that share ``theta_i`` (GBCE's features), with
        ``chunk_size(chunk_size, K) -> int``, ``phi_sum(E, rows, keep) -> Tensor (K, n)``
        (their weighted assignment sum for a chunk of rows given ``E = E_q[log theta]``;
        with ``keep`` they accumulate their own statistics) and, after a collecting
        call, ``phi_log_phi`` (their share of ``sum phi ln phi``).

    Returns
    -------
    EStep
        ``(gamma, phi_sum, stats, phi_log_phi, n_passes, terms)``.

    ``backend``: ``"torch"`` (any device; the reference), ``"numba"`` (CPU only, a fused
    per-row kernel computing the same quantities, see
    :mod:`consensuskit.models.bce.kernels`; plain BCE only), or ``"auto"`` (numba on
    CPU for plain BCE when ``tol == 0``, else torch).  ``n_jobs``: threads for the numba
    kernel's row blocks (None: torch's setting, ``torch.get_num_threads()``; -1: one per
    CPU); the result does not depend on it.
    """
    if with_terms and not collect:
        raise ValueError("e_step: with_terms needs collect=True")
    if backend not in ("auto", "torch", "numba"):
        raise ValueError(f"backend must be 'auto', 'torch' or 'numba'; got {backend!r}")
    unit = weights is None or bool((weights == 1).all())
    plain = unit and extra is None
    if backend == "auto":
        backend = "numba" if (plain and gamma.device.type == "cpu" and tol == 0
                              and _have_numba()) else "torch"
    if backend == "numba":
        if not plain:
            raise ValueError("backend='numba' runs plain BCE only (no weights, no extra terms)")
        out = _e_step_numba(alpha, beta, data, gamma, n_iter, collect, n_jobs)
        return out if with_terms else out._replace(terms=None)
    if collect and tol > 0:
        raise ValueError("e_step: tol > 0 (early stopping) is only for collect=False")
    out = _e_step_torch(alpha, beta, data, gamma, n_iter, collect=collect, tol=tol,
                        chunk_size=chunk_size, weights=None if unit else weights, extra=extra)
    if with_terms:
        return out._replace(terms=row_terms(out.gamma, out.phi_sum))
    return out


class _Collected:
    """The collecting pass's running sums over chunks of rows (the torch E-step)."""

    def __init__(self, beta, K, L):
        self.stats = beta.new_zeros(K, L + 1)  # the last column: missing labels
        self.plogp = 0.0


def _e_step_torch(alpha, beta, data, gamma, n_iter, *, collect, tol, chunk_size, weights,
                  extra) -> EStep:
    """:func:`e_step` by torch on any device, chunk by chunk of rows (``weights``: None
    when every column weighs 1)."""
    K, N = gamma.shape
    L = data.n_total_labels
    u = None if weights is None else [float(v) for v in weights.tolist()]
    V_all = data.n_observed_rows if weights is None else data.weighted_rows(weights)
    if extra is not None:
        chunk_size = extra.chunk_size(chunk_size, K)
    beta_ext = with_missing_column(beta)
    gamma_out = torch.empty_like(gamma)
    phi_sum = torch.empty_like(gamma)
    sums = _Collected(beta, K, L) if collect else None
    a = alpha.to(gamma.dtype)[:, None]
    max_passes = 0
    for start in range(0, N, chunk_size):
        rows = slice(start, min(N, start + chunk_size))
        g, acc, t = _chunk_passes(a, beta_ext, data, gamma[:, rows], rows, n_iter, u, extra,
                                  sums, V_all, tol)
        max_passes = max(max_passes, t)
        gamma_out[:, rows] = g
        phi_sum[:, rows] = acc
    if not collect:
        return EStep(gamma_out, phi_sum, None, None, max_passes)
    stats_L = sums.stats[:, :L]
    plogp = sums.plogp + sum64(stats_L * torch.log(beta_ext)[:, :L])
    if extra is not None:
        plogp += extra.phi_log_phi
    return EStep(gamma_out, phi_sum, stats_L, plogp, max_passes)


def _chunk_passes(a, beta_ext, data, g, rows, n_iter, u, extra, sums, V_all, tol):
    """Up to ``n_iter`` (phi, gamma) passes over one chunk of rows ``rows`` from its warm
    start ``g`` (K, n); with ``sums`` (a :class:`_Collected`), the last pass adds its
    beta statistics and entropy there.  Returns ``(gamma (K, n), phi_sum (K, n), passes)``.
    """
    M = data.n_partitions
    t = 0
    while t < n_iter:
        t += 1
        last = t == n_iter
        keep = sums is not None and last
        E = elog_dirichlet(g)
        m = E.max(0, keepdim=True).values
        w = torch.exp(E - m)
        acc = torch.zeros_like(g)
        logd = g.new_zeros(g.shape[1]) if keep else None
        for j in range(M):
            idx_j, mask_j = data.column(j, rows)
            phi_j, d = _phi_from_weights(w, beta_ext, idx_j, mask_j)
            if u is not None:
                phi_j = phi_j * u[j]
            acc += phi_j
            if keep:
                sums.stats.index_add_(1, idx_j, phi_j)
                ld = torch.log(d)
                if u is not None:
                    ld = ld * u[j]
                logd += ld if mask_j is None else ld * mask_j
        acc_x = None if extra is None else extra.phi_sum(E, rows, keep)
        g_new = a + acc
        if acc_x is not None:
            g_new = g_new + acc_x
        if keep:
            V = V_all[rows].to(g.dtype)
            sums.plogp += sum64(acc * E) - sum64(m[0] * V) - sum64(logd)
        done = last
        if tol > 0 and not last:
            done = float((g_new - g).abs().sum() / g.sum()) <= tol
        g = g_new
        if done:
            break
    return g, (acc if acc_x is None else acc + acc_x), t


def _have_numba() -> bool:
    try:
        import numba  # noqa: F401
    except ImportError:  # pragma: no cover - numba is a dependency
        return False
    return True


def _e_step_numba(alpha, beta, data, gamma, n_iter, collect, n_jobs=None, run_estep=None):
    """:func:`e_step` by the fused kernel: an :class:`EStep` with its :class:`RowTerms`.

    ``run_estep``: the kernel's entry point (default :func:`_bce_numba.run_estep`; a
    benchmark passes an earlier version of it).
    """
    if run_estep is None:
        from consensuskit.models.bce.kernels import run_estep

    if gamma.device.type != "cpu":
        raise ValueError("backend='numba' needs CPU tensors")
    K, N = gamma.shape
    L = data.n_total_labels
    idx, mask = data.row_layout()
    dt = gamma.dtype
    betaT = np.ascontiguousarray(with_missing_column(beta.detach().to(dt)).T.numpy())
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
        return EStep(gamma_out, phi_sum, None, None, n_iter, None)
    st = torch.from_numpy(stats[:L].T.copy())
    plogp = float(terms[K]) + float((st * torch.log(beta.detach().double())).sum())
    rt = RowTerms(suff=torch.from_numpy(terms[:K].copy()), cross=float(terms[K + 1]),
                  lgamma=float(terms[K + 2]), n_rows=N)
    return EStep(gamma_out, phi_sum, st.to(beta.dtype), plogp, n_iter, rt)


def initial_gamma(alpha, data: LabelData, dtype=None, row_weights=None):
    """``gamma_i = alpha + V_i / K`` (the authors' initialisation), shape (K, N).

    ``row_weights`` (N,) replaces ``V_i`` (GBCE: the weighted count of labels and features).
    """
    K = alpha.shape[0]
    V = data.n_observed_rows if row_weights is None else row_weights
    V = V.to(dtype or alpha.dtype)
    return alpha.to(V.dtype)[:, None] + V[None, :] / K


def fold_in(alpha, beta, data: LabelData, *, max_iter: int = 500, tol: float = 1e-8,
            chunk_size: int = 32768, weights=None, extra=None, row_weights=None):
    """Variational posterior ``gamma`` (K, N) of new rows for fixed alpha and beta.

    ``weights``, ``extra`` and ``row_weights`` as in :func:`e_step` / :func:`initial_gamma`.
    """
    g0 = initial_gamma(alpha, data, beta.dtype, row_weights)
    return e_step(alpha, beta, data, g0, max_iter, collect=False, tol=tol,
                  chunk_size=chunk_size, weights=weights, extra=extra).gamma


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


def init_beta_seeded(ensemble, n_clusters: int, random_state, *, smoothing: float = 1e-2,
                     max_rows: int = 2000, n_lloyd: int = 2):
    """Initial beta from k-means++ seeding on a row subsample, as a ``(K, L)`` float64 array.

    The cheap default initialisation: on at most ``max_rows`` random rows, K seeds are
    chosen by k-means++ (D^2 sampling) under the Hamming distance between label rows (a
    missing label differs from nothing; it is the squared distance of the one-hot rows up to
    a factor 2), then ``n_lloyd`` assignment steps to the nearest seed profile (the
    profile: each cluster's label distribution per column, matched by its expected
    disagreement).  Each cluster's label counts over its members, plus ``smoothing``,
    normalised per column, give beta.  Cost: O(max_rows * K * M * (1 + n_lloyd)), about
    one E-step on ``max_rows`` rows -- independent of N.
    """
    from sklearn.utils import check_random_state

    rs = check_random_state(random_state)
    N = ensemble.n_samples
    rows = np.arange(N) if N <= max_rows else np.sort(rs.choice(N, max_rows, replace=False))
    codes = ensemble.codes[rows].astype(np.int64)  # (n, M), small
    n, M = codes.shape
    obs = codes >= 0
    K = int(n_clusters)
    gidx = np.where(obs, codes + ensemble.offsets[:-1], 0)
    L = ensemble.n_total_labels

    def disagreement(profile):
        """Expected number of observed labels of each row differing from ``profile`` (K, L)."""
        # sum_j [obs] (1 - profile_k(x_ij)), (n, K)
        agree = (profile.T[gidx] * obs[:, :, None]).sum(1)
        return obs.sum(1)[:, None] - agree

    first = rs.randint(n)
    seeds = [first]
    d2 = ((codes != codes[first]) & obs & obs[first]).sum(1).astype(np.float64)
    for _ in range(1, K):
        total = d2.sum()
        nxt = rs.randint(n) if total <= 0 else rs.choice(n, p=d2 / total)
        seeds.append(nxt)
        d2 = np.minimum(d2, ((codes != codes[nxt]) & obs & obs[nxt]).sum(1))
    onehot_rows = np.zeros((K, L))
    for k, i in enumerate(seeds):
        onehot_rows[k, gidx[i][obs[i]]] = 1.0
    lab = disagreement(onehot_rows).argmin(1)
    for _ in range(n_lloyd):
        counts = np.zeros((K, L))
        np.add.at(counts, (np.repeat(lab, M)[obs.ravel()], gidx[obs]), 1.0)
        profile = update_beta(torch.as_tensor(counts), ensemble.offsets,
                              smoothing=smoothing).numpy()
        lab = disagreement(profile).argmin(1)
    counts = np.zeros((K, L))
    np.add.at(counts, (np.repeat(lab, M)[obs.ravel()], gidx[obs]), 1.0)
    beta = update_beta(torch.as_tensor(counts), ensemble.offsets, smoothing=smoothing)
    return beta.numpy()


def init_beta_random(ensemble, n_clusters: int, random_state):
    """Initial beta, each row of each ``beta_j`` from a flat Dirichlet (authors' default)."""
    from sklearn.utils import check_random_state

    rs = check_random_state(random_state)
    blocks = [rs.dirichlet(np.ones(k), size=n_clusters) for k in ensemble.n_labels]
    return np.concatenate(blocks, axis=1)


@dataclass
class CAVIState:
    """State (and, at the end of a run, result) of BCE / GBCE variational EM.

    Attributes
    ----------
    alpha : Tensor (K,);  beta : Tensor (K, L);  gamma : Tensor (K, N)
    bound : float
        The objective after the last iteration (nan at the start).
    mu, sigma2 : Tensor (K, D) or None
        GBCE's feature Gaussians (None for BCE).
    n_alpha_rejected : int
        Iterations so far whose Newton solve for alpha stalled (alpha left unchanged).
    n_variance_floored : int
        GBCE: feature variances ``sigma2_hf`` raised to the smallest positive float so far
        (summed over iterations; see :func:`consensuskit.models.gbce.cavi.update_gaussian`).
    """

    alpha: torch.Tensor
    beta: torch.Tensor
    gamma: torch.Tensor
    bound: float = math.nan
    mu: torch.Tensor | None = None
    sigma2: torch.Tensor | None = None
    n_alpha_rejected: int = 0
    n_variance_floored: int = 0


def _identity_reduce(x, name):
    return x


class CAVI(Engine):
    """BCE's variational EM (eqs. 5-8) as an engine of :func:`consensuskit.inference.driver.fit`.

    One step: :func:`e_step` (``inner_iter`` warm-started passes), then
    :func:`update_beta` (eq. 7), the features' M-step if any, :func:`update_alpha`
    (eq. 8, with ``ensure_ascent``), and the objective ``L + smoothing * sum ln beta``
    (:func:`lower_bound`, plus the features' terms), which never decreases.  A run is
    degenerate when ``sum(alpha)`` passes ``alpha_cap`` (the prior swamps the data and
    every ``theta_i`` collapses onto the same mean); default ``10 * max_i V_i``.

    Parameters
    ----------
    data : LabelData
        The rows this process holds.
    n_clusters : int
    init_beta : callable(rng) -> array (K, L), or array (K, L)
        Initial beta of each run.
    alpha0 : array (K,) or None
        Initial alpha (default ones).
    features : object or None
        GBCE's feature term (:class:`consensuskit.models.gbce.cavi.FeatureTerm`):
        label ``weights``, ``row_weights``, ``initial()``, ``e_term(mu, sigma2)``,
        ``m_step(term, mu, sigma2)`` (-> mu, sigma2, number of variances floored) and
        ``bound(term, mu, sigma2)``.
    reduce : callable(tensor, name) -> tensor, or None
        Sums a tensor over the processes that hold the other rows (row-distributed EM:
        an all-reduce); None: this process holds every row.
    n_rows : int or None
        ``N`` over all processes (default: this process's rows).
    backend, n_jobs : passed to :func:`e_step`.

    alpha's statistic and the bound's row terms come with the E-step
    (:class:`RowTerms`; on CPU from the kernel's last pass), not from a second pass.
    """

    def __init__(self, data: LabelData, n_clusters: int, init_beta, *, alpha0=None,
                 inner_iter: int = 5, smoothing: float = 1e-6, alpha_cap: float | None = None,
                 newton_tol: float = 1e-10, chunk_size: int = 8192, backend: str = "auto",
                 features=None, reduce=None, n_rows: int | None = None,
                 n_jobs: int | None = None):
        self.data = data
        self.K = int(n_clusters)
        self.init_beta = init_beta
        self.alpha0 = alpha0
        self.inner_iter = inner_iter
        self.smoothing = smoothing
        self.newton_tol = newton_tol
        self.chunk_size = chunk_size
        self.backend = backend
        self.n_jobs = n_jobs
        self.features = features
        self.reduce = reduce
        self.n_rows = data.n_rows if n_rows is None else int(n_rows)
        self.dtype = data.n_observed_rows.dtype
        self.device = data.idx.device
        self.weights = None if features is None else features.weights
        self.row_weights = None if features is None else features.row_weights
        if alpha_cap is None:
            V = data.n_observed_rows if self.row_weights is None else self.row_weights
            alpha_cap = 10.0 * float(V.max())
        self.alpha_cap = alpha_cap

    def _tensor(self, x):
        return torch.as_tensor(x, dtype=self.dtype, device=self.device)

    def init(self, rng, run=0):
        beta = self._tensor(self.init_beta(rng) if callable(self.init_beta) else self.init_beta)
        alpha = (torch.ones(self.K, dtype=self.dtype, device=self.device)
                 if self.alpha0 is None else self._tensor(self.alpha0))
        gamma = initial_gamma(alpha, self.data, self.dtype, self.row_weights)
        mu = sigma2 = None
        if self.features is not None:
            mu, sigma2 = self.features.initial(self.K)
        return CAVIState(alpha, beta, gamma, math.nan, mu, sigma2)

    def step(self, state, rng=None):
        f = self.features
        term = None if f is None else f.e_term(state.mu, state.sigma2)
        gamma, phi_sum, stats, plogp, _, terms = e_step(
            state.alpha, state.beta, self.data, state.gamma, self.inner_iter,
            chunk_size=self.chunk_size, backend=self.backend, weights=self.weights, extra=term,
            n_jobs=self.n_jobs, with_terms=True)
        suff = terms.suff.to(self.dtype)
        local_stats = stats
        if self.reduce is not None:
            K, L = stats.shape
            buf = torch.cat([stats.reshape(-1), suff]).to(torch.float64)
            buf = self.reduce(buf, "row/suffstats").to(self.dtype)
            stats, suff = buf[:K * L].reshape(K, L), buf[K * L:]
        beta = update_beta(stats, self.data.offsets, self.smoothing)
        mu, sigma2, n_floored = state.mu, state.sigma2, 0
        if term is not None:
            mu, sigma2, n_floored = f.m_step(term, mu, sigma2)
        alpha, newton = update_alpha(state.alpha, suff, self.n_rows, tol=self.newton_tol,
                                     ensure_ascent=True, alpha_cap=self.alpha_cap)
        if self.reduce is None:
            lb = lower_bound(alpha, beta, gamma, phi_sum, stats, plogp, smoothing=self.smoothing,
                             terms=terms)
        else:
            part = lower_bound(alpha, beta, gamma, phi_sum, local_stats, plogp, smoothing=0.0,
                               terms=terms)
            part = self.reduce(torch.tensor([part], dtype=torch.float64), "row/bound")
            lb = float(part) + self.smoothing * float(torch.log(beta).sum(dtype=torch.float64))
        if term is not None:
            lb += f.bound(term, mu, sigma2)
        return CAVIState(alpha, beta, gamma, lb, mu, sigma2,
                         state.n_alpha_rejected + int(newton["stalled"]),
                         state.n_variance_floored + n_floored)

    def objective(self, state) -> float:
        return state.bound

    def degenerate(self, state) -> bool:
        return float(state.alpha.sum()) > self.alpha_cap

    def info(self, state) -> dict:
        return {"lower_bound": state.bound}


def variational_em(data: LabelData, n_clusters: int, beta0, alpha0=None, *, max_iter: int = 100,
                   tol: float = 1e-6, inner_iter: int = 5, smoothing: float = 1e-6,
                   alpha_cap: float | None = None, newton_tol: float = 1e-10,
                   chunk_size: int = 8192, backend: str = "auto", features=None,
                   n_jobs: int | None = None):
    """One run of variational EM from ``beta0`` (K, L): :class:`CAVI` under the driver.

    Stops when the objective's relative change is ``<= tol``, after ``max_iter``
    iterations, or at the degenerate optimum.  ``features``: GBCE's feature term;
    ``n_jobs``: threads for the E-step kernel (see :func:`e_step`).

    Returns
    -------
    Run
        ``params`` a :class:`CAVIState`; ``objectives`` the bound after every iteration;
        ``n_iter``, ``converged``, ``degenerate``.
    """
    engine = CAVI(data, n_clusters, beta0, alpha0=alpha0, inner_iter=inner_iter,
                  smoothing=smoothing, alpha_cap=alpha_cap, newton_tol=newton_tol,
                  chunk_size=chunk_size, backend=backend, features=features, n_jobs=n_jobs)
    return drive(engine, max_iter=max_iter, tol=tol).best
