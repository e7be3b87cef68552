"""Mean-field variational Bayes for NBCE with the FSD prior (paper section 5.2), in torch.

Variational family (the paper's eq. 6, :func:`consensuskit.models.nbce.spec.guide_fsd`):
``q(pi) = Dir(xi)`` (T,), ``q(theta*_kj) = Dir(rho_kj)`` stored flat as ``rho``
(T, L) over the global label index, ``q(z_i) = Cat(gamma_i)`` (N, T).

Coordinate ascent, each step an exact maximisation of the bound, in the order
``rho, xi | gamma``  ->  ``alpha0, beta | rho, xi`` (Newton)  ->  ``gamma | rho, xi``;
so the bound never decreases.  The updates use ``E[log theta] = psi(rho) -
psi(sum rho)`` and ``E[log pi] = psi(xi) - psi(sum xi)`` (the paper's first-order
conditions print ``log rho``; the digamma form is the correct one, cf. its
appendix).  Missing labels are left out of every sum.

Hyper-parameters: ``alpha0`` maximises ``L[alpha0] = log Gamma(alpha0) - T log
Gamma(alpha0/T) + (alpha0/T - 1) sum_k E[log pi_k]`` and ``beta`` maximises
``L[beta] = sum_j T (log Gamma(k_j beta) - k_j log Gamma(beta)) + (beta - 1)
sum_{k,l} E[log theta_kl]``; both are concave, and are maximised by a safeguarded
Newton iteration on the log scale (a step is halved until the objective does
not decrease).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from scipy.special import digamma, gammaln, polygamma

from consensuskit.inference.driver import Engine
from consensuskit.models.nbce.priors import PRIORS

__all__ = ["Variational", "VB", "VBState", "vb_bound", "newton_max_log", "onehot_tensor"]


_FSD = PRIORS["fsd"]  # the paper's VB is derived for the finite symmetric Dirichlet only

def onehot_tensor(idx, L, dtype, device):
    """Sparse (COO, coalesced) one-hot ``X`` (N, L) of the observed global labels
    ``idx`` (N, M) (-1 missing) and its transpose ``Xt`` (L, N)."""
    idx = np.asarray(idx)
    rows, cols = np.nonzero(idx >= 0)
    lab = idx[rows, cols]
    vals = torch.ones(rows.size, dtype=dtype)
    N = idx.shape[0]
    ind = torch.as_tensor(np.stack([rows, lab]))
    X = torch.sparse_coo_tensor(ind, vals, (N, L), check_invariants=True)
    Xt = torch.sparse_coo_tensor(ind.flip(0), vals, (L, N), check_invariants=True)
    return X.coalesce().to(device), Xt.coalesce().to(device)


def newton_max_log(f, df, d2f, x0, max_iter=100, tol=1e-10):
    """Maximise a concave scalar function of ``x > 0`` by Newton steps on ``u = log x``.

    ``f``, ``df``, ``d2f`` are the function and its first two derivatives in x.
    A step is halved until f does not decrease, so the result is never worse
    than ``x0``.
    """
    x = float(x0)
    fx = f(x)
    for _ in range(max_iter):
        g = x * df(x)  # d f / du
        h = x * df(x) + x * x * d2f(x)  # d2 f / du2
        step = -g / h if h < 0 else float(np.sign(g))
        step = float(np.clip(step, -5.0, 5.0))
        improved = False
        for _ in range(60):
            xn = x * math.exp(step)
            fn = f(xn)
            if np.isfinite(fn) and fn >= fx:
                improved = True
                break
            step *= 0.5
        if not improved:
            break
        done = abs(step) < tol
        x, fx = xn, fn
        if done:
            break
    return x


def _segment_sum(A, col_of_t, M):
    """Sum the columns of A (T, L) within each base clustering -> (T, M)."""
    out = torch.zeros(A.shape[0], M, dtype=A.dtype, device=A.device)
    return out.index_add_(1, col_of_t, A)


def vb_bound(stats, xi, rho, gamma, alpha0, beta, n_labels_t, col_of_t):
    """The evidence lower bound (paper eq. 7 and appendix, with E[log theta] in digamma form).

    ``stats`` is ``X^T gamma`` (L, T) — expected label counts per cluster.
    """
    T, L = rho.shape
    M = n_labels_t.shape[0]
    Elt = torch.special.digamma(rho) - torch.special.digamma(
        _segment_sum(rho, col_of_t, M)
    )[:, col_of_t]
    Elp = torch.special.digamma(xi) - torch.special.digamma(xi.sum())
    Nk = gamma.sum(0)
    a0, b = float(alpha0), float(beta)
    J = n_labels_t.to(rho.dtype)
    lg = torch.lgamma
    val = (stats.T * Elt).sum()  # E log p(x | z, theta)
    val = val + (Nk * Elp).sum()  # E log p(z | pi)
    val = val + gammaln(a0) - T * gammaln(a0 / T) + (a0 / T - 1.0) * Elp.sum()
    val = val + T * (lg(J * b) - J * gammaln(b)).sum() + (b - 1.0) * Elt.sum()
    val = val - (lg(xi.sum()) - lg(xi).sum() + ((xi - 1.0) * Elp).sum())
    val = val - (
        lg(_segment_sum(rho, col_of_t, M)).sum() - lg(rho).sum() + ((rho - 1.0) * Elt).sum()
    )
    val = val - torch.special.xlogy(gamma, gamma).sum()
    return float(val)


@dataclass
class VBState:
    """Variational parameters of NBCE-FSD: ``gamma`` (N, T) = q(z), ``xi`` (T,) = q(pi),
    ``rho`` (T, L) = q(theta*), the hyper-parameters and the bound of this state."""

    gamma: torch.Tensor
    xi: torch.Tensor | None
    rho: torch.Tensor | None
    alpha0: float
    beta: float
    bound: float = math.nan


class Variational(Engine):
    """What NBCE's VB and CVB engines share: the one-hot labels and the random start.

    Parameters
    ----------
    idx : int array (N, M)
        Global label index, -1 missing.
    n_labels : int array (M,)
    truncation : int
        T.
    generator : torch.Generator
        For the random initial responsibilities (uniform on the simplex, drawn in
        float64 so that float32 and float64 runs start from the same point).
    dtype, device
        Arithmetic.
    init_gamma : array (N, T) or None
        A given start instead.
    """

    def __init__(self, idx, n_labels, truncation, *, generator=None, dtype=torch.float64,
                 device="cpu", init_gamma=None):
        self.idx = np.asarray(idx)
        self.N, self.M = self.idx.shape
        self.T = int(truncation)
        self.n_labels = np.asarray(n_labels, dtype=np.int64)
        self.X, self.Xt = onehot_tensor(self.idx, int(self.n_labels.sum()), dtype, device)
        self.J_t = torch.as_tensor(self.n_labels, device=device)
        self.generator, self.dtype, self.device = generator, dtype, device
        self.init_gamma = init_gamma

    def initial_gamma(self):
        if self.init_gamma is None:
            e = -torch.log(torch.rand(self.N, self.T, generator=self.generator,
                                      dtype=torch.float64))
            return (e / e.sum(1, keepdim=True)).to(device=self.device, dtype=self.dtype)
        return torch.as_tensor(self.init_gamma, dtype=self.dtype, device=self.device).clone()


class VB(Variational):
    """Mean-field VB for NBCE-FSD (module docstring) as an engine of the fit driver.

    One step: ``rho, xi | gamma``, then (optionally) ``alpha0, beta`` by Newton, then
    ``gamma | rho, xi``, then the bound.  ``alpha0``, ``beta``: fixed values or starting
    values (``update_hyperparameters``); other arguments as :class:`Variational`.  Run it
    with ``VB(...).run(max_iter=..., tol=...)`` (stops when the bound improves by less
    than ``tol * |bound|``); the kept run's ``params`` is a :class:`VBState`.
    """

    def __init__(self, idx, n_labels, truncation, *, alpha0=1.0, beta=0.5,
                 update_hyperparameters=True, **kw):
        super().__init__(idx, n_labels, truncation, **kw)
        self.col_of_t = torch.as_tensor(np.repeat(np.arange(self.M), self.n_labels),
                                        device=self.device)
        self.Jf = self.n_labels.astype(np.float64)
        self.alpha0, self.beta = float(alpha0), float(beta)
        self.update_hyperparameters = update_hyperparameters

    def init(self, rng=None, run=0):
        return VBState(self.initial_gamma(), None, None, self.alpha0, self.beta)

    def step(self, state: VBState, rng=None) -> VBState:
        T, M, Jf, col_of_t = self.T, self.M, self.Jf, self.col_of_t
        gamma, a0, b = state.gamma, state.alpha0, state.beta
        stats = torch.sparse.mm(self.Xt, gamma)  # (L, T) expected label counts
        rho = b + stats.T  # (T, L)
        xi = _FSD.posterior_concentration(gamma.sum(0), a0)
        Elt = torch.special.digamma(rho) - torch.special.digamma(
            _segment_sum(rho, col_of_t, M)
        )[:, col_of_t]
        Elp = torch.special.digamma(xi) - torch.special.digamma(xi.sum())
        if self.update_hyperparameters:
            s_pi = float(Elp.sum())
            a0 = newton_max_log(
                lambda a, s=s_pi: gammaln(a) - T * gammaln(a / T) + (a / T - 1.0) * s,
                lambda a, s=s_pi: digamma(a) - digamma(a / T) + s / T,
                lambda a: polygamma(1, a) - polygamma(1, a / T) / T,
                a0,
            )
            s_th = float(Elt.sum())
            b = newton_max_log(
                lambda x, s=s_th: T * np.sum(gammaln(Jf * x) - Jf * gammaln(x)) + (x - 1.0) * s,
                lambda x, s=s_th: T * np.sum(Jf * digamma(Jf * x) - Jf * digamma(x)) + s,
                lambda x: T * np.sum(Jf**2 * polygamma(1, Jf * x) - Jf * polygamma(1, x)),
                b,
            )
        logits = torch.sparse.mm(self.X, Elt.T) + Elp[None, :]
        gamma = torch.softmax(logits, dim=1)
        stats = torch.sparse.mm(self.Xt, gamma)
        # the bound of (xi, rho) fitted to the previous gamma and this gamma
        bound = vb_bound(stats, xi, rho, gamma, a0, b, self.J_t, col_of_t)
        return VBState(gamma, xi, rho, a0, b, bound)

    def objective(self, state: VBState) -> float:
        return state.bound
