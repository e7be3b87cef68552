"""BCE on planted data: CAVI (mean-field and importance-weighted alpha), SVI and NUTS side
by side, and how far each point estimate of alpha is from the NUTS posterior.

Data are simulated from BCE's own spec (``consensuskit.models.bce.model``): K = 3,
alpha = 0.3 per component, beta_jh ~ Dirichlet(0.5), k_j = 3..5, M = 8 base clusterings,
N = 200 training rows and 100 held-out rows.  ``BCE(inference="nuts")`` samples the
collapsed spec (``consensuskit.models.bce.model_collapsed``: alpha ~ Gamma(1, 1),
beta ~ Dirichlet(1), theta and z summed out exactly per row).

Reports split R-hat and bulk ESS (ArviZ) of label-invariant quantities: the log joint
log p(X, alpha, beta) of the collapsed spec, sum(alpha) and the sorted alpha; the held-out
perplexities with their SEs; each point estimate's sum(alpha) and sorted alpha in
posterior SDs from the NUTS posterior mean; CPU per NUTS iteration.

    PYTHONPATH=. python experiments/bce_nuts_planted.py [--draws 1000] [--chains 4]

(``--draws`` is also the number of warm-up steps per chain.)
"""

import argparse
import time

import numpy as np
import pyro
import torch
from pyro import poutine

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
    """log p(X, alpha, beta) of the collapsed spec (theta, z summed out) per draw: (C, D)."""
    s = est.hub_.all_samples_
    C, D = s["alpha"].shape[:2]
    kw = est.hub_._kwargs(est.ensemble_)
    out = np.empty((C, D))
    with torch.no_grad():
        for c in range(C):
            for d in range(D):
                data = {k: torch.as_tensor(v[c, d]) for k, v in s.items()}
                cond = poutine.condition(bce.model_collapsed, data=data)
                out[c, d] = float(poutine.trace(cond).get_trace(labels, **kw).log_prob_sum())
    return out


def main(draws=1000, chains=4, seed=0):
    import arviz as az

    X, truth, n_labels = simulate(seed)
    X_train, X_test = X[:200], X[200:]
    rows = {}
    fits = {}
    for name, est in {
        "cavi": ck.BCE(3, random_state=seed),
        "cavi-iw": ck.BCE(3, alpha_estimate="iw", random_state=seed),
        "svi": ck.BCE(3, inference="svi", max_iter=300, n_init=1, random_state=seed),
        "nuts": ck.BCE(3, inference="nuts", max_iter=draws, n_init=chains, random_state=seed),
    }.items():
        t0, w0 = time.process_time(), time.perf_counter()
        est.fit(X_train)
        cpu, wall = time.process_time() - t0, time.perf_counter() - w0
        ppl, se = est.perplexity(X_test, return_se=True, unknown="missing")
        rows[name] = (ppl, se, cpu, wall, est.alpha_)
        fits[name] = est
    print(f"planted BCE data: N=200 train / 100 held out, M=8, K=3, true alpha = 0.3 each, "
          f"k_j = {n_labels}")
    print(f"{'inference':<10}{'held-out ppl':>14}{'SE':>10}{'CPU s':>9}{'wall s':>9}   alpha")
    for name, (ppl, se, cpu, wall, alpha) in rows.items():
        print(f"{name:<10}{ppl:>14.4f}{se:>10.4f}{cpu:>9.1f}{wall:>9.1f}   "
              f"{np.round(alpha, 3)}")

    nuts = fits["nuts"]
    print(f"\nNUTS sampled the {nuts.nuts_form_} spec ({nuts.n_count_states_} count states)")
    labels = torch.as_tensor(nuts.ensemble_.codes)
    s = nuts.hub_.all_samples_
    alpha = s["alpha"]  # (C, D, K)
    lj = log_joint_draws(nuts, labels)
    quantities = {"log_joint": lj, "sum_alpha": alpha.sum(-1)}
    srt = np.sort(alpha, axis=-1)
    for k in range(srt.shape[-1]):
        quantities[f"sorted_alpha[{k}]"] = srt[..., k]
    info = nuts.mcmc_info_
    n_iter = chains * 2 * draws
    print(f"NUTS: {chains} chains x {draws} draws (+{draws} warm-up), divergences "
          f"{info['divergences']}, accept {np.round(info['accept_prob'], 2)}, CPU "
          f"{info['seconds']:.0f} s = {1e3 * info['seconds'] / n_iter:.0f} ms per iteration")
    print(f"{'quantity':<18}{'split R-hat':>12}{'bulk ESS':>10}{'tail ESS':>10}{'mean':>10}"
          f"{'sd':>9}")
    for q, v in quantities.items():
        r = float(az.rhat(v))
        e = float(az.ess(v, method="bulk"))
        et = float(az.ess(v, method="tail"))
        print(f"{q:<18}{r:>12.4f}{e:>10.0f}{et:>10.0f}{v.mean():>10.3f}{v.std():>9.3f}")

    sa = quantities["sum_alpha"]
    flat = srt.reshape(-1, srt.shape[-1])
    print("\npoint estimates of alpha against the NUTS posterior (in posterior SDs from its mean)")
    for name in ("cavi", "cavi-iw", "svi"):
        a = np.asarray(fits[name].alpha_)
        zs = (a.sum() - sa.mean()) / sa.std()
        zk = (np.sort(a) - flat.mean(0)) / flat.std(0)
        print(f"{name:<8} sum(alpha) = {a.sum():.3f} ({zs:+.1f} SD; posterior {sa.mean():.3f} "
              f"± {sa.std():.3f}); sorted alpha {np.round(np.sort(a), 3)} "
              f"({np.round(zk, 1)} SD; posterior {np.round(flat.mean(0), 3)} "
              f"± {np.round(flat.std(0), 3)})")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    main(a.draws, a.chains, a.seed)
