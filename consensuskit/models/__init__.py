"""Generative models written once as Pyro programs: the hub of every method.

Each family package (``mm``, ``bce``, ``gbce``, ``nbce``, ``pcc``) exposes its spec's
``model(...)`` and guides, and declares itself once in a ``FAMILY`` record
(:mod:`consensuskit.models.family`) from which the package's lists of families derive.
``mm``, ``bce``, ``gbce`` and ``nbce`` follow one calling convention, which
:class:`consensuskit.PyroConsensus`, the generic engines
(:mod:`consensuskit.inference.pyro_svi`, :mod:`~consensuskit.inference.pyro_mcmc`), the
per-row scoring (:mod:`~consensuskit.inference.pointwise`) and the fast-path registry
(:mod:`~consensuskit.inference.registry`) rely on; a user's model that follows it gets all
of them.

The convention
--------------
``model(labels=None, *, n_labels, n_clusters, n_rows=None, subsample_size=None,
subsample=None, **hyper_parameters_and_parameters)``

* ``labels``: LongTensor of shape (N, M), base clustering ``j``'s label of row ``i``
  re-coded to ``0..k_j-1``, ``-1`` where missing (``Ensemble.codes``).  Missing labels
  are masked out of the likelihood (``poutine.mask``).  ``labels=None`` *simulates*
  ``n_rows`` rows, so ``pyro.infer.Predictive(model, num_samples=S)(None, n_labels=...,
  n_clusters=K, n_rows=N)`` draws synthetic ensembles with their parameters; the model
  returns the (N, M) labels (observed or simulated).
* ``n_labels``: sequence (M,) of ``k_j``; ``n_clusters``: ``K`` (NBCE: the truncation).
* Per-row sites live in a plate named ``"rows"`` at ``dim=-1`` whose size is ``n_rows``
  (default ``labels.shape[0]``) and which accepts ``subsample_size`` (minibatches) or
  ``subsample`` with the rows of a streamed chunk.  Global sites sit outside it.
* Discrete per-row latents carry ``infer={"enumerate": "parallel"}`` so that
  ``TraceEnum_ELBO``/NUTS sum them out and their posterior is exact.
* The membership of a row is its row-local continuous site with K values (BCE's
  ``theta``) or else its enumerated site in the rows plate (MM's and NBCE's ``z``).
* Hyper-parameters and parameters are keyword arguments that accept tensors and keep
  their gradients (no ``float()``), so a variant computes them from its own sample sites
  and calls the built-in model: ``bce.model(labels, ..., alpha=my_alpha, beta=my_betas)``.
* ``MAX_PLATE_NESTING`` (module constant) is what ``TraceEnum_ELBO`` needs.

``gbce`` adds ``features=`` (N, D), NaN missing, which follow their rows through the
plate, and ``n_features=D`` to simulate them (site ``"o"``; ``gbce.simulate`` returns
labels, features and latents); its label part is BCE's (same global sites).  ``pcc`` (a
co-association model) keeps its own signature.
"""

import pkgutil as _pkgutil
from importlib import import_module as _import_module

#: The model families, one package each (spec, engines, kernels, estimator, and its
#: registration record ``FAMILY``: :mod:`consensuskit.models.family`), found on disk.
FAMILIES = tuple(m.name for m in _pkgutil.iter_modules(__path__) if m.ispkg)

__all__ = ["simulate", "convention", "family", *FAMILIES]


def __getattr__(name):
    # Imported on first use, so that importing an estimator does not import Pyro.
    if name == "simulate":
        return _import_module("consensuskit.models.simulation").simulate
    if name in FAMILIES or name in ("convention", "family"):
        return _import_module(f"consensuskit.models.{name}")
    raise AttributeError(f"module 'consensuskit.models' has no attribute {name!r}")
