"""BCE on planted data: CAVI (mean-field and importance-weighted alpha), SVI and NUTS side
by side, and how far each point estimate of alpha is from the NUTS posterior.

Data are simulated from BCE's own spec (``consensuskit.models.bce.spec.model``): K = 3,
alpha = 0.3 per component, beta_jh ~ Dirichlet(0.5), k_j = 3..5, M = 8 base clusterings,
N = 200 training rows and 100 held-out rows.  NUTS samples the collapsed spec
(``consensuskit.models.bce.spec.model_collapsed``: alpha ~ Gamma(1, 1), beta ~ Dirichlet(1),
theta and z summed out exactly per row) exactly as ``BCE(inference="nuts")`` does (its
hub's settings), but with the chains in ``--jobs`` processes at once (the estimator runs
them one after another); its held-out perplexity is the hub's: exact per draw, averaged
over 200 draws thinned from all chains.

Reports split R-hat and bulk ESS (ArviZ) of label-invariant quantities: the log joint
log p(X, alpha, beta) of the collapsed spec, sum(alpha) and the sorted alpha; the held-out
perplexities with their SEs; each point estimate's sum(alpha) and sorted alpha in
posterior SDs from the NUTS posterior mean; CPU per NUTS iteration.

    PYTHONPATH=. python experiments/bce_nuts_planted.py [--draws 1000] [--chains 4]

(``--draws`` is also the number of warm-up steps per chain.)  ``--draws 20 --chains 2``
runs in about a minute.
"""

import argparse
import time

import numpy as np
import pyro
import torch
from pyro import poutine

import consensuskit as ck
from consensuskit.models.bce import spec as bce
from consensuskit.models.bce.marginal import n_count_states

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


def _one_chain(codes, n_labels, draws, seed, max_tree_depth):
    """One NUTS chain on the collapsed spec, as ``BCE(inference="nuts")`` runs it (its
    hub: float64, jit, target acceptance 0.8); returns (samples site -> (1, D, ...), info)."""
    from consensuskit.inference.pyro_mcmc import fit_nuts

    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)
    samples, info = fit_nuts(bce.model_collapsed, torch.as_tensor(codes),
                             model_kwargs=dict(n_labels=n_labels, n_clusters=3),
                             num_samples=draws, warmup_steps=draws, num_chains=1,
                             max_plate_nesting=1, max_tree_depth=max_tree_depth, seed=seed)
    return {k: v.numpy() for k, v in samples.items()}, info


def start_chains(pool, ens, draws, chains, seed, max_tree_depth=6):
    """Submit ``chains`` NUTS chains to ``pool``; returns their futures."""
    seeds = np.random.default_rng(seed).integers(2**31 - 1, size=chains)
    n_labels = [int(k) for k in ens.n_labels]
    return [pool.submit(_one_chain, ens.codes, n_labels, draws, int(s), max_tree_depth)
            for s in seeds]


def collect_chains(futures):
    """(samples site -> (C, D, ...), per-chain infos) from :func:`start_chains`."""
    out = [f.result() for f in futures]
    return {k: np.concatenate([o[0][k] for o in out]) for k in out[0][0]}, [o[1] for o in out]


def log_joint_draws(samples, labels, kw):
    """log p(X, alpha, beta) of the collapsed spec (theta, z summed out) per draw: (C, D)."""
    C, D = samples["alpha"].shape[:2]
    out = np.empty((C, D))
    with torch.no_grad():
        for c in range(C):
            for d in range(D):
                data = {k: torch.as_tensor(v[c, d]) for k, v in samples.items()}
                cond = poutine.condition(bce.model_collapsed, data=data)
                out[c, d] = float(poutine.trace(cond).get_trace(labels, **kw).log_prob_sum())
    return out


def heldout_perplexity(samples, labels, kw, n_draws=200):
    """Exact per-draw row log-likelihoods of the collapsed spec, averaged over ``n_draws``
    draws thinned evenly from all chains (as the hub scores): (perplexity, its SE)."""
    from consensuskit.inference import pointwise

    flat = {k: torch.as_tensor(v.reshape(-1, *v.shape[2:])) for k, v in samples.items()}
    idx = np.linspace(0, len(flat["alpha"]) - 1, n_draws).round().astype(int)
    draws = {k: v[idx] for k, v in flat.items()}
    roles = pointwise.site_roles(bce.model_collapsed, labels, kw, 3)
    L, V, _ = pointwise.score_rows_draws(bce.model_collapsed, labels, draws, model_kwargs=kw,
                                         roles=roles)
    ll, var = pointwise.combine_draws(L, V)
    n_obs = int((labels >= 0).sum())
    ppl = float(np.exp(-ll.sum() / n_obs))
    return ppl, ppl * float(np.sqrt(var.sum())) / n_obs


def main(draws=1000, chains=4, seed=0, jobs=4):
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    import arviz as az

    from consensuskit.data.ensemble import as_ensemble

    X, truth, n_labels = simulate(seed)
    X_train, X_test = X[:200], X[200:]
    ens = as_ensemble(X_train)
    pool = ProcessPoolExecutor(jobs, mp_context=get_context("spawn"))
    w0 = time.perf_counter()
    futures = start_chains(pool, ens, draws, chains, seed)  # run while the others fit
    rows = {}
    fits = {}
    for name, est in {
        "cavi": ck.BCE(3, random_state=seed),
        "cavi-iw": ck.BCE(3, alpha_estimate="iw", random_state=seed),
        "svi": ck.BCE(3, inference="svi", max_iter=300, n_init=1, random_state=seed),
    }.items():
        t0, w0 = time.process_time(), time.perf_counter()
        est.fit(X_train)
        cpu, wall = time.process_time() - t0, time.perf_counter() - w0
        ppl, se = est.perplexity(X_test, return_se=True, unknown="missing")
        rows[name] = (ppl, se, cpu, wall, est.alpha_)
        fits[name] = est
    kw = dict(n_labels=[int(k) for k in ens.n_labels], n_clusters=3)
    s, infos = collect_chains(futures)
    pool.shutdown()
    wall = time.perf_counter() - w0
    cpu = sum(i["seconds"] for i in infos)
    test = torch.as_tensor(fits["cavi"]._encode_new(X_test, unknown="missing").codes)
    ppl, se = heldout_perplexity(s, test, kw)
    alpha = s["alpha"]  # (C, D, K)
    rows["nuts"] = (ppl, se, cpu, wall, np.sort(alpha, -1).reshape(-1, 3).mean(0))
    print(f"planted BCE data: N=200 train / 100 held out, M=8, K=3, true alpha = 0.3 each, "
          f"k_j = {n_labels}")
    print(f"{'inference':<10}{'held-out ppl':>14}{'SE':>10}{'CPU s':>9}{'wall s':>9}   alpha")
    for name, (ppl, se, cpu, wall, alpha_hat) in rows.items():
        print(f"{name:<10}{ppl:>14.4f}{se:>10.4f}{cpu:>9.1f}{wall:>9.1f}   "
              f"{np.round(alpha_hat, 3)}")
    print("(nuts: alpha is the posterior mean of the sorted alpha; CPU summed over chains, "
          f"{jobs} chain processes)")

    labels = torch.as_tensor(ens.codes)
    lj = log_joint_draws(s, labels, kw)
    quantities = {"log_joint": lj, "sum_alpha": alpha.sum(-1)}
    srt = np.sort(alpha, axis=-1)
    for k in range(srt.shape[-1]):
        quantities[f"sorted_alpha[{k}]"] = srt[..., k]
    n_iter = chains * 2 * draws
    print(f"\nNUTS on the collapsed spec ({n_count_states(len(n_labels), 3)} count states): "
          f"{chains} chains x {draws} draws (+{draws} warm-up), divergences "
          f"{[i['divergences'][0] for i in infos]}, accept "
          f"{[round(i['accept_prob'][0], 2) for i in infos]}, CPU {cpu:.0f} s = "
          f"{1e3 * cpu / n_iter:.0f} ms per iteration")
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
    ap.add_argument("--jobs", type=int, default=4, help="chain processes at a time")
    a = ap.parse_args()
    main(a.draws, a.chains, a.seed, a.jobs)
