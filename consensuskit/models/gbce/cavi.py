"""Variational EM (CAVI) for generalized Bayesian cluster ensembles (paper eqs. 12-17).

GBCE (Wang, Shan & Banerjee 2011, section 6) adds the ``D`` original features of
each point to BCE: feature ``f`` of a point in consensus cluster ``h`` is
``Normal(mu_hf, sigma2_hf)``.  Base clustering ``j`` counts ``u_j`` times and
feature ``f`` counts ``w_f`` times (real weights >= 0; the paper's repetitions).
Model and guide in Pyro: :mod:`consensuskit.models.gbce.spec`.

GBCE *is* BCE plus a feature term.  The fit is BCE's engine
(:class:`consensuskit.models.bce.cavi.CAVI`: its E-step with per-column weights
``u_j``, eq. 12 = BCE eq. 5; the beta update, eq. 15 = BCE eq. 7 on weighted counts;
the Newton update of alpha, BCE eq. 8; the label part of the bound) given a
:class:`FeatureTerm`, which this module defines from

* :func:`update_phi_features` -- eq. 13,
  ``phi_ifh ∝ exp(E_q[log theta_ih]) N(o_if | mu_hf, sigma2_hf)``; its weighted sum
  enters gamma beside the labels' (eq. 14,
  ``gamma_i = alpha + sum_j u_j phi_ij + sum_f w_f phi_if``);
* :func:`feature_statistics` / :func:`update_gaussian` -- eqs. 16-17 (weighted mean
  and variance), optionally smoothed by a pseudo-observation (see below);
* :func:`feature_expected_loglik` / :func:`feature_log_prior` -- the features' share
  of the weighted bound.

The weighted bound (per row ``i``; ``E_h = psi(gamma_ih) - psi(sum gamma_i)``;
observed labels / features only)::

    lnG(sum a) - sum_h lnG(a_h) + sum_h (a_h - 1) E_h
    + sum_j u_j sum_h phi_ijh (E_h + ln beta_j(h, x_ij) - ln phi_ijh)
    + sum_f w_f sum_h phi_ifh (E_h + ln N(o_if | mu_hf, sigma2_hf) - ln phi_ifh)
    - lnG(sum gamma_i) + sum_h lnG(gamma_ih) - sum_h (gamma_ih - 1) E_h

is exactly Pyro's ELBO of the model with ``poutine.scale`` weights under the
mean-field guide (tested).  With every ``w_f = 0`` (features dropped) and every
``u_j = 1`` every number equals :mod:`~consensuskit.models.bce.cavi`'s.

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
by the engine includes the log-prior, so it never decreases.

Layout follows :mod:`~consensuskit.models.bce.cavi`: per-row arrays are
``(K, N)``, features are stored ``(D, N)``, ``mu`` and ``sigma2`` are ``(K, D)``.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from consensuskit.models.bce.cavi import sum64

__all__ = [
    "FeatureTerm",
    "feature_term",
    "feature_loglik",
    "update_phi_features",
    "feature_statistics",
    "update_gaussian",
    "feature_expected_loglik",
    "feature_log_prior",
]

_LOG_2PI = math.log(2.0 * math.pi)


def _as_weights(value, size: int, name: str) -> np.ndarray:
    w = np.asarray(value, dtype=np.float64)
    if w.ndim == 0:
        w = np.full(size, float(w))
    if w.shape != (size,):
        raise ValueError(f"{name} must be a number or have shape ({size},); got shape {w.shape}")
    if not np.all(np.isfinite(w)) or (w < 0).any():
        raise ValueError(f"{name} must be finite and >= 0; got {value!r}")
    return w


def feature_term(ensemble, features=None, label_weight=1.0, feature_weight=1.0, *,
                 smoothing: float = 0.0, device="cpu", dtype=torch.float64, center=None,
                 spread=None) -> FeatureTerm:
    """GBCE's features and weights laid out as BCE's extra term (:class:`FeatureTerm`).

    Parameters
    ----------
    ensemble : Ensemble
        ``N`` rows, ``M`` base clusterings (for the label weights' row sums).
    features : array-like (N, D) of float or None
        NaN marks a missing value.  Features whose weight is 0 are dropped here.
        Validation (finite values, no all-missing column) is the estimator's job.
    label_weight : float or array-like (M,)
        ``u_j``.
    feature_weight : float or array-like (D,)
        ``w_f``.
    smoothing : float
        ``nu``, the features' pseudo-observations (module docstring).
    center, spread : array-like (D,) or None
        Overall mean and variance of each feature (all ``D`` columns); None: from
        ``features``.  Fold-in passes the training values.
    """
    labels = ensemble.label_data(device, dtype)
    M = labels.n_partitions
    u = torch.as_tensor(_as_weights(label_weight, M, "label_weight"), dtype=dtype, device=device)
    weighted = labels.weighted_rows(u)
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
    as_t = lambda v: torch.as_tensor(np.asarray(v, dtype=np.float64)[keep], dtype=dtype,  # noqa: E731
                                     device=device)
    return FeatureTerm(weights=u, row_weights=weighted, y=y, fmask=fmask, feature_weight=w,
                       feature_index=keep, center=as_t(center), spread=as_t(spread),
                       smoothing=float(smoothing))


class FeatureTerm:
    """GBCE's features as an extra term of BCE's engine (see the module docstring).

    Attributes
    ----------
    weights : Tensor (M,)
        Label weights ``u_j``.
    row_weights : Tensor (N,)
        ``sum_j u_j [x_ij observed] + sum_f w_f [o_if observed]``: gamma's start and the
        degeneracy cap.
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
    smoothing : float
        ``nu``.
    """

    def __init__(self, *, weights, row_weights, y, fmask, feature_weight, feature_index, center,
                 spread, smoothing):
        self.weights = weights
        self.row_weights = row_weights
        self.y = y
        self.fmask = fmask
        self.feature_weight = feature_weight
        self.feature_index = feature_index
        self.center = center
        self.spread = spread
        self.smoothing = smoothing

    @property
    def n_features(self) -> int:
        return int(self.y.shape[0])

    def initial(self, n_clusters: int):
        """``mu_hf = m_f``, ``sigma2_hf = s_f``: features start neutral, shape (K, D) each."""
        K = n_clusters
        mu = self.center[None, :].expand(K, -1).clone()
        s2 = self.spread.clamp_min(torch.finfo(self.spread.dtype).tiny)
        return mu, s2[None, :].expand(K, -1).clone()

    def e_term(self, mu, sigma2):
        """The hook for one E-step at ``mu, sigma2`` (None without features)."""
        return _FeaturePass(self, mu, sigma2) if self.n_features else None

    def m_step(self, term, mu, sigma2):
        """Eqs. 16-17 from the statistics ``term`` accumulated (kept where a cluster is empty).

        Returns ``mu``, ``sigma2`` and the number of variances raised to the smallest
        positive float (see :func:`update_gaussian`).
        """
        return update_gaussian(*term.stats, self.center, self.spread, self.smoothing,
                               mu=mu, sigma2=sigma2, return_floored=True)

    def bound(self, term, mu, sigma2) -> float:
        """The features' share of the weighted bound, plus their smoothing log-prior."""
        return (feature_expected_loglik(mu, sigma2, *term.stats, self.center)
                + feature_log_prior(mu, sigma2, self.center, self.spread, self.smoothing))


class _FeaturePass:
    """One E-step's feature assignments (eq. 13): weighted phi sums, statistics, entropy."""

    def __init__(self, term: FeatureTerm, mu, sigma2):
        self.term, self.mu, self.sigma2 = term, mu, sigma2
        self.stats = None
        self.phi_log_phi = 0.0

    def chunk_size(self, chunk_size: int, n_clusters: int) -> int:
        # keep the (D, K, chunk) feature temporaries near 32k entries per feature
        return max(1, min(chunk_size, (1 << 22) // max(1, self.term.n_features * n_clusters)))

    def phi_sum(self, E, rows, keep):
        t = self.term
        yr = t.y[:, rows]
        fm = None if t.fmask is None else t.fmask[:, rows]
        phi_f, log_phi_f, _ = update_phi_features(E, self.mu, self.sigma2, yr, fm,
                                                  return_log=True)
        wphi = phi_f * t.feature_weight[:, None, None]
        if keep:
            d = feature_statistics(phi_f, yr, fm, t.feature_weight, t.center)
            self.stats = d if self.stats is None else tuple(a + b for a, b in zip(self.stats, d))
            # log_phi_f is finite everywhere; wphi is 0 where o_if is missing
            self.phi_log_phi += sum64(wphi * log_phi_f)
        return wphi.sum(0)


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


def update_gaussian(W, S1, S2, center, spread, smoothing: float = 0.0, mu=None, sigma2=None,
                    return_floored: bool = False):
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
    return_floored : bool
        Also return how many ``sigma2_hf`` of non-empty clusters came out below the
        smallest positive float and were raised to it: with ``nu = 0`` a cluster that
        owns one point or one repeated value (eq. 17 gives 0 and the bound +inf).

    Returns
    -------
    mu, sigma2 : Tensor (K, D)
    n_floored : int, with ``return_floored``
    """
    den = W + smoothing
    empty = den <= 0
    safe = torch.where(empty, torch.ones_like(den), den)
    delta = S1 / safe
    var = (S2 - S1 * delta + smoothing * spread[None, :]) / safe
    tiny = torch.finfo(var.dtype).tiny
    n_floored = int(((var < tiny) & ~empty).sum()) if return_floored else 0
    var = var.clamp_min(tiny)
    new_mu = center[None, :] + delta
    if mu is not None and bool(empty.any()):
        new_mu = torch.where(empty, mu, new_mu)
        var = torch.where(empty, sigma2, var)
    if return_floored:
        return new_mu, var, n_floored
    return new_mu, var


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
