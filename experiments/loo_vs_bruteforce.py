"""PSIS-LOO of every engine with draws against brute-force leave-one-out.

For each model and data set: fit on all N rows, run ``az.loo`` on ``inference_data_``;
then, for each row i of a set of checked rows, refit on the other N - 1 rows (same label
coding: ``Ensemble.subset``) and score row i -- the brute-force ``log p(x_i | x_-i)``.
Printed per model and data set: the brute-force sum over the checked rows, PSIS's sum over
the same rows, their difference with its paired SE over rows (``sqrt(n var(d_i))``) and the
Monte Carlo SE of the brute-force sum (from each refit's own draw noise), and the share of
rows with Pareto k > 0.7 (all N rows).  With ``--psis-fits R`` the PSIS side is the mean of
R independent full fits (``random_state`` seed .. seed + R - 1) and their spread gives its
own Monte Carlo SE, which z then counts too (one fit's LOO varies with its draws: on pima,
SD 0.09 nats over five fits against a paired SE of 0.06, stop 36).

What "score row i" is, per engine (the estimand PSIS-LOO on that engine's draws targets):

* NUTS (MM, BCE, user variants through PyroConsensus) and NBCE's collapsed Gibbs: the
  refit's posterior predictive of row i (``score_samples``: the mean of ``p(x_i | draw)``
  over the refit's draws);
* NBCE's VB: the mean of ``p(x_i | pi, theta)`` over draws of the refit's *variational*
  posterior (what PSIS on VB's draws estimates; VB's own ``score_samples`` plugs in the
  variational means instead).

``--negative-control`` adds NBCE(Gibbs) scored with the in-sample log-likelihood (row i's
own assignment left in the counts), which must fail.

Run: ``PYTHONPATH=. python experiments/loo_vs_bruteforce.py`` (full: N = 40 rows per data
set, every row checked for the Gibbs/VB engines, 12 rows for the NUTS ones) or ``--quick``.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from scipy.special import logsumexp

import consensuskit as ck
from consensuskit.data import datasets, generate
from consensuskit.data.ensemble import as_ensemble
from consensuskit.inference.arviz_adapter import import_arviz

sys.path.insert(0, str(Path(__file__).resolve().parent))
import user_variants  # noqa: E402

DATASETS = ("wine", "iris", "ecoli")


#: base-clustering families of the check's ensembles (``--family``)
FAMILIES = ("kmeans", "rfs", "mixed")


def small_ensemble(name, n_rows, n_partitions=4, n_clusters=3, seed=0, family="kmeans"):
    """``n_rows`` random rows of a bundled data set, ``n_partitions`` base clusterings, as
    an Ensemble: k-means with k = n_clusters (``"kmeans"``), or with k drawn per column from
    2 to 2 n_clusters, k-means on random feature subsets (``"rfs"``) or k-means, average and
    Ward linkage in turn (``"mixed"``)."""
    F, _ = datasets.load(name)
    rows = np.random.RandomState(seed).choice(len(F), n_rows, replace=False)
    k = (2, 2 * n_clusters)
    if family == "kmeans":
        X = generate.kmeans_partitions(F[rows], n_partitions, n_clusters=n_clusters,
                                       random_state=seed)
    elif family == "rfs":
        X = generate.random_feature_partitions(F[rows], n_partitions, n_clusters=k,
                                               random_state=seed)
    elif family == "mixed":
        X = generate.mixed_partitions(F[rows], n_partitions, k,
                                      algorithms=("kmeans", "average", "ward"),
                                      random_state=seed)
    else:
        raise ValueError(f"family must be one of {FAMILIES}; got {family!r}")
    return as_ensemble(X)


def models(quick=False, seed=0, nuts=None):
    """name -> (factory of an unfitted estimator, how a refit scores a held-out row).
    ``nuts``: warm-up steps = draws per chain of the NUTS fits (default 120 quick, 300).
    A factory called with ``s`` gives the same estimator with ``random_state=seed + s``
    (independent full fits for the PSIS side's Monte Carlo error; the refits use s = 0)."""
    nuts = nuts or (120 if quick else 300)

    def hub(s):
        return dict(n_clusters=3, inference="nuts", num_samples=nuts, warmup_steps=nuts,
                    num_chains=2, random_state=seed + s, n_posterior_draws=100)

    gibbs = dict(truncation=6, n_samples=150 if quick else 400, burn_in=100, n_chains=2)
    return {
        "MM(NUTS)": (lambda s=0: ck.MM(3, inference="nuts", max_iter=nuts, n_init=2,
                                       random_state=seed + s), "predictive"),
        "BCE(NUTS)": (lambda s=0: ck.BCE(3, inference="nuts", max_iter=nuts, n_init=2,
                                         random_state=seed + s), "predictive"),
        "NBCE(Gibbs)": (lambda s=0: ck.NBCE(**gibbs, random_state=seed + s), "predictive"),
        "NBCE(VB)": (lambda s=0: ck.NBCE(truncation=6, prior="fsd", inference="vb",
                                         n_samples=2000, n_chains=1, random_state=seed + s),
                     "variational"),
        "MM-hierarchical(NUTS)": (lambda s=0: ck.PyroConsensus(user_variants.mm_hierarchical,
                                                               **hub(s)), "predictive"),
        "BCE-alpha-hyperprior(NUTS)": (lambda s=0: ck.PyroConsensus(
            user_variants.bce_alpha_hyperprior_collapsed, **hub(s)), "predictive"),
    }


def score_heldout_row(est, row, how):
    """``(log p(x_i | x_-i), its Monte Carlo variance)`` of the held-out ``row`` (an
    Ensemble of one row) under the refit ``est``."""
    if how == "variational":
        rng = np.random.default_rng(0)
        lp, lt = est._variational_parameter_draws(int(est.n_samples * est.n_chains), rng)
        idx = row.offset_index()
        from consensuskit.models.nbce.predictive import component_loglik

        ll = np.array([logsumexp(a + component_loglik(idx, b)[0]) for a, b in zip(lp, lt)])
        m = logsumexp(ll) - np.log(ll.size)
        w = np.exp(ll - m)
        return float(m), float(w.var() / ll.size)
    ll, se = est.score_samples_se(row)
    return float(ll[0]), float(se[0] ** 2)


def psis_loo(idata):
    """Pointwise PSIS-LOO (n,) and Pareto k (n,), ArviZ's warnings passed through."""
    az = import_arviz()
    loo = az.loo(idata, pointwise=True)
    return np.asarray(loo.loo_i), np.asarray(loo.pareto_k)


def bruteforce(make, how, ens, rows, progress=False):
    """Brute-force ``log p(x_i | x_-i)`` and its MC variance for each i in ``rows``."""
    out, var = np.empty(len(rows)), np.empty(len(rows))
    it = rows
    if progress:
        from tqdm.auto import tqdm

        it = tqdm(rows, desc="refits", leave=False)
    for a, i in enumerate(it):
        keep = np.setdiff1d(np.arange(ens.n_samples), [i])
        with warnings.catch_warnings():
            # refits of a few rows warn about their own chains; the full fit's warnings
            # are shown where it is fitted
            warnings.simplefilter("ignore", RuntimeWarning)
            est = make().fit(ens.subset(keep))
        out[a], var[a] = score_heldout_row(est, ens.subset([i]), how)
    return out, var


def check(make, how, ens, rows, *, loglik=None, progress=False, psis_fits=1):
    """One comparison: dict with the sums over ``rows``, the paired difference and SEs.

    ``psis_fits`` full fits (``make(s)``, s = 0, 1, ...) give the PSIS side: their
    pointwise LOO averaged, and the Monte Carlo SE of its sum over ``rows`` from their
    spread (``psis_mcse``: SD of the fits' sums / sqrt(psis_fits); NaN with one fit,
    whose own draw noise is then not counted)."""
    t0 = time.process_time()
    loo_fits, k_fits = [], []
    for s in range(psis_fits):
        est = make(s).fit(ens)
        if loglik is not None:  # negative control: another log-likelihood in the same idata
            from consensuskit.inference.arviz_adapter import to_inference_data

            ll = loglik(est)
            idata = to_inference_data({"lp": ll.sum(-1)}, log_likelihood={"x": ll})
        else:
            idata = est.inference_data_
        loo_i, k = psis_loo(idata)
        loo_fits.append(loo_i)
        k_fits.append(k)
    loo_fits, k = np.array(loo_fits), np.concatenate(k_fits)
    loo_i = loo_fits.mean(0)
    sums = loo_fits[:, rows].sum(1)
    psis_mcse = float(sums.std(ddof=1) / np.sqrt(psis_fits)) if psis_fits > 1 else np.nan
    bf, bf_var = bruteforce(make, how, ens, rows, progress=progress)
    d = loo_i[rows] - bf
    n = d.size
    return {"bruteforce": float(bf.sum()), "psis": float(loo_i[rows].sum()),
            "diff": float(d.sum()), "paired_se": float(np.sqrt(n * d.var(ddof=1))),
            "bruteforce_mcse": float(np.sqrt(bf_var.sum())), "psis_mcse": psis_mcse,
            "psis_fits": psis_fits,
            "share_k_above_0.7": float(np.mean(k > 0.7)), "k_max": float(k.max()),
            "n_rows_checked": n, "cpu_seconds": time.process_time() - t0}


def z_score(r):
    """The difference over its SE: paired over rows, the brute force's Monte Carlo SE and,
    where several full fits were run, the PSIS side's."""
    mc = r["psis_mcse"] if np.isfinite(r["psis_mcse"]) else 0.0
    return r["diff"] / np.sqrt(r["paired_se"] ** 2 + r["bruteforce_mcse"] ** 2 + mc**2)


def main(quick=False, negative_control=False, only=None, datasets_=DATASETS, n_rows=None,
         nuts=None, nuts_rows=None, psis_fits=1, family="kmeans"):
    import pandas as pd

    n_rows = n_rows or (24 if quick else 40)
    out = []
    for name in datasets_:
        ens = small_ensemble(name, n_rows, family=family)
        table = models(quick, nuts=nuts)
        if negative_control:
            table["NBCE(Gibbs) in-sample counts [negative control]"] = table["NBCE(Gibbs)"]
        for model, (make, how) in table.items():
            if only and not any(o in model for o in only):
                continue
            n_check = min(n_rows, (nuts_rows or (6 if quick else 12)) if "NUTS" in model
                          else n_rows)
            rows = np.sort(np.random.RandomState(1).choice(n_rows, n_check, replace=False))
            loglik = None
            if "negative control" in model:
                def loglik(est):
                    C, S = est.samples_["log_joint"].shape
                    return est._row_logliks_gibbs(est._train_index()).reshape(C, S, -1)
            r = check(make, how, ens, rows, loglik=loglik, progress=True, psis_fits=psis_fits)
            r.update(dataset=name, model=model, n_rows=n_rows, family=family)
            r["z"] = z_score(r)
            out.append(r)
            print(f"{name:6s} {model:48s} bf {r['bruteforce']:9.3f}  psis {r['psis']:9.3f}  "
                  f"diff {r['diff']:+7.3f} ± {r['paired_se']:.3f} (rows) ± "
                  f"{r['bruteforce_mcse']:.3f} (MC) ± {r['psis_mcse']:.3f} (PSIS MC)  "
                  f"k>0.7 {r['share_k_above_0.7']:.2f}  "
                  f"[{r['n_rows_checked']}/{n_rows} rows, {r['cpu_seconds']:.0f} s CPU]",
                  flush=True)
    df = pd.DataFrame(out).set_index(["dataset", "model"])
    print(df[["bruteforce", "psis", "diff", "paired_se", "bruteforce_mcse", "psis_mcse", "z",
              "share_k_above_0.7", "n_rows_checked", "cpu_seconds"]].round(3).to_string())
    return df


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--negative-control", action="store_true")
    p.add_argument("--only", nargs="*", help="model names containing these strings")
    p.add_argument("--datasets", nargs="*", default=list(DATASETS))
    p.add_argument("--n-rows", type=int, default=None)
    p.add_argument("--nuts-draws", type=int, default=None,
                   help="warm-up steps = draws per chain of the NUTS fits")
    p.add_argument("--nuts-rows", type=int, default=None,
                   help="rows checked by brute force for the NUTS fits")
    p.add_argument("--psis-fits", type=int, default=1,
                   help="independent full fits on the PSIS side (their spread is its Monte "
                        "Carlo SE, counted in z; default 1: not counted)")
    p.add_argument("--family", choices=FAMILIES, default="kmeans",
                   help="base clusterings of the ensembles (default: k-means, k = 3)")
    a = p.parse_args()
    main(a.quick, a.negative_control, a.only, a.datasets, a.n_rows, a.nuts_draws, a.nuts_rows,
         a.psis_fits, a.family)
