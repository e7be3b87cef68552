"""NBCE: the nonparametric Bayesian clustering ensemble (Wang, Domeniconi & Laskey 2010).

Generative process (paper section 4; paper symbols in brackets)::

    TSB prior:  v_k ~ Beta(1, alpha0),  k = 1..T-1,  v_T = 1,
                pi_k = v_k prod_{h<k} (1 - v_h)                      [eq. 1]
    FSD prior:  pi ~ Dirichlet(alpha0/T, ..., alpha0/T)
    theta*_{k j} ~ Dirichlet(beta * 1_{k_j})   for every cluster k, column j   [theta*_km]
    z_i ~ Categorical(pi)                                             [z_n]
    x_ij ~ Categorical(theta*_{z_i j})   for every *observed* label   [y_nm]

``T`` is the truncation level (the paper's ``K``), ``k_j`` the number of labels
of base clustering ``j`` (the paper's ``J_m``).

Representation of the ragged label spaces
-----------------------------------------
The columns have different ``k_j``.  The Pyro model below uses a *per-column*
representation: one Dirichlet site ``theta_{j}`` of shape ``(T, k_j)`` and one
observation site ``x_{j}`` per base clustering, so no padding and no fake
probability mass exist.  The hand-written engines use the equivalent flat
"offset index" of :meth:`consensuskit.data.ensemble.Ensemble.offset_index`: label ``r``
of column ``j`` is global label ``offsets[j] + r`` of ``L = sum_j k_j``, and a
``(T, L)`` table holds all ``theta*`` at once.

Missing labels are masked (``poutine.mask``): they contribute nothing to the
likelihood, exactly as if the base clustering had never labelled the point.

Contents
--------
``model``            the Pyro model (both priors); ``z`` is enumerable.
``guide_fsd``        mean-field family of the paper's VB (section 5.2):
                     q(pi)=Dir(xi), q(theta*_kj)=Dir(rho_kj), q(z_i)=Cat(gamma_i).
``guide_tsb``        the same with Beta sticks q(v_k)=Beta(a_k, b_k).
``collapsed_log_joint``  log p(x, z | alpha0, beta) with pi and theta integrated
                     out (paper eq. 4, plus the Beta normalisers the paper drops).
"""

from __future__ import annotations

import numpy as np
import pyro
import pyro.distributions as dist
import torch
from pyro import poutine
from pyro.ops.indexing import Vindex
from scipy.special import gammaln

from consensuskit.models.convention import check_labels, label_distribution, rows_plate
from consensuskit.models.nbce.priors import get_prior

__all__ = [
    "PRIORS",
    "model",
    "guide_fsd",
    "guide_tsb",
    "stick_breaking",
    "collapsed_log_joint",
    "log_prior_partition",
    "log_likelihood_collapsed",
    "MAX_PLATE_NESTING",
]

MAX_PLATE_NESTING = 1

PRIORS = ("tsb", "fsd")


def _check_prior(prior: str) -> str:
    if prior not in PRIORS:
        raise ValueError(f"prior must be 'tsb' or 'fsd'; got {prior!r}")
    return prior


def stick_breaking(v: torch.Tensor) -> torch.Tensor:
    """Mixing weights from ``T-1`` sticks (last stick fixed to 1).

    Parameters
    ----------
    v : tensor, shape (..., T-1)
        Stick proportions ``v_1..v_{T-1}`` in (0, 1).

    Returns
    -------
    pi : tensor, shape (..., T)
        ``pi_k = v_k prod_{h<k}(1-v_h)`` with ``v_T = 1`` (paper eq. 1, truncated).
    """
    one = torch.ones(v.shape[:-1] + (1,), dtype=v.dtype, device=v.device)
    v_full = torch.cat([v, one], dim=-1)
    rest = torch.cumprod(torch.cat([one, 1.0 - v], dim=-1), dim=-1)
    return v_full * rest


def model(labels=None, *, n_labels, n_clusters, n_rows=None, alpha0=1.0, beta=0.5,
          prior="tsb", subsample_size=None, subsample=None):
    """Pyro model of NBCE (simulates when ``labels`` is None).

    Parameters
    ----------
    labels : LongTensor, shape (N, M), or None
        Re-coded labels ``x_ij`` in ``0..k_j-1``; ``-1`` marks a missing label
        (masked out of the likelihood).  None: simulate ``n_rows`` rows.
    n_labels : sequence of int, length M
        ``k_j``, the number of labels of each base clustering (paper ``J_m``).
    n_clusters : int
        ``T``, the truncation level (paper ``K``): the number of mixture components.
    n_rows : int, optional
        ``N``; default ``labels.shape[0]``.
    alpha0, beta : float or Tensor
        DP concentration and the symmetric Dirichlet parameter of ``G_0`` (tensors keep
        their gradients, so a wrapping model may sample them).
    prior : {"tsb", "fsd"}
        Truncated stick-breaking or finite symmetric Dirichlet.

    Returns
    -------
    LongTensor (n, M): the labels of the plate's rows (observed or simulated).

    Sites
    -----
    ``v`` (T-1,) [tsb] or ``pi`` (T,) [fsd]; ``theta_{j}`` (T, k_j) in plate
    ``components`` (dim -1); ``z`` (n,) and ``x_{j}`` (n,) in plate ``rows``
    (dim -1).  ``z`` carries ``infer={"enumerate": "parallel"}``; use
    ``TraceEnum_ELBO(max_plate_nesting=1)``.
    """
    _check_prior(prior)
    labels, _, M, dev = check_labels(labels, n_labels, n_rows)
    T = int(n_clusters)
    dtype = torch.get_default_dtype()
    a0 = torch.as_tensor(alpha0, dtype=dtype, device=dev)
    b = torch.as_tensor(beta, dtype=dtype, device=dev)
    if prior == "tsb":
        with pyro.plate("sticks", T - 1, dim=-1):
            v = pyro.sample("v", dist.Beta(torch.ones((), dtype=dtype, device=dev), a0))
        pi = stick_breaking(v).unsqueeze(-2)  # (..., 1, T): broadcasts over the rows plate
    else:
        pi = pyro.sample("pi", dist.Dirichlet((a0 / T).expand(T)))
    thetas = []
    with pyro.plate("components", T, dim=-1):
        for j in range(M):
            kj = int(n_labels[j])
            thetas.append(pyro.sample(f"theta_{j}", dist.Dirichlet(b.expand(kj))))
    with rows_plate(labels, n_rows, subsample_size, subsample, dev) as (_, x):
        z = pyro.sample("z", dist.Categorical(pi), infer={"enumerate": "parallel"})
        xs = []
        for j in range(M):
            # theta_j (..., T, k_j) -> (..., 1, T, k_j) so its batch dims broadcast with z's
            probs = Vindex(thetas[j].unsqueeze(-3))[..., z, :]
            if x is None:
                xs.append(pyro.sample(f"x_{j}", label_distribution(probs)))
                continue
            with poutine.mask(mask=x[:, j] >= 0):
                pyro.sample(f"x_{j}", label_distribution(probs), obs=x[:, j].clamp(min=0))
            xs.append(x[:, j])
    return torch.stack(xs, dim=-1)


def _theta_guide(n_labels, T, dtype, init_scale=1.0):
    thetas = []
    with pyro.plate("components", T, dim=-1):
        for j, kj in enumerate(n_labels):
            rho = pyro.param(
                f"rho_{j}",
                lambda kj=kj: init_scale + torch.rand(T, int(kj), dtype=dtype),
                constraint=dist.constraints.positive,
            )
            thetas.append(pyro.sample(f"theta_{j}", dist.Dirichlet(rho)))
    return thetas


def _z_guide(N, T, dtype):
    gamma = pyro.param(
        "gamma",
        lambda: torch.full((N, T), 1.0 / T, dtype=dtype),
        constraint=dist.constraints.simplex,
    )
    with pyro.plate("rows", N, dim=-1):
        pyro.sample("z", dist.Categorical(gamma), infer={"enumerate": "parallel"})


def guide_fsd(labels, *, n_labels, n_clusters, **model_kwargs):
    """Mean-field guide of the paper's VB (section 5.2) for the FSD prior.

    Parameters ``xi`` (T,), ``rho_{j}`` (T, k_j), ``gamma`` (N, T):
    ``q(pi) = Dir(xi)``, ``q(theta*_kj) = Dir(rho_kj)``, ``q(z_i) = Cat(gamma_i)``.
    Same signature as :func:`model`.
    """
    N = labels.shape[0]
    T = int(n_clusters)
    dtype = torch.get_default_dtype()
    xi = pyro.param("xi", lambda: torch.ones(T, dtype=dtype), constraint=dist.constraints.positive)
    pyro.sample("pi", dist.Dirichlet(xi))
    _theta_guide(n_labels, T, dtype)
    _z_guide(N, T, dtype)


def guide_tsb(labels, *, n_labels, n_clusters, **model_kwargs):
    """Mean-field guide for the TSB prior: ``q(v_k) = Beta(a_k, b_k)``, k < T.

    Parameters ``stick_a``, ``stick_b`` (T-1,), ``rho_{j}`` (T, k_j),
    ``gamma`` (N, T).  Same signature as :func:`model`.
    """
    N = labels.shape[0]
    T = int(n_clusters)
    dtype = torch.get_default_dtype()
    pos = dist.constraints.positive
    a = pyro.param("stick_a", lambda: torch.ones(T - 1, dtype=dtype), constraint=pos)
    bb = pyro.param("stick_b", lambda: torch.ones(T - 1, dtype=dtype), constraint=pos)
    with pyro.plate("sticks", T - 1, dim=-1):
        pyro.sample("v", dist.Beta(a, bb))
    _theta_guide(n_labels, T, dtype)
    _z_guide(N, T, dtype)


# ---------------------------------------------------------------------------
# collapsed joint (theta* and pi integrated out)
# ---------------------------------------------------------------------------
def log_prior_partition(counts, alpha0: float, prior: str) -> float:
    """``log p(z | alpha0)`` from the cluster sizes, pi integrated out.

    Parameters
    ----------
    counts : array of int, shape (T,)
        ``N_k``, the number of points with ``z_i = k`` (in label order: the TSB
        prior is not exchangeable).
    alpha0 : float
    prior : {"tsb", "fsd"}

    Notes
    -----
    TSB: ``prod_{k<T} alpha0 * B(1 + N_k, alpha0 + N_{>k})`` — the Beta(1, alpha0)
    normaliser ``alpha0`` is kept (the paper's eq. 4 drops it; it matters when
    alpha0 is learned).  FSD: ``Gamma(alpha0)/Gamma(alpha0+N) prod_k
    Gamma(alpha0/T + N_k)/Gamma(alpha0/T)``.
    """
    _check_prior(prior)
    return get_prior(prior).log_prior(np.asarray(counts, dtype=np.float64), alpha0)


def log_likelihood_collapsed(label_counts, col_of, n_labels, beta: float) -> float:
    """``log p(x | z, beta)`` with theta* integrated out (Dirichlet-multinomial).

    Parameters
    ----------
    label_counts : array, shape (T, L)
        ``N_{k l}``: points in cluster k with global label l (offset index).
    col_of : array of int, shape (L,)
        Column ``j`` of each global label.
    n_labels : array of int, shape (M,)
    beta : float
    """
    C = np.asarray(label_counts, dtype=np.float64)
    col_of = np.asarray(col_of)
    M = len(n_labels)
    T = C.shape[0]
    per_col = np.zeros((T, M))
    np.add.at(per_col.T, col_of, C.T)  # N_{kj}: observed labels of column j in cluster k
    J = np.asarray(n_labels, dtype=np.float64)
    b = float(beta)
    return float(
        np.sum(gammaln(J * b) - gammaln(J * b + per_col))
        + np.sum(gammaln(b + C) - gammaln(b))
    )


def collapsed_log_joint(codes, n_labels, z, truncation, alpha0, beta, prior="tsb") -> float:
    """``log p(x, z | alpha0, beta)`` with pi and theta* integrated out (paper eq. 4).

    Parameters
    ----------
    codes : array of int, shape (N, M)
        Labels ``0..k_j-1``, ``-1`` missing.
    n_labels : array of int, shape (M,)
    z : array of int, shape (N,)
        Cluster indicators in ``0..T-1``.
    truncation : int
    alpha0, beta : float
    prior : {"tsb", "fsd"}
    """
    codes = np.asarray(codes)
    z = np.asarray(z)
    T = int(truncation)
    n_labels = np.asarray(n_labels, dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(n_labels)])
    L = int(offsets[-1])
    col_of = np.repeat(np.arange(n_labels.size), n_labels)
    C = np.zeros((T, L))
    rows, cols = np.nonzero(codes >= 0)
    np.add.at(C, (z[rows], offsets[cols] + codes[rows, cols]), 1.0)
    counts = np.bincount(z, minlength=T)
    return log_prior_partition(counts, alpha0, prior) + log_likelihood_collapsed(
        C, col_of, n_labels, beta
    )
