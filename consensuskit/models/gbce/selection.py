"""How GBCE fits are compared: the log marginal likelihood of labels *and* features.

``sum_i log p(x_i, o_i | alpha, beta, mu, sigma2)`` over (a fixed subset of) the training
rows, ``theta_i`` and every assignment summed out, each observed label and feature one
column of BCE's count-vector recursion (:func:`consensuskit.models.gbce.spec.exact_log_marginal`
computes the same quantity for any number of states).  Exact when ``C(M + D + K, K)`` is
small; otherwise the defensive-mixture importance sampler
(:func:`consensuskit.models.bce.alpha.mixture_log_weights_lik`) on the same columns.
The collapsed Gibbs fit of :class:`consensuskit.models.gbce.estimator.GBCE` uses it to
choose among its chains.
"""

from __future__ import annotations

import numpy as np
import torch

from consensuskit.inference.pointwise import logmeanexp_rows
from consensuskit.models.bce.alpha import mixture_log_weights_lik
from consensuskit.models.bce.marginal import collapsed_log_marginal, n_count_states

__all__ = ["row_columns", "selection_log_marginal"]


def row_columns(codes, offsets, values, observed, alpha, beta, mu, sigma2):
    """The per-column likelihoods of rows: ``(lik (n, M + D, K), observed (n, M + D), shift
    (n,))``; ``lik`` of a feature is its Normal density divided by its largest value over
    clusters, whose logs sum to ``shift``.

    ``codes`` (n, M) global label indices (-1 missing), ``offsets`` (M + 1,); ``values``
    (n, D), ``observed`` (n, D) bool; ``beta`` (K, L), ``mu``, ``sigma2`` (K, D) tensors.
    """
    dt = beta.dtype
    codes = torch.as_tensor(np.asarray(codes), dtype=torch.long)
    lab_obs = codes >= 0
    lab = beta.T[codes.clamp(min=0)]  # (n, M, K)
    o = torch.as_tensor(np.where(observed, values, 0.0), dtype=dt)
    f_obs = torch.as_tensor(np.asarray(observed))
    ll = -0.5 * ((o[..., None] - mu.T[None]) ** 2 / sigma2.T[None]
                 + torch.log(2 * torch.pi * sigma2.T[None]))  # (n, D, K)
    top = ll.max(-1, keepdim=True).values
    lik = torch.cat([lab, torch.exp(ll - top)], 1)
    obs = torch.cat([lab_obs, f_obs], 1)
    return lik, obs, (top.squeeze(-1) * f_obs).sum(1)


def selection_log_marginal(alpha, beta, mu, sigma2, codes, offsets, values, observed, *,
                           seed: int, max_rows: int = 1000, n_samples: int = 32,
                           exact_max_states: int = 500) -> float:
    """The criterion (module docstring) on up to ``max_rows`` rows chosen by ``seed``.

    The same ``seed`` gives the same rows and random numbers (common random numbers for
    the fits being compared).
    """
    gen = torch.Generator().manual_seed(int(seed))
    N = codes.shape[0]
    rows = np.arange(N)
    if N > max_rows:
        rows = np.sort(torch.randperm(N, generator=gen)[:max_rows].numpy())
    a = alpha.detach().double().cpu()
    lik, obs, shift = row_columns(codes[rows], offsets, values[rows], observed[rows], a,
                                  beta.detach().double().cpu(), mu.detach().double().cpu(),
                                  sigma2.detach().double().cpu())
    C, K = lik.shape[1], a.shape[0]
    if n_count_states(C, K) <= exact_max_states:
        return float((collapsed_log_marginal(a, lik, obs) + shift).sum())
    total = 0.0
    chunk = max(1, 2**20 // (n_samples * K))
    for s in range(0, lik.shape[0], chunk):
        lw = mixture_log_weights_lik(a, lik[s:s + chunk], obs[s:s + chunk], n_samples, gen)
        total += float(logmeanexp_rows(lw)[0].sum())
    return total + float(shift.sum())
