"""Probabilistic consensus clustering (PCC) as a Pyro model.

Lourenço, Rota Bulò, Rebagliati, Fred, Figueiredo & Pelillo (2015),
"Probabilistic consensus clustering using evidence accumulation", Machine
Learning 98, section 3.

Generative story (paper symbols; ``n`` points, ``K`` = maximum number of clusters):

* for each point ``i``: ``y_i ~ Dirichlet(alpha 1_K)``, ``y_i in Delta_K``,
  ``y_ki = P[i in cluster k]``.  The paper puts no prior on ``Y`` (maximum
  likelihood); the default ``alpha = 1`` is the flat prior on the simplex,
  whose density ``Gamma(K)`` does not depend on ``Y``, so MAP = ML;
* for each observed pair ``{i, j}`` (``i < j``; all pairs, or a sampled subset
  as in section 5.4): ``C_ij ~ Binomial(N_ij, y_i^T y_j)``, with ``N_ij`` the
  number of base clusterings labelling both points and ``c_ij`` the observed
  number that put them in the same cluster.  Pairs are independent given ``Y``.

The negative log-likelihood equals the KL objective of paper eq. (3) minus a
constant (Proposition 1):  ``-log P(C | Y) = f_KL(Y) - kappa`` with ``kappa``
from :func:`consensuskit.models.pcc.descent.kl_objective_constant`.  The
fast optimiser lives in :mod:`consensuskit.models.pcc.descent`; this model
is the reference for it and a starting point for extensions (other priors,
SVI with a :func:`guide_delta` or a Dirichlet guide).

Shapes: ``pairs`` (P, 2) int64, ``counts`` / ``trials`` (P,), ``y`` (n, K).
Plates: ``"points"`` (size n, dim -1) and ``"pairs"`` (size P, dim -1; may be
subsampled with ``subsample_size``).
"""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import torch
from torch.distributions import constraints

__all__ = ["model", "guide_delta", "log_likelihood", "co_cluster_probability"]


def co_cluster_probability(y: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
    """``a_ij = y_i^T y_j`` for each pair: ``y`` (n, K), ``pairs`` (P, 2) -> (P,)."""
    return (y[pairs[:, 0]] * y[pairs[:, 1]]).sum(-1)


def _check(pairs, counts, trials):
    if pairs.dim() != 2 or pairs.shape[1] != 2:
        raise ValueError(f"pairs must have shape (P, 2); got {tuple(pairs.shape)}")
    if counts.shape != (pairs.shape[0],) or trials.shape != counts.shape:
        raise ValueError("counts and trials must have shape (P,) matching pairs")


def model(pairs, counts, trials, n_points, n_clusters, *, alpha=1.0, subsample_size=None,
          init=None):
    """PCC generative model.

    Parameters
    ----------
    pairs : LongTensor, shape (P, 2)
        Observed point pairs ``{i, j}``, ``i != j``, each at most once.
    counts : Tensor, shape (P,)
        ``c_ij``: base clusterings putting ``i`` and ``j`` in the same cluster.
    trials : Tensor, shape (P,)
        ``N_ij``: base clusterings labelling both points (``N_ij = M`` when
        no label is missing).  Pairs with ``N_ij = 0`` contribute nothing.
    n_points : int
        ``n``.
    n_clusters : int
        ``K``, the maximum number of clusters.
    alpha : float
        Dirichlet concentration of the prior on each ``y_i`` (1 = flat).
    subsample_size : int or None
        Mini-batch size over pairs (the likelihood is rescaled by Pyro).
    init : ignored
        A :func:`guide_delta` option, accepted so that model and guide share
        one signature under ``pyro.infer.SVI``.

    Returns
    -------
    y : Tensor, shape (n, K)
    """
    _check(pairs, counts, trials)
    dtype = counts.dtype
    conc = torch.full((n_clusters,), float(alpha), dtype=dtype, device=counts.device)
    with pyro.plate("points", n_points, dim=-1):
        y = pyro.sample("y", dist.Dirichlet(conc))  # (n, K)
    with pyro.plate("pairs", pairs.shape[0], dim=-1, subsample_size=subsample_size) as idx:
        p = co_cluster_probability(y, pairs[idx]).clamp(0.0, 1.0)
        pyro.sample("c", dist.Binomial(total_count=trials[idx], probs=p), obs=counts[idx])
    return y


def guide_delta(pairs, counts, trials, n_points, n_clusters, *, alpha=1.0, subsample_size=None,
                init=None):
    """MAP guide: a point mass at ``y = pyro.param("y_map")`` constrained to the simplex.

    ``init`` (n, K) sets the starting value the first time the parameter is
    created (default: near-uniform rows with a small random perturbation,
    since exactly uniform rows are a stationary point of the likelihood).
    With ``alpha = 1`` the ELBO equals ``log P(C | Y) + n log Gamma(K)``.
    """
    dtype = counts.dtype
    if init is None:
        noise = torch.rand(n_points, n_clusters, dtype=dtype, device=counts.device)
        init = 0.9 / n_clusters + 0.1 * noise / noise.sum(-1, keepdim=True)
    y = pyro.param("y_map", lambda: init.to(dtype), constraint=constraints.simplex)
    with pyro.plate("points", n_points, dim=-1):
        pyro.sample("y", dist.Delta(y, event_dim=1))
    return y


def log_likelihood(y, pairs, counts, trials) -> torch.Tensor:
    """``log P(C | Y) = sum_pairs log Binomial(c_ij; N_ij, y_i^T y_j)`` (scalar)."""
    _check(pairs, counts, trials)
    p = co_cluster_probability(y, pairs).clamp(0.0, 1.0)
    return dist.Binomial(total_count=trials, probs=p).log_prob(counts).sum()
