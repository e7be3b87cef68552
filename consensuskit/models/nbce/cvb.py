"""First-order collapsed variational Bayes for NBCE (paper section 5.3, eqs. 10-11), in torch.

Only ``q(z) = prod_i Cat(gamma_i)`` is kept; ``pi`` and ``theta*`` are
integrated out.  Each update of ``gamma_i`` is eq. (10) with every expectation
``E[log(c + N^{-i})]`` replaced by ``log(c + E[N^{-i}])`` (the first-order,
"CVB0"-style approximation of the paper, eq. 11), where the expected counts
without point i are the totals minus ``gamma_i``'s own contribution:

    log gamma_ik = log p(z_i = k | E[N^{-i}]) + sum_{j observed}
                   [log(beta + E N^{-i}_{k, x_ij}) - log(k_j beta + E N^{-i}_{kj})] + const,

with the TSB or FSD prior term of eq. (10) evaluated at the expected cluster
sizes (for TSB ``E N_{>=k}`` is a reverse cumulative sum).

Rows are updated in blocks of ``block_size``: rows within a block are updated
from the same expected counts, and the counts are refreshed after each block
(``block_size=1`` is the fully sequential algorithm).  The iteration stops
when the largest change of any ``gamma_ik`` in a pass is below ``tol`` (the
paper's criterion).

The expected counts are running sums refreshed after each block; a
leave-one-out count (total minus the row's own share) that comes out negative
is raised to 0, and counted when it is negative beyond the round-off of the
subtraction, i.e. when the running totals have drifted
(``CVBState.n_clamped``; the NBCE estimator warns and reports ``n_clamped_``).

``alpha0`` and ``beta`` stay fixed (the paper gives no update for CVB).

Reported bound: ``L_CVB ≈ log p(x, E[z-counts] | alpha0, beta) + H[q(z)]`` —
the collapsed log joint (eq. 4) evaluated at the expected counts (log-gamma of
real arguments) plus the entropy of q.  It is the same first-order
approximation of eq. (9) that the updates use, so it is *not* a guaranteed
lower bound and it need not increase monotonically; it is recorded for
monitoring.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from consensuskit.models.nbce.priors import get_prior
from consensuskit.models.nbce.vb import Variational

__all__ = ["CVB", "CVBState", "cvb_expected_counts", "cvb_approx_bound", "leave_one_out"]


def cvb_expected_counts(X, Xt, O, gamma):
    """Expected counts: ``Nk`` (T,), ``Nkl`` (T, L) and ``Nkm`` (T, M).

    ``O`` is the dense (N, M) float mask of observed labels.
    """
    Nk = gamma.sum(0)
    Nkl = torch.sparse.mm(Xt, gamma).T.contiguous()
    Nkm = (O.T @ gamma).T.contiguous()
    return Nk, Nkl, Nkm


def cvb_approx_bound(Nk, Nkl, Nkm, gamma, alpha0, beta, prior, J):
    """First-order approximation of L_CVB (see module docstring)."""
    lg = torch.lgamma
    b = torch.as_tensor(beta, dtype=Nk.dtype)
    Jb = J.to(Nk.dtype) * b
    val = get_prior(prior).log_prior(Nk, alpha0)
    val = val + (lg(Jb)[None, :] - lg(Jb[None, :] + Nkm)).sum() + (lg(b + Nkl) - lg(b)).sum()
    val = val - torch.special.xlogy(gamma, gamma).sum()
    return float(val)


@dataclass
class CVBState:
    """q(z) = ``gamma`` (N, T), the expected counts ``Nk`` (T,), ``Nkl`` (T, L), ``Nkm``
    (T, M), the fixed hyper-parameters, the largest change of a responsibility in the last
    pass and the approximate bound.

    ``n_clamped`` counts the leave-one-out expected counts (``E N^{-i}``) of all passes so
    far that came out negative beyond round-off and were raised to 0, ``max_clamped`` the
    largest amount raised (see :func:`leave_one_out`)."""

    gamma: torch.Tensor
    Nk: torch.Tensor
    Nkl: torch.Tensor
    Nkm: torch.Tensor
    alpha0: float
    beta: float
    delta: float = math.inf
    bound: float = math.nan
    n_clamped: int = 0
    max_clamped: float = 0.0


def leave_one_out(total, own, roundoff):
    """``total - own`` raised to 0 where negative, with how many were raised beyond round-off.

    Exactly, ``total >= own`` (a total includes the row's own share), so a negative
    difference is an error.  Down to ``-roundoff`` it is rounding (the row holds all of
    that count; the engine uses ``64 eps N``, N the rows summed into a count), 0 is the
    exact value and nothing is counted.  Beyond it the running totals have drifted from
    ``sum_i gamma_i`` (they are refreshed after every block; in float32 by up to ~1e-1
    on 5,000 rows) and raising to 0 is a fallback: those entries are counted.  Returns
    the clamped tensor, the number counted and the largest amount counted (0.0 if none).
    """
    diff = total - own
    if diff.numel() == 0 or float(diff.min()) >= 0.0:
        return diff, 0, 0.0
    beyond = diff < -roundoff
    n = int(beyond.sum())
    amount = -float(diff.min()) if n else 0.0
    return diff.clamp_min(0.0), n, amount


class CVB(Variational):
    """First-order CVB for NBCE (module docstring) as an engine of the fit driver.

    A step is one pass over the rows in blocks of ``block_size`` (rows within a block
    are updated from the same expected counts; 1 is the fully sequential algorithm); a
    run has converged when the largest change of a responsibility in a pass is below
    ``tol`` (the paper's criterion).  ``prior`` is "tsb" or "fsd"; ``alpha0``, ``beta``
    stay fixed; other arguments as :class:`~consensuskit.models.nbce.vb.Variational`.
    Run it with ``CVB(...).run(max_iter=..., tol=...)``; the kept run's ``params`` is a
    :class:`CVBState` whose counts are recomputed exactly at the end.
    """

    def __init__(self, idx, n_labels, truncation, *, prior="tsb", alpha0=1.0, beta=0.5,
                 block_size=256, **kw):
        self.prior_obj = get_prior(prior)
        super().__init__(idx, n_labels, truncation, **kw)
        self.O = torch.as_tensor(self.idx >= 0, dtype=self.dtype, device=self.device)
        self.idx_t = torch.as_tensor(np.where(self.idx >= 0, self.idx, 0), device=self.device)
        self.J = self.J_t
        self.Jb = self.J.to(self.dtype) * float(beta)
        self.prior, self.alpha0, self.beta = prior, alpha0, beta
        self.bs = max(1, int(block_size))
        # rounding scale of a count summed over N rows (see leave_one_out)
        self.roundoff = 64.0 * torch.finfo(self.dtype).eps * self.N

    def init(self, rng=None, run=0):
        gamma = self.initial_gamma()
        Nk, Nkl, Nkm = cvb_expected_counts(self.X, self.Xt, self.O, gamma)
        return CVBState(gamma, Nk, Nkl, Nkm, float(self.alpha0), float(self.beta))

    def step(self, state: CVBState, rng=None) -> CVBState:
        alpha0, beta, prior, M = self.alpha0, self.beta, self.prior, self.M
        gamma, Nk, Nkl, Nkm = state.gamma, state.Nk, state.Nkl, state.Nkm
        delta = 0.0
        n_clamped, max_clamped = state.n_clamped, state.max_clamped
        for s in range(0, self.N, self.bs):
            rows = slice(s, min(self.N, s + self.bs))
            g_old = gamma[rows]  # (B, T)
            ob = self.O[rows]  # (B, M)
            ib = self.idx_t[rows]  # (B, M)
            own = ob[:, :, None] * g_old[:, None, :]  # (B, M, T)
            # expected counts without the row itself: (B, T), and (B, M, T) per label / column
            Nk_, c1, m1 = leave_one_out(Nk[None, :], g_old, self.roundoff)
            lab, c2, m2 = leave_one_out(Nkl.T[ib], own, self.roundoff)
            col, c3, m3 = leave_one_out(Nkm.T[None, :, :], own, self.roundoff)
            n_clamped += c1 + c2 + c3
            max_clamped = max(max_clamped, m1, m2, m3)
            ll = ob[:, :, None] * (torch.log(beta + lab) - torch.log(self.Jb[None, :, None] + col))
            logit = ll.sum(1)
            # log p(z_i = k | E[N^{-i}]); FSD's constant denominator cancels in softmax
            logit = logit + self.prior_obj.conditional_log_weights(Nk_, alpha0)
            g_new = torch.softmax(logit, dim=1)
            diff = g_new - g_old
            delta = max(delta, float(diff.abs().max()))
            gamma[rows] = g_new
            # refresh the expected counts
            Nk = Nk + diff.sum(0)
            Nkm = Nkm + (ob.T @ diff).T
            flat = ib[ob.bool()]
            contrib = diff[:, None, :].expand(-1, M, -1)[ob.bool()]  # (n_obs, T)
            Nkl = Nkl.index_add(1, flat, contrib.T)
        bound = cvb_approx_bound(Nk, Nkl, Nkm, gamma, alpha0, beta, prior, self.J)
        return CVBState(gamma, Nk, Nkl, Nkm, state.alpha0, state.beta, delta, bound,
                        n_clamped, max_clamped)

    def objective(self, state: CVBState) -> float:
        return state.bound

    def converged(self, objectives, tol, state: CVBState) -> bool:
        return state.delta < tol

    def result(self, state: CVBState) -> CVBState:
        # recompute the counts exactly to remove accumulated rounding
        Nk, Nkl, Nkm = cvb_expected_counts(self.X, self.Xt, self.O, state.gamma)
        return CVBState(state.gamma, Nk, Nkl, Nkm, state.alpha0, state.beta, state.delta,
                        state.bound, state.n_clamped, state.max_clamped)
