"""One place that turns (chain, draw) traces into ArviZ objects, for arviz 0.x and 1.x.

arviz 0.x builds an ``InferenceData`` with ``arviz.from_dict(posterior=...)``;
arviz 1.x moved the converters to ``arviz_base.from_dict({"posterior": ...})``,
which returns an ``xarray.DataTree``.  Both expose the variables with ``chain``
and ``draw`` dimensions, so ``arviz.summary`` gives R-hat and ESS either way.
"""

from __future__ import annotations

import warnings

import numpy as np

__all__ = ["to_inference_data", "import_arviz", "add_group"]

#: the groups :func:`to_inference_data` builds, in ArviZ's order
GROUPS = ("posterior", "posterior_predictive", "log_likelihood", "sample_stats",
          "observed_data")


def import_arviz():
    """``arviz``, without the FutureWarning arviz 0.23 gives on import about its refactor."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        import arviz as az
    return az


def to_inference_data(posterior: dict, attrs: dict | None = None,
                      log_likelihood: dict | None = None, *, sample_stats: dict | None = None,
                      observed_data: dict | None = None,
                      posterior_predictive: dict | None = None, dims: dict | None = None,
                      group_attrs: dict | None = None):
    """Wrap traces of shape (n_chains, n_draws, ...) into ArviZ's container.

    Parameters
    ----------
    posterior : dict of str -> array of shape (n_chains, n_draws, ...)
    attrs : dict, optional
        Stored as attributes of the posterior group.
    log_likelihood : dict of str -> array (n_chains, n_draws, n_rows), optional
        Pointwise log-likelihood (the ``log_likelihood`` group, dims ``row``), for
        ``az.loo`` / ``az.compare``.
    sample_stats : dict of str -> array (n_chains, n_draws), optional
        Sampler statistics under ArviZ's names (``diverging``, ``tree_depth``,
        ``step_size``, ``energy``, ``acceptance_rate``, ``lp``, ...).
    observed_data : dict of str -> array (no chain/draw dims), optional
    posterior_predictive : dict of str -> array (n_chains, n_draws, ...), optional
    dims : dict of variable -> list of dimension names (beyond chain, draw), optional
        Defaults: ``row`` for the log-likelihood variables, ``(row, clustering)`` for
        observed and predictive variables.
    group_attrs : dict of group name -> dict, optional
        Attributes of other groups (e.g. what the ``log_likelihood`` values are).

    Returns
    -------
    ``arviz.InferenceData`` (arviz 0.x) or ``xarray.DataTree`` (arviz 1.x).
    """
    post = {k: np.asarray(v) for k, v in posterior.items()}
    for k, v in post.items():
        if v.ndim < 2:
            raise ValueError(f"trace {k!r} must have shape (chain, draw, ...); got {v.shape}")
    groups = {
        "posterior": post,
        "posterior_predictive": {k: np.asarray(v) for k, v in (posterior_predictive or {}).items()},
        "log_likelihood": {k: np.asarray(v) for k, v in (log_likelihood or {}).items()},
        "sample_stats": {k: np.asarray(v) for k, v in (sample_stats or {}).items()},
        "observed_data": {k: np.asarray(v) for k, v in (observed_data or {}).items()},
    }
    all_dims = {k: ["row"] for k in groups["log_likelihood"]}
    for g in ("observed_data", "posterior_predictive"):
        all_dims.update({k: ["row", "clustering"] for k, v in groups[g].items()
                         if v.ndim - (g != "observed_data") * 2 == 2})
    all_dims.update(dims or {})
    g_attrs = {"posterior": dict(attrs or {}), **(group_attrs or {})}
    try:
        import arviz_base  # arviz >= 1.0
    except ImportError:
        arviz_base = None
    if arviz_base is not None:
        present = {g: v for g, v in groups.items() if v}
        return arviz_base.from_dict(present, attrs={g: a for g, a in g_attrs.items()
                                                    if g in present}, dims=all_dims)
    az = import_arviz()
    idata = az.from_dict(**{g: (v or None) for g, v in groups.items()},
                         attrs=g_attrs["posterior"], dims=all_dims)
    for g, a in g_attrs.items():
        if g in idata.groups():
            idata[g].attrs.update(a)
    return idata


def add_group(idata, name: str, data: dict, dims: dict | None = None):
    """Add the group ``name`` (variables of shape (chain, draw, ...)) to ``idata`` in place
    (``InferenceData.add_groups`` on arviz 0.x, a child node of the DataTree on 1.x)."""
    data = {k: np.asarray(v) for k, v in data.items()}
    if hasattr(idata, "add_groups"):
        idata.add_groups({name: data}, dims=dims or {})
        return idata
    import arviz_base  # arviz >= 1.0

    idata[name] = arviz_base.from_dict({name: data}, dims=dims or {})[name]
    return idata
