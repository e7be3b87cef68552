"""Simulation-based calibration (SBC, Talts et al. 2018) of NBCE's collapsed Gibbs sampler.

Each replication draws hyper-parameters (or takes them fixed), a partition z and a label
matrix x from the model (its Pyro spec, :func:`consensuskit.models.simulate`), runs the
sampler on x, and ranks a statistic of the truth among the same statistic of thinned
posterior draws. For a correct sampler every rank is uniform on 0..L. Statistics of z
are evaluated at the TRUE hyper-parameters (a constant of the replication, the same for
truth and draws), so a sampler run with wrong hyper-parameters is judged on what it gets
wrong, not on a different function:

* ``log_lik``   log p(x | z, beta_true)    (sensitive to beta)
* ``log_prior`` log p(z | alpha0_true)     (sensitive to alpha0)
* ``n_occupied`` the number of occupied components
* with hyper-parameter sampling, also the ranks of alpha0 and beta themselves and
  ``log_joint`` log p(x, z | alpha0, beta) at each draw's own values.

Per case the p-value is the Bonferroni-corrected smallest chi-square p-value over
its statistics.  Negative controls: the same sampler with beta 40% off or alpha0
50% off must be rejected (p < 0.001) in the slow suite, while the correct one passes.
The fast version (default suite) runs small sizes in seconds.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from consensuskit.models import simulate as simulate_spec
from consensuskit.models.nbce import spec as nbce
from consensuskit.models.nbce.gibbs import gibbs_nbce
from consensuskit.models.nbce.priors import get_prior
from consensuskit.models.nbce.spec import log_likelihood_collapsed

#: the cases: size of the data, prior, hyper-parameters, what the sampler does
CASES = {
    # fixed hyper-parameters, both priors
    "tsb_fixed": dict(prior="tsb", N=30, n_labels=(3, 3, 4, 3, 2), T=10, a0=1.0, b=0.5),
    "fsd_fixed": dict(prior="fsd", N=30, n_labels=(3, 3, 4, 3, 2), T=10, a0=1.0, b=0.5),
    # a quarter of the labels missing (every row keeps at least one)
    "tsb_missing": dict(prior="tsb", N=30, n_labels=(3, 3, 4, 3, 2), T=10, a0=1.0, b=0.5,
                        missing=0.25),
    # hyper-parameters drawn from their Gamma(1, 1) priors and sampled
    "tsb_hyper": dict(prior="tsb", N=30, n_labels=(3, 3, 4, 3, 2), T=10, hyper=True),
    "fsd_hyper": dict(prior="fsd", N=30, n_labels=(3, 3, 4, 3, 2), T=10, hyper=True,
                      missing=0.15),
    # many occupied components (the truth has >= 8 on average)
    "tsb_many": dict(prior="tsb", N=60, n_labels=(4, 4, 5, 4), T=24, a0=4.0, b=0.5),
    "fsd_many": dict(prior="fsd", N=60, n_labels=(4, 4, 5, 4), T=24, a0=6.0, b=0.5),
}


def simulate(rng, prior, N, n_labels, T, a0, b, missing=0.0):
    """One draw (z (N,), global label index (N, M) with -1 missing) from NBCE's spec.

    Everything comes from ``nbce.model`` except FSD's ``pi``, drawn by the prior's own
    log-scale sampler (``get_prior("fsd").simulate``) and held fixed: a Dirichlet(a0/T)
    draw by gammas underflows for small a0/T (torch clamps the gammas at the smallest
    float, so a draw with all of them underflowed would come out uniform), and SBC
    needs exact prior draws.
    """
    params = {"pi": get_prior("fsd").simulate(rng, T, a0)} if prior == "fsd" else {}
    X, latents = simulate_spec(nbce, n_rows=N, n_labels=n_labels, n_clusters=T,
                               params=params, prior=prior, alpha0=a0, beta=b,
                               seed=int(rng.integers(2**31 - 1)))
    idx = X + np.concatenate([[0], np.cumsum(n_labels)[:-1]])
    if missing:
        drop = rng.random(idx.shape) < missing
        drop[np.arange(N), rng.integers(0, len(n_labels), size=N)] = False
        idx[drop] = -1
    return latents["z"], idx


def _stat_names(hyper):
    base = ["log_lik", "log_prior", "n_occupied"]
    return base + ["alpha0", "beta", "log_joint"] if hyper else base


def _statistics(counts, label_counts, a0, b, a0_draw, b_draw, prior, n_labels, hyper):
    """Statistic vectors over draws (rows of ``counts``, ``label_counts``)."""
    P = get_prior(prior)
    col_of = np.repeat(np.arange(len(n_labels)), n_labels)
    ll = np.array([log_likelihood_collapsed(lc, col_of, n_labels, b) for lc in label_counts])
    lp = np.array([P.log_prior(c, a0) for c in counts])
    out = {"log_lik": ll, "log_prior": lp, "n_occupied": (counts > 0).sum(1).astype(float)}
    if hyper:
        out["alpha0"] = np.asarray(a0_draw, dtype=float)
        out["beta"] = np.asarray(b_draw, dtype=float)
        out["log_joint"] = np.array([
            P.log_prior(c, a) + log_likelihood_collapsed(lc, col_of, n_labels, bb)
            for c, lc, a, bb in zip(counts, label_counts, a0_draw, b_draw)
        ])
    return out


def sbc_ranks(case, reps, seed, n_post=9, thin=5, burn_in=50, sampler_a0=None,
              sampler_b=None):
    """Ranks (reps, n_stats) of the truth's statistics among ``n_post`` draws."""
    c = dict(CASES[case])
    prior, N, n_labels, T = c["prior"], c["N"], np.asarray(c["n_labels"]), c["T"]
    hyper = c.get("hyper", False)
    rng = np.random.default_rng(seed)
    names = _stat_names(hyper)
    ranks = np.empty((reps, len(names)), dtype=np.int64)
    true_occupied = np.empty(reps)
    for r in range(reps):
        if hyper:  # Gamma(shape 1, rate 1), the sampler's hyper-prior
            a0, b = rng.gamma(1.0, 1.0), rng.gamma(1.0, 1.0)
        else:
            a0, b = c["a0"], c["b"]
        z, idx = simulate(rng, prior, N, n_labels, T, a0, b, c.get("missing", 0.0))
        out = gibbs_nbce(
            idx, n_labels, T, prior=prior,
            alpha0=a0 if sampler_a0 is None else sampler_a0 * a0,
            beta=b if sampler_b is None else sampler_b * b,
            update_hyperparameters=hyper, n_samples=n_post, burn_in=burn_in, thin=thin,
            n_chains=1, n_jobs=1, random_state=int(rng.integers(2**31 - 1)),
            store_counts=True, store_z=False,
        )
        true_counts = np.bincount(z, minlength=T)[None, :]
        L = int(n_labels.sum())
        true_lc = np.zeros((1, T, L))
        rows, cols = np.nonzero(idx >= 0)
        np.add.at(true_lc[0], (z[rows], idx[rows, cols]), 1)
        truth = _statistics(true_counts, true_lc, a0, b, [a0], [b], prior, n_labels, hyper)
        draws = _statistics(out["counts"][0], out["label_counts"][0], a0, b, out["alpha0"][0],
                            out["beta"][0], prior, n_labels, hyper)
        for s, name in enumerate(names):
            t, d = truth[name][0], draws[name]
            less = np.sum(d < t - 1e-9 * max(1.0, abs(t)))
            ties = np.sum(np.abs(d - t) <= 1e-9 * max(1.0, abs(t)))
            ranks[r, s] = less + rng.integers(0, ties + 1)  # ties broken at random
        true_occupied[r] = np.count_nonzero(true_counts)
    return ranks, names, true_occupied


def uniformity_pvalue(ranks, n_post):
    """Bonferroni-corrected smallest chi-square p-value of the rank histograms."""
    ps = [stats.chisquare(np.bincount(ranks[:, s], minlength=n_post + 1)).pvalue
          for s in range(ranks.shape[1])]
    return min(1.0, min(ps) * len(ps)), ps


# ---------------------------------------------------------------------------
# fast (default suite)
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("case", ["tsb_fixed", "fsd_hyper"])
def test_sbc_fast(case):
    """The correct sampler: uniform ranks at a small size (seconds)."""
    ranks, _, _ = sbc_ranks(case, reps=120, seed=1, n_post=9)
    p, ps = uniformity_pvalue(ranks, 9)
    assert p > 1e-3, ps


def test_simulated_cases_have_what_they_promise():
    """The "many" cases have >= 8 occupied components on average and the missing
    cases do miss labels (checked on the simulator, cheaply)."""
    rng = np.random.default_rng(0)
    for case in ("tsb_many", "fsd_many"):
        c = CASES[case]
        occ = [np.unique(simulate(rng, c["prior"], c["N"], c["n_labels"], c["T"], c["a0"],
                                  c["b"])[0]).size for _ in range(300)]
        assert np.mean(occ) >= 8, (case, np.mean(occ))
    c = CASES["tsb_missing"]
    _, idx = simulate(rng, c["prior"], c["N"], c["n_labels"], c["T"], 1.0, 0.5, 0.25)
    assert 0.15 < np.mean(idx < 0) < 0.3 and np.all((idx >= 0).any(1))


# ---------------------------------------------------------------------------
# full size (slow suite): every case passes, both negative controls are rejected
# ---------------------------------------------------------------------------
SLOW = dict(reps=1000, n_post=19, thin=5, burn_in=60)


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_sbc_full(case):
    ranks, names, occ = sbc_ranks(case, seed=7, **SLOW)
    p, ps = uniformity_pvalue(ranks, SLOW["n_post"])
    assert p > 1e-3, dict(zip(names, ps))


@pytest.mark.slow
@pytest.mark.parametrize("case,control", [
    ("tsb_fixed", dict(sampler_b=1.4)), ("fsd_fixed", dict(sampler_b=1.4)),
    ("tsb_fixed", dict(sampler_a0=1.5)), ("fsd_fixed", dict(sampler_a0=1.5)),
])
def test_sbc_rejects_a_wrong_sampler(case, control):
    """beta 40% off or alpha0 50% off: the same statistics at the true values flag it."""
    ranks, names, _ = sbc_ranks(case, seed=7, **SLOW, **control)
    p, ps = uniformity_pvalue(ranks, SLOW["n_post"])
    assert p < 1e-3, dict(zip(names, ps))
