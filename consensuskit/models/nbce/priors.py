"""NBCE's two priors on the mixing weights, as small classes used by every engine.

``TSB`` is the truncated stick-breaking prior (``v_k ~ Beta(1, alpha0)``, ``v_T = 1``,
``pi_k = v_k prod_{h<k} (1 - v_h)``); ``FSD`` the finite symmetric Dirichlet
``pi ~ Dir(alpha0/T, ..., alpha0/T)``.  Each class gives, from the cluster sizes
``N_k`` (T,) of a partition (``pi`` integrated out):

``log_prior(counts, alpha0)``        ``log p(z | alpha0)`` (numpy or torch, real counts
                                      allowed: CVB evaluates it at expected counts);
``conditional_log_weights(counts, alpha0)``
                                      ``log p(z_new = k | z)`` for one more point, (..., T);
``mixing_means(counts, alpha0)``      ``E[pi | z]``, (..., T);
``simulate(rng, T, alpha0)``          one draw of ``pi`` (T,);
``code``                              the branch number of the compiled Gibbs kernels.

Collapsed Gibbs, VB, CVB and the estimator look the prior up by name with
:func:`get_prior` instead of branching on the string themselves.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["PartitionPrior", "TSB", "FSD", "PRIORS", "get_prior"]


def _as_tensor(counts):
    """(tensor, was_numpy): float64 tensor view of numpy counts, tensors unchanged."""
    if isinstance(counts, torch.Tensor):
        return counts, False
    return torch.as_tensor(np.asarray(counts, dtype=np.float64)), True


def _back(value, was_numpy):
    if not was_numpy:
        return value
    out = value.numpy()
    return float(out) if out.ndim == 0 else out


class PartitionPrior:
    """Base class: the prior over partitions of a truncated mixture with T components."""

    name: str = ""
    code: int = -1

    def log_prior(self, counts, alpha0):
        """``log p(z | alpha0)`` from the sizes ``counts`` (..., T); float for numpy input."""
        t, was_np = _as_tensor(counts)
        return _back(self._log_prior(t, torch.as_tensor(alpha0, dtype=t.dtype)), was_np)

    def conditional_log_weights(self, counts, alpha0):
        """``log p(z_new = k | counts)`` (..., T) for one point added to a partition."""
        t, was_np = _as_tensor(counts)
        return _back(self._conditional(t, torch.as_tensor(alpha0, dtype=t.dtype)), was_np)

    def mixing_means(self, counts, alpha0):
        """Posterior mean of the mixing weights ``E[pi | z]`` (..., T)."""
        return np.exp(self.conditional_log_weights(counts, alpha0))

    def simulate(self, rng, truncation, alpha0):
        """One draw of ``pi`` (T,) from the prior with numpy generator ``rng``."""
        raise NotImplementedError

    def __repr__(self):
        return f"{type(self).__name__}()"


class TSB(PartitionPrior):
    """Truncated stick-breaking: ``prod_{k<T} alpha0 B(1 + N_k, alpha0 + N_{>k})``.

    The Beta(1, alpha0) normaliser ``alpha0`` of each stick is kept (it matters when
    alpha0 is sampled).  Not exchangeable: the order of the components matters.
    """

    name = "tsb"
    code = 0

    @staticmethod
    def _tails(n):
        ge = torch.flip(torch.cumsum(torch.flip(n, [-1]), -1), [-1])  # N_{>=k}
        return ge, ge - n  # N_{>=k}, N_{>k}

    def _log_prior(self, n, a0):
        _, gt = self._tails(n)
        lg = torch.lgamma
        terms = torch.log(a0) + lg(1.0 + n) + lg(a0 + gt) - lg(1.0 + a0 + n + gt)
        return terms[..., :-1].sum(-1)

    def _conditional(self, n, a0):
        ge, gt = self._tails(n)
        stick = torch.log1p(n) - torch.log(1.0 + a0 + ge)
        rest = torch.log(a0 + gt) - torch.log(1.0 + a0 + ge)
        before = torch.cumsum(rest, -1) - rest  # sum_{h<k}
        out = stick + before
        out[..., -1] = before[..., -1]  # the last stick is 1
        return out

    def simulate(self, rng, truncation, alpha0):
        v = np.append(rng.beta(1.0, alpha0, size=int(truncation) - 1), 1.0)
        return v * np.concatenate([[1.0], np.cumprod(1.0 - v[:-1])])


class FSD(PartitionPrior):
    """Finite symmetric Dirichlet: ``Gamma(a0)/Gamma(a0+N) prod_k Gamma(a0/T+N_k)/Gamma(a0/T)``."""

    name = "fsd"
    code = 1

    def _log_prior(self, n, a0):
        a = a0 / n.shape[-1]
        lg = torch.lgamma
        return lg(a0) - lg(a0 + n.sum(-1)) + (lg(a + n) - lg(a)).sum(-1)

    def _conditional(self, n, a0):
        a = a0 / n.shape[-1]
        return torch.log(a + n) - torch.log(a0 + n.sum(-1, keepdim=True))

    def posterior_concentration(self, counts, alpha0):
        """Dirichlet parameters of ``p(pi | z)``: ``alpha0/T + N_k``."""
        return alpha0 / counts.shape[-1] + counts

    def simulate(self, rng, truncation, alpha0):
        T = int(truncation)
        # Dir(a/T) with small a/T underflows to exact zeros; draw on the log scale
        # (Gamma(a) = Gamma(a+1) U^(1/a)) and normalise there
        a = alpha0 / T
        logg = np.log(rng.gamma(a + 1.0, size=T)) + np.log(rng.random(T)) / a
        w = np.exp(logg - logg.max())
        return w / w.sum()


#: the priors by name
PRIORS = {"tsb": TSB(), "fsd": FSD()}


def get_prior(prior) -> PartitionPrior:
    """The prior object for ``"tsb"``/``"fsd"`` (or a :class:`PartitionPrior`, returned as is)."""
    if isinstance(prior, PartitionPrior):
        return prior
    try:
        return PRIORS[prior]
    except (KeyError, TypeError):
        raise ValueError(f"prior must be 'tsb' or 'fsd'; got {prior!r}") from None
