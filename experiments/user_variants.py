"""Two BCE variants written as a user would, on top of the built-in spec.

Everything a user writes is in this file: no guide (PyroConsensus's automatic guide is
used), no scoring code.  Line counts are printed by ``experiments/hub_variants.py``.
"""

import pyro
import pyro.distributions as dist
import torch

from consensuskit.models.bce import spec as bce


def bce_alpha_hyperprior(labels=None, *, n_labels, n_clusters, **kw):
    """BCE with a Gamma hyperprior: alpha_h ~ Gamma(2, r), r ~ Gamma(2, 2)."""
    rate = pyro.sample("alpha_rate", dist.Gamma(torch.tensor(2.0), torch.tensor(2.0)))
    alpha = pyro.sample("alpha", dist.Gamma(torch.full((n_clusters,), 2.0), rate).to_event(1))
    return bce.model(labels, n_labels=n_labels, n_clusters=n_clusters, alpha=alpha, **kw)


def bce_reliability(labels=None, *, n_labels, n_clusters, c_beta=0.5, **kw):
    """BCE with a reliability rho_j per base clustering: column j's labels follow the
    consensus cluster with probability rho_j, else a background distribution b_j
    (``beta_j ~ Dirichlet(c_beta)``; notebook 03 uses ``c_beta=0.2``)."""
    alpha = pyro.sample("alpha", dist.Gamma(torch.full((n_clusters,), 2.0), 2.0).to_event(1))
    with pyro.plate("clusterings_rho", len(n_labels)):
        rho = pyro.sample("rho", dist.Beta(torch.tensor(2.0), torch.tensor(1.0)))
    betas = []
    for j, k in enumerate(n_labels):
        with pyro.plate(f"clusters_{j}", n_clusters):
            beta_j = pyro.sample(f"beta_{j}", dist.Dirichlet(torch.full((k,), c_beta)))
        b_j = pyro.sample(f"background_{j}", dist.Dirichlet(torch.ones(k)))
        betas.append(rho[j] * beta_j + (1 - rho[j]) * b_j)
    return bce.model(labels, n_labels=n_labels, n_clusters=n_clusters, alpha=alpha,
                     beta=betas, **kw)


def mm_hierarchical(labels=None, *, n_labels, n_clusters, **kw):
    """MM with a learned label concentration: a ~ Gamma(2, 2) shared by every theta_jk, and
    the mixing weights as a softmax of Normal logits (both handed to the MM spec)."""
    from consensuskit.models.mm import spec as mm

    a = pyro.sample("label_concentration", dist.Gamma(torch.tensor(2.0), torch.tensor(2.0)))
    logits = pyro.sample("pi_logits", dist.Normal(torch.zeros(n_clusters), 1.0).to_event(1))
    return mm.model(labels, n_labels=n_labels, n_clusters=n_clusters, label_prior=a,
                    pi=torch.softmax(logits, -1), **kw)


def bce_alpha_hyperprior_collapsed(labels=None, *, n_labels, n_clusters, **kw):
    """:func:`bce_alpha_hyperprior` on BCE's collapsed spec (theta_i and z summed out)."""
    rate = pyro.sample("alpha_rate", dist.Gamma(torch.tensor(2.0), torch.tensor(2.0)))
    alpha = pyro.sample("alpha", dist.Gamma(torch.full((n_clusters,), 2.0), rate).to_event(1))
    return bce.model_collapsed(labels, n_labels=n_labels, n_clusters=n_clusters, alpha=alpha,
                               **kw)
