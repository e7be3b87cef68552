"""Draw a synthetic ensemble from any spec that follows the calling convention.

The specs simulate when ``labels`` is None; :func:`simulate` is the one place that runs
them that way, so tests, experiments and users draw data from the model they fit instead
of re-typing its generative process.  Parameters may be fixed (``poutine.condition``);
the rest are drawn from their priors.
"""

from __future__ import annotations

from contextlib import nullcontext

import numpy as np
import torch
from pyro import poutine
from pyro.poutine.util import site_is_subsample

from consensuskit.models.convention import float64_default

__all__ = ["simulate"]


def _as_value(v):
    if torch.is_tensor(v):
        return v
    a = np.asarray(v)
    if a.dtype.kind in "iub":
        return torch.as_tensor(a, dtype=torch.int64)
    return torch.as_tensor(a, dtype=torch.float64)


def simulate(spec, *, n_rows, n_labels, n_clusters, params=None, seed=None, **spec_kwargs):
    """Simulate ``n_rows`` rows of base labels from ``spec`` (one draw of everything).

    Parameters
    ----------
    spec : callable or module
        A model following the convention of :mod:`consensuskit.models` (``mm.model``,
        ``bce.model``, ``nbce.model`` or a user's), or a module with a ``model``.
    n_rows : int
        ``N``, the number of rows simulated.
    n_labels : sequence of int (M,)
        ``k_j``, the number of labels of each base clustering.
    n_clusters : int
        ``K`` (NBCE: the truncation ``T``).
    params : dict, optional
        Sample sites held fixed, name -> array-like (e.g. ``{"alpha": (K,), "beta_0":
        (K, k_0)}`` for BCE, or MM's ``{"pi": (K,), "theta_j": (K, k_j), "z": (N,)}`` to
        plant a partition).  Float arrays become float64 tensors, integer arrays int64.
        Sites not given are drawn from the spec's priors.  The draw runs with torch's
        default dtype float64 (restored afterwards).
    seed : int, optional
        Seeds a private torch RNG stream (the global stream is left as it was); None
        draws from the global stream.
    **spec_kwargs
        Passed to the spec (hyper-parameters such as ``alpha0``, ``prior``,
        ``label_prior``).

    Returns
    -------
    X : ndarray of int64, shape (N, M)
        Simulated labels, column ``j`` in ``0..k_j-1`` (nothing missing; use
        :func:`consensuskit.data.generate.drop_labels` for missing labels).
    latents : dict of str -> ndarray
        Every latent sample site of the draw, given or sampled: the global parameters
        (e.g. MM's ``pi`` (K,), ``theta_j`` (K, k_j)) and the per-row latents (``z``
        (N,) or BCE's ``theta`` (N, K) and ``z`` (M, N)).  Label sites are left out;
        other simulated data stay in (GBCE's features, site ``"o"`` (D, N), with
        ``n_features=D``; :func:`consensuskit.models.gbce.spec.simulate` lays them out (N, D)).
    """
    model = getattr(spec, "model", spec)
    data = {k: _as_value(v) for k, v in (params or {}).items()}
    kw = dict(n_labels=[int(k) for k in n_labels], n_clusters=int(n_clusters), **spec_kwargs)
    fork = nullcontext() if seed is None else torch.random.fork_rng(devices=[])
    with fork, float64_default(), torch.no_grad():
        if seed is not None:
            torch.manual_seed(int(seed))
        tr = poutine.trace(poutine.condition(model, data=data)).get_trace(
            None, n_rows=int(n_rows), **kw)
    X = tr.nodes["_RETURN"]["value"]
    if not torch.is_tensor(X) or X.shape != (int(n_rows), len(kw["n_labels"])):
        raise ValueError(f"{getattr(model, '__name__', model)!r} did not return the (N, M) "
                         "labels when simulating; does it follow the spec convention?")
    X = X.detach().cpu().numpy().astype(np.int64)
    # the label sites are those a trace with labels observes (on a private stream, so
    # that it draws nothing from the caller's)
    with torch.random.fork_rng(devices=[]), float64_default(), torch.no_grad():
        observed = {name for name, site in poutine.trace(model).get_trace(
            torch.as_tensor(X[:1]), **kw).nodes.items() if site.get("is_observed")}
    latents = {name: site["value"].detach().cpu().numpy()
               for name, site in tr.nodes.items()
               if site["type"] == "sample" and name not in observed
               and not site_is_subsample(site)}
    return X, latents
