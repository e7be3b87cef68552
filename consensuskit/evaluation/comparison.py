"""Compare generative consensus models on held-out rows: one table, one figure.

``compare`` fits every estimator on the same training rows, scores the same held-out
rows, and reports each model's held-out perplexity with its standard error beside the
*paired* difference in held-out log-likelihood to the best model: the per-row
differences ``d_i = log p_m(x_i) - log p_best(x_i)`` share the rows' variability, so their
sum has a much smaller standard error than the difference of two perplexities and says
whether two models can be told apart.
"""

from __future__ import annotations

import time
import warnings

import numpy as np
from sklearn.base import clone

__all__ = ["compare", "plot_comparison"]


def _named(estimators):
    if isinstance(estimators, dict):
        return dict(estimators)
    out = {}
    for est in estimators:
        name = type(est).__name__
        inf = getattr(est, "inference", None)
        name = f"{name}({inf})" if isinstance(inf, str) else name
        base, k = name, 2
        while name in out:
            name, k = f"{base}#{k}", k + 1
        out[name] = est
    return out


def _elpd_loo(est):
    """PSIS-LOO elpd and its SE where the fit has more than one posterior draw."""
    ll = np.asarray(est.log_likelihood_draws())
    if ll.shape[0] * ll.shape[1] < 2:
        return np.nan, np.nan
    import arviz as az

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loo = az.loo(est.inference_data_)
    return float(loo.elpd_loo), float(loo.se)


def compare(estimators, X_train, X_test, *, unknown="error", refit=True):
    """Fit each estimator on ``X_train``, score it on ``X_test``; one row per model.

    Parameters
    ----------
    estimators : dict name -> estimator, or list of estimators
        Generative consensus estimators (``score_samples`` and ``perplexity``: MM, BCE,
        GBCE, NBCE, PyroConsensus).  Unfitted ones are cloned and fitted; with
        ``refit=False`` a fitted estimator is used as it is.
    X_train, X_test : array-like (n, M) or Ensemble
        Base labels in the same label space.
    unknown : {"error", "missing"}
        A held-out label that its column never showed in training.

    Returns
    -------
    pandas.DataFrame indexed by name, sorted by held-out perplexity, with columns
    ``heldout_perplexity``, ``heldout_se`` (Monte-Carlo SE of the perplexity),
    ``train_perplexity``, ``elpd_loo``/``elpd_loo_se`` (PSIS-LOO on the training rows
    where the fit has posterior draws, else NaN), ``heldout_elpd`` (sum of held-out
    log-likelihoods), ``elpd_diff`` and ``elpd_diff_se`` (paired difference of held-out
    log-likelihood to the best model: ``sum_i d_i`` and ``sqrt(n var(d) + MC var)``),
    ``n_clusters`` (distinct consensus labels found), ``fit_seconds`` (CPU) and
    ``fit_wall_seconds``.  ``table.attrs["estimators"]`` holds the fitted estimators.
    """
    import pandas as pd

    from consensuskit.data.ensemble import as_ensemble

    ens_train = as_ensemble(X_train)
    rows, per_row, fitted_estimators = {}, {}, {}
    for name, est in _named(estimators).items():
        if not hasattr(est, "score_samples"):
            raise TypeError(f"{name}: {type(est).__name__} has no likelihood (score_samples)")
        fitted = hasattr(est, "labels_") and not refit
        if not fitted:
            est = clone(est)
            t0, w0 = time.process_time(), time.perf_counter()
            est.fit(ens_train)
            cpu, wall = time.process_time() - t0, time.perf_counter() - w0
        else:
            cpu = wall = np.nan
        ens_test = est.encode(X_test, unknown=unknown)
        ll, se_rows = est.score_samples_se(ens_test)
        n_obs = ens_test.n_observed
        ppl = float(np.exp(-ll.sum() / n_obs))
        train_ll = est.score_samples(est.ensemble_)
        loo, loo_se = _elpd_loo(est)
        per_row[name] = (ll, se_rows**2)
        fitted_estimators[name] = est
        rows[name] = {
            "heldout_perplexity": ppl,
            "heldout_se": ppl * float(np.sqrt(np.sum(se_rows**2))) / n_obs,
            "train_perplexity": float(np.exp(-train_ll.sum() / est.ensemble_.n_observed)),
            "elpd_loo": loo,
            "elpd_loo_se": loo_se,
            "heldout_elpd": float(ll.sum()),
            "n_clusters": int(len(np.unique(est.labels_))),
            "fit_seconds": cpu,
            "fit_wall_seconds": wall,
        }
    best = min(rows, key=lambda k: rows[k]["heldout_perplexity"])
    lb, vb = per_row[best]
    for name, (ll, v) in per_row.items():
        d = ll - lb
        n = d.size
        mc = 0.0 if name == best else float(np.sum(v) + np.sum(vb))
        rows[name]["elpd_diff"] = float(d.sum())
        rows[name]["elpd_diff_se"] = float(np.sqrt(n * d.var(ddof=1) + mc)) if n > 1 else np.nan
    table = pd.DataFrame.from_dict(rows, orient="index")
    cols = ["heldout_perplexity", "heldout_se", "train_perplexity", "elpd_diff", "elpd_diff_se",
            "heldout_elpd", "elpd_loo", "elpd_loo_se", "n_clusters", "fit_seconds",
            "fit_wall_seconds"]
    table = table[cols].sort_values("heldout_perplexity")
    table.attrs["estimators"] = fitted_estimators
    return table


def plot_comparison(table, ax=None):
    """Held-out perplexity ± 2 SE and the paired elpd difference to the best ± 2 SE.

    ``table`` is the DataFrame of :func:`compare`.  Returns the matplotlib Figure.
    """
    import matplotlib.pyplot as plt

    if ax is None:
        fig, ax = plt.subplots(1, 2, figsize=(10, 0.5 * len(table) + 2))
    else:
        fig = np.atleast_1d(ax)[0].figure
    a0, a1 = np.atleast_1d(ax)[:2]
    y = np.arange(len(table))[::-1]
    a0.errorbar(table["heldout_perplexity"], y, xerr=2 * table["heldout_se"], fmt="o", capsize=4)
    a0.set_yticks(y)
    a0.set_yticklabels(table.index)
    a0.set_xlabel("held-out perplexity (± 2 SE), lower is better")
    a1.errorbar(table["elpd_diff"], y, xerr=2 * table["elpd_diff_se"].fillna(0), fmt="o",
                capsize=4, color="tab:red")
    a1.axvline(0, color="k", lw=0.8)
    a1.set_yticks(y)
    a1.set_yticklabels([])
    a1.set_xlabel("held-out log-lik. minus best, paired (± 2 SE)")
    fig.tight_layout()
    return fig
