"""BCE's alpha on data simulated from BCE: mean-field bound vs importance-weighted refinement.

Data: K = 4 consensus clusters, ``alpha_h = 0.3``, ``k_j = 4`` labels per base
clustering, every row of every ``beta_j`` drawn from ``Dirichlet(0.5)``; N = 2000 rows,
the last 500 held out; M in {6, 8, 20}; 5 seeds; simulated from BCE's Pyro spec
(:func:`consensuskit.models.simulation`).

For each case the held-out perplexity of MM, of BCE with ``alpha_estimate="meanfield"``
and with ``"iw"``, and of the true parameters, all computed *exactly* (BCE: the count
enumeration of :func:`consensuskit.models.bce.alpha.exact_log_marginal`; MM's
likelihood is exact), so no importance-sampling error enters the comparison.  The
relative gap to the truth, the fitted ``sum(alpha)`` beside the true 1.2, and the
CPU time of each fit are printed.  ``z(iw-MM)`` is the paired per-row difference of
the held-out log-likelihoods of BCE-iw and MM over its standard error (positive: BCE
better).  ``c*`` (M <= 8) checks that the "iw" alpha is where the *exact* training
likelihood puts it at the fitted beta: ``c* = argmax_c log p(X_train | c alpha, beta)``
(1 means the estimate sits at the exact optimum along its own direction).

Usage: python experiments/bce_alpha.py [--seeds 5] [--M 6 8 20]
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import torch

from consensuskit.data.ensemble import Ensemble
from consensuskit.models import simulate as simulate_spec
from consensuskit.models.bce import cavi as bce_cavi
from consensuskit.models.bce import spec as bce_spec
from consensuskit.models.bce.alpha import exact_log_marginal
from consensuskit.models.bce.estimator import BCE
from consensuskit.models.mm.estimator import MM

K, ALPHA, LABELS, BETA_CONC = 4, 0.3, 4, 0.5


def simulate(rng, n_rows, n_partitions, n_clusters=K, n_labels=LABELS, alpha=ALPHA,
             beta_concentration=BETA_CONC, missing=0.0):
    """Rows simulated from BCE's spec; returns labels (N, M), alpha (K,), betas [(K, k_j)].

    ``alpha`` is fixed; every row of every ``beta_j`` is drawn from the spec's symmetric
    Dirichlet prior (``label_prior=beta_concentration``); the torch stream is seeded from
    ``rng``.  With ``missing`` that fraction of labels (outside column 0) is set to -1.
    """
    a = np.full(n_clusters, alpha)
    X, latents = simulate_spec(bce_spec, n_rows=n_rows, n_labels=[n_labels] * n_partitions,
                               n_clusters=n_clusters, params={"alpha": a},
                               label_prior=beta_concentration,
                               seed=int(rng.integers(2**31 - 1)))
    betas = [latents[f"beta_{j}"] for j in range(n_partitions)]
    if missing:
        drop = rng.random(X.shape) < missing
        drop[:, 0] = False
        X = np.where(drop, -1, X)
    return X, a, betas


def exact_rows(alpha, betas, ensemble: Ensemble):
    """Exact ``log p(x_i | alpha, beta)`` per row, ``betas`` in ``ensemble``'s coding."""
    data = bce_cavi.prepare_data(ensemble)
    beta = bce_cavi.pack_beta([np.asarray(b, dtype=np.float64) for b in betas])
    return exact_log_marginal(torch.as_tensor(alpha, dtype=torch.float64), beta, data).numpy()


def exact_perplexity(alpha, betas, ensemble: Ensemble):
    """exp(-log p(X) / n_observed) with ``betas`` in ``ensemble``'s label coding."""
    return float(np.exp(-exact_rows(alpha, betas, ensemble).sum() / ensemble.n_observed))


def mm_rows(mm, ensemble: Ensemble):
    """MM's ``log p(x_i)`` per row: ``log sum_k pi_k prod_j theta_jk(x_ij)``."""
    lp = np.tile(np.log(mm.weights_), (ensemble.n_samples, 1))
    for j, t in enumerate(mm.theta_):
        c = ensemble.codes[:, j]
        lp += np.where(c[:, None] >= 0, np.log(t[:, np.maximum(c, 0)].T), 0.0)
    return np.logaddexp.reduce(lp, axis=1)


def profile_scale(alpha, betas, ensemble: Ensemble):
    """``argmax_c`` of the exact log-likelihood of ``ensemble`` at ``(c alpha, beta)``."""
    from scipy.optimize import minimize_scalar

    res = minimize_scalar(lambda t: -exact_rows(np.exp(t) * alpha, betas, ensemble).sum(),
                          bounds=(-3.0, 3.0), method="bounded", options={"xatol": 1e-2})
    return float(np.exp(res.x))


def timed_fit(est, X):
    t0 = time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        est.fit(X)
    return est, time.process_time() - t0


def run_case(M, seed):
    rng = np.random.default_rng(seed)
    X, alpha, betas = simulate(rng, 2000, M)
    train, test = X[:1500], X[1500:]
    mf, t_mf = timed_fit(BCE(K, alpha_estimate="meanfield", random_state=seed), train)
    iw, t_iw = timed_fit(BCE(K, alpha_estimate="iw", random_state=seed), train)
    mm, t_mm = timed_fit(MM(K, random_state=seed), train)
    held = mf.ensemble_.encode(test)  # same coding for every model (same training rows)
    cats = mf.ensemble_.categories
    truth = exact_perplexity(alpha, [b[:, cats[j]] for j, b in enumerate(betas)], held)
    diff = exact_rows(iw.alpha_, iw.beta_, held) - mm_rows(mm, held)
    row = {"M": M, "seed": seed, "truth": truth, "MM": mm.perplexity(test),
           "BCE-mf": exact_perplexity(mf.alpha_, mf.beta_, held),
           "BCE-iw": exact_perplexity(iw.alpha_, iw.beta_, held),
           "z": diff.sum() / (diff.std(ddof=1) * np.sqrt(diff.size)),
           "c": profile_scale(iw.alpha_, iw.beta_, iw.ensemble_) if M <= 8 else np.nan,
           "iw_is": iw.perplexity(test, return_se=True),
           "sa_mf": mf.alpha_.sum(), "sa_iw": iw.alpha_.sum(),
           "a_iw": np.sort(iw.alpha_), "t": (t_mm, t_mf, t_iw)}
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--M", type=int, nargs="+", default=[6, 8, 20])
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    head = (f"{'M':>3} {'seed':>4} {'truth':>7} {'MM':>7} {'BCE-mf':>7} {'BCE-iw':>7} "
            f"{'MM%':>6} {'mf%':>6} {'iw%':>6} {'iw IS est':>15} {'sum a':>6} {'mf':>6} "
            f"{'iw':>6}  {'iw sorted alpha':<24} {'c*':>5} {'z(iw-MM)':>8} {'cpu s MM/mf/iw':>16}")
    print(head)
    rows = []
    for M in args.M:
        for seed in range(args.seeds):
            r = run_case(M, seed)
            rows.append(r)
            gap = {k: 100 * (r[k] / r["truth"] - 1) for k in ("MM", "BCE-mf", "BCE-iw")}
            print(f"{M:>3} {seed:>4} {r['truth']:7.4f} {r['MM']:7.4f} {r['BCE-mf']:7.4f} "
                  f"{r['BCE-iw']:7.4f} {gap['MM']:6.2f} {gap['BCE-mf']:6.2f} {gap['BCE-iw']:6.2f} "
                  f"{r['iw_is'][0]:7.4f}±{r['iw_is'][1]:.4f} {K * ALPHA:6.2f} {r['sa_mf']:6.2f} "
                  f"{r['sa_iw']:6.2f}  {np.array2string(r['a_iw'], precision=2):<24} "
                  f"{r['c']:5.2f} {r['z']:8.2f} "
                  f"{'/'.join(f'{t:.1f}' for t in r['t']):>16}", flush=True)
    print("\nsummary (gap to the true parameters' held-out perplexity, %; iw - MM, %)")
    for M in args.M:
        sel = [r for r in rows if r["M"] == M]
        g = {k: [100 * (r[k] / r["truth"] - 1) for r in sel] for k in ("MM", "BCE-mf", "BCE-iw")}
        d = [100 * (r["BCE-iw"] / r["MM"] - 1) for r in sel]
        print(f"M={M:>2}: MM {np.mean(g['MM']):.2f} (max {np.max(g['MM']):.2f})  "
              f"BCE-mf {np.mean(g['BCE-mf']):.2f} (max {np.max(g['BCE-mf']):.2f})  "
              f"BCE-iw {np.mean(g['BCE-iw']):.2f} (max {np.max(g['BCE-iw']):.2f})  "
              f"iw-MM {np.mean(d):+.2f} (max {np.max(d):+.2f}; paired z min "
              f"{min(r['z'] for r in sel):+.2f})")


if __name__ == "__main__":
    main()
