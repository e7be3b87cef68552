"""NBCE's number of components when the user gives none (``truncation=None``).

TSB with Gibbs needs none (its tables grow: the untruncated Dirichlet process); FSD is a
finite model whose size must be chosen, and the variational families need a fixed size.
The estimator (:class:`consensuskit.models.nbce.estimator.NBCE`) resolves its truncation
from these.
"""

from __future__ import annotations

import numpy as np

__all__ = ["DEFAULT_TRUNCATION", "FSD_TRUNCATION_ALPHA0", "MAX_TRUNCATION_BELOW_N",
           "default_fsd_truncation"]

#: components of the variational engines (VB, CVB) when ``truncation=None``, and the
#: smallest default truncation of FSD with Gibbs (:func:`default_fsd_truncation`)
DEFAULT_TRUNCATION = 20

#: the generous concentration at which :func:`default_fsd_truncation` takes the expected
#: number of clusters (alpha0 has a Gamma(1, 1) prior: P(alpha0 > 10) = 4.5e-5)
FSD_TRUNCATION_ALPHA0 = 10.0


def default_fsd_truncation(n_rows: int) -> int:
    """Components of FSD with Gibbs when ``truncation=None``: twice the expected number
    of clusters of ``n_rows`` points under a Dirichlet process at ``alpha0 = 10``,
    ``2 alpha0 (psi(alpha0 + N) - psi(alpha0))`` (= ``2 sum_{i<N} alpha0 / (alpha0 + i)``,
    about ``2 alpha0 log(1 + N / alpha0)``), and at least :data:`DEFAULT_TRUNCATION`.

    FSD with T components, ``pi ~ Dir(alpha0/T, ..., alpha0/T)``, tends to the Dirichlet
    process as T grows, so the truncation only has to exceed the clusters the posterior
    occupies.  Under the Dirichlet process these are about ``E[K_N | alpha0]`` at the
    posterior's alpha0; a posterior alpha0 of 10 is far in the tail of the Gamma(1, 1)
    prior, and the factor 2 leaves room above the expectation.  Values: 20 up to
    N = 16, 57 at N = 150, 108 at 2,000, 140 at 1e4, 186 at 1e5, 232 at 1e6 (above N
    only below N = 27, where no draw can fill it).  The Gibbs kernels' cost grows with
    the occupied components, not with T (the empty ones share one weight), so the
    generous T costs little; a draw that still fills it warns (``truncation_filled_``).
    """
    from scipy.special import digamma

    a = FSD_TRUNCATION_ALPHA0
    n = max(int(n_rows), 0)
    expected = a * (digamma(a + n) - digamma(a))
    return max(DEFAULT_TRUNCATION, int(np.ceil(2.0 * expected - 1e-9)))


#: truncations up to this are allowed even above the number of rows (small data sets)
MAX_TRUNCATION_BELOW_N = 100
