"""Partition draws of any spec's consensus clustering, one per posterior draw of its globals.

A NUTS (or SVI) fit of a spec gives draws of the global sites; the consensus cluster of each
row is summed or integrated out of the potential.  A posterior draw of the partition is made
by *exact conditional sampling* given each draw ``d`` of the globals: the rows are
conditionally independent given the globals (the convention of :mod:`consensuskit.models`),
so row ``i``'s cluster is drawn from its own conditional ``p(c_i | x_i, globals_d)``,
independently over rows:

* an enumerated membership site in the rows plate (MM's ``z_i``): ``c_i = z_i`` drawn from
  ``p(z_i | x_i, globals_d)``, computed exactly by the enumeration of
  :func:`consensuskit.inference.pointwise.score_rows`;
* a row-local continuous membership (BCE's ``theta_i``, whose ``z`` is one per *label*): the
  consensus cluster of row ``i`` is the cluster of a new label of the row, ``c_i | theta_i ~
  Cat(theta_i)``.  When NUTS sampled ``theta_i`` (the uncollapsed BCE spec) it is drawn from
  ``Cat(theta_i^(d))``, exact given the draw.  Otherwise ``theta_i`` is integrated out and
  ``c_i ~ Cat(E[theta_i | x_i, globals_d])``, the same conditional law: exact for a collapsed
  spec (BCE's ``model_collapsed``, whose row marginal gives the posterior mean of ``theta_i``),
  an importance-sampling estimate of the probabilities for a spec with ``theta_i`` sampled
  under SVI.

The draws are a sample of the joint posterior of (globals, partition) marginalised to the
partition: label switching between draws does not matter, since a
:class:`~consensuskit.posterior.PartitionPosterior` sees only partitions.
"""

from __future__ import annotations

import numpy as np

from consensuskit.inference import pointwise

__all__ = ["sample_partitions", "sample_rows"]


def sample_rows(membership, rng):
    """One categorical draw per row of ``membership`` (N, K) (rows sum to 1), (N,) int64."""
    m = np.asarray(membership, dtype=np.float64)
    cum = np.cumsum(m, axis=1)
    u = rng.random(m.shape[0]) * cum[:, -1]
    return np.minimum((cum < u[:, None]).sum(1), m.shape[1] - 1).astype(np.int64)


def sample_partitions(model, labels, draws, *, model_kwargs, roles, local_draws=None,
                      num_particles=1000, seed=None, progress=False):
    """(D, N) partition draws, one per draw of the globals (see the module docstring).

    Parameters
    ----------
    model : the spec.
    labels : LongTensor (N, M), the rows the partitions are over.
    draws : dict global site -> Tensor (D, ...), the draws of the global sites.
    model_kwargs : dict, ``n_labels``, ``n_clusters`` and hyper-parameters.
    roles : :class:`~consensuskit.inference.pointwise.SiteRoles` of the spec.
    local_draws : optional dict site -> array (D, N, K): sampled values of row-local sites
        (NUTS' ``theta``); when it holds ``roles.membership``, its rows are the
        probabilities directly.
    num_particles : importance samples per row when a continuous membership must be
        integrated (SVI on an uncollapsed spec).
    seed : seeds the categorical draws and any particles.
    """
    if roles.membership is None:
        raise ValueError("the model has no membership site (a row-local site with K values, "
                         "an enumerated site in the rows plate, or a collapsed row marginal)")
    D = len(next(iter(draws.values())))
    rng = np.random.default_rng(seed)
    sampled = None if local_draws is None else local_draws.get(roles.membership)
    it = range(D)
    if progress:
        from tqdm.auto import tqdm

        it = tqdm(it, desc="partition draws")
    out = np.empty((D, labels.shape[0]), dtype=np.int64)
    for d in it:
        if sampled is not None:
            m = np.asarray(sampled[d], dtype=np.float64)
        else:
            m = pointwise.score_rows(model, labels, {k: v[d] for k, v in draws.items()},
                                     model_kwargs=model_kwargs, roles=roles,
                                     num_particles=num_particles, membership=True,
                                     seed=int(rng.integers(2**31 - 1))).membership
        out[d] = sample_rows(m, rng)
    return out
