"""Held-out rows: a seeded split, and a perplexity with the standard errors a reader needs.

A held-out perplexity is a sample statistic: another draw of held-out rows would
give another number.  :func:`heldout_perplexity` reports that spread (``se``,
over rows) beside the Monte Carlo error of the estimate itself
(``se_monte_carlo``, what ``perplexity(return_se=True)`` returns: importance
sampling or posterior-draw noise, 0 where the likelihood is exact).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sklearn.utils import check_random_state

from consensuskit.data.ensemble import Ensemble

__all__ = ["split_rows", "HeldOutPerplexity", "heldout_perplexity"]


def split_rows(n_rows: int, fraction: float, random_state=0):
    """Sorted (train_rows, test_rows) with ``round(fraction * n_rows)`` rows held out.

    Raises ValueError unless both parts keep at least one row.
    """
    fraction = float(fraction)
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"the held-out fraction must be between 0 and 1; got {fraction}")
    n_test = int(round(fraction * n_rows))
    if not 1 <= n_test <= n_rows - 1:
        raise ValueError(
            f"a held-out fraction of {fraction} of {n_rows} rows holds out {n_test}; "
            "both the training and the held-out part need at least one row")
    perm = check_random_state(random_state).permutation(n_rows)
    return np.sort(perm[n_test:]), np.sort(perm[:n_test])


@dataclass
class HeldOutPerplexity:
    """A perplexity of some rows and its two standard errors (see the module docstring)."""

    perplexity: float
    se: float  # over rows (NaN with fewer than 2 rows)
    se_monte_carlo: float
    n_rows: int
    n_labels: int  # observed labels

    def __str__(self):
        return (f"{self.perplexity:.4f} ± {self.se:.4f} (SE over the {self.n_rows} rows; "
                f"Monte Carlo SE {self.se_monte_carlo:.4f}; {self.n_labels} labels)")


def heldout_perplexity(estimator, X, *, n_groups=20, unknown="error",
                       random_state=0) -> HeldOutPerplexity:
    """Perplexity of the rows ``X`` under a fitted generative ``estimator``, with SEs.

    Parameters
    ----------
    estimator : fitted estimator with ``perplexity(X, return_se=True, unknown=...)``
    X : array-like (n_rows, n_partitions) or Ensemble
        Rows in the label space of ``fit`` (-1 missing).
    n_groups : int
        The SE over rows is a batch-means estimate: the rows are dealt at random
        into ``min(n_groups, n_rows)`` groups, each group's log-likelihood ``T_g``
        over its ``n_g`` observed labels is computed, and the ratio estimator
        ``r = sum T_g / sum n_g`` (log-likelihood per label) gets
        ``se(r)^2 = G / (G - 1) * sum_g (T_g - r n_g)^2 / n^2``; the perplexity's
        SE is ``perplexity * se(r)`` (delta method).
    """
    A = np.asarray(X.decode() if isinstance(X, Ensemble) else X)
    ppl, se_mc = estimator.perplexity(A, return_se=True, unknown=unknown)
    n_rows = A.shape[0]
    values = A.astype(np.float64)
    labels = (~np.isnan(values) & (values >= 0)).sum(axis=1)
    n_labels = int(labels.sum())
    n_groups = min(int(n_groups), n_rows)
    se = float("nan")
    if n_groups >= 2:
        group = check_random_state(random_state).permutation(n_rows) % n_groups
        rate = -np.log(ppl)
        deviations = []
        for g in range(n_groups):
            rows = np.flatnonzero(group == g)
            n_g = int(labels[rows].sum())
            if n_g == 0:
                deviations.append(0.0)
                continue
            total_g = -n_g * np.log(estimator.perplexity(A[rows], unknown=unknown))
            deviations.append(total_g - rate * n_g)
        dev = np.asarray(deviations)
        se = float(ppl * np.sqrt(n_groups / (n_groups - 1) * (dev ** 2).sum()) / n_labels)
    return HeldOutPerplexity(float(ppl), se, float(se_mc), n_rows, n_labels)
