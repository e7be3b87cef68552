"""Bayesian cluster ensembles (Wang, Shan & Banerjee 2011, section 4) as a Pyro program.

Generative process, for rows ``i = 1..N`` and base clusterings ``j = 1..M``::

    alpha_h   ~ alpha_prior  (default Gamma(1, 1))      h = 1..K   [unless alpha= is given]
    beta_jh   ~ Dirichlet(label_prior 1_{k_j})          [unless beta= is given]
    theta_i   ~ Dirichlet(alpha)
    z_ij      ~ Categorical(theta_i)                    (x_ij masked where missing)
    x_ij      ~ Categorical(beta_j[z_ij])

The paper treats ``alpha`` and ``beta`` as parameters (empirical Bayes).  Pass them as
tensors (``alpha=``, ``beta=``) to get exactly that program: nothing is sampled for them
and their gradients flow, so a variant can compute them from its own sites and call this
model (see ``docs/extending.md``).  Left out, they are sample sites with weak priors, so
the program is a full generative model: it simulates (``labels=None``) and NUTS samples it.

Calling convention (shared by every spec, see :mod:`consensuskit.models`)
------------------------------------------------------------------------
``model(labels=None, *, n_labels, n_clusters, n_rows=None, ...)`` with ``labels`` a
LongTensor (N, M), ``-1`` missing.  Inside, the program works on the (M, n) transpose so
that the clusterings plate can be vectorised over padded ``beta``.

Representation of beta (padded)
-------------------------------
The ``k_j`` differ per column.  ``beta`` is a tensor of shape ``(M, K, k_max)`` whose
entries ``beta[j, h, r]`` for ``r >= k_j`` are zero (a padded label can never be drawn),
or a list of ``(K, k_j)`` tensors (padded here, differentiably).  Sampled, it is one
Dirichlet site ``beta_{j}`` of shape (K, k_j) per column.

Plates: ``"rows"`` at ``dim=-1`` (size N, supports ``subsample_size`` / ``subsample``),
``"clusterings"`` at ``dim=-2`` (size M).  ``z`` is marked for parallel enumeration, so
``TraceEnum_ELBO(max_plate_nesting=2)`` with :func:`guide_enumerated` sums it out exactly.
"""

from __future__ import annotations

import numpy as np
import pyro
import pyro.distributions as dist
import pyro.poutine as poutine
import torch
import torch.nn.functional as F
from pyro.distributions import constraints
from pyro.ops.indexing import Vindex

from consensuskit.models.bce.marginal import MAX_STATES, BCERowMarginal
from consensuskit.models.convention import check_labels, label_distribution, rows_plate

__all__ = ["model", "model_collapsed", "guide_meanfield", "guide_enumerated", "pad_beta",
           "unpad_beta", "label_mask", "point_parameters", "read_point_parameters", "site_names",
           "MAX_PLATE_NESTING"]

MAX_PLATE_NESTING = 2


def site_names(n_partitions: int):
    """Names of the global sample sites: ``["alpha", "beta_0", ..., "beta_{M-1}"]``."""
    return ["alpha"] + [f"beta_{j}" for j in range(n_partitions)]


def label_mask(n_labels, device=None) -> torch.Tensor:
    """Boolean ``(M, k_max)``: True where ``r < k_j`` (a real label of column j)."""
    n_labels = torch.as_tensor(np.asarray(n_labels), device=device)
    kmax = int(n_labels.max())
    return torch.arange(kmax, device=device)[None, :] < n_labels[:, None]


def pad_beta(betas, dtype=None, device=None, n_labels=None) -> torch.Tensor:
    """Label distributions -> padded ``(..., M, K, k_max)`` with zeros beyond ``k_j``.

    ``betas`` is a list of ``(..., K, k_j)``, or with ``n_labels`` the engines' concatenated
    ``(K, sum_j k_j)`` (:func:`consensuskit.models.bce.cavi.pack_beta`).  Differentiable
    (``F.pad`` and ``stack``), so sampled or learned ``beta_j`` keep their gradients.
    ``dtype`` defaults to the input's (float64 for numpy input).  The one padding of beta
    in the package (GBCE's model too).
    """
    if n_labels is not None and isinstance(betas, torch.Tensor) and betas.dim() == 2:
        off = np.concatenate([[0], np.cumsum(np.asarray(n_labels, dtype=np.int64))])
        betas = [betas[:, off[j]:off[j + 1]] for j in range(off.size - 1)]
    blocks = [torch.as_tensor(b, device=device) for b in betas]
    if dtype is None:
        dtype = blocks[0].dtype if blocks[0].is_floating_point() else torch.float64
    kmax = max(b.shape[-1] for b in blocks)
    return torch.stack([F.pad(b.to(dtype), (0, kmax - b.shape[-1])) for b in blocks], dim=-3)


def unpad_beta(beta, n_labels) -> list:
    """Padded ``(M, K, k_max)`` -> list of ``(K, k_j)`` tensors."""
    return [beta[j, :, : int(k)] for j, k in enumerate(np.asarray(n_labels))]


def point_parameters(n_labels, n_clusters, *, dtype=None, device=None):
    """``alpha`` (K,) and padded ``beta`` (M, K, k_max) as ``pyro.param`` sites.

    The paper's empirical-Bayes parameters: ``"alpha"`` (positive, init 1) and
    ``"beta_logits"`` (M, K, k_max; padded entries masked to ``-inf`` before the softmax).
    Call inside a model and hand the result to :func:`model`.
    """
    dtype = dtype or torch.get_default_dtype()
    valid = label_mask(n_labels, device=device)
    K = int(n_clusters)
    alpha = pyro.param("alpha", lambda: torch.ones(K, dtype=dtype, device=device),
                       constraint=constraints.positive)
    logits = pyro.param("beta_logits", lambda: torch.zeros(len(valid), K, valid.shape[1],
                                                           dtype=dtype, device=device))
    beta = torch.softmax(logits.masked_fill(~valid[:, None, :], -float("inf")), -1)
    return alpha, beta


def read_point_parameters(n_labels):
    """Fitted ``(alpha (K,), [beta_j (K, k_j)])`` from the param store of :func:`point_parameters`.

    Does the masking, softmax and un-padding, so a user never re-does them.
    """
    store = pyro.get_param_store()
    valid = label_mask(n_labels, device=store["alpha"].device)
    alpha = store["alpha"].detach()
    logits = store["beta_logits"].detach().masked_fill(~valid[:, None, :], -float("inf"))
    return alpha, unpad_beta(torch.softmax(logits, -1), n_labels)


def as_padded(beta, n_labels, dtype, device):
    """Given ``beta`` (list of (K, k_j), packed (K, sum k_j) or padded) as padded (M, K, k_max)."""
    if isinstance(beta, (list, tuple)):
        return pad_beta(beta, dtype=dtype, device=device)
    beta = torch.as_tensor(beta, dtype=dtype, device=device)
    return pad_beta(beta, n_labels=n_labels) if beta.dim() == 2 else beta


def global_sites(n_labels, n_clusters, alpha, beta, alpha_prior, label_prior, dev):
    """``alpha`` (K,) and padded ``beta`` (M, K, k_max): given, or sampled from their priors."""
    K = int(n_clusters)
    if alpha is None:
        if alpha_prior is None:
            one = torch.ones(K, dtype=torch.get_default_dtype(), device=dev)
            alpha_prior = dist.Gamma(one, one).to_event(1)
        alpha = pyro.sample("alpha", alpha_prior)
    alpha = torch.as_tensor(alpha, device=dev)
    if not alpha.is_floating_point():
        alpha = alpha.to(torch.get_default_dtype())
    dtype = alpha.dtype  # a conditioned or given alpha sets the precision of the program
    if beta is None:
        conc = torch.as_tensor(label_prior, dtype=dtype, device=dev)
        blocks = []
        with pyro.plate("components", K, dim=-1):
            for j, kj in enumerate(np.asarray(n_labels)):
                blocks.append(pyro.sample(f"beta_{j}", dist.Dirichlet(conc.expand(int(kj)))))
        return alpha, pad_beta(blocks)
    return alpha, as_padded(beta, n_labels, dtype, dev)


def model(labels=None, *, n_labels, n_clusters, n_rows=None, alpha=None, beta=None,
          alpha_prior=None, label_prior=1.0, subsample_size=None, subsample=None,
          **guide_kwargs):
    """The BCE generative process (simulates when ``labels`` is None).

    Parameters
    ----------
    labels : LongTensor (N_data, M) or None
        ``x_ij`` re-coded to ``0..k_j-1``, ``-1`` missing.  Either all rows (the plate
        picks its subsample) or just the rows of ``subsample`` (a streamed chunk; then
        give ``n_rows`` = total number of rows).  None: simulate ``n_rows`` rows.
    n_labels : sequence of int (M,)
        ``k_j``.
    n_clusters : int
        ``K``.
    n_rows : int, optional
        ``N`` (plate size); default ``labels.shape[0]``.
    alpha : Tensor (K,), optional
        Fixed Dirichlet parameter; default the sample site ``"alpha" ~ alpha_prior``.
    beta : Tensor (M, K, k_max), list of (K, k_j) or packed (K, sum k_j), optional
        Fixed label distributions; default sample sites ``"beta_{j}"``.
    alpha_prior : pyro Distribution with event shape (K,), optional
        Default ``Gamma(1, 1)`` per component.
    label_prior : float or Tensor
        Concentration of the symmetric Dirichlet prior of each ``beta_jh``.
    subsample_size, subsample
        Passed to the ``"rows"`` plate for minibatches / streamed chunks.
    **guide_kwargs
        Ignored (lets SVI pass the guides' ``gamma`` / ``phi`` to both programs).

    Returns
    -------
    LongTensor (n, M): the labels of the plate's rows (observed or simulated).

    Sample sites
    ------------
    ``alpha`` (K,), ``beta_{j}`` (K, k_j) unless given; ``theta`` (n, K) Dirichlet in
    plate rows; ``z`` (M, n) enumerable; ``x`` (M, n), observed and masked where missing.
    """
    labels, N_data, M, dev = check_labels(labels, n_labels, n_rows)
    alpha, beta = global_sites(n_labels, n_clusters, alpha, beta, alpha_prior, label_prior,
                                dev)
    j_index = torch.arange(M, device=dev)[:, None]  # (M, 1)
    with rows_plate(labels, n_rows, subsample_size, subsample, dev) as (_, x):
        theta = pyro.sample("theta", dist.Dirichlet(alpha))  # (n, K)
        with pyro.plate("clusterings", M, dim=-2):
            z = pyro.sample("z", dist.Categorical(theta), infer={"enumerate": "parallel"})
            probs = Vindex(beta)[j_index, z, :]  # (M, n, kmax) or (K, M, 1, kmax)
            if x is None:
                return pyro.sample("x", label_distribution(probs)).T
            xt = x.T  # (M, n)
            with poutine.mask(mask=xt >= 0):
                pyro.sample("x", label_distribution(probs), obs=xt.clamp(min=0))
    return x


def model_collapsed(labels=None, *, n_labels, n_clusters, n_rows=None, alpha=None,
                    beta=None, alpha_prior=None, label_prior=1.0, subsample_size=None,
                    subsample=None, max_states=MAX_STATES, **guide_kwargs):
    """The BCE process with ``theta_i`` and ``z_i`` summed out exactly: one site per row.

    Same arguments, global sites (``alpha``, ``beta_{j}``) and priors as :func:`model`;
    inside the ``"rows"`` plate the only site is ``"x"`` (n, M), observed with
    :class:`~consensuskit.models.bce.marginal.BCERowMarginal` (masked labels summed out),
    so its log density is the exact ``log p(x_i | alpha, beta)``.  This is the form NUTS
    samples (``alpha`` and ``beta`` only: no funnel in ``theta``), and its row distribution
    gives the exact posterior membership ``E[theta_i | x_i]`` (``membership``).  Costs
    ``C(M+K, K)`` count states per row (ValueError above ``max_states``).  Simulates when
    ``labels`` is None (complete rows).
    """
    labels, N_data, M, dev = check_labels(labels, n_labels, n_rows)
    alpha, beta = global_sites(n_labels, n_clusters, alpha, beta, alpha_prior, label_prior,
                                dev)
    row = BCERowMarginal(alpha, beta, max_states=max_states)
    with rows_plate(labels, n_rows, subsample_size, subsample, dev) as (_, x):
        return pyro.sample("x", row, obs=x)


def guide_meanfield(labels=None, *, n_labels, n_clusters, n_rows=None, alpha=None,
                    beta=None, subsample_size=None, subsample=None, gamma=None, phi=None,
                    **model_kwargs):
    """The paper's family ``q(theta_i) = Dirichlet(gamma_i)``, ``q(z_ij) = Categorical(phi_ij)``.

    For the model with ``alpha`` and ``beta`` given (the paper's parameters).

    Parameters
    ----------
    labels, n_labels, n_clusters, n_rows, subsample_size, subsample
        As for :func:`model` (``alpha``/``beta`` are accepted and ignored).
    gamma : Tensor (N, K), optional
        Default ``pyro.param("gamma")`` (positive, init 1 + M/K), indexed by the
        rows plate's subsample.
    phi : Tensor (M, N, K), optional
        Default ``pyro.param("phi")`` (simplex over K, init uniform).

    For a missing ``x_ij`` the guide draws ``z_ij`` from ``Categorical(theta_i)`` (its
    conditional prior), so it adds exactly zero to the ELBO and the ELBO equals the
    paper's bound summed over observed labels only.
    """
    labels, N_data, M, dev = check_labels(labels, n_labels, n_rows)
    K = int(n_clusters)
    size = N_data if n_rows is None else int(n_rows)
    dtype = torch.get_default_dtype() if gamma is None and phi is None else (
        gamma if gamma is not None else phi).dtype
    if gamma is None:
        gamma = pyro.param("gamma", lambda: torch.ones(size, K, dtype=dtype, device=dev)
                           + M / K, constraint=constraints.positive)
    if phi is None:
        phi = pyro.param("phi", lambda: torch.full((M, size, K), 1.0 / K, dtype=dtype,
                                                   device=dev), constraint=constraints.simplex)
    with rows_plate(labels, n_rows, subsample_size, subsample, dev) as (ind, x):
        theta = pyro.sample("theta", dist.Dirichlet(gamma.index_select(0, ind)))
        with pyro.plate("clusterings", M, dim=-2):
            q = phi.index_select(1, ind)  # (M, n, K)
            q = torch.where((x.T >= 0)[..., None], q, theta)  # broadcasts over (M, n, K)
            pyro.sample("z", dist.Categorical(q))


def guide_enumerated(labels=None, *, n_labels, n_clusters, n_rows=None, alpha=None,
                     beta=None, subsample_size=None, subsample=None, gamma=None,
                     **model_kwargs):
    """``q(theta_i) = Dirichlet(gamma_i)`` only; ``z`` is summed out in the model.

    Use with ``TraceEnum_ELBO(max_plate_nesting=2)``.  ``gamma`` (N, K) defaults to
    ``pyro.param("gamma")`` and is indexed by the rows plate's subsample, so SVI on
    minibatches updates only the rows it sees.  For the model with ``alpha`` and ``beta``
    given; to fit them as well, put them in a point-estimate guide or use
    :func:`point_parameters` in a wrapper model.
    """
    labels, N_data, M, dev = check_labels(labels, n_labels, n_rows)
    K = int(n_clusters)
    size = N_data if n_rows is None else int(n_rows)
    if gamma is None:
        gamma = pyro.param("gamma", lambda: torch.ones(size, K, dtype=torch.get_default_dtype(),
                                                       device=dev) + M / K,
                           constraint=constraints.positive)
    with rows_plate(labels, n_rows, subsample_size, subsample, dev) as (ind, _):
        pyro.sample("theta", dist.Dirichlet(gamma.index_select(0, ind)))
