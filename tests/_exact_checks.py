"""Helpers shared by the exact-enumeration tests of the NBCE sampler."""

import numpy as np
from scipy import stats


def chi2_pvalue(draws, p):
    """Chi-square goodness-of-fit p-value of integer ``draws`` against probabilities ``p``,
    cells with fewer than 5 expected draws pooled into one."""
    f = np.bincount(draws, minlength=p.size)
    expected = p * draws.size
    keep = expected >= 5
    obs, exp = f[keep], expected[keep]
    if expected[~keep].sum() > 0:
        obs, exp = np.append(obs, f[~keep].sum()), np.append(exp, expected[~keep].sum())
    return stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue


def stick_breaking_labels(rng, n_points, alpha0):
    """Labelled z (n_points,) from the untruncated stick-breaking prior: sticks
    ``Beta(1, alpha0)`` drawn as far as the points need."""
    z = np.empty(n_points, dtype=np.int64)
    weights, rest = [], 1.0
    for n in range(n_points):
        u, acc, k = rng.random(), 0.0, 0
        while True:
            if k == len(weights):
                v = rng.beta(1.0, alpha0)
                weights.append(rest * v)
                rest *= 1.0 - v
            acc += weights[k]
            if u < acc:
                break
            k += 1
        z[n] = k
    return z


def scanned_split_merge(error=0.0):
    """A move for the invariance checks: split-merge with two restricted Gibbs scans after
    the launch (Jain & Neal 2004) and near pairs half the time, its log ratio off by
    ``error`` (0 for the real move, non-zero for the negative control)."""
    def move(st):
        st.split_merge_scans = 2
        st.split_merge_local_share = 0.5
        st.split_merge_log_ratio_error = error
        st.split_merge(20)
    return move
