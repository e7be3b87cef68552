"""Generalized Bayesian cluster ensembles (GBCE) as a Pyro model.

Wang, Shan & Banerjee (2011), section 6.  Each point ``i`` carries its ``M``
base-clustering labels ``x_i`` *and* its ``D`` original feature values ``o_i``;
both are generated from one mixed membership ``theta_i``:

0. the globals, unless given: ``alpha ~ Gamma(1, 1)``, ``beta_jh ~ Dirichlet(1)`` (BCE's
   sites and priors, :func:`consensuskit.models.bce.spec.model`), ``mu_hf ~ Normal(0, 10^2)``,
   ``sigma2_hf ~ InverseGamma(1, 1)`` (all replaceable, see :func:`model`);
1. ``theta_i ~ Dirichlet(alpha)``;
2. for each observed label ``x_ij`` (repeated ``u_j`` times):
   ``z_ij ~ Categorical(theta_i)``, ``x_ij ~ Categorical(beta_j[z_ij])``;
3. for each observed feature ``o_if`` (repeated ``w_f`` times):
   ``z_if ~ Categorical(theta_i)``, ``o_if ~ Normal(mu[z_if, f], sigma2[z_if, f])``.

The paper treats the globals as parameters (empirical Bayes): pass them as tensors to
get exactly that program.  Left out, they are sample sites, so the program is a full
generative model: it simulates (``labels=None``; features too with ``n_features``, see
:func:`simulate`), and ``pyro.infer.Predictive`` draws data and parameters.

Calling convention: that of :mod:`consensuskit.models` (labels (N, M), a ``"rows"``
plate at dim -1 with minibatches and streamed chunks), plus ``features`` (N, D), which
follow their rows through the plate.

The repetition weights ``u_j`` (``label_weight``) and ``w_f`` (``feature_weight``)
are real numbers >= 0; they are expressed with :func:`pyro.poutine.scale`, which
multiplies a site's log-density, so that a weight of 3 is exactly three copies
of the observation, each with its own ``z`` (sharing one variational factor, as
in the paper's ``q(z_ij | phi_ij)^{u_j}``).  A weight of 0 removes the site.
With every ``w_f = 0`` and every ``u_j = 1`` the model is BCE.

Missing labels (code ``-1``) and missing features (NaN) are masked with
:func:`pyro.poutine.mask` at the observation only: their ``z`` stays in the model
(summed out under enumeration, it contributes a factor of one) and the guide draws it
from ``Categorical(theta_i)``, so neither the log-joint nor the ELBO counts it.

Shapes (``N`` points, ``M`` base clusterings with ``k_j`` labels each,
``k_max = max_j k_j``, ``D`` features, ``K`` consensus clusters):

=================  ==================  ==========================================
name               shape               paper symbol
=================  ==================  ==========================================
``labels``         (N, M) long          ``x_ij`` re-coded to ``0..k_j-1``; -1 missing
``features``       (N, D) float         ``o_if`` (``y_i,M+f``); NaN missing
``alpha``          (K,)                 ``alpha``, Dirichlet parameter
``beta``           list of (K, k_j)     ``beta_hj(r)``
``mu``, ``sigma2`` (K, D)               ``mu_hf``, ``sigma^2_hf``
``gamma``          (N, K)               ``gamma_i``, variational Dirichlet
``phi``            (M, N, K)            ``phi_ij``, variational label assignments
``phi_features``   (D, N, K)            ``phi_i,M+f``, variational feature assignments
=================  ==================  ==========================================

Plates: ``rows`` (dim -1, size N); ``partitions`` (dim -2, size M) and
``features`` (dim -2, size D) are siblings inside ``rows``.  Sites: the globals
``alpha`` (K,), ``beta_{j}`` (K, k_j), ``mu``, ``sigma2`` (K, D) unless given;
``theta`` (batch (N,), event (K,)), ``z`` and ``x`` (batch (M, N)), ``z_feature``
and ``o`` (batch (D, N)); ``z`` and ``z_feature`` are marked for parallel enumeration
(``MAX_PLATE_NESTING = 2``).

:func:`model_collapsed` is the same process with ``theta_i`` and every ``z`` summed
out exactly (:func:`exact_log_marginal`, BCE's count-vector recursion with the
features as extra columns); its MAP is the maximum-likelihood fit
(:func:`consensuskit.inference.pyro_map.fit_map`), which recovers the parameters on the
model's own data where mean-field CAVI does not (``tests/test_specs.py``).

The hand-written engine is :mod:`consensuskit.models.gbce.cavi`; the test
suite checks that its bound equals this model's ELBO under :func:`guide`.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pyro
import pyro.distributions as dist
import torch
from pyro import poutine
from pyro.distributions import constraints
from pyro.ops.indexing import Vindex

from consensuskit.models.bce.marginal import (
    MAX_STATES,
    check_n_states,
    collapsed_log_marginal,
    label_likelihoods,
)
from consensuskit.models.bce.spec import as_padded, global_sites, pad_beta
from consensuskit.models.convention import check_labels, label_distribution, plate_rows, rows_plate

__all__ = ["model", "model_collapsed", "guide", "simulate", "exact_log_marginal", "pad_beta",
           "site_names", "MAX_PLATE_NESTING"]

MAX_PLATE_NESTING = 2


def site_names(n_partitions: int, with_features: bool = True):
    """Names of the global sample sites: ``alpha``, ``beta_0..beta_{M-1}``, ``mu``, ``sigma2``."""
    return (["alpha"] + [f"beta_{j}" for j in range(n_partitions)]
            + (["mu", "sigma2"] if with_features else []))


def _weights(w, size, dtype, device, name):
    w = torch.as_tensor(w, dtype=dtype, device=device)
    if w.dim() == 0:
        w = w.expand(size)
    if w.shape != (size,):
        raise ValueError(f"{name} must be a scalar or have shape ({size},); got {tuple(w.shape)}")
    return w


def _as_features(features, n_features, device):
    """``features`` as a float Tensor (N, D) (NaN missing) and ``D`` (None: no features)."""
    if features is None:
        return None, (None if n_features is None else int(n_features))
    f = torch.as_tensor(features, device=device)
    if f.dim() != 2 or not f.is_floating_point():
        raise ValueError(f"features must be a float tensor of shape (N, D); got "
                         f"{tuple(f.shape)} {f.dtype}")
    if n_features is not None and int(n_features) != f.shape[1]:
        raise ValueError(f"features has {f.shape[1]} columns but n_features is {n_features}")
    return f, f.shape[1]


def _feature_sites(n_clusters, n_features, mu, sigma2, mu_prior, sigma2_prior, dtype, dev):
    """``mu`` and ``sigma2`` (K, D): given, or sampled from their priors."""
    K, D = int(n_clusters), int(n_features)
    if mu is None:
        if mu_prior is None:
            mu_prior = dist.Normal(torch.zeros(K, D, dtype=dtype, device=dev),
                                   torch.full((K, D), 10.0, dtype=dtype, device=dev))
            mu_prior = mu_prior.to_event(2)
        mu = pyro.sample("mu", mu_prior)
    if sigma2 is None:
        if sigma2_prior is None:
            one = torch.ones(K, D, dtype=dtype, device=dev)
            sigma2_prior = dist.InverseGamma(one, one).to_event(2)
        sigma2 = pyro.sample("sigma2", sigma2_prior)
    mu = torch.as_tensor(mu, dtype=dtype, device=dev)
    sigma2 = torch.as_tensor(sigma2, dtype=dtype, device=dev)
    if mu.shape != (K, D) or sigma2.shape != (K, D):
        raise ValueError(f"mu and sigma2 must have shape (K, D) = ({K}, {D}); got "
                         f"{tuple(mu.shape)} and {tuple(sigma2.shape)}")
    return mu, sigma2


def model(labels=None, *, n_labels, n_clusters, n_rows=None, features=None, n_features=None,
          label_weight=1.0, feature_weight=1.0, alpha=None, beta=None, mu=None, sigma2=None,
          alpha_prior=None, label_prior=1.0, mu_prior=None, sigma2_prior=None,
          subsample_size=None, subsample=None, **unused):
    """GBCE generative model (paper section 6, eq. 11 with repetition weights).

    Follows the calling convention of :mod:`consensuskit.models`; BCE's label part is
    :func:`consensuskit.models.bce.spec.model`'s (same global sites and priors).

    Parameters
    ----------
    labels : LongTensor (N_data, M) or None
        Re-coded base-clustering labels ``0..k_j-1``; ``-1`` missing.  All rows, or the
        rows of ``subsample`` (a streamed chunk).  None: simulate them.
    n_labels : sequence of int (M,)
        ``k_j``, the number of labels of each base clustering.
    n_clusters : int
        ``K``.
    n_rows : int, optional
        ``N`` (the rows plate's size); default ``labels.shape[0]``, else
        ``features.shape[0]``.
    features : Tensor (N_data, D) float or None
        Original features ``o_if``, NaN where missing, row-aligned with ``labels``.
        None with ``n_features`` None: no feature part (BCE).
    n_features : int, optional
        ``D`` when ``features`` is None: the features are then simulated (site ``"o"``).
    label_weight : float or Tensor (M,)
        ``u_j``, repetitions of each base clustering (``poutine.scale``).
    feature_weight : float or Tensor (D,)
        ``w_f``, repetitions of each feature (``poutine.scale``).
    alpha : Tensor (K,), optional
        Fixed; default the sample site ``"alpha" ~ alpha_prior`` (default Gamma(1, 1)).
    beta : list of (K, k_j), Tensor (K, sum k_j) or padded (M, K, k_max), optional
        Fixed; default sample sites ``"beta_{j}" ~ Dirichlet(label_prior)``.
    mu : Tensor (K, D), optional
        Fixed; default the sample site ``"mu" ~ mu_prior``.
    sigma2 : Tensor (K, D), optional
        Fixed; default the sample site ``"sigma2" ~ sigma2_prior``.
    alpha_prior, label_prior
        As for :func:`consensuskit.models.bce.spec.model`.
    mu_prior : pyro Distribution with event shape (K, D), optional
        Default ``Normal(0, 10)`` per entry (weak for standardised features).
    sigma2_prior : pyro Distribution with event shape (K, D), optional
        Default ``InverseGamma(1, 1)`` per entry (median 1.44, heavy right tail).
    subsample_size, subsample
        Passed to the ``"rows"`` plate (minibatches, streamed chunks).
    **unused
        Variational parameters meant for :func:`guide` (ignored), so both share kwargs.

    Returns
    -------
    LongTensor (n, M): the labels of the plate's rows (observed or simulated).  Simulated
    features are the site ``"o"`` (D, n) of the trace (:func:`simulate` returns them).

    The program's precision follows ``alpha``'s (torch's default dtype unless ``alpha``
    is given); features are converted to it.
    """
    g = _globals(labels, n_labels, n_clusters, n_rows, features, n_features, alpha, beta, mu,
                 sigma2, alpha_prior, label_prior, mu_prior, sigma2_prior)
    return _row_sites(g, label_weight, feature_weight, subsample_size, subsample)


def _globals(labels, n_labels, n_clusters, n_rows, features, n_features, alpha, beta, mu,
             sigma2, alpha_prior, label_prior, mu_prior, sigma2_prior):
    """Check the data; draw (or take) the global sites ``alpha``, ``beta``, ``mu``, ``sigma2``."""
    features, D = _as_features(features, n_features, None)
    if labels is None and n_rows is None and features is not None:
        n_rows = features.shape[0]
    labels, N_data, M, dev = check_labels(labels, n_labels, n_rows)
    if (mu is not None or sigma2 is not None) and D is None:
        raise ValueError("mu / sigma2 given but no features: pass features or n_features")
    alpha, beta = global_sites(n_labels, n_clusters, alpha, beta, alpha_prior, label_prior,
                                dev)
    if D is not None:
        mu, sigma2 = _feature_sites(n_clusters, D, mu, sigma2, mu_prior, sigma2_prior,
                                    alpha.dtype, dev)
    # what the program has decided before its rows plate: data, sizes, parameters
    return SimpleNamespace(labels=labels, features=features, n_labels=n_labels, M=M, D=D,
                    n_rows=n_rows, size=N_data if n_rows is None else int(n_rows), dev=dev,
                    alpha=alpha, beta=beta, mu=mu, sigma2=sigma2)


def _row_sites(g, label_weight, feature_weight, subsample_size, subsample):
    """The rows plate of :func:`model`: ``theta``, then ``z``/``x`` and ``z_feature``/``o``."""
    dtype = g.alpha.dtype
    u = _weights(label_weight, g.M, dtype, g.dev, "label_weight")
    with rows_plate(g.labels, g.n_rows, subsample_size, subsample, g.dev) as (ind, x):
        theta = pyro.sample("theta", dist.Dirichlet(g.alpha))  # (n, K)
        x_mask = True if x is None else (x >= 0).T  # (M, n)
        # only the observations are masked: a missing label's z then sums to one given
        # theta under enumeration (masking z too would count each such label K times)
        with pyro.plate("partitions", g.M, dim=-2) as j, poutine.scale(scale=u[:, None]):
            z = pyro.sample("z", dist.Categorical(theta), infer={"enumerate": "parallel"})
            probs = Vindex(g.beta)[j[:, None], z]
            with poutine.mask(mask=x_mask):
                xt = pyro.sample("x", label_distribution(probs),
                                 obs=None if x is None else x.T.clamp(min=0))
        if g.D is not None:
            w = _weights(feature_weight, g.D, dtype, g.dev, "feature_weight")
            o = plate_rows(g.features, ind, g.size, "features")
            if o is not None:
                o = o.to(dtype).T  # (D, n)
                o_mask = ~torch.isnan(o)
                o = torch.where(o_mask, o, torch.zeros_like(o))
            with pyro.plate("features", g.D, dim=-2) as f, poutine.scale(scale=w[:, None]):
                zf = pyro.sample("z_feature", dist.Categorical(theta),
                                 infer={"enumerate": "parallel"})
                loc = Vindex(g.mu.T)[f[:, None], zf]
                scale = Vindex(g.sigma2.T)[f[:, None], zf].sqrt()
                with poutine.mask(mask=True if o is None else o_mask):
                    pyro.sample("o", dist.Normal(loc, scale), obs=o)
    return xt.T if x is None else x


def model_collapsed(labels=None, *, n_labels, n_clusters, n_rows=None, features=None,
                    n_features=None, alpha=None, beta=None, mu=None, sigma2=None,
                    alpha_prior=None, label_prior=1.0, mu_prior=None, sigma2_prior=None,
                    label_weight=1.0, feature_weight=1.0, subsample_size=None,
                    subsample=None, max_states=MAX_STATES, **unused):
    """The GBCE process with ``theta_i`` and every ``z`` summed out: one factor per row.

    Same arguments, global sites and priors as :func:`model`.  With ``labels`` given, the
    rows plate holds one site ``"x"``, a :func:`pyro.factor` of the exact
    ``log p(x_i, o_i | alpha, beta, mu, sigma2)`` (:func:`exact_log_marginal`; missing
    labels and features summed out), so the log joint is a deterministic function of the
    globals: its maximiser is the MAP / maximum-likelihood estimate
    (:func:`consensuskit.inference.pyro_map.fit_map`), and NUTS would sample the globals
    without ``theta``.  ``labels=None`` simulates with :func:`model`'s row sites (the
    same joint distribution of labels and features).

    The weights must stay 1: the collapsed form is the generative model, in which each
    label and feature has one assignment (``label_weight``/``feature_weight`` other than
    1 raise ValueError).  ``features`` must be given with ``labels`` (there are no latent
    features to sum out beyond the missing ones).
    """
    for name, w in (("label_weight", label_weight), ("feature_weight", feature_weight)):
        if not bool(torch.all(torch.as_tensor(w) == 1)):
            raise ValueError(f"model_collapsed is the unweighted model: {name} must be 1")
    if labels is not None and features is None and n_features is not None:
        raise ValueError("model_collapsed with labels observes the features too: pass "
                         "features (NaN where missing)")
    g = _globals(labels, n_labels, n_clusters, n_rows, features, n_features, alpha, beta, mu,
                 sigma2, alpha_prior, label_prior, mu_prior, sigma2_prior)
    if g.labels is None:
        return _row_sites(g, 1.0, 1.0, subsample_size, subsample)
    with rows_plate(g.labels, g.n_rows, subsample_size, subsample, g.dev) as (ind, x):
        o = plate_rows(g.features, ind, g.size, "features")
        pyro.factor("x", exact_log_marginal(x, o, n_labels=n_labels, alpha=g.alpha,
                                            beta=g.beta, mu=g.mu, sigma2=g.sigma2,
                                            max_states=max_states))
    return x


def guide(labels=None, *, n_labels, n_clusters, n_rows=None, features=None, n_features=None,
          label_weight=1.0, feature_weight=1.0, gamma=None, phi=None, phi_features=None,
          subsample_size=None, subsample=None, **unused):
    """Mean-field guide ``q(theta_i | gamma_i) prod_j q(z_ij | phi_ij)^{u_j} prod_f ...``.

    For the model with ``alpha``, ``beta``, ``mu``, ``sigma2`` given (the paper's
    parameters); to fit them too, add a point guide over :func:`site_names` (e.g.
    ``AutoDelta`` on the model blocked to those sites, called beside this guide).

    Parameters
    ----------
    labels, n_labels, n_clusters, n_rows, features, n_features, label_weight,
    feature_weight, subsample_size, subsample
        As in :func:`model`.
    gamma : Tensor (N, K), optional
        Variational Dirichlet parameters; default ``pyro.param("gamma")`` (init 1).
    phi : Tensor (M, N, K), optional
        Variational label assignments; default ``pyro.param("phi")`` (init uniform).
    phi_features : Tensor (D, N, K), optional
        Variational feature assignments; default ``pyro.param("phi_features")``.
    **unused
        Model parameters passed to :func:`model` (ignored), so both share kwargs.

    The per-row parameters are indexed by the rows plate's subsample.  For a missing
    label or feature value the guide draws its ``z`` from ``Categorical(theta_i)``, the
    model's conditional prior, so it adds exactly zero to the ELBO (as in
    :func:`consensuskit.models.bce.spec.guide_meanfield`): the ELBO is the paper's bound over
    the observed entries.
    """
    features, D = _as_features(features, n_features, None)
    if labels is None and n_rows is None and features is not None:
        n_rows = features.shape[0]
    labels, N_data, M, dev = check_labels(labels, n_labels, n_rows)
    K = int(n_clusters)
    size = N_data if n_rows is None else int(n_rows)
    dtype = next((t.dtype for t in (gamma, phi, phi_features) if t is not None),
                 features.dtype if features is not None else torch.get_default_dtype())
    if gamma is None:
        gamma = pyro.param("gamma", lambda: torch.ones(size, K, dtype=dtype, device=dev),
                           constraint=constraints.positive)
    if phi is None:
        phi = pyro.param("phi", lambda: torch.full((M, size, K), 1.0 / K, dtype=dtype,
                                                   device=dev), constraint=constraints.simplex)
    u = _weights(label_weight, M, dtype, dev, "label_weight")
    with rows_plate(labels, n_rows, subsample_size, subsample, dev) as (ind, x):
        theta = pyro.sample("theta", dist.Dirichlet(gamma.index_select(0, ind)))
        with pyro.plate("partitions", M, dim=-2), poutine.scale(scale=u[:, None]):
            q = phi.index_select(1, ind)  # (M, n, K)
            if x is not None:
                q = torch.where((x.T >= 0)[..., None], q, theta)
            pyro.sample("z", dist.Categorical(q))
        if D is not None:
            if phi_features is None:
                phi_features = pyro.param(
                    "phi_features", lambda: torch.full((D, size, K), 1.0 / K, dtype=dtype,
                                                       device=dev),
                    constraint=constraints.simplex)
            o = plate_rows(features, ind, size, "features")
            w = _weights(feature_weight, D, dtype, dev, "feature_weight")
            with pyro.plate("features", D, dim=-2), poutine.scale(scale=w[:, None]):
                q = phi_features.index_select(1, ind)  # (D, n, K)
                if o is not None:
                    q = torch.where(torch.isnan(o).T[..., None], theta, q)
                pyro.sample("z_feature", dist.Categorical(q))


def simulate(*, n_rows, n_labels, n_clusters, n_features, params=None, seed=None,
             **spec_kwargs):
    """Simulate a GBCE data set: labels, features and every latent of the draw.

    :func:`consensuskit.models.simulate` on :func:`model` with ``n_features`` features,
    the simulated features (site ``"o"``) taken out of the latents and laid out as the
    estimator takes them.

    Parameters
    ----------
    n_rows, n_labels, n_clusters, seed
        As for :func:`consensuskit.models.simulate`.
    n_features : int
        ``D``.
    params : dict, optional
        Sites held fixed: ``alpha`` (K,), ``beta_{j}`` (K, k_j), ``mu`` (K, D),
        ``sigma2`` (K, D) (and per-row ones such as ``theta`` (N, K)); the rest are drawn
        from their priors.
    **spec_kwargs
        Passed to :func:`model` (priors, ``label_prior``).

    Returns
    -------
    X : ndarray int64 (N, M)
        Labels, nothing missing.
    F : ndarray float64 (N, D)
        Features, nothing missing (``ck.GBCE().fit(X, features=F)``).
    latents : dict of str -> ndarray
        The globals (``alpha``, ``beta_{j}``, ``mu``, ``sigma2``) and the per-row latents
        ``theta`` (N, K), ``z`` (M, N), ``z_feature`` (D, N).
    """
    from consensuskit.models.simulation import simulate as simulate_spec

    X, latents = simulate_spec(model, n_rows=n_rows, n_labels=n_labels,
                               n_clusters=n_clusters, params=params, seed=seed,
                               n_features=int(n_features), **spec_kwargs)
    F = np.ascontiguousarray(latents.pop("o").T, dtype=np.float64)
    return X, F, latents


def exact_log_marginal(labels, features=None, *, n_labels, alpha, beta, mu=None, sigma2=None,
                       max_states=MAX_STATES):
    """``log p(x_i, o_i | alpha, beta, mu, sigma2)`` of each row, ``theta_i`` and ``z`` summed out.

    Every observed label and feature has its own assignment (weights 1: the generative
    model, not the weighted fitting objective), so the row's columns are ``M + D``
    factors of BCE's count-vector recursion
    (:func:`consensuskit.models.bce.marginal.collapsed_log_marginal`): ``beta_j[k, x_ij]``
    per label and ``N(o_if | mu_kf, sigma2_kf)`` per feature.  Exact and differentiable
    in every parameter; costs ``C(M + D + K, K)`` count states per row.

    Parameters
    ----------
    labels : LongTensor (n, M), ``-1`` missing
    features : Tensor (n, D), NaN missing, or None (then BCE's marginal)
    n_labels : sequence of int (M,)
    alpha : Tensor (K,);  beta : list of (K, k_j), (K, sum k_j) or padded (M, K, k_max)
    mu, sigma2 : Tensor (K, D) (with features)
    max_states : int
        ValueError when ``C(M + D + K, K)`` exceeds it.

    Returns
    -------
    Tensor (n,) in ``alpha``'s dtype.
    """
    alpha = torch.as_tensor(alpha)
    dtype, dev = alpha.dtype, alpha.device
    x = torch.as_tensor(labels, device=dev).long()
    K = alpha.shape[0]
    beta = as_padded(beta, n_labels, dtype, dev)  # (M, K, k_max)
    lik = label_likelihoods(beta, x)  # (n, M, K)
    observed = x >= 0
    shift = torch.zeros(x.shape[0], dtype=dtype, device=dev)
    if features is not None:
        o = torch.as_tensor(features, dtype=dtype, device=dev)
        obs_f = ~torch.isnan(o)
        o0 = torch.where(obs_f, o, torch.zeros_like(o))
        mu = torch.as_tensor(mu, dtype=dtype, device=dev)
        sigma2 = torch.as_tensor(sigma2, dtype=dtype, device=dev)
        ll = dist.Normal(mu.T, sigma2.T.sqrt()).log_prob(o0[..., None])  # (n, D, K)
        top = ll.max(-1, keepdim=True).values.detach()  # per-(row, feature) scale
        lik = torch.cat([lik, torch.exp(ll - top)], 1)
        observed = torch.cat([observed, obs_f], 1)
        shift = (top.squeeze(-1) * obs_f).sum(1)
    check_n_states(lik.shape[1], K, max_states, what="M + D = {C} labels and features",
                   spec="consensuskit.models.gbce.spec.model")
    return collapsed_log_marginal(alpha, lik, observed) + shift
