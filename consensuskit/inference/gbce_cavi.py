"""Variational EM (CAVI) for generalized Bayesian cluster ensembles (paper eqs. 12-17).

GBCE (Wang, Shan & Banerjee 2011, section 6) adds the ``D`` original features of
each point to BCE: feature ``f`` of a point in consensus cluster ``h`` is
``Normal(mu_hf, sigma2_hf)``.  Base clustering ``j`` counts ``u_j`` times and
feature ``f`` counts ``w_f`` times (real weights >= 0; the paper's repetitions).
Model and guide in Pyro: :mod:`consensuskit.models.gbce`.

The label part *is* BCE: this module reuses :mod:`consensuskit.inference.bce_cavi`
for the label assignments (eq. 12 = BCE eq. 5), the beta update (eq. 15 = BCE
eq. 7 on weighted counts), the Newton update of alpha (BCE eq. 8) and the label
part of the bound; it adds

* :func:`update_phi_features` -- eq. 13,
  ``phi_ifh ∝ exp(E_q[log theta_ih]) N(o_if | mu_hf, sigma2_hf)``;
* :func:`update_gamma` -- eq. 14, ``gamma_i = alpha + sum_j u_j phi_ij + sum_f w_f phi_if``;
* :func:`feature_statistics` / :func:`update_gaussian` -- eqs. 16-17 (weighted mean
  and variance), optionally smoothed by a pseudo-observation (see below);
* :func:`lower_bound` -- the weighted bound.

The weighted bound (per row ``i``; ``E_h = psi(gamma_ih) - psi(sum gamma_i)``;
observed labels / features only)::

    lnG(sum a) - sum_h lnG(a_h) + sum_h (a_h - 1) E_h
    + sum_j u_j sum_h phi_ijh (E_h + ln beta_j(h, x_ij) - ln phi_ijh)
    + sum_f w_f sum_h phi_ifh (E_h + ln N(o_if | mu_hf, sigma2_hf) - ln phi_ifh)
    - lnG(sum gamma_i) + sum_h lnG(gamma_ih) - sum_h (gamma_ih - 1) E_h

is exactly Pyro's ELBO of the model with ``poutine.scale`` weights under the
mean-field guide (tested).  With every ``w_f = 0`` (features dropped) and every
``u_j = 1`` every number equals :mod:`~consensuskit.inference.bce_cavi`'s.

Feature smoothing
-----------------
With ``feature_smoothing = nu > 0`` each (cluster, feature) pair gets ``nu``
pseudo-observations at the feature's overall mean ``m_f`` with spread ``s_f``
(its overall variance), i.e. the log-prior
``-(nu/2) ln sigma2_hf - nu ((mu_hf - m_f)^2 + s_f) / (2 sigma2_hf)`` is added to
the objective.  Its exact maximiser is eqs. 16-17 with the pseudo-observation
included::

    mu_hf     = m_f + S1_hf / (W_hf + nu)
    sigma2_hf = (S2_hf - S1_hf (mu_hf - m_f) + nu s_f) / (W_hf + nu)

with ``W = sum_i w_f phi_ifh``, ``S1 = sum_i w_f phi_ifh (o_if - m_f)``,
``S2 = sum_i w_f phi_ifh (o_if - m_f)^2``.  It keeps ``sigma2 > 0`` when a cluster
owns a single point or one repeated value (where eq. 17 gives 0 and the bound
+inf); ``nu = 0`` is the paper's eqs. 16-17 exactly.  The objective tracked
by :func:`variational_em` includes the log-prior, so it never decreases.

Layout follows :mod:`~consensuskit.inference.bce_cavi`: per-row arrays are
``(K, N)``, features are stored ``(D, N)``, ``mu`` and ``sigma2`` are ``(K, D)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from . import bce_cavi as bce
from .bce_cavi import BCEData, elog_dirichlet, update_alpha, update_beta

__all__ = [
    "GBCEData",
    "prepare_data",
    "feature_loglik",
    "update_phi_features",
    "update_gamma",
    "feature_statistics",
    "update_gaussian",
    "initial_gaussian",
    "feature_expected_loglik",
    "feature_log_prior",
    "lower_bound",
    "e_step",
    "initial_gamma",
    "fold_in",
    "variational_em",
]

_LOG_2PI = math.log(2.0 * math.pi)


@dataclass
class GBCEData:
    """Labels, features and weights laid out for the engine.

    Attributes
    ----------
    labels : BCEData
        The label part (see :func:`consensuskit.inference.bce_cavi.prepare_data`).
    label_weight : Tensor (M,)
        ``u_j``.
    y : Tensor (D, N)
        The features that enter the model (weight > 0), missing set to 0.
    fmask : Tensor (D, N) or None
        1.0 where the feature is observed; None when nothing is missing.
    feature_weight : Tensor (D,)
        ``w_f`` of the features in ``y`` (all > 0).
    feature_index : ndarray of int (D,)
        Column of the caller's feature matrix each row of ``y`` comes from.
    center, spread : Tensor (D,)
        Mean ``m_f`` and (population) variance ``s_f`` of the observed values;
        the smoothing pseudo-observation and the initial ``mu``/``sigma2``.
    label_rows : Tensor (N,)
        ``sum_j u_j [x_ij observed]`` (BCE's ``V_i`` when every ``u_j = 1``).
    weighted_rows : Tensor (N,)
        ``label_rows + sum_f w_f [o_if observed]``.
    """

    labels: BCEData
    label_weight: torch.Tensor
    y: torch.Tensor
    fmask: torch.Tensor | None
    feature_weight: torch.Tensor
    feature_index: np.ndarray
    center: torch.Tensor
    spread: torch.Tensor
    label_rows: torch.Tensor
    weighted_rows: torch.Tensor

    @property
    def n_rows(self) -> int:
        return self.labels.n_rows

    @property
    def n_features(self) -> int:
        return int(self.y.shape[0])


def _as_weights(value, size: int, name: str) -> np.ndarray:
    w = np.asarray(value, dtype=np.float64)
    if w.ndim == 0:
        w = np.full(size, float(w))
    if w.shape != (size,):
        raise ValueError(f"{name} must be a number or have shape ({size},); got shape {w.shape}")
    if not np.all(np.isfinite(w)) or (w < 0).any():
        raise ValueError(f"{name} must be finite and >= 0; got {value!r}")
    return w


def prepare_data(ensemble, features=None, label_weight=1.0, feature_weight=1.0,
                 *, device="cpu", dtype=torch.float64, center=None, spread=None) -> GBCEData:
    """Lay out labels, features and weights for the engine.

    Parameters
    ----------
    ensemble : Ensemble
        ``N`` rows, ``M`` base clusterings.
    features : array-like (N, D) of float or None
        NaN marks a missing value.  Features whose weight is 0 are dropped here.
        Validation (finite values, no all-missing column) is the estimator's job.
    label_weight : float or array-like (M,)
        ``u_j``.
    feature_weight : float or array-like (D,)
        ``w_f``.
    center, spread : array-like (D,) or None
        Overall mean and variance of each feature (all ``D`` columns); None: from
        ``features``.  Fold-in passes the training values.

    Returns
    -------
    GBCEData
    """
    lab = bce.prepare_data(ensemble, device=device, dtype=dtype)
    M = lab.n_partitions
    u = torch.as_tensor(_as_weights(label_weight, M, "label_weight"), dtype=dtype, device=device)
    obs_lab = torch.as_tensor(ensemble.mask.T, dtype=dtype, device=device)
    label_rows = (u[:, None] * obs_lab).sum(0)
    weighted = label_rows
    if features is None:
        F = np.zeros((ensemble.n_samples, 0))
    else:
        F = np.asarray(features, dtype=np.float64)
    D_all = F.shape[1]
    w_all = _as_weights(feature_weight, D_all, "feature_weight")
    obs = ~np.isnan(F)
    if center is None:
        n_obs = obs.sum(0)
        with np.errstate(invalid="ignore", divide="ignore"):
            center = np.where(n_obs > 0, np.nansum(F, 0) / np.maximum(n_obs, 1), 0.0)
            spread = np.where(n_obs > 0,
                              np.nansum((F - center) ** 2, 0) / np.maximum(n_obs, 1), 0.0)
    keep = np.flatnonzero(w_all > 0)
    Fk = F[:, keep]
    ok = obs[:, keep]
    y = torch.as_tensor(np.ascontiguousarray(np.where(ok, Fk, 0.0).T), dtype=dtype, device=device)
    fmask = None
    if not ok.all():
        fmask = torch.as_tensor(np.ascontiguousarray(ok.T), dtype=dtype, device=device)
    w = torch.as_tensor(w_all[keep], dtype=dtype, device=device)
    if keep.size:
        okt = torch.as_tensor(ok.T, dtype=dtype, device=device)
        weighted = weighted + (w[:, None] * okt).sum(0)
    return GBCEData(
        labels=lab, label_weight=u, y=y, fmask=fmask, feature_weight=w, feature_index=keep,
        center=torch.as_tensor(np.asarray(center, dtype=np.float64)[keep], dtype=dtype,
                               device=device),
        spread=torch.as_tensor(np.asarray(spread, dtype=np.float64)[keep], dtype=dtype,
                               device=device),
        label_rows=label_rows, weighted_rows=weighted)


# ---------------------------------------------------------------- feature part
def feature_loglik(mu, sigma2, y):
    """``ln N(o_if | mu_hf, sigma2_hf)`` for every (f, h, i).

    Parameters
    ----------
    mu, sigma2 : Tensor (K, D)
    y : Tensor (D, n)

    Returns
    -------
    Tensor (D, K, n)
    """
    m = mu.T[:, :, None]
    s2 = sigma2.T[:, :, None]
    return -0.5 * (_LOG_2PI + torch.log(s2)) - (y[:, None, :] - m) ** 2 / (2.0 * s2)


def update_phi_features(elog_theta, mu, sigma2, y, fmask=None, *, return_log=False):
    """Paper eq. 13: feature assignments from the Gaussian log-likelihood.

    ``phi_ifh ∝ exp(E_q[log theta_ih] - ln sigma_hf - (o_if - mu_hf)^2 / (2 sigma2_hf))``.

    Parameters
    ----------
    elog_theta : Tensor (K, n)
    mu, sigma2 : Tensor (K, D)
    y : Tensor (D, n)
    fmask : Tensor (D, n) or None
        Missing features get ``phi = 0``.
    return_log : bool
        Also return ``ln phi`` (before masking) and the log-likelihoods.

    Returns
    -------
    phi : Tensor (D, K, n)
    (log_phi, loglik) : Tensor (D, K, n) each, only with ``return_log``
    """
    ll = feature_loglik(mu, sigma2, y)
    lp = elog_theta[None, :, :] + ll
    log_phi = lp - torch.logsumexp(lp, dim=1, keepdim=True)
    phi = torch.exp(log_phi)
    if fmask is not None:
        phi = phi * fmask[:, None, :]
    if return_log:
        return phi, log_phi, ll
    return phi


def update_gamma(alpha, label_phi_sum, feature_phi_sum=None):
    """Paper eq. 14: ``gamma_i = alpha + sum_j u_j phi_ij + sum_f w_f phi_if``.

    The two sums (each (K, N)) are already weighted.  Returns gamma (K, N).
    """
    g = bce.update_gamma(alpha, label_phi_sum)
    if feature_phi_sum is not None:
        g = g + feature_phi_sum
    return g


def feature_statistics(phi_f, y, fmask, feature_weight, center):
    """Weighted sufficient statistics of eqs. 16-17 for one block of rows.

    Parameters
    ----------
    phi_f : Tensor (D, K, n)
        Feature assignments (0 where missing).
    y : Tensor (D, n);  fmask : Tensor (D, n) or None
    feature_weight : Tensor (D,);  center : Tensor (D,)

    Returns
    -------
    W, S1, S2 : Tensor (K, D) each
        ``sum_i w_f phi_ifh``, ``... (o_if - m_f)``, ``... (o_if - m_f)^2``.
    """
    wp = phi_f * feature_weight[:, None, None]
    dy = y - center[:, None]
    if fmask is not None:
        dy = dy * fmask
    W = wp.sum(-1).T
    S1 = (wp * dy[:, None, :]).sum(-1).T
    S2 = (wp * (dy * dy)[:, None, :]).sum(-1).T
    return W, S1, S2


def update_gaussian(W, S1, S2, center, spread, smoothing: float = 0.0, mu=None, sigma2=None):
    """Paper eqs. 16-17 (weighted mean and variance), with ``smoothing`` pseudo-observations.

    Parameters
    ----------
    W, S1, S2 : Tensor (K, D)
        From :func:`feature_statistics` (summed over all rows).
    center, spread : Tensor (D,)
        ``m_f`` and ``s_f`` of the pseudo-observation.
    smoothing : float
        ``nu`` >= 0 (see the module docstring).
    mu, sigma2 : Tensor (K, D) or None
        Previous values, kept where ``W + nu == 0`` (an empty cluster without
        smoothing: the bound does not depend on them there).

    Returns
    -------
    mu, sigma2 : Tensor (K, D)
    """
    den = W + smoothing
    empty = den <= 0
    safe = torch.where(empty, torch.ones_like(den), den)
    delta = S1 / safe
    var = (S2 - S1 * delta + smoothing * spread[None, :]) / safe
    var = var.clamp_min(torch.finfo(var.dtype).tiny)
    new_mu = center[None, :] + delta
    if mu is not None and bool(empty.any()):
        new_mu = torch.where(empty, mu, new_mu)
        var = torch.where(empty, sigma2, var)
    return new_mu, var


def initial_gaussian(data: GBCEData, n_clusters: int):
    """``mu_hf = m_f``, ``sigma2_hf = s_f``: features start neutral, shape (K, D) each."""
    K = n_clusters
    mu = data.center[None, :].expand(K, -1).clone()
    s2 = data.spread.clamp_min(torch.finfo(data.spread.dtype).tiny)
    return mu, s2[None, :].expand(K, -1).clone()


def feature_expected_loglik(mu, sigma2, W, S1, S2, center) -> float:
    """``sum_f w_f sum_i sum_h phi_ifh ln N(o_if | mu_hf, sigma2_hf)`` from the statistics."""
    d = mu - center[None, :]
    quad = S2 - 2.0 * d * S1 + W * d * d
    val = -0.5 * (W * (_LOG_2PI + torch.log(sigma2))) - quad / (2.0 * sigma2)
    return float(val.sum(dtype=torch.float64))


def feature_log_prior(mu, sigma2, center, spread, smoothing: float) -> float:
    """The smoothing log-prior ``sum_hf -(nu/2) ln sigma2 - nu((mu - m)^2 + s) / (2 sigma2)``."""
    if not smoothing:
        return 0.0
    d = mu - center[None, :]
    val = -0.5 * smoothing * torch.log(sigma2) - smoothing * (d * d + spread[None, :]) / (
        2.0 * sigma2)
    return float(val.sum(dtype=torch.float64))


def lower_bound(alpha, beta, mu, sigma2, gamma, phi_sum, stats, fstats, phi_log_phi, data,
                *, smoothing: float = 0.0, feature_smoothing: float = 0.0, terms=None):
    """The weighted GBCE bound (module docstring), plus the smoothing log-priors.

    Parameters
    ----------
    alpha : (K,);  beta : (K, L);  mu, sigma2 : (K, D);  gamma : (K, N)
    phi_sum : Tensor (K, N)
        ``sum_j u_j phi_ij + sum_f w_f phi_if``.
    stats : Tensor (K, L)
        Weighted expected label counts ``sum_{(i,j): x_ij = l} u_j phi_ijh``.
    fstats : tuple (W, S1, S2) of Tensor (K, D), or None without features
    phi_log_phi : float
        ``sum u_j phi ln phi + sum w_f phi ln phi`` over labels and features.
    data : GBCEData
    smoothing : float
        BCE's beta pseudo-count (adds ``smoothing * sum ln beta``).
    feature_smoothing : float
        ``nu`` (adds :func:`feature_log_prior`).
    terms : bce_cavi.RowTerms, optional
        The row terms of ``(gamma, phi_sum)`` if already computed (see :func:`e_step`).
    """
    val = bce.lower_bound(alpha, beta, gamma, phi_sum, stats, phi_log_phi, smoothing=smoothing,
                          terms=terms)
    if fstats is not None and data.n_features:
        W, S1, S2 = fstats
        val += feature_expected_loglik(mu, sigma2, W, S1, S2, data.center)
        val += feature_log_prior(mu, sigma2, data.center, data.spread, feature_smoothing)
    return val


# ---------------------------------------------------------------- schedule
def e_step(alpha, beta, mu, sigma2, data: GBCEData, gamma, n_iter: int, *,
           collect: bool = True, tol: float = 0.0, chunk_size: int = 8192,
           backend: str = "auto", with_terms: bool = False):
    """``n_iter`` warm-started passes of (phi, gamma) updates, as :func:`bce_cavi.e_step`.

    Same schedule and arithmetic as BCE's torch E-step (rows in chunks; per pass,
    label phi for every base clustering from the same gamma, eq. 12; then feature
    phi, eq. 13; then gamma, eq. 14), with each label's phi counted ``u_j`` times
    and each feature's ``w_f`` times.  On the last pass the weighted label counts,
    the feature statistics and ``sum phi ln phi`` are accumulated.

    ``backend``: ``"auto"`` hands a pure-BCE problem (no feature in the model, every
    ``u_j = 1``) to :func:`bce_cavi.e_step` (whose own ``"auto"`` picks its numba
    kernel on CPU), and runs everything else here; ``"torch"`` always runs the
    torch code here (for a pure-BCE problem it gives the numbers of BCE's
    ``backend="torch"`` exactly).

    Returns
    -------
    gamma : Tensor (K, N)
    phi_sum : Tensor (K, N)
        Weighted ``sum_j u_j phi_ij + sum_f w_f phi_if`` from the last pass.
    stats : Tensor (K, L) or None
    fstats : tuple (W, S1, S2) or None
    phi_log_phi : float or None
    n_passes : int
    terms : bce_cavi.RowTerms
        Only with ``with_terms=True``: the bound's row terms and alpha's statistic at
        the returned gamma (from BCE's kernel when the problem is handed to it).
    """
    if backend not in ("auto", "torch"):
        raise ValueError(f"backend must be 'auto' or 'torch'; got {backend!r}")
    if collect and tol > 0:
        raise ValueError("e_step: tol > 0 (early stopping) is only for collect=False")
    lab = data.labels
    if backend == "auto" and not data.n_features and bool((data.label_weight == 1).all()):
        out = bce.e_step(alpha, beta, lab, gamma, n_iter, collect=collect, tol=tol,
                         chunk_size=chunk_size, with_terms=with_terms)
        return out[:3] + (None,) + out[3:]
    K, N = gamma.shape
    M = lab.n_partitions
    L = lab.n_total_labels
    D = data.n_features
    u = data.label_weight
    unit = bool((u == 1).all())
    u_list = [float(v) for v in u.tolist()]
    beta_ext = bce._extend(beta)
    logb_ext = torch.log(beta_ext) if collect else None
    gamma_out = torch.empty_like(gamma)
    phi_sum = torch.empty_like(gamma)
    stats = beta.new_zeros(K, L + 1) if collect else None
    if D and collect:
        W = gamma.new_zeros(K, D)
        S1 = gamma.new_zeros(K, D)
        S2 = gamma.new_zeros(K, D)
    plogp = 0.0
    plogp_f = 0.0
    a = alpha.to(gamma.dtype)[:, None]
    wf = data.feature_weight
    max_passes = 0
    if D:  # keep the (D, K, chunk) feature temporaries near 32k entries per feature
        chunk_size = max(1, min(chunk_size, (1 << 22) // max(1, D * K)))
    for start in range(0, N, chunk_size):
        rows = slice(start, min(N, start + chunk_size))
        g = gamma[:, rows]
        yr = data.y[:, rows]
        fm = None if data.fmask is None else data.fmask[:, rows]
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
                idx_j, mask_j = lab.column(j, rows)
                phi_j, d = bce._phi_from_weights(w, beta_ext, idx_j, mask_j)
                if not unit:
                    phi_j = phi_j * u_list[j]
                acc += phi_j
                if keep:
                    stats.index_add_(1, idx_j, phi_j)
                    ld = torch.log(d)
                    if not unit:
                        ld = ld * u_list[j]
                    logd += ld if mask_j is None else ld * mask_j
            accf = None
            if D:
                phi_f, log_phi_f, _ = update_phi_features(E, mu, sigma2, yr, fm, return_log=True)
                wphi = phi_f * wf[:, None, None]
                accf = wphi.sum(0)
                if keep:
                    dW, dS1, dS2 = feature_statistics(phi_f, yr, fm, wf, data.center)
                    W += dW
                    S1 += dS1
                    S2 += dS2
                    # log_phi_f is finite everywhere; wphi is 0 where o_if is missing
                    plogp_f += bce._sum64(wphi * log_phi_f)
            g_new = a + acc
            if accf is not None:
                g_new = g_new + accf
            if keep:
                V = data.label_rows[rows]
                plogp += bce._sum64(acc * E) - bce._sum64(m[0] * V) - bce._sum64(logd)
            done = last
            if tol > 0 and not last:
                done = float((g_new - g).abs().sum() / g.sum()) <= tol
            g = g_new
            if done:
                break
        max_passes = max(max_passes, t)
        gamma_out[:, rows] = g
        phi_sum[:, rows] = acc if accf is None else acc + accf
    if collect:
        stats_L = stats[:, :L]
        plogp += bce._sum64(stats_L * logb_ext[:, :L])
        plogp += plogp_f
        fstats = (W, S1, S2) if D else None
        if with_terms:
            return (gamma_out, phi_sum, stats_L, fstats, plogp, max_passes,
                    bce.row_terms(gamma_out, phi_sum))
        return gamma_out, phi_sum, stats_L, fstats, plogp, max_passes
    return gamma_out, phi_sum, None, None, None, max_passes


def initial_gamma(alpha, data: GBCEData, dtype=None):
    """``gamma_i = alpha + (weighted count of row i) / K`` (BCE's rule, weighted), (K, N)."""
    K = alpha.shape[0]
    V = data.weighted_rows.to(dtype or alpha.dtype)
    return alpha.to(V.dtype)[:, None] + V[None, :] / K


def fold_in(alpha, beta, mu, sigma2, data: GBCEData, *, max_iter: int = 500, tol: float = 1e-8,
            chunk_size: int = 8192):
    """Variational posterior ``gamma`` (K, N) of new rows for fixed alpha, beta, mu, sigma2."""
    g0 = initial_gamma(alpha, data, beta.dtype)
    gamma = e_step(alpha, beta, mu, sigma2, data, g0, max_iter, collect=False, tol=tol,
                   chunk_size=chunk_size)[0]
    return gamma


def variational_em(data: GBCEData, n_clusters: int, beta0, alpha0=None, mu0=None, sigma20=None,
                   *, max_iter: int = 100, tol: float = 1e-6, inner_iter: int = 5,
                   smoothing: float = 1e-6, feature_smoothing: float = 1e-2,
                   alpha_cap: float | None = None, newton_tol: float = 1e-10,
                   chunk_size: int = 8192, backend: str = "auto", callback=None,
                   resume=None):
    """One run of GBCE's variational EM from ``beta0`` (K, L); BCE's schedule plus features.

    Each iteration: :func:`e_step` (``inner_iter`` warm-started passes); M-step
    ``beta`` (eq. 15, BCE's :func:`~consensuskit.inference.bce_cavi.update_beta` on
    the weighted counts), ``mu, sigma2`` (eqs. 16-17, :func:`update_gaussian`),
    ``alpha`` (BCE's Newton, eq. 8, with ``ensure_ascent``); then the objective
    (:func:`lower_bound` with both smoothing log-priors), which never decreases.
    Stops on a relative change ``<= tol``, after ``max_iter`` iterations, or when
    ``sum(alpha)`` passes ``alpha_cap`` (degenerate optimum; default 10 times the
    largest weighted row count).

    Parameters
    ----------
    mu0, sigma20 : Tensor (K, D) or None
        Initial Gaussians; None: :func:`initial_gaussian` (neutral).
    backend : {"auto", "torch"}
        Passed to :func:`e_step`.
    callback : callable or None
        ``callback(state)`` after every iteration, ``state`` a dict of ``iteration``,
        ``lower_bound``, ``alpha``, ``beta``, ``mu``, ``sigma2``, ``gamma``, ``bounds``,
        ``converged``, ``degenerate``, ``done``; returning ``False`` stops the run.
    resume : dict or None
        Such a state: the run continues from it exactly as it would have.

    Returns
    -------
    dict with ``alpha`` (K,), ``beta`` (K, L), ``mu``, ``sigma2`` (K, D), ``gamma`` (K, N),
    ``bounds`` (list), ``n_iter``, ``converged``, ``degenerate``, ``stopped``.
    """
    lab = data.labels
    dev = lab.idx.device
    dtype = lab.n_observed_rows.dtype
    K = n_clusters
    beta = torch.as_tensor(beta0, dtype=dtype, device=dev)
    alpha = (torch.ones(K, dtype=dtype, device=dev) if alpha0 is None
             else torch.as_tensor(alpha0, dtype=dtype, device=dev))
    mu, sigma2 = initial_gaussian(data, K)
    if mu0 is not None:
        mu = torch.as_tensor(mu0, dtype=dtype, device=dev)
    if sigma20 is not None:
        sigma2 = torch.as_tensor(sigma20, dtype=dtype, device=dev)
    if alpha_cap is None:
        alpha_cap = 10.0 * float(data.weighted_rows.max())
    gamma = initial_gamma(alpha, data, dtype)
    N = data.n_rows
    bounds = []
    converged = degenerate = stopped = False
    it = 0
    if resume is not None:
        alpha, beta, mu, sigma2, gamma = (
            torch.as_tensor(resume[k], dtype=dtype, device=dev)
            for k in ("alpha", "beta", "mu", "sigma2", "gamma"))
        bounds, it = list(resume["bounds"]), int(resume["iteration"])
        converged, degenerate = bool(resume["converged"]), bool(resume["degenerate"])
    while it < max_iter and not (converged or degenerate):
        it += 1
        gamma, phi_sum, stats, fstats, plogp, _, terms = e_step(
            alpha, beta, mu, sigma2, data, gamma, inner_iter, chunk_size=chunk_size,
            backend=backend, with_terms=True)
        beta = update_beta(stats, lab.offsets, smoothing)
        if fstats is not None:
            mu, sigma2 = update_gaussian(*fstats, data.center, data.spread, feature_smoothing,
                                         mu=mu, sigma2=sigma2)
        alpha, _ = update_alpha(alpha, terms.suff.to(alpha), N, tol=newton_tol,
                                ensure_ascent=True, alpha_cap=alpha_cap)
        lb = lower_bound(alpha, beta, mu, sigma2, gamma, phi_sum, stats, fstats, plogp, data,
                         smoothing=smoothing, feature_smoothing=feature_smoothing, terms=terms)
        bounds.append(lb)
        degenerate = float(alpha.sum()) > alpha_cap
        converged = (not degenerate and len(bounds) > 1
                     and abs(bounds[-1] - bounds[-2]) <= tol * abs(bounds[-1]))
        if callback is not None and callback(
            {"iteration": it, "lower_bound": lb, "alpha": alpha, "beta": beta, "mu": mu,
             "sigma2": sigma2, "gamma": gamma, "bounds": list(bounds), "converged": converged,
             "degenerate": degenerate, "done": converged or degenerate or it == max_iter}
        ) is False:
            stopped = True
            break
    return {"alpha": alpha, "beta": beta, "mu": mu, "sigma2": sigma2, "gamma": gamma,
            "bounds": bounds, "n_iter": it, "converged": converged, "degenerate": degenerate,
            "stopped": stopped}
