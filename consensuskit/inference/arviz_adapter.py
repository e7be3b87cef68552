"""One place that turns (chain, draw) traces into ArviZ objects, for arviz 0.x and 1.x.

arviz 0.x builds an ``InferenceData`` with ``arviz.from_dict(posterior=...)``;
arviz 1.x moved the converters to ``arviz_base.from_dict({"posterior": ...})``,
which returns an ``xarray.DataTree``.  Both expose the variables with ``chain``
and ``draw`` dimensions, so ``arviz.summary`` gives R-hat and ESS either way.
"""

from __future__ import annotations

import warnings

import numpy as np

__all__ = ["to_inference_data"]


def to_inference_data(posterior: dict, attrs: dict | None = None,
                      log_likelihood: dict | None = None):
    """Wrap traces of shape (n_chains, n_draws, ...) into ArviZ's container.

    Parameters
    ----------
    posterior : dict of str -> array of shape (n_chains, n_draws, ...)
    attrs : dict, optional
        Stored as attributes of the posterior group.
    log_likelihood : dict of str -> array (n_chains, n_draws, n_rows), optional
        Pointwise log-likelihood (the ``log_likelihood`` group, dims ``row``), for
        ``az.loo`` / ``az.compare``.

    Returns
    -------
    ``arviz.InferenceData`` (arviz 0.x) or ``xarray.DataTree`` (arviz 1.x).
    """
    post = {k: np.asarray(v) for k, v in posterior.items()}
    for k, v in post.items():
        if v.ndim < 2:
            raise ValueError(f"trace {k!r} must have shape (chain, draw, ...); got {v.shape}")
    attrs = dict(attrs or {})
    try:
        import arviz_base  # arviz >= 1.0
    except ImportError:
        arviz_base = None
    ll = {k: np.asarray(v) for k, v in (log_likelihood or {}).items()}
    dims = {k: ["row"] for k in ll}
    if arviz_base is not None:
        groups = {"posterior": post, **({"log_likelihood": ll} if ll else {})}
        return arviz_base.from_dict(groups, attrs={"posterior": attrs}, dims=dims)
    with warnings.catch_warnings():  # arviz 0.23 warns about its coming refactor on import
        warnings.simplefilter("ignore", FutureWarning)
        import arviz as az
    return az.from_dict(posterior=post or None, attrs=attrs, log_likelihood=ll or None,
                        dims=dims)
