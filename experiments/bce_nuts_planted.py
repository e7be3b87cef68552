"""BCE on planted data: CAVI, SVI and NUTS side by side, and how far CAVI's alpha is from
the NUTS posterior.

Data are simulated from BCE's own spec (``consensuskit.models.bce.model``): K = 3,
alpha = 0.3 per component, beta_jh ~ Dirichlet(0.5), k_j = 3..5, M = 8 base clusterings,
N = 200 training rows and 100 held-out rows.  ``BCE(inference="nuts")`` samples the full
Bayesian spec (alpha ~ Gamma(1, 1), beta ~ Dirichlet(1), theta per row, z enumerated).

Reports split R-hat and bulk ESS (ArviZ) of label-invariant quantities: the log joint
log p(X, theta, alpha, beta) with z summed out, sum(alpha) and the sorted alpha; the
held-out perplexities with their SEs; CAVI's alpha in posterior SDs from the NUTS mean.

    PYTHONPATH=. python experiments/bce_nuts_planted.py [--draws 500] [--chains 4]
"""

import argparse
import time

import numpy as np
import pyro
import torch
from pyro import poutine
from pyro.infer import TraceEnum_ELBO

import consensuskit as ck
from consensuskit.models import bce

torch.set_num_threads(1)


def simulate(seed=0, N=300, M=8, K=3):
    rs = np.random.default_rng(seed)
    n_labels = [int(k) for k in rs.integers(3, 6, size=M)]
    truth = {"alpha": torch.full((K,), 0.3, dtype=torch.float64)}
    truth.update({f"beta_{j}": torch.tensor(rs.dirichlet(np.full(k, 0.5), size=K))
                  for j, k in enumerate(n_labels)})
    pyro.set_rng_seed(seed)
    X = poutine.condition(bce.model, data=truth)(None, n_labels=n_labels, n_clusters=K,
                                                 n_rows=N)
    return X.numpy(), truth, n_labels


def log_joint_draws(est, labels):
    """log p(X, theta, alpha, beta) with z summed out, for every NUTS draw: (C, D)."""
    s = est.hub_.all_samples_
    C, D = s["alpha"].shape[:2]
    kw = est.hub_._kwargs(est.ensemble_)
    elbo = TraceEnum_ELBO(max_plate_nesting=2)
    out = np.empty((C, D))
    for c in range(C):
        for d in range(D):
            data = {k: torch.as_tensor(v[c, d]) for k, v in s.items()}
            cond = poutine.condition(bce.model, data=data)
            out[c, d] = -elbo.loss(cond, lambda *a, **k: None, labels, **kw)
    return out


def main(draws=500, chains=4, seed=0):
    import arviz as az

    X, truth, n_labels = simulate(seed)
    X_train, X_test = X[:200], X[200:]
    rows = {}
    fits = {}
    for name, est in {
        "cavi": ck.BCE(3, random_state=seed),
        "svi": ck.BCE(3, inference="svi", max_iter=300, n_init=1, random_state=seed),
        "nuts": ck.BCE(3, inference="nuts", max_iter=draws, n_init=chains, random_state=seed),
    }.items():
        t0 = time.process_time()
        est.fit(X_train)
        cpu = time.process_time() - t0
        ppl, se = est.perplexity(X_test, return_se=True, unknown="missing")
        rows[name] = (ppl, se, cpu, est.alpha_)
        fits[name] = est
    print(f"planted BCE data: N=200 train / 100 held out, M=8, K=3, true alpha = 0.3 each, "
          f"k_j = {n_labels}")
    print(f"{'inference':<10}{'held-out ppl':>14}{'SE':>10}{'CPU s':>9}   alpha")
    for name, (ppl, se, cpu, alpha) in rows.items():
        print(f"{name:<10}{ppl:>14.4f}{se:>10.4f}{cpu:>9.1f}   {np.round(alpha, 3)}")

    nuts = fits["nuts"]
    labels = torch.as_tensor(nuts.ensemble_.codes)
    s = nuts.hub_.all_samples_
    alpha = s["alpha"]  # (C, D, K)
    lj = log_joint_draws(nuts, labels)
    quantities = {"log_joint": lj, "sum_alpha": alpha.sum(-1)}
    srt = np.sort(alpha, axis=-1)
    for k in range(srt.shape[-1]):
        quantities[f"sorted_alpha[{k}]"] = srt[..., k]
    print(f"\nNUTS: {chains} chains x {draws} draws (+{draws} warm-up), divergences "
          f"{nuts.mcmc_info_['divergences']}, CPU {nuts.mcmc_info_['seconds']:.0f} s")
    print(f"{'quantity':<18}{'split R-hat':>12}{'bulk ESS':>10}{'mean':>10}{'sd':>9}")
    for q, v in quantities.items():
        r = float(az.rhat(v))
        e = float(az.ess(v, method="bulk"))
        print(f"{q:<18}{r:>12.4f}{e:>10.0f}{v.mean():>10.3f}{v.std():>9.3f}")

    cavi_sum = fits["cavi"].alpha_.sum()
    sa = quantities["sum_alpha"]
    print(f"\nCAVI sum(alpha) = {cavi_sum:.3f}; NUTS posterior {sa.mean():.3f} ± {sa.std():.3f} "
          f"-> {(cavi_sum - sa.mean()) / sa.std():+.1f} posterior SDs")
    cs = np.sort(fits["cavi"].alpha_)
    z = (cs - srt.reshape(-1, srt.shape[-1]).mean(0)) / srt.reshape(-1, srt.shape[-1]).std(0)
    print(f"CAVI sorted alpha {np.round(cs, 3)}: {np.round(z, 1)} posterior SDs from the NUTS "
          f"mean of the sorted alpha")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--draws", type=int, default=500)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    main(a.draws, a.chains, a.seed)
