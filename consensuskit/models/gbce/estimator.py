"""Generalized Bayesian cluster ensembles (Wang, Shan & Banerjee 2011, section 6)."""

from __future__ import annotations

import inspect
import numbers
import warnings

import numpy as np
import torch
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from consensuskit.base import check_positive_float
from consensuskit.data.ensemble import Ensemble, as_ensemble
from consensuskit.models.bce import cavi as bce_cavi
from consensuskit.models.bce.estimator import BCE
from consensuskit.models.gbce import cavi as gcavi

__all__ = ["GBCE"]


def _check_features(features, n_rows, n_cols=None, *, fitting):
    """Validate a feature matrix: 2-D float (n_rows, D), NaN = missing, no inf.

    When fitting, a column without any observed value is an error.
    """
    if isinstance(features, Ensemble):
        raise TypeError("features must be a float array of original features, not an Ensemble")
    try:
        import torch

        if isinstance(features, torch.Tensor):
            features = features.detach().cpu().numpy()
    except ImportError:  # pragma: no cover
        pass
    if hasattr(features, "to_numpy") and hasattr(features, "columns"):
        features = features.to_numpy(dtype=np.float64, na_value=np.nan)
    try:
        F = np.asarray(features, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"features must be a numeric array of shape (n_samples, n_features); "
                         f"could not convert it to float ({exc})") from None
    if F.ndim != 2:
        hint = " (use F.reshape(-1, 1) for a single feature)" if F.ndim == 1 else ""
        raise ValueError(f"features must be 2-D of shape (n_samples, n_features); got {F.ndim}-D "
                         f"with shape {F.shape}{hint}")
    if F.shape[0] != n_rows:
        raise ValueError(f"features has {F.shape[0]} rows but the label matrix X has {n_rows}; "
                         "row i of features must describe row i of X")
    if n_cols is not None and F.shape[1] != n_cols:
        raise ValueError(f"features has {F.shape[1]} columns; the model was fitted with {n_cols}")
    if F.shape[1] == 0:
        raise ValueError("features has no columns; pass features=None to fit plain BCE")
    inf = np.isinf(F)
    if inf.any():
        i, f = np.argwhere(inf)[0]
        raise ValueError(f"feature at row {i}, column {f} is infinite "
                         "(use NaN for a missing value)")
    if fitting:
        empty = np.flatnonzero(np.isnan(F).all(axis=0))
        if empty.size:
            raise ValueError(f"feature column {empty[0]} has no observed value (all NaN; "
                             f"{empty.size} such column(s)); remove it")
    return F


#: the share of a row's weight the features may carry before fit warns that they, not the
#: base clusterings, decide the consensus (0.75: unit weights and D >= 3M)
FEATURE_SHARE_WARNING = 0.75


def _extend_signature(base_init, init):
    """``base_init``'s signature with ``init``'s own keyword parameters added (no ``**``)."""
    base = list(inspect.signature(base_init).parameters.values())
    own = [p for p in inspect.signature(init).parameters.values()
           if p.kind is inspect.Parameter.KEYWORD_ONLY]
    return inspect.Signature(base[:2] + own + base[2:])


def _features_digest(F) -> str:
    """Digest of the feature matrix (NaN included), so a checkpoint refuses other features."""
    if F is None:
        return ""
    import hashlib

    return hashlib.sha256(np.ascontiguousarray(F, dtype=np.float64).tobytes()).hexdigest()


class GBCE(BCE):
    """Generalized Bayesian cluster ensemble: consensus from base labels *and* features.

    GBCE (paper section 6) generates, for each point, its base-clustering labels
    and its original features from one mixed membership (paper symbols; ``k_j``
    labels in base clustering ``j``, ``D`` features)::

        theta_i ~ Dirichlet(alpha)                               alpha: (K,)
        u_j times, for each observed label x_ij:
            z ~ Categorical(theta_i),  x_ij ~ Categorical(beta_j[z])      beta_j: (K, k_j)
        w_f times, for each observed feature o_if:
            z ~ Categorical(theta_i),  o_if ~ Normal(mu[z, f], sigma2[z, f])  mu: (K, D)

    The weights ``u_j = label_weight`` and ``w_f = feature_weight`` may be any
    real numbers >= 0.  The paper's comparison with BCE (its Fig. 7) uses
    ``feature_weight=1`` and ``label_weight=D``, so that each base clustering
    counts as much as the whole feature vector (``label_weight="n_features"``).
    ``feature_weight=0`` (or ``features=None``) gives BCE exactly.  Fitted by
    BCE's variational EM (paper eqs. 12-17) with the features as an extra term of its
    E-step and bound (:mod:`consensuskit.models.gbce.cavi`), and BCE's
    initialisation, restarts and Newton step for ``alpha``.  Pyro
    model and guide: :mod:`consensuskit.models.gbce.spec`.

    Parameters
    ----------
    n_clusters : int, default 2
        ``K``.
    label_weight : float, array-like (M,) or "n_features", default 1.0
        ``u_j``; "n_features" means ``D``, the number of feature columns.
    feature_weight : float or array-like (D,), default 1.0
        ``w_f``; a feature with weight 0 is left out of the model.
    feature_likelihood : {"gaussian"}
        Per-cluster distribution of a feature (the paper's choice, eq. 13).
    feature_smoothing : float, default 1e-2
        ``nu``: pseudo-observations, at each feature's overall mean with its
        overall variance, added to every cluster's weighted mean/variance
        (eqs. 16-17).  Keeps ``sigma2 > 0`` when a cluster owns one value;
        0 gives eqs. 16-17 exactly.  A MAP prior, so the bound stays monotone.
    inference : {"cavi"}
        Variational EM (no SVI engine for GBCE).
    **bce_params
        Every other parameter of :class:`~consensuskit.models.bce.estimator.BCE` (``max_iter``,
        ``tol``, ``n_init``, ``inner_iter``, ``init``, ``smoothing``,
        ``n_perplexity_samples``, ``random_state``, ``device``, ``dtype``, ``verbose``,
        ``callback``, ``checkpoint_path``, ``checkpoint_every``), with the same meaning
        (the callback's ``state`` also holds ``mu`` and ``sigma2``).
        ``alpha_estimate``: None (the default) is ``"gibbs"`` with unit weights
        (``label_weight = 1``, ``feature_weight`` 0 or 1) and ``"meanfield"`` otherwise
        (``alpha_estimate_`` says which ran).  ``"gibbs"`` estimates ``alpha``,
        ``beta``, ``mu`` and ``sigma2`` by BCE's collapsed Gibbs Monte Carlo EM
        (:mod:`consensuskit.models.bce.collapsed_gibbs`) with every observed feature a
        further column of its row (``feature_sweep``), the Gaussians by eqs. 16-17 on the
        sampled assignments, and the chains compared by the exact or importance-sampled
        marginal likelihood of labels and features together
        (:mod:`consensuskit.models.gbce.selection`); it samples the generative model, so
        it needs ``label_weight = 1`` and ``feature_weight`` 0 or 1 (else ValueError).
        ``lower_bound_`` is then NaN and ``lower_bounds_`` the sampler's collapsed log
        joint per sweep.  ``"meanfield"``: the paper's weighted variational EM (any
        weights; what ``reproduce/`` uses).  ``"iw"`` raises ValueError (it refines alpha
        and beta on the labels alone, which would discard the features' contribution).

    Attributes
    ----------
    alpha_, beta_, gamma_, membership_, labels_ : as in BCE
        ``gamma_`` (N, K) is the variational Dirichlet given labels and features.
    mu_, sigma2_ : ndarray (K, D)
        Per-cluster feature means and variances; NaN for a feature left out
        (weight 0, or constant over the observed rows: it carries no cluster
        information and its variance would collapse to 0, so it is dropped with
        a warning).
    label_weight_ : ndarray (M,);  feature_weight_ : ndarray (D,)
        The weights used (0 for dropped features).
    n_original_features_ : int
        ``D``.
    lower_bound_, lower_bounds_ : float, list of float
        The weighted bound plus the smoothing log-priors (never decreases).
    n_iter_, converged_, degenerate_, n_degenerate_ : as in BCE
    feature_share_ : float
        The features' share of a fully observed row's weight, ``sum(w) / (sum(w) +
        sum(u))`` (0.0 without features).  Above ``FEATURE_SHARE_WARNING`` (0.75; unit
        weights with ``D >= 3M``) fit warns: the paper (section 6) notes that with ``D >>
        M`` the features dominate and the consensus is close to a clustering of the
        features alone, and weights each base clustering by ``D`` in its experiments
        (``label_weight="n_features"``).  On k-means ensembles (M = 10) of
        dermatology_358 (D = 34) and optdigits (D = 62) unit weights gave ARI 0.41 and
        0.43 against BCE's 0.71 and 0.59, ``label_weight="n_features"`` 0.72 and 0.62
        (docs/gbce.md).
    n_variance_floored_ : int
        Feature variances ``sigma2_hf`` of the kept restart that eq. 17 set to 0 or below
        (summed over its iterations: with ``feature_smoothing=0``, a cluster owning one
        point or one repeated value) and that were raised to the smallest positive float;
        the bound is then huge rather than +inf.  A warning says so when it is not 0.

    Notes
    -----
    ``score`` and ``perplexity`` measure the *labels* only, each observed label
    counted once (the weights are a fitting device, not part of a label
    distribution), with the features integrated out -- not conditioned on:
    ``log p(x_i | alpha, beta)`` under the fitted GBCE ``alpha`` and ``beta``,
    estimated by importance sampling exactly as BCE does.  The numbers are thus
    directly comparable with a BCE fitted to the same labels.

    Like BCE's, the mean-field ``alpha_`` is biased upward on data simulated from the
    model itself (``alpha`` about 2 against 0.3 there), and ``beta_``, ``mu_`` and
    ``sigma2_`` with it; the default ``"gibbs"`` estimate is not
    (``experiments/gbce_grid.py``).  The fit that recovers the parameters within their standard
    errors is the MAP of the spec with ``theta`` and ``z`` summed out
    (:func:`consensuskit.models.gbce.spec.model_collapsed` with
    :func:`consensuskit.inference.pyro_map.fit_map`, started from this fit); see
    ``docs/gbce.md``.
    """

    def __init__(self, n_clusters=2, *, label_weight=1.0, feature_weight=1.0,
                 feature_likelihood="gaussian", feature_smoothing=1e-2, **bce_params):
        super().__init__(n_clusters, **bce_params)
        self.label_weight = label_weight
        self.feature_weight = feature_weight
        self.feature_likelihood = feature_likelihood
        self.feature_smoothing = feature_smoothing

    # scikit-learn reads the parameters from the signature: BCE's plus the four above
    __init__.__signature__ = _extend_signature(BCE.__init__, __init__)

    # ------------------------------------------------------------------ checks
    def _validate(self, ensemble):
        if self.inference != "cavi":
            raise ValueError(f"inference must be 'cavi' for GBCE (no SVI engine); "
                             f"got {self.inference!r}")
        if self.alpha_estimate == "iw":
            raise ValueError(
                "GBCE does not support alpha_estimate='iw': that refinement maximises the "
                "marginal likelihood of the labels alone, which would discard what the "
                "features contributed to alpha and beta; use alpha_estimate='meanfield' "
                "(or BCE(alpha_estimate='iw') for labels only)")
        if self.feature_likelihood != "gaussian":
            raise ValueError(f"feature_likelihood must be 'gaussian'; "
                             f"got {self.feature_likelihood!r}")
        check_positive_float(self.feature_smoothing, "feature_smoothing", allow_zero=True)
        return super()._validate(ensemble)

    def _weights(self, value, size, name):
        if isinstance(value, str):
            raise ValueError(f"{name} must be a number or an array of shape ({size},); "
                             f"got {value!r}")
        if isinstance(value, (bool, np.bool_)):
            raise TypeError(f"{name} must be a real number; got {value!r}")
        if isinstance(value, numbers.Real):
            w = np.full(size, check_positive_float(value, name, allow_zero=True))
        else:
            w = np.asarray(value, dtype=np.float64)
            if w.shape != (size,):
                raise ValueError(f"{name} must be a number or have shape ({size},); "
                                 f"got shape {w.shape}")
            if not np.all(np.isfinite(w)) or (w < 0).any():
                raise ValueError(f"{name} must be finite and >= 0")
        return w

    # ------------------------------------------------------------------ fitting
    def fit(self, X, y=None, features=None, resume_from=None):
        """Fit on base clusterings ``X`` (N, M) and original features ``features`` (N, D).

        Parameters
        ----------
        X : array-like (N, M) or Ensemble
            Base-clustering labels, -1 (or NaN) missing.
        y : ignored
        features : array-like (N, D) of float or None
            Row ``i`` describes the point of row ``i`` of ``X``; NaN = missing value.
            None fits BCE (every feature weight 0).
        resume_from : path or None
            Continue the run checkpointed there (``checkpoint_path``), on the same
            labels, features and hyper-parameters.

        Raises
        ------
        ValueError
            Bad labels (see :class:`~consensuskit.data.ensemble.Ensemble`), features with a row
            count different from ``X``, an infinite value, an all-NaN column, or a bad
            weight / hyper-parameter.
        """
        ens = as_ensemble(X)
        F = None
        if features is not None:
            F = _check_features(features, ens.n_samples, fitting=True)
        self.ensemble_ = ens
        self.n_features_in_ = ens.n_partitions
        digest = _features_digest(F)
        self._fit(ens, F, resume=self._read_resume(resume_from, ens, digest), digest=digest)
        return self

    def fit_predict(self, X, y=None, features=None):
        """Fit and return the hard consensus ``labels_`` (N,)."""
        return self.fit(X, features=features).labels_

    def _resolve_weights(self, ensemble, F):
        D = 0 if F is None else F.shape[1]
        if isinstance(self.label_weight, str):
            if self.label_weight != "n_features":
                raise ValueError(f"label_weight must be a number, an array or 'n_features'; "
                                 f"got {self.label_weight!r}")
            u = np.full(ensemble.n_partitions, float(max(D, 1)))
        else:
            u = self._weights(self.label_weight, ensemble.n_partitions, "label_weight")
        if F is None:
            return u, np.zeros(0), np.zeros(0), np.zeros(0)
        w = self._weights(self.feature_weight, D, "feature_weight")
        n_obs = (~np.isnan(F)).sum(0)
        center = np.nansum(F, 0) / n_obs
        spread = np.nansum((F - center) ** 2, 0) / n_obs
        const = np.flatnonzero((spread <= 0) & (w > 0))
        if const.size:
            warnings.warn(f"feature column(s) {const.tolist()} take a single value over the "
                          "observed rows; they carry no cluster information and are left out",
                          RuntimeWarning, stacklevel=4)
            w = w.copy()
            w[const] = 0.0
        return u, w, center, spread

    def _check_feature_share(self, u, w):
        """``feature_share_``, and a warning when the features carry most of a row's weight."""
        total = float(np.sum(w)) + float(np.sum(u))
        self.feature_share_ = float(np.sum(w)) / total if total > 0 else 0.0
        if self.feature_share_ > FEATURE_SHARE_WARNING:
            warnings.warn(
                f"GBCE: the {len(w)} features carry {self.feature_share_:.0%} of each row's "
                f"weight against the {len(u)} base clusterings (feature_share_), so the "
                "consensus follows the features more than the base clusterings; the paper "
                "weights each base clustering by the number of features "
                "(label_weight='n_features')", UserWarning, stacklevel=4)

    def _fit(self, ensemble: Ensemble, F=None, resume=None, digest=""):
        K, dev, dtype = self._validate(ensemble)
        self._device, self._dtype = dev, dtype
        u, w, center, spread = self._resolve_weights(ensemble, F)
        self._check_feature_share(u, w)
        rs = check_random_state(self.random_state)
        term = gcavi.feature_term(ensemble, F, u, w if F is not None else 0.0,
                                  smoothing=self.feature_smoothing, device=dev, dtype=dtype,
                                  center=center, spread=spread)
        data = ensemble.label_data(dev, dtype)
        unit = not (np.any(u != 1.0) or np.any((w != 0.0) & (w != 1.0)))
        self.alpha_estimate_ = self.alpha_estimate or ("gibbs" if unit else "meanfield")
        self.eta_, self.log_marginal_, self.chain_log_marginals_ = None, None, []
        self.kept_chain_, self.n_alpha_clipped_ = None, 0
        self.log_marginals_, self.iw_start_ = [], None
        if self.alpha_estimate_ == "gibbs":
            fit = self._fit_gibbs_features(ensemble, data, K, rs, resume, digest, F, u, w,
                                           center, spread)
        else:
            fit = self._drive(self._engine(ensemble, data, K, features=term), ensemble, rs,
                              resume, digest)
        state = self.set_fitted_state(ensemble, fit)
        if self.alpha_estimate_ == "gibbs":
            self.lower_bound_ = float("nan")
        self.n_variance_floored_ = int(state.n_variance_floored)
        if self.n_variance_floored_:
            warnings.warn(
                f"GBCE: {self.n_variance_floored_} feature variance update(s) gave 0 (a cluster "
                "owning one point or one repeated value, feature_smoothing=0) and were raised "
                "to the smallest positive float (n_variance_floored_); feature_smoothing > 0 "
                "keeps them positive", RuntimeWarning, stacklevel=3)
        self._mu_t = state.mu.detach()
        self._sigma2_t = state.sigma2.detach()
        self._center, self._spread = center, spread
        D = len(w)
        self.mu_ = np.full((K, D), np.nan)
        self.sigma2_ = np.full((K, D), np.nan)
        self.mu_[:, term.feature_index] = self._mu_t.cpu().numpy()
        self.sigma2_[:, term.feature_index] = self._sigma2_t.cpu().numpy()
        self.label_weight_ = u
        self.feature_weight_ = w
        self.n_original_features_ = D
        return self

    def _fit_gibbs_features(self, ensemble, data, K, rs, resume, digest, F, u, w, center,
                            spread):
        """``alpha_estimate="gibbs"``: BCE's collapsed sampler with the features as further
        columns (weights 1 only: it samples the generative model, not a weighted one)."""
        from consensuskit.models.bce.collapsed_gibbs import FeatureColumns
        from consensuskit.models.gbce.selection import selection_log_marginal

        if np.any(u != 1.0) or np.any((w != 0.0) & (w != 1.0)):
            raise ValueError(
                "GBCE(alpha_estimate='gibbs') samples the generative model, in which every "
                "label and feature counts once: label_weight must be 1 and feature_weight 0 "
                "or 1; for other weights use alpha_estimate='meanfield' (the paper's "
                "weighted variational fit)")
        keep = np.flatnonzero(w > 0)
        if F is None or keep.size == 0:  # BCE exactly (same draws)
            fit = self._fit_gibbs(ensemble, K, rs, resume, digest=digest)
            empty = torch.zeros(K, 0, dtype=self._dtype, device=self._device)
            fit.best.params.mu, fit.best.params.sigma2 = empty, empty.clone()
            return fit
        sub = np.asarray(F, dtype=np.float64)[:, keep]
        obs = ~np.isnan(sub)
        vals = np.where(obs, sub, 0.0)
        fc = FeatureColumns(np.ascontiguousarray(vals), np.ascontiguousarray(obs),
                            np.asarray(center, dtype=np.float64)[keep],
                            np.asarray(spread, dtype=np.float64)[keep],
                            float(self.feature_smoothing))
        codes, offsets = ensemble.offset_index(), ensemble.offsets

        def score(seed):
            def f(alpha, beta, mu, sigma2):
                return selection_log_marginal(alpha, beta, mu, sigma2, codes, offsets,
                                              fc.values, fc.observed, seed=seed)
            return f

        return self._fit_gibbs(ensemble, K, rs, resume, features=fc, score=score,
                               digest=digest)

    # ------------------------------------------------------------------ fold-in
    def predict_proba(self, X, features=None, unknown="error"):
        """Soft consensus of new rows by fold-in, shape (n, K).

        The E-step (eqs. 12-14) is run to convergence on the new rows with the
        fitted ``alpha``, ``beta``, ``mu``, ``sigma2`` and weights held fixed;
        returns ``gamma_i / sum_h gamma_ih``.

        Parameters
        ----------
        X : array-like (n, M)
            Labels in the training label space (-1 missing; a row may be all missing).
        features : array-like (n, D) or None
            NaN = missing; None treats every feature as missing (labels only).
        unknown : {"error", "missing"}
            A label a column never showed in ``fit``: raise, or treat as missing.
        """
        check_is_fitted(self, "alpha_")
        ens = self._encode_new(X, unknown=unknown)
        D = self.n_original_features_
        F = None
        if features is not None:
            if D == 0:
                raise ValueError("this GBCE was fitted without features; call "
                                 "predict_proba(X) without features")
            F = _check_features(features, ens.n_samples, D, fitting=False)
        elif D:
            F = np.full((ens.n_samples, D), np.nan)
        term = gcavi.feature_term(ens, F, self.label_weight_,
                                  self.feature_weight_ if D else 0.0, device=self._device,
                                  dtype=self._dtype, center=self._center, spread=self._spread)
        gamma = bce_cavi.fold_in(self._alpha_t, self._beta_t,
                                 ens.label_data(self._device, self._dtype), chunk_size=8192,
                                 weights=term.weights, row_weights=term.row_weights,
                                 extra=term.e_term(self._mu_t, self._sigma2_t))
        g = gamma.T.cpu().numpy().astype(np.float64)
        return g / g.sum(1, keepdims=True)

    def predict(self, X, features=None, unknown="error"):
        """Hard consensus of new rows (argmax of :meth:`predict_proba`), shape (n,)."""
        return self.predict_proba(X, features=features, unknown=unknown).argmax(1)
