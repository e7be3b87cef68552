"""Two user-written BCE variants fitted, scored and ranked against MM, BCE and NBCE.

The variants are in ``experiments/user_variants.py`` (the only user code).  Data: the
wine ensemble of ``notebooks/03_extending_a_model``: six clean base clusterings (k-means on
random feature subsets) and six corrupted ones (a fraction 0.2..1.0 of labels replaced by
random labels); a quarter of the rows held out.

Prints ``ck.compare`` (held-out perplexity ± SE, paired elpd difference to the best ± SE,
PSIS-LOO where a fit has posterior draws) and ``az.compare`` on the models with posterior
draws (NBCE's Gibbs draws, the variants' variational draws and, with ``--nuts``, MM's and
BCE's NUTS draws: BCE's on its collapsed spec, so its log-likelihood per draw is exact),
and the line counts of the user code.  With ``--nuts`` it also prints each NUTS fit's CPU
time and the R-hat of its sorted weights.

    PYTHONPATH=. python experiments/hub_variants.py [--quick] [--nuts] [--figure out.png]
"""

import argparse
import ast
import inspect
import sys
import warnings
from pathlib import Path

import numpy as np
import torch

import consensuskit as ck
from consensuskit.data import datasets, generate

sys.path.insert(0, str(Path(__file__).parent))
import user_variants  # noqa: E402

torch.set_num_threads(1)
K = 3
NOISE = [0.2, 0.4, 0.6, 0.8, 1.0, 1.0]


def corrupted_wine(seed=0):
    """Wine: 6 clean + 6 corrupted base clusterings; (X_train, X_test, noise per column)."""
    features, _ = datasets.load("wine")
    F = (features - features.mean(0)) / features.std(0)
    rs = np.random.RandomState(seed)
    clean = generate.random_feature_partitions(F, 6, n_clusters=K, random_state=seed)
    bad = generate.kmeans_partitions(F, len(NOISE), n_clusters=K, random_state=seed + 1)
    for j, eta in enumerate(NOISE):
        flip = rs.rand(len(F)) < eta
        bad[flip, j] = rs.randint(0, K, flip.sum())
    X = np.column_stack([clean, bad])
    perm = rs.permutation(len(X))
    n_test = len(X) // 4
    return X[np.sort(perm[n_test:])], X[np.sort(perm[:n_test])]


def user_lines(fn):
    """Lines of code of a user function, without its docstring and blank lines."""
    src = inspect.getsource(fn)
    doc = ast.get_docstring(ast.parse(src).body[0], clean=False) or ""
    body = src.replace(f'"""{doc}"""', "")
    return sum(1 for line in body.splitlines() if line.strip())


def estimators(quick=False, nuts=False, seed=0):
    steps = 300 if quick else 1000
    hub = dict(n_clusters=K, random_state=seed, num_steps=steps, jit=True,
               n_posterior_draws=20 if quick else 100)
    est = {
        "MM": ck.MM(K, random_state=seed),
        "BCE": ck.BCE(K, random_state=seed),
        "NBCE": ck.NBCE(truncation=10, n_samples=100 if quick else 500,
                        burn_in=100 if quick else 500, n_chains=2, random_state=seed),
        "BCE+alpha-hyperprior": ck.PyroConsensus(user_variants.bce_alpha_hyperprior, **hub),
        "BCE+reliability": ck.PyroConsensus(user_variants.bce_reliability, **hub),
    }
    if nuts:  # BCE's NUTS samples the collapsed spec (theta and z summed out exactly)
        d = 100 if quick else 400
        est["MM(nuts)"] = ck.MM(K, inference="nuts", max_iter=d, n_init=2, random_state=seed)
        est["BCE(nuts)"] = ck.BCE(K, inference="nuts", max_iter=d, n_init=2, random_state=seed)
    return est


def nuts_diagnostics(fitted):
    """Split R-hat and bulk ESS of the label-invariant sum of each NUTS fit's first global
    site (BCE: alpha; MM: pi sums to 1, so its sorted entries), and CPU seconds."""
    import arviz as az

    for name, est in fitted.items():
        info = getattr(est, "mcmc_info_", None)
        if info is None or not hasattr(est, "hub_"):
            continue
        site = "alpha" if "alpha" in est.hub_.all_samples_ else "pi"
        v = np.sort(est.hub_.all_samples_[site], axis=-1)
        stats = [f"{float(az.rhat(v[..., k])):.3f}/{float(az.ess(v[..., k])):.0f}"
                 for k in range(v.shape[-1])]
        form = getattr(est, "nuts_form_", "")
        print(f"{name}: {form} spec, CPU {info['seconds']:.0f} s, divergences "
              f"{info['divergences']}; sorted {site} R-hat/bulk ESS: {', '.join(stats)}")


def main(quick=False, nuts=False, figure=None, seed=0):
    import arviz as az
    import pandas as pd

    X_train, X_test = corrupted_wine(seed)
    for fn in (user_variants.bce_alpha_hyperprior, user_variants.bce_reliability):
        print(f"user code: {fn.__name__}: {user_lines(fn)} lines (model; guide: automatic)")
    ests = estimators(quick, nuts, seed)
    table = ck.compare(ests, X_train, X_test, unknown="missing")
    fitted = table.attrs["estimators"]
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(table.round(4))
    if nuts:
        nuts_diagnostics(fitted)
    with_draws = {n: e.inference_data_ for n, e in fitted.items()
                  if np.asarray(e._log_likelihood_draws()).shape[1] > 1}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        print("\naz.compare (PSIS-LOO on the training rows):")
        with pd.option_context("display.width", 200, "display.max_columns", 20):
            print(az.compare(with_draws).round(3))
    if figure:
        from consensuskit.evaluation.comparison import plot_comparison

        fig = plot_comparison(table)
        fig.savefig(figure, dpi=120)
        print("figure:", figure)
    return table


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--nuts", action="store_true")
    ap.add_argument("--figure", default=None)
    a = ap.parse_args()
    main(a.quick, a.nuts, a.figure)
