"""The golden cases: every estimator, fixed seeds, small data.

Run ``python -m tests.golden.make`` to (re)write ``tests/golden/golden.npz``; the test
``tests/test_golden.py`` refits every case and compares with the stored values.  A
case's values change only in a commit of its own that says why (an algorithm changed
on purpose); a refactoring must leave them equal to 1e-10 in float64.
"""

from __future__ import annotations

import numpy as np


def _labels(seed=0, n=60, m=6, missing=0.15):
    """Planted three-cluster ensemble with missing entries (-1)."""
    rng = np.random.default_rng(seed)
    z = rng.integers(0, 3, size=n)
    X = np.empty((n, m), dtype=np.int64)
    for j in range(m):
        k = 3 + (j % 2)
        perm = rng.permutation(k)[:3]
        noisy = rng.random(n) < 0.2
        X[:, j] = np.where(noisy, rng.integers(0, k, size=n), perm[z])
    drop = rng.random((n, m)) < missing
    drop[np.arange(n), rng.integers(0, m, size=n)] = False
    X[drop] = -1
    return X


def _features(seed=1, n=60):
    rng = np.random.default_rng(seed)
    z = _labels()[:, 0].clip(0)
    return rng.normal(size=(n, 2)) + z[:, None]


def _bce_spec():
    from consensuskit.models.bce import spec as bce

    return bce.model


def cases():
    """``(table, train, test)``: table maps a case name to (factory, fit keyword arguments)."""
    import consensuskit as ck

    X = _labels()
    F = _features()
    train, test = X[:45], X[45:]
    out = {
        "MM": (lambda: ck.MM(n_clusters=3, random_state=0), {}),
        "MM_kmeans": (lambda: ck.MM(n_clusters=3, init="kmeans", n_init=2, random_state=1), {}),
        "BCE": (lambda: ck.BCE(n_clusters=3, alpha_estimate="meanfield", random_state=0,
                               n_perplexity_samples=50), {}),
        "BCE_gibbs": (lambda: ck.BCE(n_clusters=3, random_state=0, n_sweeps=60), {}),
        "BCE_gibbs_is": (
            lambda: ck.BCE(n_clusters=4, n_init=2, n_sweeps=40, log_likelihood_method="is",
                           random_state=1, n_perplexity_samples=50), {}),
        "BCE_random": (
            lambda: ck.BCE(n_clusters=3, alpha_estimate="meanfield", init="random", n_init=2,
                           max_iter=30, random_state=3, n_perplexity_samples=50),
            {},
        ),
        "BCE_svi": (
            lambda: ck.BCE(n_clusters=3, inference="svi", max_iter=60, n_init=1, random_state=0,
                           n_perplexity_samples=50),
            {},
        ),
        "GBCE": (
            lambda: ck.GBCE(n_clusters=3, alpha_estimate="meanfield", random_state=0,
                            n_perplexity_samples=50),
            {"features": F[:45]},
        ),
        "GBCE_gibbs": (lambda: ck.GBCE(n_clusters=3, random_state=0, n_sweeps=60),
                       {"features": F[:45]}),
        "NBCE_tsb": (
            lambda: ck.NBCE(truncation=6, n_samples=20, burn_in=10, n_chains=2, random_state=0),
            {},
        ),
        "NBCE_fsd": (
            lambda: ck.NBCE(truncation=6, prior="fsd", n_samples=20, burn_in=10, n_chains=2,
                            random_state=0),
            {},
        ),
        "NBCE_vb": (
            lambda: ck.NBCE(truncation=6, prior="fsd", inference="vb", max_iter=50,
                            random_state=0),
            {},
        ),
        "NBCE_cvb": (
            lambda: ck.NBCE(truncation=6, inference="cvb", max_iter=50, random_state=0), {}),
        "PCC": (lambda: ck.PCC(n_clusters=3, random_state=0), {}),
        "KCC": (lambda: ck.KCC(n_clusters=3, random_state=0), {}),
        "CSPA": (lambda: ck.CSPA(n_clusters=3, random_state=0), {}),
        "HGPA": (lambda: ck.HGPA(n_clusters=3, random_state=0), {}),
        "MCLA": (lambda: ck.MCLA(n_clusters=3, random_state=0), {}),
        "HBGF": (lambda: ck.HBGF(n_clusters=3, random_state=0), {}),
        "EAC": (lambda: ck.EAC(n_clusters=3, random_state=0), {}),
        "QMI": (lambda: ck.QMI(n_clusters=3, random_state=0), {}),
        "BCE_iw": (
            lambda: ck.BCE(n_clusters=3, alpha_estimate="iw", random_state=0,
                           n_perplexity_samples=50),
            {},
        ),
        "BCE_svi_minibatch": (
            lambda: ck.BCE(n_clusters=3, inference="svi", batch_size=16, max_iter=20, n_init=1,
                           random_state=0, n_perplexity_samples=50),
            {},
        ),
        "PyroConsensus_bce_svi": (
            lambda: ck.PyroConsensus(_bce_spec(), n_clusters=3, random_state=0, num_steps=40,
                                     n_posterior_draws=3, n_perplexity_samples=50),
            {},
        ),
        "ResamplingConsensus": (
            lambda: ck.ResamplingConsensus(k_range=(2, 4), n_resamples=10, random_state=0), {}),
        "MajorityVote": (lambda: ck.MajorityVote(n_clusters=3, random_state=0), {}),
        "IVC": (lambda: ck.IVC(n_clusters=3, n_init=3, random_state=0), {}),
        "IPVC": (lambda: ck.IPVC(n_clusters=3, n_init=3, random_state=0), {}),
        "MedoidConsensus": (lambda: ck.MedoidConsensus(n_clusters=3, random_state=0), {}),
        "LeastSquaresConsensus": (
            lambda: ck.LeastSquaresConsensus(n_clusters=3, n_init=3, random_state=0), {}),
    }
    return out, train, test


#: fitted attributes recorded when present (arrays or scalars)
ATTRIBUTES = [
    "labels_", "membership_", "lower_bound_", "lower_bounds_", "log_likelihood_",
    "alpha_", "beta_", "theta_", "weights_", "gamma_", "objective_", "n_iter_",
    "n_clusters_",
]

#: further fitted attributes recorded for one case (those of ATTRIBUTES are always tried)
CASE_ATTRIBUTES = {
    "PyroConsensus_bce_svi": ["losses_"],
    "ResamplingConsensus": ["ks_", "area_", "delta_area_", "pac_", "cdf_"],
    "MajorityVote": ["votes_", "reference_"],
    "MedoidConsensus": ["medoid_", "dissimilarity_sums_"],
}


def run_case(name):
    """Fit case ``name`` and return a dict of float64 arrays (its golden values)."""
    import torch

    from tests.seeding import reset_rngs

    reset_rngs(0)
    table, train, test = cases()
    factory, fit_kw = table[name]
    est = factory().fit(train, **fit_kw)
    values = {}
    for attr in ATTRIBUTES + CASE_ATTRIBUTES.get(name, []):
        v = getattr(est, attr, None)
        if v is None:
            continue
        if isinstance(v, torch.Tensor):
            v = v.detach().cpu().numpy()
        try:
            arr = np.asarray(v, dtype=np.float64)
        except (TypeError, ValueError):
            continue
        values[attr] = arr
    if hasattr(est, "perplexity"):
        ppl, se = est.perplexity(test, return_se=True)
        values["heldout_perplexity"] = np.array([ppl, se])
        ppl, se = est.perplexity(train, return_se=True)
        values["train_perplexity"] = np.array([ppl, se])
    if hasattr(est, "predict_proba"):
        values["predict_proba"] = np.asarray(est.predict_proba(test), dtype=np.float64)
    return values
