"""Is BCE's sum(alpha) determined by data at M = 4?  Population profile and the exact MLE.

With M base clusterings of ``k_j`` labels each, a row is one of ``prod_j k_j`` label
patterns (81 at M = 4, k_j = 3), and the pattern counts are sufficient: the exact log
likelihood of N rows is ``sum_x c_x log p(x | alpha, beta)`` (count-vector recursion,
:func:`consensuskit.models.bce.marginal.collapsed_log_marginal`), cheap at any N.  So
two questions about the default estimate's sum(alpha) at M = 4 (0.7-2.8x the truth on
issue 24's grid) can be answered exactly:

1. **Population profile** (``--profile``): with the true pattern distribution ``p*`` in
   place of the counts (infinite data), ``KL(s) = min over (alpha direction, beta) of
   KL(p* || p(. | alpha, beta))`` subject to ``sum(alpha) = s``, for ``s`` a multiple of
   the true sum.  ``KL(s) = 0`` at the truth; the rows needed before ``s`` is rejected
   (profile likelihood-ratio test at 5%, ``2 N KL >= 3.84``) are ``1.92 / KL(s)``.  A
   KL of 1e-4 nats per row at ``s = 2x`` means ~19,000 rows before twice the true sum
   can be told from the truth even by the exact MLE: genuine flatness, no estimator's
   bias.
2. **Sampling distribution** (``--replicates R``): R data sets of N rows from the truth;
   for each the exact MLE of ``(alpha, beta)`` (L-BFGS from the true values, so the
   global optimum's basin), BCE's default estimate on the same rows, and both
   log-likelihoods: if the default's log-likelihood is within a few units of the MLE's
   while their sums differ, the likelihood cannot tell them apart (flatness); if it is
   far below, the estimator falls short of the MLE (bias to fix).

Cells: M = 4 (and ``--M``), K, alpha per cluster, k_j; beta rows from Dirichlet(0.5) as
in :mod:`experiments.bce_grid` (one draw per cell).

Usage::

    python experiments/bce_alpha_identifiability.py --profile --K 2 3 5 8 --alpha 0.1 0.3 1
    python experiments/bce_alpha_identifiability.py --replicates 4 --N 1000 --K 2 5 \\
        --alpha 0.1 1
"""

from __future__ import annotations

import argparse
import itertools
import time
import warnings

import numpy as np
import torch

from consensuskit.models.bce.estimator import BCE
from consensuskit.models.bce.marginal import collapsed_log_marginal

BETA_CONC = 0.5
RATIOS = (0.35, 0.5, 0.7, 1.4, 2.0, 3.0)


def all_patterns(M, kj):
    """Every label pattern of a row, (kj**M, M) int64."""
    return torch.as_tensor(list(itertools.product(range(kj), repeat=M)), dtype=torch.long)


def pattern_loglik(alpha, log_beta, pats):
    """``log p(x | alpha, beta)`` of every pattern (P,); ``log_beta`` (M, K, kj)."""
    beta = torch.softmax(log_beta, -1)
    M = pats.shape[1]
    lik = beta[torch.arange(M)[None, :], :, pats]  # (P, M, K)
    obs = torch.ones(pats.shape, dtype=torch.bool)
    return collapsed_log_marginal(alpha, lik, obs)


def truth(K, M, kj, alpha, seed):
    rng = np.random.default_rng([K, M, kj, int(100 * alpha), seed])
    beta = rng.dirichlet(np.full(kj, BETA_CONC), size=(M, K))
    return np.full(K, float(alpha)), beta


def maximise(weights, pats, log_alpha0, log_beta0, total=None, max_iter=300):
    """Maximise ``sum_x w_x log p(x)`` over beta and alpha (its direction only when
    ``total`` fixes ``sum(alpha)``); L-BFGS from the given start.  Returns the value,
    alpha and log beta."""
    u = torch.tensor(log_alpha0, dtype=torch.float64, requires_grad=True)
    lb = torch.tensor(log_beta0, dtype=torch.float64, requires_grad=True)
    w = torch.as_tensor(weights, dtype=torch.float64)
    opt = torch.optim.LBFGS([u, lb], max_iter=max_iter, tolerance_grad=1e-10,
                            tolerance_change=1e-13, history_size=20,
                            line_search_fn="strong_wolfe")

    def alpha_of(u):  # log alpha kept in [-20, 8]: a line search that overflows exp gave NaN
        return total * torch.softmax(u, 0) if total is not None else torch.exp(u.clamp(-20, 8))

    def closure():
        opt.zero_grad()
        loss = -(w * pattern_loglik(alpha_of(u), lb, pats)).sum()
        loss.backward()
        return loss

    for _ in range(5):  # LBFGS stops at max_iter or on tolerance; restart a few times
        before = float(closure().detach())
        opt.step(closure)
        if abs(float(closure().detach()) - before) < 1e-10 * max(1.0, abs(before)):
            break
    with torch.no_grad():
        a = alpha_of(u)
        return float((w * pattern_loglik(a, lb, pats)).sum()), a.numpy(), lb.detach().numpy()


def profile(K, M, kj, alpha, seed):
    a, beta = truth(K, M, kj, alpha, seed)
    pats = all_patterns(M, kj)
    lb = np.log(beta)
    p = torch.exp(pattern_loglik(torch.as_tensor(a), torch.as_tensor(lb), pats))
    assert abs(float(p.sum()) - 1) < 1e-9, float(p.sum())
    ent = float((p * torch.log(p)).sum())
    out = {}
    for r in RATIOS:
        v, _, _ = maximise(p, pats, np.log(a), lb, total=r * a.sum())
        out[r] = max(ent - v, 0.0)  # KL(p* || best model with this sum(alpha))
    return out, pats.shape[0]


def replicate(K, M, kj, alpha, seed, N, rep):
    a, beta = truth(K, M, kj, alpha, seed)
    pats = all_patterns(M, kj)
    lb = np.log(beta)
    p = torch.exp(pattern_loglik(torch.as_tensor(a), torch.as_tensor(lb), pats)).numpy()
    rng = np.random.default_rng([rep, N, K, M, kj, int(100 * alpha)])
    counts = rng.multinomial(N, p / p.sum())
    rows = np.repeat(pats.numpy(), counts, axis=0)
    rows = rows[rng.permutation(N)]
    ll_true = float((counts * np.log(p)).sum())
    ll_mle, a_mle, _ = maximise(counts, pats, np.log(a), lb)
    est = BCE(K, random_state=rep)
    t0 = time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        est.fit(rows)
    cpu = time.process_time() - t0
    # the default's log-likelihood of the same rows, exactly, in its own label coding
    ll_d, se_d, _ = est._checked_log_likelihood(est.ensemble_)
    assert se_d == 0.0, "M = 4: the default's rows are scored exactly"
    return {"sa_mle": float(a_mle.sum() / a.sum()), "sa_default": float(est.alpha_.sum()
                                                                        / a.sum()),
            "ll_mle_minus_true": ll_mle - ll_true, "ll_mle_minus_default": ll_mle - ll_d,
            "cpu_default": cpu}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--K", type=int, nargs="+", default=[2, 3, 5, 8])
    ap.add_argument("--M", type=int, nargs="+", default=[4])
    ap.add_argument("--alpha", type=float, nargs="+", default=[0.1, 0.3, 1.0])
    ap.add_argument("--kj", type=int, nargs="+", default=[3])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--replicates", type=int, default=0)
    ap.add_argument("--N", type=int, default=1000)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    cells = list(itertools.product(args.K, args.M, args.alpha, args.kj))
    if args.profile:
        print("population profile: KL(p* || best model with sum(alpha) = r x truth), nats "
              "per row, and rows needed to reject r at 5% (1.92 / KL)")
        print(f"{'K':>2} {'M':>2} {'a':>4} {'kj':>2} {'P':>5} " + " ".join(
            f"{'r=' + str(r):>16}" for r in RATIOS))
        for K, M, alpha, kj in cells:
            t0 = time.process_time()
            kl, P = profile(K, M, kj, alpha, args.seed)
            print(f"{K:>2} {M:>2} {alpha:>4} {kj:>2} {P:>5} " + " ".join(
                f"{kl[r]:8.1e} {1.92 / max(kl[r], 1e-12):7.0f}" for r in RATIOS)
                + f"  ({time.process_time() - t0:.0f} s)", flush=True)
    if args.replicates:
        print(f"\nsampling distribution, N = {args.N}: sum(alpha)/truth of the exact MLE and "
              "of the default; log-lik MLE - truth and MLE - default")
        print(f"{'K':>2} {'M':>2} {'a':>4} {'kj':>2} {'rep':>3} {'MLE sa/t':>8} "
              f"{'dflt sa/t':>9} {'l(MLE)-l(true)':>14} {'l(MLE)-l(dflt)':>14} {'cpu':>5}")
        for (K, M, alpha, kj), rep in itertools.product(cells, range(args.replicates)):
            r = replicate(K, M, kj, alpha, args.seed, args.N, rep)
            print(f"{K:>2} {M:>2} {alpha:>4} {kj:>2} {rep:>3} {r['sa_mle']:8.2f} "
                  f"{r['sa_default']:9.2f} {r['ll_mle_minus_true']:14.2f} "
                  f"{r['ll_mle_minus_default']:14.2f} {r['cpu_default']:5.1f}", flush=True)


if __name__ == "__main__":
    main()
