"""GBCE's default estimate on data simulated from GBCE's spec (issue 24, must-show 4).

Data (``--settings K,M,D``, default 3,4,3): K clusters, M base clusterings with 3
labels each (``beta`` rows from Dirichlet(0.5)), D features with ``mu_hf = sep *
[f == h]`` (with D < K the last K - D clusters share the features' mean 0) and
``sigma2 = 1``, ``alpha_h = alpha``; N training rows and 500 held out
(:func:`consensuskit.models.gbce.spec.simulate`).  Per cell (alpha, sep) and seed, for
GBCE's default (``"gibbs"``), GBCE's mean-field fit (the previous default) and BCE's
default on the labels alone:

* ``ARI``: adjusted Rand index of the hard consensus of the training rows against the
  true dominant cluster ``argmax theta_i``; ``oracle ARI``: the same for the exact
  posterior mean ``E[theta_i | x_i, o_i]`` at the true parameters (count-vector
  recursion over labels and features);
* ``ppl/BCE``: held-out *label* perplexity (features integrated out, exact) of the GBCE
  fit over BCE's;
* ``sa/true``: fitted ``sum(alpha)`` over the truth;
* CPU seconds of each fit and GBCE's over BCE's.

Usage: python experiments/gbce_grid.py [--alpha 0.3 1] [--sep 1.5 4] [--seeds 0 1]
    [--N 1000] [--settings 3,4,3 5,10,5 4,8,2] [--no-meanfield]
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time
import warnings

import numpy as np
import torch
from sklearn.metrics import adjusted_rand_score

sys.path.insert(0, os.path.dirname(__file__))

from consensuskit.models.bce import cavi as bce_cavi  # noqa: E402
from consensuskit.models.bce.alpha import exact_log_marginal  # noqa: E402
from consensuskit.models.bce.estimator import BCE  # noqa: E402
from consensuskit.models.bce.marginal import (  # noqa: E402
    collapsed_log_marginal,
    posterior_mean_membership,
)
from consensuskit.models.gbce import spec as gbce_spec  # noqa: E402
from consensuskit.models.gbce.estimator import GBCE  # noqa: E402
from consensuskit.models.gbce.selection import row_columns  # noqa: E402

KJ, N_HELD = 3, 500
K = M = D = None  # the setting being run (main sets them)


def timed(est, X, **kw):
    t0 = time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        est.fit(X, **kw)
    return est, time.process_time() - t0


def label_loglik(est, X_held):
    held = est.ensemble_.encode(X_held, unknown="missing")
    data = bce_cavi.prepare_data(held)
    ll = exact_log_marginal(torch.as_tensor(est.alpha_), bce_cavi.pack_beta(est.beta_), data)
    return float(ll.sum()), held.n_observed


def oracle_labels(X, F, alpha, betas):
    """argmax of the exact ``E[theta_i | x_i, o_i]`` at the true parameters."""
    offsets = np.concatenate([[0], np.cumsum([KJ] * M)])
    codes = X + offsets[:-1][None, :]
    beta = torch.as_tensor(np.concatenate(betas, 1))
    a = torch.as_tensor(alpha)
    lik, obs, _ = row_columns(codes, offsets, F, ~np.isnan(F), a, beta,
                              torch.as_tensor(MU), torch.ones(K, D, dtype=torch.float64))
    _, post = collapsed_log_marginal(a, lik, obs, return_posterior=True)
    return posterior_mean_membership(a, post, lik.shape[1]).argmax(1).numpy()


MU = None


def run(alpha, sep, seed, N, meanfield=True):
    global MU
    MU = sep * np.eye(K, D)
    params = {"alpha": np.full(K, alpha), "mu": MU, "sigma2": np.ones((K, D))}
    X, F, lat = gbce_spec.simulate(n_rows=N + N_HELD, n_labels=[KJ] * M, n_clusters=K,
                                   n_features=D, params=params, seed=1000 * seed + int(10 * sep),
                                   label_prior=0.5)
    betas = [lat[f"beta_{j}"] for j in range(M)]
    truth = lat["theta"][:N].argmax(1)
    tr, te = slice(0, N), slice(N, None)
    out = {"oracle": adjusted_rand_score(truth, oracle_labels(X[tr], F[tr], params["alpha"],
                                                              betas))}
    bce, t_b = timed(BCE(K, random_state=seed), X[tr])
    g, t_g = timed(GBCE(K, random_state=seed), X[tr], features=F[tr])
    fits = [("gibbs", g, t_g), ("BCE", bce, t_b)]
    if meanfield:
        gm, t_gm = timed(GBCE(K, alpha_estimate="meanfield", random_state=seed), X[tr],
                         features=F[tr])
        fits.insert(1, ("meanfield", gm, t_gm))
    ll_b, n = label_loglik(bce, X[te])
    for name, est, t in fits:
        ll, _ = label_loglik(est, X[te])
        out[name] = {"ari": adjusted_rand_score(truth, est.labels_),
                     "ppl": float(np.exp(-(ll - ll_b) / n)),
                     "sa": float(est.alpha_.sum() / (K * alpha)), "cpu": t}
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--alpha", type=float, nargs="+", default=[0.3, 1.0])
    ap.add_argument("--sep", type=float, nargs="+", default=[1.5, 4.0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--N", type=int, default=1000)
    ap.add_argument("--settings", nargs="+", default=["3,4,3"], metavar="K,M,D")
    ap.add_argument("--no-meanfield", action="store_true")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    global K, M, D
    nan = {"ari": float("nan"), "ppl": float("nan"), "sa": float("nan"), "cpu": float("nan")}
    print(f"{'K,M,D':>7} {'alpha':>5} {'sep':>4} {'sd':>2} {'orARI':>6} | {'ARI g/mf/BCE':>17} | "
          f"{'ppl/BCE g/mf':>13} | {'sa/true g/mf/BCE':>17} | {'cpu g/mf/BCE':>15} "
          f"{'g/BCE':>5}")
    for setting, alpha, sep, seed in itertools.product(args.settings, args.alpha, args.sep,
                                                       args.seeds):
        K, M, D = (int(v) for v in setting.split(","))
        r = run(alpha, sep, seed, args.N, meanfield=not args.no_meanfield)
        g, m, b = r["gibbs"], r.get("meanfield", nan), r["BCE"]
        print(f"{setting:>7} {alpha:>5} {sep:>4} {seed:>2} {r['oracle']:6.3f} | {g['ari']:5.3f} "
              f"{m['ari']:5.3f} {b['ari']:5.3f} | {g['ppl']:6.4f} {m['ppl']:6.4f} | "
              f"{g['sa']:5.2f} {m['sa']:5.2f} {b['sa']:5.2f} | {g['cpu']:4.1f} {m['cpu']:5.1f} "
              f"{b['cpu']:4.1f} {g['cpu'] / b['cpu']:5.2f}", flush=True)


if __name__ == "__main__":
    main()
