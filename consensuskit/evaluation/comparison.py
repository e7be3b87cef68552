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

__all__ = ["compare", "plot_comparison", "COLUMNS"]


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


#: what each column of :func:`compare`'s table holds (``table.attrs["columns"]``)
COLUMNS = {
    "heldout_perplexity": "exp(-held-out log-likelihood / held-out labels); lower is better",
    "heldout_se_rows": "SE of the held-out perplexity over the held-out rows (another draw "
                       "of held-out rows would move it by this much)",
    "heldout_mcse": "Monte Carlo SE of the held-out perplexity (importance sampling or "
                    "posterior-draw noise of this estimate; 0 where exact)",
    "train_perplexity": "perplexity of the training rows (in-sample)",
    "elpd_diff": "held-out log-likelihood minus the best model's, summed over rows (paired)",
    "elpd_diff_se": "SE of elpd_diff over rows (paired) plus the Monte Carlo variance",
    "heldout_elpd": "held-out log-likelihood, summed over rows",
    "elpd_loo": "PSIS-LOO elpd on the training rows (NaN for a point fit: no draws)",
    "elpd_loo_se_rows": "SE of elpd_loo over the training rows (ArviZ's se)",
    "loo_draws": "what PSIS-LOO importance-sampled from: 'posterior' (MCMC), 'variational' "
                 "(draws of an approximate posterior: a cheaper, less reliable LOO) or "
                 "'none (point fit)'",
    "pareto_k_max": "largest Pareto k of PSIS-LOO",
    "share_k_above_0.7": "share of training rows with Pareto k > 0.7 (their LOO term is "
                         "unreliable)",
    "rhat_loglik": "split R-hat of the per-draw total training log-likelihood over chains "
                   "(label-switching invariant; NaN with one chain)",
    "reliable": "False when a check failed: Pareto k > 0.7, R-hat > 1.05, chains in "
                "separate modes, a NUTS run whose R-hat of lp is above its threshold or "
                "unknown, an unconverged ELBO, or scaled observed sites (a warning names it)",
    "n_clusters": "distinct consensus labels found",
    "fit_seconds": "CPU seconds of fit", "fit_wall_seconds": "wall seconds of fit",
}


def _loo_draws(est, ll):
    if ll.shape[0] * ll.shape[1] < 2:
        return "none (point fit)"
    kind = ""
    if hasattr(est, "_log_likelihood_kind"):
        kind = est._log_likelihood_kind()
    return "variational" if ("variational" in kind or "guide" in kind) else "posterior"


def _loo_summary(name, est):
    """PSIS-LOO of a fit, its diagnostics and the problems found (list of str).

    Point fits (one draw) have no LOO: NaN, said in ``loo_draws``.  ArviZ's own
    warnings are caught and re-issued with the model's name."""
    out = {"elpd_loo": np.nan, "elpd_loo_se_rows": np.nan, "pareto_k_max": np.nan,
           "share_k_above_0.7": np.nan, "rhat_loglik": np.nan}
    problems = []
    idata = est.inference_data_
    ll = np.asarray(idata.log_likelihood["x"])
    out["loo_draws"] = _loo_draws(est, ll)
    if out["loo_draws"].startswith("none"):
        return out, problems
    from consensuskit.inference.arviz_adapter import import_arviz

    az = import_arviz()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loo = az.loo(idata, pointwise=True)
        if ll.shape[0] >= 2:
            out["rhat_loglik"] = float(az.rhat(ll.sum(-1)))
    for w in caught:
        warnings.warn(f"compare: {name}: {w.message}", w.category, stacklevel=3)
    k = np.asarray(loo.pareto_k)
    out.update(elpd_loo=float(loo.elpd_loo), elpd_loo_se_rows=float(loo.se),
               pareto_k_max=float(np.max(k)), **{"share_k_above_0.7": float(np.mean(k > 0.7))})
    if np.any(k > 0.7):
        problems.append(f"{int(np.sum(k > 0.7))} of {k.size} training rows have Pareto k > "
                        f"0.7 (max {np.max(k):.2f}): their PSIS-LOO terms are unreliable")
    if np.isfinite(out["rhat_loglik"]) and out["rhat_loglik"] > 1.05:
        problems.append(f"R-hat of the log-likelihood {out['rhat_loglik']:.3f} > 1.05: the "
                        "chains disagree")
    if out["loo_draws"] == "variational":
        problems.append("PSIS-LOO from variational draws, not posterior draws")
    return out, problems


def _fit_problems(est):
    """Fit-time flags: chains in separate modes, an unconverged ELBO, scaled likelihoods."""
    src = getattr(est, "hub_", None) or est
    problems = []
    if getattr(src, "chains_disagree_", False):
        problems.append(f"chains in separate modes (R-hat of lp {src.rhat_lp_:.3g})")
    elif getattr(src, "inference", None) == "nuts" and getattr(src, "converged_", True) is False:
        problems.append(f"NUTS not converged (R-hat of lp {src.rhat_lp_:.3g})")
    if getattr(src, "inference", None) == "svi" and getattr(src, "converged_", True) is False:
        problems.append("the SVI ELBO has not converged")
    if getattr(src, "scaled_sites_", None):
        problems.append(f"observed site(s) {src.scaled_sites_} scaled (poutine.scale): its "
                        "scores count their log-density times the scale, not comparable "
                        "with unscaled models")
    return problems


def _se_rows(ll, n_labels, ppl):
    """SE over rows of the perplexity (ratio estimator, delta method)."""
    n = ll.size
    if n < 2:
        return np.nan
    r = ll.sum() / n_labels.sum()
    dev = ll - r * n_labels
    return float(ppl * np.sqrt(n / (n - 1) * np.sum(dev**2)) / n_labels.sum())


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
    pandas.DataFrame indexed by name, sorted by held-out perplexity; its columns are
    described in ``table.attrs["columns"]`` (:data:`COLUMNS`).  The two kinds of standard
    error are named apart: ``*_se_rows`` is the spread over rows (what another sample of
    rows would change), ``heldout_mcse`` the Monte Carlo error of the estimate itself.
    PSIS-LOO (``elpd_loo``) is reported with its Pareto-k diagnostics and what it
    sampled from (``loo_draws``); point fits (EM, CAVI, VB point estimates) have no
    posterior draws and get NaN there, explicitly.  A row with a failed check (Pareto k
    above 0.7, R-hat above 1.05, chains in separate modes, an unconverged ELBO, LOO from
    variational draws) has ``reliable = False`` and raises a RuntimeWarning naming it.
    ``table.attrs["estimators"]`` holds the fitted estimators, ``table.attrs["problems"]``
    the problems per model.
    """
    import pandas as pd

    from consensuskit.data.ensemble import as_ensemble

    ens_train = as_ensemble(X_train)
    rows, per_row, fitted_estimators, problems = {}, {}, {}, {}
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
        ll, se_mc = est.score_samples_se(ens_test)
        n_obs = ens_test.n_observed
        n_labels = (np.asarray(ens_test.codes) >= 0).sum(1)
        ppl = float(np.exp(-ll.sum() / n_obs))
        train_ll = est.score_samples(est.ensemble_)
        loo, found = _loo_summary(name, est)
        found = _fit_problems(est) + found
        per_row[name] = (ll, se_mc**2)
        fitted_estimators[name] = est
        problems[name] = found
        rows[name] = {
            "heldout_perplexity": ppl,
            "heldout_se_rows": _se_rows(ll, n_labels, ppl),
            "heldout_mcse": ppl * float(np.sqrt(np.sum(se_mc**2))) / n_obs,
            "train_perplexity": float(np.exp(-train_ll.sum() / est.ensemble_.n_observed)),
            **loo,
            "reliable": not found,
            "heldout_elpd": float(ll.sum()),
            "n_clusters": int(len(np.unique(est.labels_))),
            "fit_seconds": cpu,
            "fit_wall_seconds": wall,
        }
        for p in found:
            warnings.warn(f"compare: {name}: {p}", RuntimeWarning, stacklevel=2)
    best = min(rows, key=lambda k: rows[k]["heldout_perplexity"])
    lb, vb = per_row[best]
    for name, (ll, v) in per_row.items():
        d = ll - lb
        n = d.size
        mc = 0.0 if name == best else float(np.sum(v) + np.sum(vb))
        rows[name]["elpd_diff"] = float(d.sum())
        rows[name]["elpd_diff_se"] = float(np.sqrt(n * d.var(ddof=1) + mc)) if n > 1 else np.nan
    table = pd.DataFrame.from_dict(rows, orient="index")
    cols = ["heldout_perplexity", "heldout_se_rows", "heldout_mcse", "train_perplexity",
            "elpd_diff", "elpd_diff_se", "heldout_elpd", "elpd_loo", "elpd_loo_se_rows",
            "loo_draws", "pareto_k_max", "share_k_above_0.7", "rhat_loglik", "reliable",
            "n_clusters", "fit_seconds", "fit_wall_seconds"]
    table = table[cols].sort_values("heldout_perplexity")
    table.attrs["estimators"] = fitted_estimators
    table.attrs["problems"] = problems
    table.attrs["columns"] = dict(COLUMNS)
    return table


def plot_comparison(table, ax=None):
    """Held-out perplexity ± 2 SE over rows and the paired elpd difference to the best ± 2 SE.

    ``table`` is the DataFrame of :func:`compare`.  Returns the matplotlib Figure.
    """
    import matplotlib.pyplot as plt

    if ax is None:
        fig, ax = plt.subplots(1, 2, figsize=(10, 0.5 * len(table) + 2))
    else:
        fig = np.atleast_1d(ax)[0].figure
    a0, a1 = np.atleast_1d(ax)[:2]
    y = np.arange(len(table))[::-1]
    a0.errorbar(table["heldout_perplexity"], y, xerr=2 * table["heldout_se_rows"].fillna(0),
                fmt="o", capsize=4)
    a0.set_yticks(y)
    a0.set_yticklabels(table.index)
    a0.set_xlabel("held-out perplexity (± 2 SE over rows), lower is better")
    a1.errorbar(table["elpd_diff"], y, xerr=2 * table["elpd_diff_se"].fillna(0), fmt="o",
                capsize=4, color="tab:red")
    a1.axvline(0, color="k", lw=0.8)
    a1.set_yticks(y)
    a1.set_yticklabels([])
    a1.set_xlabel("held-out log-lik. minus best, paired (± 2 SE)")
    fig.tight_layout()
    return fig
