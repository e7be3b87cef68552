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
from consensuskit.models.nbce.gibbs import GibbsState, gibbs_nbce, gibbs_step
from consensuskit.models.nbce.priors import get_prior
from consensuskit.models.nbce.spec import log_likelihood_collapsed
from tests._exact_checks import stick_breaking_labels

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
    # no truncation (T=None: the untruncated stick-breaking prior), >= 20 occupied
    "dp_many": dict(prior="tsb", N=150, n_labels=(4, 4, 5, 4, 3), T=None, a0=8.0, b=0.5),
    "dp_hyper": dict(prior="tsb", N=40, n_labels=(3, 3, 4, 3, 2), T=None, hyper=True),
}


def simulate_untruncated(rng, N, n_labels, a0, b, missing=0.0):
    """One draw (z (N,), global label index (N, M)) from the untruncated model: sticks
    ``Beta(1, a0)`` drawn as far as the points need, ``theta_kj ~ Dir(b)`` per occupied
    component, labels ``x_ij ~ Cat(theta_{z_i j})``."""
    z = stick_breaking_labels(rng, N, a0)
    offsets = np.concatenate([[0], np.cumsum(n_labels)[:-1]])
    idx = np.empty((N, len(n_labels)), dtype=np.int64)
    for k in np.unique(z):
        rows = np.flatnonzero(z == k)
        for j, kj in enumerate(n_labels):
            theta = rng.dirichlet(np.full(kj, b))
            idx[rows, j] = offsets[j] + rng.choice(kj, size=rows.size, p=theta)
    if missing:
        drop = rng.random(idx.shape) < missing
        drop[np.arange(N), rng.integers(0, len(n_labels), size=N)] = False
        idx[drop] = -1
    return z, idx


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


def _run_sampler(idx, n_labels, T, prior, a0, b, hyper, n_post, burn_in, thin, seed,
                 log_ratio_error):
    """The sampler's retained counts, label counts, alpha0 and beta (one chain).

    ``log_ratio_error`` != 0 is the negative control: the same iteration with the
    split-merge log acceptance ratios off by that much (splits +, merges -)."""
    if not log_ratio_error:
        out = gibbs_nbce(idx, n_labels, T, prior=prior, alpha0=a0, beta=b,
                         update_hyperparameters=hyper, n_samples=n_post, burn_in=burn_in,
                         thin=thin, n_chains=1, n_jobs=1, random_state=seed,
                         store_counts=True, store_z=False)
        return (out["counts"][0], out["label_counts"][0], out["alpha0"][0], out["beta"][0])
    rs = np.random.RandomState(seed)
    size = 20 if T is None else T
    st = GibbsState(idx, n_labels, rs.randint(0, size - 1, size=idx.shape[0]), size, a0, b,
                    prior, unbounded=T is None)
    st.split_merge_log_ratio_error = log_ratio_error
    keep = []
    for it in range(burn_in + n_post * thin):
        gibbs_step(st, rs, 20, hyper)
        if it >= burn_in and (it - burn_in + 1) % thin == 0:
            keep.append((st.cnt.copy(), st.nlk.T.copy(), st.alpha0, st.beta))
    width = max(c.size for c, _, _, _ in keep)
    counts = np.array([np.pad(c, (0, width - c.size)) for c, _, _, _ in keep])
    lcs = np.array([np.pad(lc, ((0, width - lc.shape[0]), (0, 0))) for _, lc, _, _ in keep])
    return counts, lcs, np.array([k[2] for k in keep]), np.array([k[3] for k in keep])


def sbc_ranks(case, reps, seed, n_post=9, thin=5, burn_in=50, sampler_a0=None,
              sampler_b=None, log_ratio_error=0.0):
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
        if T is None:
            z, idx = simulate_untruncated(rng, N, n_labels, a0, b, c.get("missing", 0.0))
        else:
            z, idx = simulate(rng, prior, N, n_labels, T, a0, b, c.get("missing", 0.0))
        counts, lcs, a0_draws, b_draws = _run_sampler(
            idx, n_labels, T, prior, a0 if sampler_a0 is None else sampler_a0 * a0,
            b if sampler_b is None else sampler_b * b, hyper, n_post, burn_in, thin,
            int(rng.integers(2**31 - 1)), log_ratio_error)
        # untruncated: both padded to a common size whose last component is empty, where
        # the truncated TSB log prior is the untruncated one
        width = counts.shape[1] if T is not None else max(counts.shape[1], z.max() + 2)
        counts = np.pad(counts, ((0, 0), (0, width - counts.shape[1])))
        lcs = np.pad(lcs, ((0, 0), (0, width - lcs.shape[1]), (0, 0)))
        true_counts = np.bincount(z, minlength=width)[None, :]
        L = int(n_labels.sum())
        true_lc = np.zeros((1, width, L))
        rows, cols = np.nonzero(idx >= 0)
        np.add.at(true_lc[0], (z[rows], idx[rows, cols]), 1)
        truth = _statistics(true_counts, true_lc, a0, b, [a0], [b], prior, n_labels, hyper)
        draws = _statistics(counts, lcs, a0, b, a0_draws, b_draws, prior, n_labels, hyper)
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
@pytest.mark.parametrize("case", ["tsb_fixed", "fsd_hyper", "dp_hyper"])
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
    c, rng = CASES["dp_many"], np.random.default_rng(1)  # no truncation: >= 20 occupied
    occ = [np.unique(simulate_untruncated(rng, c["N"], c["n_labels"], c["a0"], c["b"])[0]).size
           for _ in range(300)]
    assert np.mean(occ) >= 20, np.mean(occ)


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
    ("dp_many", dict(sampler_b=1.4)), ("dp_many", dict(sampler_a0=1.5)),
    ("dp_many", dict(log_ratio_error=2.0)), ("tsb_many", dict(log_ratio_error=2.0)),
])
def test_sbc_rejects_a_wrong_sampler(case, control):
    """beta 40% off, alpha0 50% off, or split-merge moves whose log acceptance ratio is
    off by 2 (splits e^2 times too likely to be accepted, merges e^2 times too unlikely):
    the same statistics at the true values flag it."""
    ranks, names, _ = sbc_ranks(case, seed=7, **SLOW, **control)
    p, ps = uniformity_pvalue(ranks, SLOW["n_post"])
    assert p < 1e-3, dict(zip(names, ps))
