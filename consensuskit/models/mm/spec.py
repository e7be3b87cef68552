"""The mixture model of consensus (Topchy, Jain & Punch, 2004) as a Pyro model.

Generative process (the paper's symbols in brackets)::

    pi        ~ Dirichlet(b 1_K)                       mixing weights (alpha_m)
    theta_jk  ~ Dirichlet(a 1_{k_j})   j < M, k < K    label distributions (vartheta_jm)
    z_i       ~ Categorical(pi)        i < N           consensus cluster (z_i)
    x_ij      ~ Categorical(theta_j[z_i])              base label (y_ij), observed
                                                      only where it is not missing

``a = label_prior`` and ``b = weight_prior`` (floats or tensors: a variant can put a
hyper-prior on them).  ``pi=`` and ``theta=`` take the parameters themselves as tensors
(nothing is sampled for them), as BCE's spec takes ``alpha=`` and ``beta=``: a variant
computes them from its own sites and calls this model, which keeps the rows plate,
enumeration, masking and simulation.  With ``a = b = 1`` the priors
are flat and the MAP point is the paper's maximum-likelihood estimate; ``a > 1``
adds ``a - 1`` pseudo-counts to every label of every component, which keeps a
label never seen in a component at positive probability (finite held-out
perplexity).  :mod:`consensuskit.models.mm.em` maximises exactly the log
joint of this model with ``z`` summed out.

Representation of the ragged ``theta``.  Base clusterings have different
numbers of labels ``k_j``, so ``theta`` is kept as a Python list of ``M``
sample sites ``theta_{j}`` of shape (K, k_j), each inside the ``components``
plate; the columns ``x_{j}`` are a Python loop inside the ``rows`` plate.  No
padding is involved, so every site is an ordinary Dirichlet / Categorical.
Missing labels (code ``-1``) are handled by :func:`pyro.poutine.mask`: they
contribute nothing to the log joint, i.e. they are left out of the products as
in the paper.

Plates and dims: ``components`` (size K, dim -1) for ``theta_{j}``; ``rows``
(size N, dim -1, optional ``subsample_size``) for ``z`` and ``x_{j}``.  ``z`` is
marked ``infer={"enumerate": "parallel"}``, so use ``max_plate_nesting=1`` with
:class:`pyro.infer.TraceEnum_ELBO`.

Guides: :func:`map_guide` (point masses on ``pi`` and ``theta``; ``z`` is
enumerated out), usable with ``SVI(model, map_guide, optim, TraceEnum_ELBO(max_plate_nesting=1))``.
"""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import torch
from pyro import poutine
from pyro.distributions import constraints

from consensuskit.models.convention import check_labels, label_distribution, rows_plate

__all__ = ["model", "map_guide", "set_map_params", "log_joint", "sample", "site_names",
           "MAX_PLATE_NESTING"]

MAX_PLATE_NESTING = 1


def site_names(n_partitions: int):
    """Names of the global latent sites: ``["pi", "theta_0", ..., "theta_{M-1}"]``."""
    return ["pi"] + [f"theta_{j}" for j in range(n_partitions)]


def model(
    labels=None,
    *,
    n_labels,
    n_clusters,
    n_rows=None,
    label_prior=1.0,
    weight_prior=1.0,
    pi=None,
    theta=None,
    subsample_size=None,
    subsample=None,
    dtype=torch.float64,
    device="cpu",
):
    """Mixture model of consensus (simulates when ``labels`` is None).

    Parameters
    ----------
    labels : LongTensor of shape (N, M) or None
        Base labels coded ``0..k_j-1`` per column, ``-1`` missing
        (``Ensemble.codes``).  ``None`` simulates ``n_rows`` new rows.
    n_labels : sequence of int, length M
        ``k_j`` (the paper's ``K(j)``).
    n_clusters : int
        ``K``, the number of mixture components (the paper's ``M``).
    n_rows : int, optional
        ``N`` (the rows plate's size); default ``labels.shape[0]``.
    label_prior : float or Tensor
        ``a`` in ``theta_jk ~ Dirichlet(a 1_{k_j})``.  A tensor keeps its gradient, so a
        hyper-prior can be put on it by a wrapping model.
    weight_prior : float or Tensor
        ``b`` in ``pi ~ Dirichlet(b 1_K)`` (likewise).
    pi : Tensor (K,), optional
        Fixed mixing weights: no ``"pi"`` site is sampled and the tensor's gradient flows,
        so a variant computes ``pi`` from its own sites and hands it over (as BCE's
        ``alpha=``).  Default: the sample site ``"pi"``.
    theta : list of M Tensors (K, k_j), or packed (K, sum_j k_j), optional
        Fixed label distributions (likewise); default the sample sites ``"theta_{j}"``.
    subsample_size, subsample : optional
        Minibatch of the ``rows`` plate (the log joint is rescaled by N / B).

    Returns
    -------
    x : LongTensor, shape (n, M)
        Observed codes of the plate's rows (missing kept as ``-1``) or simulated labels.

    Sample sites
    ------------
    ``pi`` (K,); ``theta_{j}`` (K, k_j); ``z`` (n,); ``x_{j}`` (n,).
    """
    labels, _, M, dev = check_labels(labels, n_labels, n_rows)
    device = device if dev is None else dev
    n_labels = [int(k) for k in n_labels]
    K = int(n_clusters)
    opts = dict(dtype=dtype, device=device)
    if pi is None:
        b = torch.as_tensor(weight_prior, **opts)
        pi = pyro.sample("pi", dist.Dirichlet(b.expand(K)))
    else:
        pi = torch.as_tensor(pi, device=device)
        if tuple(pi.shape[-1:]) != (K,):
            raise ValueError(f"pi must have shape (K,) = ({K},); got {tuple(pi.shape)}")
    if theta is None:
        a = torch.as_tensor(label_prior, **opts)
        thetas = []
        with pyro.plate("components", K, dim=-1):
            for j, kj in enumerate(n_labels):
                thetas.append(pyro.sample(f"theta_{j}", dist.Dirichlet(a.expand(kj))))
    else:
        thetas = _split_theta(theta, n_labels, K, device)
    with rows_plate(labels, n_rows, subsample_size, subsample, device) as (_, batch):
        z = pyro.sample("z", dist.Categorical(pi), infer={"enumerate": "parallel"})
        xs = []
        for j in range(M):
            probs = thetas[j][z]  # (..., n, k_j) or (K, 1, k_j) when enumerated
            if batch is None:
                xs.append(pyro.sample(f"x_{j}", label_distribution(probs)))
                continue
            obs = batch[:, j]
            with poutine.mask(mask=obs >= 0):
                pyro.sample(f"x_{j}", label_distribution(probs), obs=obs.clamp(min=0))
            xs.append(obs)
    return torch.stack(xs, dim=-1)


def _split_theta(theta, n_labels, K, device):
    """Given ``theta`` (list of (K, k_j) or packed (K, sum k_j)) as a checked list."""
    if isinstance(theta, (list, tuple)):
        blocks = [torch.as_tensor(t, device=device) for t in theta]
    else:
        t = torch.as_tensor(theta, device=device)
        if t.dim() != 2 or t.shape[-1] != sum(n_labels):
            raise ValueError(f"a packed theta must have shape (K, sum(n_labels)) = ({K}, "
                             f"{sum(n_labels)}); got {tuple(t.shape)}")
        blocks = list(torch.split(t, list(n_labels), dim=-1))
    if len(blocks) != len(n_labels):
        raise ValueError(f"theta must hold one (K, k_j) block per base clustering "
                         f"({len(n_labels)}); got {len(blocks)}")
    for j, (b, kj) in enumerate(zip(blocks, n_labels)):
        if tuple(b.shape[-2:]) != (K, kj):
            raise ValueError(f"theta[{j}] must have shape (K, k_j) = ({K}, {kj}); got "
                             f"{tuple(b.shape)}")
    return blocks


def _hand_written_potential(labels, **model_kwargs):
    """:func:`consensuskit.models.mm.potential.mm_potential` (numba; imported on first use)."""
    from consensuskit.models.mm.potential import mm_potential

    return mm_potential(labels, **model_kwargs)


#: The spec's collapsed potential with its gradient by hand, which
#: :func:`consensuskit.inference.compiled_potential.build_potential` uses for NUTS and MAP.
model.potential = _hand_written_potential
_hand_written_potential.sampled_sites = ("pi", "theta")


def map_guide(
    labels=None,
    *,
    n_labels,
    n_clusters,
    dtype=torch.float64,
    device="cpu",
    **model_kwargs,
):
    """MAP (point-mass) guide over ``pi`` and ``theta``; ``z`` is enumerated in the model.

    Takes the model's arguments.  Parameters (``pyro.param`` names):
    ``pi_map`` (K,) and ``theta_map_{j}`` (K, k_j), all constrained to the
    simplex; they start uniform (``pi``) and Dirichlet(1) random (``theta``)
    unless set beforehand with :func:`set_map_params` (e.g. from an EM fit).
    With this guide ``-TraceEnum_ELBO`` equals the log joint
    ``log p(X, pi, theta)`` with ``z`` summed out, i.e. the penalised
    objective ``F`` of :mod:`consensuskit.models.mm.em`.
    """
    n_labels = [int(k) for k in n_labels]
    K = int(n_clusters)
    opts = dict(dtype=dtype, device=device)
    pi_q = pyro.param(
        "pi_map", lambda: torch.full((K,), 1.0 / K, **opts), constraint=constraints.simplex
    )
    pyro.sample("pi", dist.Delta(pi_q, event_dim=1))
    with pyro.plate("components", K, dim=-1):
        for j, kj in enumerate(n_labels):
            th = pyro.param(
                f"theta_map_{j}",
                lambda kj=kj: dist.Dirichlet(torch.ones(kj, **opts)).sample((K,)),
                constraint=constraints.simplex,
            )
            pyro.sample(f"theta_{j}", dist.Delta(th, event_dim=1))


def set_map_params(pi, theta, *, dtype=torch.float64, device="cpu"):
    """Put ``pi`` (K,) and ``theta`` (list of (K, k_j)) into the param store for :func:`map_guide`.

    Existing values of ``pi_map`` / ``theta_map_{j}`` are replaced.
    """
    store = pyro.get_param_store()
    opts = dict(dtype=dtype, device=device)
    names = ["pi_map"] + [f"theta_map_{j}" for j in range(len(theta))]
    for name, value in zip(names, [pi, *theta]):
        if name in store:
            del store[name]
        pyro.param(name, torch.as_tensor(value, **opts).clone(), constraint=constraints.simplex)


def _empty_guide(*args, **kwargs):
    return None


def log_joint(codes, pi, theta, **model_kwargs):
    """Log joint and log-likelihood of the model at fixed ``pi`` and ``theta``, ``z`` summed out.

    Uses Pyro's enumeration (``TraceEnum_ELBO`` with ``pi`` and ``theta``
    conditioned, so they are observed sites and the ELBO is exact).

    Parameters
    ----------
    codes : LongTensor (N, M)
    pi : Tensor (K,)
    theta : list of Tensor (K, k_j)
    **model_kwargs
        ``n_labels``, ``n_clusters``, ``label_prior``, ``weight_prior``, ...

    Returns
    -------
    log_joint : float
        ``log p(X, pi, theta) = log p(X | pi, theta) + log p(pi) + log p(theta)``.
    log_likelihood : float
        ``log p(X | pi, theta) = sum_i log sum_k pi_k prod_j theta_jk(x_ij)``.
    """
    data = {"pi": pi, **{f"theta_{j}": t for j, t in enumerate(theta)}}
    cond = poutine.condition(model, data=data)
    elbo = pyro.infer.TraceEnum_ELBO(max_plate_nesting=1)
    total = -float(elbo.loss(cond, _empty_guide, codes, **model_kwargs))
    tr = poutine.trace(poutine.block(cond, hide=["z"] + [f"x_{j}" for j in range(len(theta))]))
    tr = tr.get_trace(None, n_rows=1, **{k: v for k, v in model_kwargs.items()
                                         if k != "subsample_size"})
    prior = sum(
        float(tr.nodes[name]["fn"].log_prob(tr.nodes[name]["value"]).sum())
        for name in site_names(len(theta))
    )
    return total, total - prior


def sample(pi, theta, n_samples, *, generator_seed=None, **model_kwargs):
    """Draw ``n_samples`` rows from the model with ``pi`` and ``theta`` fixed.

    MM's shorthand for :func:`consensuskit.models.simulate` (``generator_seed`` seeds a
    private torch stream).  Returns ``(z, x)``: LongTensors of shape (N,) and (N, M).
    """
    from consensuskit.models.simulation import simulate

    pi = torch.as_tensor(pi)
    theta = [torch.as_tensor(t) for t in theta]
    kw = dict(dtype=pi.dtype)
    kw.update(model_kwargs)
    x, latents = simulate(model, n_rows=n_samples, n_labels=[t.shape[1] for t in theta],
                          n_clusters=pi.shape[0], seed=generator_seed,
                          params={"pi": pi, **{f"theta_{j}": t for j, t in enumerate(theta)}},
                          **kw)
    return torch.as_tensor(latents["z"]), torch.as_tensor(x)
