"""Bayesian cluster ensembles (Wang, Shan & Banerjee 2011, section 4) as a Pyro program.

Generative process, for rows ``i = 1..N`` and base clusterings ``j = 1..M``::

    theta_i ~ Dirichlet(alpha)                 alpha: (K,)
    z_ij    ~ Categorical(theta_i)             (x_ij masked where missing)
    x_ij    ~ Categorical(beta_j[z_ij])        beta_j: (K, k_j)

Representation of beta (padded)
-------------------------------
The ``k_j`` differ per column.  The model takes beta *padded* to
``k_max = max_j k_j``: a tensor of shape ``(M, K, k_max)`` whose entries
``beta[j, h, r]`` for ``r >= k_j`` are zero (so every row still sums to 1 and a
padded label can never be drawn).  :func:`pad_beta` / :func:`unpad_beta` convert
from / to the list of ``(K, k_j)`` arrays used by the estimator.  The padded
layout lets the clusterings plate be vectorised.

Labels are passed as ``codes`` of shape ``(M, N)`` (column-major view of
:attr:`Ensemble.codes`, ``-1`` = missing).  Missing labels are masked out of the
likelihood with ``poutine.mask``; their ``z_ij`` stays in the model but carries
no information: enumerated, it sums to one; in :func:`guide_meanfield` it is
drawn from its conditional prior ``Categorical(theta_i)``, so it adds exactly
zero to the ELBO, which then equals the paper's bound over observed labels.

Plates: ``"rows"`` at ``dim=-1`` (size N, supports ``subsample_size`` /
``subsample``), ``"clusterings"`` at ``dim=-2`` (size M).  ``z`` is marked for
parallel enumeration, so ``TraceEnum_ELBO(max_plate_nesting=2)`` with
:func:`guide_enumerated` sums it out exactly.

Parameters ``alpha`` and ``beta`` are ``pyro.param`` sites (``"alpha"``,
``"beta_logits"``) unless passed in as tensors.
"""

from __future__ import annotations

import numpy as np
import pyro
import pyro.distributions as dist
import pyro.poutine as poutine
import torch
from pyro.distributions import constraints
from pyro.ops.indexing import Vindex

__all__ = ["model", "guide_meanfield", "guide_enumerated", "pad_beta", "unpad_beta",
           "label_mask"]


def label_mask(n_labels, device=None) -> torch.Tensor:
    """Boolean ``(M, k_max)``: True where ``r < k_j`` (a real label of column j)."""
    n_labels = torch.as_tensor(np.asarray(n_labels), device=device)
    kmax = int(n_labels.max())
    return torch.arange(kmax, device=device)[None, :] < n_labels[:, None]


def pad_beta(betas, dtype=torch.float64, device=None, n_labels=None) -> torch.Tensor:
    """Label distributions -> padded ``(M, K, k_max)`` with zeros beyond ``k_j`` (differentiable).

    ``betas`` is a list of ``(K, k_j)``, or with ``n_labels`` the engines' concatenated
    ``(K, sum_j k_j)`` (:func:`consensuskit.inference.bce_cavi.pack_beta`).  ``dtype=None``
    keeps the input's dtype.  The one padding of beta in the package (GBCE's model too).
    """
    if n_labels is not None and isinstance(betas, torch.Tensor) and betas.dim() == 2:
        off = np.concatenate([[0], np.cumsum(np.asarray(n_labels, dtype=np.int64))])
        betas = [betas[:, off[j]:off[j + 1]] for j in range(off.size - 1)]
    if dtype is None:
        dtype = torch.as_tensor(betas[0]).dtype
    K = betas[0].shape[0]
    kmax = max(b.shape[1] for b in betas)
    out = torch.zeros(len(betas), K, kmax, dtype=dtype, device=device)
    for j, b in enumerate(betas):
        out[j, :, : b.shape[1]] = torch.as_tensor(b, dtype=dtype, device=device)
    return out


def unpad_beta(beta, n_labels) -> list:
    """Padded ``(M, K, k_max)`` -> list of ``(K, k_j)`` tensors."""
    return [beta[j, :, : int(k)] for j, k in enumerate(np.asarray(n_labels))]


def _rows_plate(codes, size, subsample_size, subsample):
    """Open the rows plate and return it with the ``(M, n)`` codes of its rows."""
    N_data = codes.shape[1]
    size = N_data if size is None else size
    rows = pyro.plate("rows", size, dim=-1, subsample_size=subsample_size, subsample=subsample)
    return rows, size, N_data


def _select(codes, ind, size, N_data):
    if N_data == size:
        return codes.index_select(1, ind) if ind.numel() != size else codes
    if ind.numel() != N_data:
        raise ValueError(
            f"codes has {N_data} rows, neither the plate size {size} nor the subsample size "
            f"{ind.numel()}")
    return codes


def model(codes, n_labels, n_clusters, *, alpha=None, beta=None, size=None,
          subsample_size=None, subsample=None, **guide_kwargs):
    """The BCE generative process.

    Parameters
    ----------
    codes : LongTensor, shape (M, N_data)
        ``x_ij`` re-coded to ``0..k_j-1``, ``-1`` missing.  Either all ``size`` rows
        (the plate picks its subsample) or just the rows of ``subsample`` (streamed
        chunk; then pass ``size`` = total number of rows).
    n_labels : array of int, shape (M,)
        ``k_j``.
    n_clusters : int
        ``K``.
    alpha : Tensor (K,), optional
        Dirichlet parameter; default ``pyro.param("alpha")`` (positive, init 1).
    beta : Tensor (M, K, k_max), optional
        Padded label distributions (see module docstring); default the softmax of
        ``pyro.param("beta_logits")`` with padded entries at ``-inf``.
    size, subsample_size, subsample
        Passed to the ``"rows"`` plate for minibatching.
    **guide_kwargs
        Ignored (lets SVI pass the guides' ``gamma`` / ``phi`` to both programs).

    Sample sites
    ------------
    ``theta`` : (n, K) Dirichlet, plate rows;  ``z`` : (M, n) enumerable;
    ``x`` : (M, n) observed, masked (``poutine.mask``) where ``codes < 0``.
    """
    M = codes.shape[0]
    K = n_clusters
    dev = codes.device
    valid = label_mask(n_labels, device=dev)  # (M, kmax)
    if alpha is None:
        alpha = pyro.param("alpha", lambda: torch.ones(K, dtype=torch.get_default_dtype(),
                                                       device=dev),
                           constraint=constraints.positive)
    if beta is None:
        logits0 = torch.zeros(M, K, valid.shape[1], dtype=alpha.dtype, device=dev)
        logits = pyro.param("beta_logits", logits0)
        logits = logits.masked_fill(~valid[:, None, :], -float("inf"))
        beta = torch.softmax(logits, -1)
    j_index = torch.arange(M, device=dev)[:, None]  # (M, 1)
    rows, size, N_data = _rows_plate(codes, size, subsample_size, subsample)
    with rows as ind:
        x = _select(codes, ind, size, N_data)  # (M, n)
        theta = pyro.sample("theta", dist.Dirichlet(alpha))  # (n, K)
        with pyro.plate("clusterings", M, dim=-2):
            z = pyro.sample("z", dist.Categorical(theta), infer={"enumerate": "parallel"})
            probs = Vindex(beta)[j_index, z, :]  # (M, n, kmax) or (K, M, 1, kmax)
            with poutine.mask(mask=x >= 0):
                pyro.sample("x", dist.Categorical(probs), obs=x.clamp(min=0))


def guide_meanfield(codes, n_labels, n_clusters, *, alpha=None, beta=None, size=None,
                    subsample_size=None, subsample=None, gamma=None, phi=None):
    """The paper's family ``q(theta_i) = Dirichlet(gamma_i)``, ``q(z_ij) = Categorical(phi_ij)``.

    Parameters
    ----------
    codes, n_labels, n_clusters, size, subsample_size, subsample
        As for :func:`model` (``alpha``/``beta`` are accepted and ignored).
    gamma : Tensor (size, K), optional
        Default ``pyro.param("gamma")`` (positive, init 1 + V_i/K), indexed by the
        rows plate's subsample.
    phi : Tensor (M, size, K), optional
        Default ``pyro.param("phi")`` (simplex over K, init uniform).

    For a missing ``x_ij`` the model's ``z_ij`` is not observed through any
    likelihood; the guide draws it from ``Categorical(theta_i)`` (its conditional
    prior), so it adds exactly zero to the ELBO and the ELBO equals the paper's
    bound summed over observed labels only.
    """
    M = codes.shape[0]
    K = n_clusters
    dev = codes.device
    rows, size, N_data = _rows_plate(codes, size, subsample_size, subsample)
    dtype = torch.get_default_dtype() if gamma is None and phi is None else (
        gamma if gamma is not None else phi).dtype
    if gamma is None:
        gamma = pyro.param("gamma", lambda: torch.ones(size, K, dtype=dtype, device=dev)
                           + M / K, constraint=constraints.positive)
    if phi is None:
        phi = pyro.param("phi", lambda: torch.full((M, size, K), 1.0 / K, dtype=dtype,
                                                   device=dev), constraint=constraints.simplex)
    with rows as ind:
        x = _select(codes, ind, size, N_data)
        theta = pyro.sample("theta", dist.Dirichlet(gamma.index_select(0, ind)))
        with pyro.plate("clusterings", M, dim=-2):
            q = phi.index_select(1, ind)  # (M, n, K)
            q = torch.where((x >= 0)[..., None], q, theta)  # broadcasts over (M, n, K)
            pyro.sample("z", dist.Categorical(q))


def guide_enumerated(codes, n_labels, n_clusters, *, alpha=None, beta=None, size=None,
                     subsample_size=None, subsample=None, gamma=None):
    """``q(theta_i) = Dirichlet(gamma_i)`` only; ``z`` is summed out in the model.

    Use with ``TraceEnum_ELBO(max_plate_nesting=2)``.  ``gamma`` (size, K) defaults to
    ``pyro.param("gamma")`` and is indexed by the rows plate's subsample, so SVI on
    minibatches updates only the rows it sees.
    """
    M = codes.shape[0]
    K = n_clusters
    dev = codes.device
    rows, size, N_data = _rows_plate(codes, size, subsample_size, subsample)
    if gamma is None:
        gamma = pyro.param("gamma", lambda: torch.ones(size, K, dtype=torch.get_default_dtype(),
                                                       device=dev) + M / K,
                           constraint=constraints.positive)
    with rows as ind:
        pyro.sample("theta", dist.Dirichlet(gamma.index_select(0, ind)))
