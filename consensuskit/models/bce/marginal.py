"""BCE's exact per-row marginal ``p(x_i | alpha, beta)``, with ``theta_i`` and ``z_i`` summed out.

Given ``theta_i ~ Dirichlet(alpha)``, the assignments of row ``i``'s observed labels form a
Polya-urn (Dirichlet-multinomial) sequence: a sequence with count vector ``n`` (``n_k``
assignments to cluster ``k``, ``|n| = sum_k n_k``) has probability::

    P(n; alpha) = Gamma(A) / Gamma(A + |n|) * prod_k Gamma(alpha_k + n_k) / Gamma(alpha_k)

(``A = sum_k alpha_k``), which depends on the sequence only through ``n``.  So::

    p(x_i | alpha, beta) = sum_n P(n; alpha) * W_i(n),
    W_i(n) = sum over z-sequences of the observed columns with counts n of prod_j beta_j[z_ij, x_ij]

and ``W_i`` follows a forward recursion over the observed columns of row ``i``::

    W'(n) = sum_k W(n - e_k) * beta_j[k, x_ij]          (W(0) = 1 before the first column)

Missing columns are skipped (their ``z_ij`` sums to one given ``theta_i``).  The states are
the count vectors with ``|n| <= M``: ``C(M + K, K)`` of them (165 for M = 8, K = 3).  Each
step is rescaled and its log normaliser accumulated (float64 throughout), so the result
is stable; it is differentiable in ``alpha`` and ``beta`` by autograd and vectorised over
rows.  Nothing in it is specific to labels: :func:`collapsed_log_marginal` runs it on any
per-column likelihoods ``p(value_ic | z_ic = k)`` (n, C, K), so GBCE feeds it its labels'
``beta_j[k, x_ij]`` and its features' Normal densities as further columns
(:func:`consensuskit.models.gbce.spec.exact_log_marginal`).  :class:`BCERowMarginal` wraps it as
a Pyro distribution with event shape (M,), which is what
:func:`consensuskit.models.bce.spec.model_collapsed` observes per row.

The posterior of the final count vector, ``p(n | x_i) ∝ P(n; alpha) W_i(n)``, gives the
posterior mean membership exactly, since ``theta_i | z_i ~ Dirichlet(alpha + n)``::

    E[theta_ik | x_i, alpha, beta] = sum_n p(n | x_i) (alpha_k + n_k) / (A + |n|)
"""

from __future__ import annotations

from functools import lru_cache
from itertools import combinations

import numpy as np
import torch
from pyro.distributions import TorchDistribution, constraints

__all__ = ["BCERowMarginal", "collapsed_log_marginal", "label_likelihoods",
           "posterior_mean_membership",
           "count_states", "check_n_states", "MAX_STATES"]

MAX_STATES = 20_000
"""Largest number of count-vector states :class:`BCERowMarginal` accepts (``C(M+K, K)``)."""

_BLOCK_ELEMENTS = 2**22  # rows x states per block of the recursion (about 32 MB per array)


def n_count_states(max_level: int, n_clusters: int) -> int:
    """``C(max_level + K, K)``: count vectors in N^K with ``|n| <= max_level``."""
    from math import comb

    return comb(int(max_level) + int(n_clusters), int(n_clusters))


@lru_cache(maxsize=32)
def count_states(max_level: int, n_clusters: int):
    """All count vectors ``n`` in N^K with ``|n| <= max_level``, by level.

    Returns
    -------
    counts : ndarray (S, K) int64
    level : ndarray (S,) int64, ``|n|``
    pred : ndarray (S, K) int64, index of ``n - e_k``, or ``S`` (a zero column) if ``n_k = 0``
    """
    K, L = int(n_clusters), int(max_level)
    rows = []
    for level in range(L + 1):  # compositions of `level` into K parts (stars and bars)
        for bars in combinations(range(level + K - 1), K - 1):
            edges = (-1,) + bars + (level + K - 1,)
            rows.append([edges[k + 1] - edges[k] - 1 for k in range(K)])
    counts = np.asarray(rows, dtype=np.int64).reshape(-1, K)
    index = {tuple(c): s for s, c in enumerate(counts)}
    S = len(counts)
    pred = np.full((S, K), S, dtype=np.int64)
    for s, c in enumerate(counts):
        for k in range(K):
            if c[k] > 0:
                c2 = c.copy()
                c2[k] -= 1
                pred[s, k] = index[tuple(c2)]
    return counts, counts.sum(1), pred


def check_n_states(max_level, K, max_states, what="M = {C} base clusterings",
                   spec="consensuskit.models.bce.spec.model"):
    """``C(C+K, K)`` for ``C = max_level`` columns; ValueError above ``max_states``."""
    S = n_count_states(max_level, K)
    if S > max_states:
        raise ValueError(
            f"the exact row marginal needs C(C+K, K) = {S} count states for "
            f"{what.format(C=max_level)} and K = {K} clusters, more than max_states = "
            f"{max_states}; use the uncollapsed spec ({spec}, theta sampled) or raise "
            "max_states if memory allows (rows x states x K floats)")
    return S


def _forward(lik, observed):
    """The forward recursion on one block: ``lik`` (n, C, K), ``observed`` (n, C) bool.

    Returns ``(W (n, S) up to exp(log_norm), log_norm (n,), counts (S, K), level (S,),
    observed columns per row (n,))``; W is 0 off the row's level.
    """
    n, C, K = lik.shape
    counts, level, pred = (torch.as_tensor(a, device=lik.device) for a in count_states(C, K))
    S = pred.shape[0]
    dt = lik.dtype
    # states along dim 0 so that each predecessor gather copies whole rows
    w = torch.zeros(S + 1, n, dtype=dt, device=lik.device)
    w[0] = 1.0  # the empty count vector (state 0); row S stays 0 (no predecessor)
    log_norm = torch.zeros(n, dtype=dt, device=lik.device)
    # after t columns no row is above level t: states are sorted by level, so the
    # states of levels <= t + 1 are a prefix of C(t + 1 + K, K) and the rest stay 0
    ends = np.searchsorted(count_states(C, K)[1], np.arange(C + 1), side="right")
    # every column advances the level bound t, even one no row of the block observes
    # (then ``torch.where`` keeps w and log_norm as they were, bit for bit): no branch on
    # the data, so the recursion records into one graph (traced potentials, see
    # consensuskit.inference.compiled_potential)
    t = 0
    for j in range(C):
        obs = observed[:, j]
        t += 1
        P = int(ends[t])
        b = lik[:, j, :].T  # (K, n)
        step = w.index_select(0, pred[:P, 0]) * b[0]
        for k in range(1, K):
            step = step + w.index_select(0, pred[:P, k]) * b[k]
        c = step.sum(0)  # (n,)
        step = torch.cat([step / c, w.new_zeros(S + 1 - P, n)], 0)
        w = torch.where(obs, step, w)
        log_norm = log_norm + torch.where(obs, c.log(), log_norm.new_zeros(()))
    return w[:S].T, log_norm, counts, level, observed.sum(1)


def _log_polya(alpha, counts, level):
    """``log P(n; alpha)`` for every state, (S,)."""
    A = alpha.sum()
    return (torch.lgamma(alpha + counts).sum(-1) - torch.lgamma(alpha).sum()
            + torch.lgamma(A) - torch.lgamma(A + level))


def _marginal_block(alpha, lik, observed):
    w, log_norm, counts, level, V = _forward(lik, observed)
    lp = _log_polya(alpha, counts.to(alpha.dtype), level.to(alpha.dtype))
    on_level = level[None, :] == V[:, None]  # (n, S): the states a row can end in
    lp = torch.where(on_level, lp[None, :], lp.new_tensor(-float("inf")))
    mx = lp.max(-1, keepdim=True).values.detach()
    terms = w * torch.exp(lp - mx)  # zero off the row's level (exp(-inf) = 0)
    total = terms.sum(-1)
    return log_norm + mx.squeeze(-1) + total.log(), terms / total[:, None]


def collapsed_log_marginal(alpha, lik, observed, *, return_posterior=False):
    """``log p(row_i | alpha, ...)`` with ``theta_i`` and every ``z_ic`` summed out.

    The recursion of the module docstring for any per-column likelihoods: column ``c`` of
    row ``i`` contributes ``lik[i, c, k] = p(value_ic | z_ic = k)`` (BCE: ``beta_j[k,
    x_ij]``; GBCE adds a Normal density per feature), unobserved columns nothing.

    Parameters
    ----------
    alpha : Tensor (K,)
    lik : Tensor (n, C, K)
        Per-column likelihoods (any finite value where not observed).  A row's result
        is exact up to the floating point of the rescaled recursion; scale a column by a
        per-row constant (and add its log to the result) to keep it in range.
    observed : BoolTensor (n, C)
    return_posterior : bool
        Also return ``p(n | row_i)`` (n, S) over :func:`count_states` ``(C, K)``.

    Returns
    -------
    Tensor (n,) (and (n, S)); differentiable in ``alpha`` and ``lik``; computed in blocks
    of rows (bounded memory).
    """
    n, C, K = lik.shape
    block = max(1, _BLOCK_ELEMENTS // n_count_states(C, K))
    if n <= block:
        parts = [_marginal_block(alpha, lik, observed)]
    else:
        parts = [_marginal_block(alpha, lik[i:i + block], observed[i:i + block])
                 for i in range(0, n, block)]
    logp = parts[0][0] if len(parts) == 1 else torch.cat([p[0] for p in parts])
    if not return_posterior:
        return logp
    return logp, (parts[0][1] if len(parts) == 1 else torch.cat([p[1] for p in parts]))


def label_likelihoods(beta, x):
    """``beta_j[k, x_ij]`` for rows ``x`` (n, M) -> (n, M, K), the label columns' input of
    :func:`collapsed_log_marginal` (any value where a label is missing); ``beta`` padded
    (M, K, k_max)."""
    M = x.shape[1]
    return beta[torch.arange(M, device=x.device)[None, :], :, x.clamp(min=0)]


def posterior_mean_membership(alpha, post, n_columns):
    """``E[theta_i | row_i] = sum_n p(n | row_i) (alpha + n) / (A + |n|)``, (n, K).

    ``post`` (n, S) from :func:`collapsed_log_marginal` with ``return_posterior=True`` on
    ``n_columns`` columns.
    """
    counts, level, _ = count_states(n_columns, alpha.shape[0])
    counts = torch.as_tensor(counts, device=alpha.device, dtype=alpha.dtype)
    level = torch.as_tensor(level, device=alpha.device, dtype=alpha.dtype)
    mean = (alpha + counts) / (alpha.sum() + level)[:, None]  # (S, K)
    return post @ mean


class BCERowMarginal(TorchDistribution):
    """``p(x_i | alpha, beta)`` of one BCE row, ``theta_i`` and ``z_i`` summed out exactly.

    Parameters
    ----------
    alpha : Tensor (K,)
        Dirichlet parameter of ``theta_i``.
    beta : Tensor (M, K, k_max)
        Padded label distributions (zeros beyond ``k_j``;
            :func:`consensuskit.models.bce.spec.pad_beta`).
    max_states : int
        Refuse (ValueError) when ``C(M+K, K)`` exceeds it.

    Event shape (M,): a row of labels, ``-1`` where missing (missing labels are summed out
    in :meth:`log_prob`; :meth:`sample` draws complete rows).  Batch shape () (the rows plate
    expands it); ``alpha`` and ``beta`` carry no batch dimensions (one parameter point per
    distribution: no vectorised particles or ``Predictive(parallel=True)``).
    """

    arg_constraints = {"alpha": constraints.positive}
    has_enumerate_support = False

    def __init__(self, alpha, beta, max_states=MAX_STATES, validate_args=None):
        if alpha.dim() != 1 or beta.dim() != 3 or beta.shape[1] != alpha.shape[0]:
            raise ValueError(f"alpha must be (K,) and beta (M, K, k_max); got "
                             f"{tuple(alpha.shape)} and {tuple(beta.shape)}")
        self.alpha, self.beta = alpha, beta.to(alpha.dtype)
        M, K, kmax = beta.shape
        check_n_states(M, K, max_states)
        self.max_states = max_states
        self._support = constraints.independent(constraints.integer_interval(-1, kmax - 1), 1)
        super().__init__(torch.Size(), torch.Size([M]), validate_args=validate_args)

    @constraints.dependent_property(is_discrete=True, event_dim=1)
    def support(self):
        return self._support

    # ------------------------------------------------------------ the recursion
    def _posterior_states(self, x):
        """``log p(x_i)`` (n,) and ``p(n | x_i)`` (n, S), in blocks of rows (bounded memory)."""
        return collapsed_log_marginal(self.alpha, label_likelihoods(self.beta, x), x >= 0,
                                      return_posterior=True)

    def _rows(self, value):
        value = torch.as_tensor(value, device=self.alpha.device)
        M = self.event_shape[0]
        if value.shape[-1] != M:
            raise ValueError(f"a row has {M} labels; got a value of shape {tuple(value.shape)}")
        return value.reshape(-1, M).long(), value.shape[:-1]

    def log_prob(self, value):
        """Exact ``log p(x_i | alpha, beta)``; ``value`` (..., M), ``-1`` missing -> (...)."""
        if self._validate_args:
            self._validate_sample(value)
        x, shape = self._rows(value)
        return self._posterior_states(x)[0].reshape(shape)

    def membership(self, value):
        """``E[theta_i | x_i, alpha, beta]`` for rows ``value`` (..., M) -> (..., K), exact."""
        x, shape = self._rows(value)
        _, post = self._posterior_states(x)
        return posterior_mean_membership(self.alpha, post, x.shape[1]).reshape(*shape, -1)

    def sample(self, sample_shape=()):
        """Complete rows (..., M) simulated as the model does: theta, then z, then x."""
        shape = torch.Size(sample_shape) + self.batch_shape
        with torch.no_grad():
            M, K, _ = self.beta.shape
            theta = torch.distributions.Dirichlet(self.alpha).sample(shape)  # (..., K)
            z = torch.distributions.Categorical(theta[..., None, :].expand(*shape, M, K)).sample()
            probs = self.beta[torch.arange(M, device=z.device), z]  # (..., M, k_max)
            return torch.distributions.Categorical(probs).sample()
