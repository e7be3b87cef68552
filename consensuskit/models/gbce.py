"""Generalized Bayesian cluster ensembles (GBCE) as a Pyro model.

Wang, Shan & Banerjee (2011), section 6.  Each point ``i`` carries its ``M``
base-clustering labels ``x_i`` *and* its ``D`` original feature values ``o_i``;
both are generated from one mixed membership ``theta_i``:

1. ``theta_i ~ Dirichlet(alpha)``;
2. for each observed label ``x_ij`` (repeated ``u_j`` times):
   ``z_ij ~ Categorical(theta_i)``, ``x_ij ~ Categorical(beta_j[z_ij])``;
3. for each observed feature ``o_if`` (repeated ``w_f`` times):
   ``z_if ~ Categorical(theta_i)``, ``o_if ~ Normal(mu[z_if, f], sigma2[z_if, f])``.

The repetition weights ``u_j`` (``label_weight``) and ``w_f`` (``feature_weight``)
are real numbers >= 0; they are expressed with :func:`pyro.poutine.scale`, which
multiplies a site's log-density, so that a weight of 3 is exactly three copies
of the observation, each with its own ``z`` (sharing one variational factor, as
in the paper's ``q(z_ij | phi_ij)^{u_j}``).  A weight of 0 removes the site.
With every ``w_f = 0`` and every ``u_j = 1`` the model is BCE.

Missing labels (code ``-1``) and missing features (NaN) are masked with
:func:`pyro.poutine.mask`: neither their ``z`` nor their value enters the
log-joint or the guide.

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
``features`` (dim -2, size D) are siblings inside ``rows``.  Sites: ``theta``
(batch (N,), event (K,)), ``z`` and ``x`` (batch (M, N)), ``z_feature`` and
``o`` (batch (D, N)).

The hand-written engine is :mod:`consensuskit.inference.gbce_cavi`; the test
suite checks that its bound equals this model's ELBO under :func:`guide`.
"""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import torch
from pyro import poutine
from pyro.distributions import constraints
from pyro.ops.indexing import Vindex

from .bce import pad_beta

__all__ = ["model", "guide", "pad_beta", "as_tensors"]


def as_tensors(labels, features=None, dtype=torch.float64):
    """Split data into the observed values and masks the model consumes.

    Parameters
    ----------
    labels : array-like (N, M) of int, -1 missing
    features : array-like (N, D) of float, NaN missing, or None
    dtype : torch float dtype for the features

    Returns
    -------
    x : LongTensor (M, N), missing set to 0;  x_mask : BoolTensor (M, N)
    o : Tensor (D, N) or None, missing set to 0;  o_mask : BoolTensor (D, N) or None
    """
    lab = torch.as_tensor(labels).long().T
    x_mask = lab >= 0
    x = torch.where(x_mask, lab, torch.zeros_like(lab))
    if features is None:
        return x, x_mask, None, None
    f = torch.as_tensor(features, dtype=dtype).T
    o_mask = ~torch.isnan(f)
    o = torch.where(o_mask, f, torch.zeros_like(f))
    return x, x_mask, o, o_mask


def _weights(w, size, dtype, name):
    w = torch.as_tensor(w, dtype=dtype)
    if w.dim() == 0:
        w = w.expand(size)
    if w.shape != (size,):
        raise ValueError(f"{name} must be a scalar or have shape ({size},); got {tuple(w.shape)}")
    return w


def model(labels, n_labels, features=None, *, n_clusters, label_weight=1.0,
          feature_weight=1.0, alpha=None, beta=None, mu=None, sigma2=None, **unused):
    """GBCE generative model (paper section 6, eq. 11 with repetition weights).

    Parameters
    ----------
    labels : LongTensor (N, M)
        Re-coded base-clustering labels ``0..k_j-1``; ``-1`` missing.
    n_labels : sequence of int, length M
        ``k_j``, the number of labels of each base clustering.
    features : Tensor (N, D) or None
        Original features ``o_if``; NaN where missing.  None: BCE.
    n_clusters : int
        ``K``.
    label_weight : float or Tensor (M,)
        ``u_j``, repetitions of each base clustering.
    feature_weight : float or Tensor (D,)
        ``w_f``, repetitions of each feature.
    alpha, beta, mu, sigma2 : Tensor or None
        Model parameters (shapes in the module docstring; ``beta`` as a list of
        ``(K, k_j)`` or a ``(K, sum k_j)`` tensor).  None: a ``pyro.param`` named
        ``alpha``, ``beta_<j>``, ``mu``, ``sigma2`` (for fitting with SVI).
    **unused
        Variational parameters meant for :func:`guide` (ignored), so both can share kwargs.
    """
    K = int(n_clusters)
    dtype = features.dtype if features is not None else torch.get_default_dtype()
    x, x_mask, o, o_mask = as_tensors(labels, features, dtype=dtype)
    M, N = x.shape
    if alpha is None:
        alpha = pyro.param("alpha", torch.ones(K, dtype=dtype), constraint=constraints.positive)
    if beta is None:
        beta = [pyro.param(f"beta_{j}", torch.full((K, int(k)), 1.0 / int(k), dtype=dtype),
                           constraint=constraints.simplex) for j, k in enumerate(n_labels)]
    beta_pad = pad_beta(beta, dtype=None, device=x.device, n_labels=n_labels)
    u = _weights(label_weight, M, dtype, "label_weight")
    with pyro.plate("rows", N, dim=-1):
        theta = pyro.sample("theta", dist.Dirichlet(alpha.expand(N, K)))
        with pyro.plate("partitions", M, dim=-2) as j, \
                poutine.scale(scale=u[:, None]), poutine.mask(mask=x_mask):
            z = pyro.sample("z", dist.Categorical(theta))
            probs = Vindex(beta_pad)[j[:, None], z]
            pyro.sample("x", dist.Categorical(probs), obs=x)
        if o is not None:
            D = o.shape[0]
            if mu is None:
                mu = pyro.param("mu", torch.zeros(K, D, dtype=dtype))
            if sigma2 is None:
                sigma2 = pyro.param("sigma2", torch.ones(K, D, dtype=dtype),
                                    constraint=constraints.positive)
            w = _weights(feature_weight, D, dtype, "feature_weight")
            with pyro.plate("features", D, dim=-2) as f, \
                    poutine.scale(scale=w[:, None]), poutine.mask(mask=o_mask):
                zf = pyro.sample("z_feature", dist.Categorical(theta))
                loc = Vindex(mu.T)[f[:, None], zf]
                scale = Vindex(sigma2.T)[f[:, None], zf].sqrt()
                pyro.sample("o", dist.Normal(loc, scale), obs=o)


def guide(labels, n_labels, features=None, *, n_clusters, label_weight=1.0,
          feature_weight=1.0, gamma=None, phi=None, phi_features=None, **unused):
    """Mean-field guide ``q(theta_i | gamma_i) prod_j q(z_ij | phi_ij)^{u_j} prod_f ...``.

    Parameters
    ----------
    labels, n_labels, features, n_clusters, label_weight, feature_weight
        As in :func:`model`.
    gamma : Tensor (N, K) or None
        Variational Dirichlet parameters; None: ``pyro.param("gamma")``.
    phi : Tensor (M, N, K) or None
        Variational label-assignment probabilities; None: ``pyro.param("phi")``.
    phi_features : Tensor (D, N, K) or None
        Variational feature-assignment probabilities; None: ``pyro.param("phi_features")``.
    **unused
        Model parameters passed to :func:`model` (ignored), so both can share kwargs.
    """
    K = int(n_clusters)
    dtype = features.dtype if features is not None else torch.get_default_dtype()
    x, x_mask, o, o_mask = as_tensors(labels, features, dtype=dtype)
    M, N = x.shape
    if gamma is None:
        gamma = pyro.param("gamma", torch.ones(N, K, dtype=dtype),
                           constraint=constraints.positive)
    if phi is None:
        phi = pyro.param("phi", torch.full((M, N, K), 1.0 / K, dtype=dtype),
                         constraint=constraints.simplex)
    u = _weights(label_weight, M, dtype, "label_weight")
    with pyro.plate("rows", N, dim=-1):
        pyro.sample("theta", dist.Dirichlet(gamma))
        with pyro.plate("partitions", M, dim=-2), \
                poutine.scale(scale=u[:, None]), poutine.mask(mask=x_mask):
            pyro.sample("z", dist.Categorical(phi))
        if o is not None:
            D = o.shape[0]
            if phi_features is None:
                phi_features = pyro.param("phi_features",
                                          torch.full((D, N, K), 1.0 / K, dtype=dtype),
                                          constraint=constraints.simplex)
            w = _weights(feature_weight, D, dtype, "feature_weight")
            with pyro.plate("features", D, dim=-2), \
                    poutine.scale(scale=w[:, None]), poutine.mask(mask=o_mask):
                pyro.sample("z_feature", dist.Categorical(phi_features))
