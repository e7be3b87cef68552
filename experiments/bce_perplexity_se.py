"""Is BCE's importance-sampled log-likelihood SE honest?  z-scores against the exact marginal.

Each case draws a small setting (K in 2..4, M in 3..8, k_j in 2..5, alpha_h in {0.05,
0.3, 1}, 30-120 held-out rows, 0 or 10% of labels missing), simulates training and
held-out rows from BCE's spec, fits a parameter point and scores the held-out rows with
the estimator's importance sampler (:func:`consensuskit.models.bce.alpha.row_log_marginals`,
``method="is"``, 200 particles) and exactly (``method="exact"``, the count-vector
recursion).  The parameter points cycle through the regimes that matter: the
mean-field fit (alpha large), the default fit (``"gibbs"``), the truth, and the
mixture limit (the fitted beta with ``alpha`` scaled down to ``~1e-8``, the regime of
issue 24's 30-SE miss).  ``z = (IS total - exact total) / SE``; an honest SE gives
``SD(z)`` near 1 and no ``|z| > 5``.

Usage: python experiments/bce_perplexity_se.py [--cases 200] [--seed 0]
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
from bce_alpha import simulate  # noqa: E402

from consensuskit.data.ensemble import Ensemble  # noqa: E402
from consensuskit.models.bce import cavi as bce_cavi  # noqa: E402
from consensuskit.models.bce.alpha import row_log_marginals  # noqa: E402
from consensuskit.models.bce.estimator import BCE  # noqa: E402

REGIMES = ("meanfield", "gibbs", "truth", "mixture_limit")


def case_point(case: int, seed: int = 0):
    """One (data, fit) case: ``(regime, at, beta, data, rng, info)`` -- the parameter
    point (alpha (K,) tensor, packed beta), the held-out rows' ``LabelData`` and the
    case's generator, advanced past the draws that made them."""
    rng = np.random.default_rng([seed, case])
    K, M, kj = int(rng.integers(2, 5)), int(rng.integers(3, 9)), int(rng.integers(2, 6))
    alpha = float(rng.choice([0.05, 0.3, 1.0]))
    n_held = int(rng.integers(30, 121))
    missing = float(rng.choice([0.0, 0.1]))
    X, a, betas = simulate(rng, 200 + n_held, M, n_clusters=K, n_labels=kj, alpha=alpha,
                           missing=missing)
    regime = REGIMES[case % len(REGIMES)]
    train = Ensemble.from_labels(X[:200])
    held = train.encode(X[200:], unknown="missing")
    cats = train.categories
    if regime == "truth":
        al = a
        bl = [b[:, cats[j]] / b[:, cats[j]].sum(1, keepdims=True) for j, b in enumerate(betas)]
    else:
        est = "meanfield" if regime == "meanfield" else "gibbs"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            m = BCE(K, alpha_estimate=est, n_init=1, n_sweeps=60, max_iter=50,
                    random_state=case).fit(train)
        al, bl = m.alpha_, m.beta_
        if regime == "mixture_limit":
            al = al / al.sum() * 10.0 ** rng.uniform(-9, -6)
    data = bce_cavi.prepare_data(held)
    beta = bce_cavi.pack_beta([np.asarray(b, dtype=np.float64) for b in bl])
    at = torch.as_tensor(np.asarray(al, dtype=np.float64))
    info = {"K": K, "M": M, "kj": kj, "alpha": alpha, "n": n_held, "missing": missing,
            "sum_alpha": float(al.sum())}
    return regime, at, beta, data, rng, info


def one_case(case: int, seed: int = 0, n_samples: int = 200):
    """One (data, fit) case: returns ``(z, regime, info)``."""
    regime, at, beta, data, rng, info = case_point(case, seed)
    exact, _ = row_log_marginals(at, beta, data, 1, None, method="exact")
    gen = torch.Generator().manual_seed(int(rng.integers(2**31 - 1)))
    ll, var = row_log_marginals(at, beta, data, n_samples, gen, method="is")
    se = float(np.sqrt(var.sum()))
    diff = float(ll.sum() - exact.sum())
    z = diff / se if se > 0 else (0.0 if abs(diff) < 1e-9 else np.inf)
    return z, regime, dict(info, diff=diff, se=se)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    zs, regimes = [], []
    print(f"{'case':>4} {'regime':>13} {'K':>2} {'M':>2} {'kj':>2} {'n':>4} {'miss':>4} "
          f"{'sum a':>9} {'IS-exact':>9} {'SE':>8} {'z':>6}")
    for c in range(args.cases):
        z, regime, i = one_case(c, args.seed)
        zs.append(z)
        regimes.append(regime)
        print(f"{c:>4} {regime:>13} {i['K']:>2} {i['M']:>2} {i['kj']:>2} {i['n']:>4} "
              f"{i['missing']:>4} {i['sum_alpha']:9.2e} {i['diff']:9.4f} {i['se']:8.4f} "
              f"{z:6.2f}", flush=True)
    zs, regimes = np.asarray(zs), np.asarray(regimes)
    print(f"\nall {zs.size} cases: SD(z) = {zs.std(ddof=1):.3f}, mean(z) = {zs.mean():+.3f}, "
          f"max |z| = {np.abs(zs).max():.2f}")
    for r in REGIMES:
        s = zs[regimes == r]
        print(f"  {r:>13} ({s.size}): SD {s.std(ddof=1):.3f}, mean {s.mean():+.3f}, "
              f"max |z| {np.abs(s).max():.2f}")


if __name__ == "__main__":
    main()
