"""BCE's engines registered as fast paths of its spec (``tests/test_fast_paths.py``).

CAVI (variational EM, the paper's algorithm) and SVI of the hub, each read by
``BCE.to_spec()``; CAVI's reported bound checked against the spec's ELBO.
"""

import numpy as np
import torch

from consensuskit.inference.registry import FastPath
from consensuskit.models.bce import cavi, spec
from consensuskit.models.bce.estimator import BCE

__all__ = ["FAST_PATHS", "objective"]


def objective(est, n_particles=2000, reps=4):
    """CAVI's reported bound vs the spec's ELBO under the paper's mean-field guide at the
    fitted (alpha, beta, gamma) and phi from one more phi-update at the fitted gamma.

    Returns ``(engine value, spec value, spec SE)``; the spec's ELBO is a Monte-Carlo
    estimate over ``reps`` independent runs of ``n_particles`` particles.
    """
    import pyro
    from pyro.infer import TraceEnum_ELBO, config_enumerate

    ens = est.ensemble_
    data = cavi.prepare_data(ens)
    alpha = _t(est.alpha_)
    beta_packed = cavi.pack_beta(est.beta_)
    gamma = _t(est.gamma_)  # (N, K)
    phik = cavi.update_phi(cavi.elog_dirichlet(gamma.T), beta_packed, data.idx, data.mask)
    phi = phik.permute(0, 2, 1)  # (M, N, K)
    loss = TraceEnum_ELBO(num_particles=n_particles, vectorize_particles=True,
                          max_plate_nesting=2)
    guide = config_enumerate(spec.guide_meanfield, "parallel")
    labels = torch.as_tensor(ens.codes)
    kw = dict(n_labels=list(ens.n_labels), n_clusters=len(est.alpha_), alpha=alpha,
              beta=[_t(b) for b in est.beta_], gamma=gamma, phi=phi)
    with torch.random.fork_rng():
        pyro.set_rng_seed(0)
        vals = [-loss.loss(spec.model, guide, labels, **kw) for _ in range(reps)]
    smooth = est.smoothing * sum(float(np.log(b).sum()) for b in est.beta_)
    # the engine's objective is the ELBO plus the smoothing pseudo-count term
    return (float(est.lower_bound_) - smooth, float(np.mean(vals)),
            float(np.std(vals, ddof=1) / np.sqrt(reps)))


def _t(a):
    return torch.as_tensor(np.asarray(a, dtype=np.float64))


FAST_PATHS = [
    FastPath("bce", "cavi", spec,
             lambda **o: BCE(n_clusters=3, alpha_estimate="meanfield", n_init=1, tol=1e-10,
                             max_iter=300, random_state=0,
                             **o),
             objective=objective),
    FastPath("bce", "svi", spec,
             lambda **o: BCE(n_clusters=3, inference="svi", max_iter=100, n_init=1,
                             random_state=0, **o)),
]
