"""An amortised guide for BCE's spec: memory independent of N, so BCE can stream.

:func:`consensuskit.models.bce.spec.guide_enumerated` and ``guide_meanfield`` keep one
Dirichlet ``q(theta_i) = Dirichlet(gamma_i)`` per row, a ``pyro.param`` of shape (N, K):
streaming SVI over 1e7 rows would hold (and update) all of it.  :class:`AmortizedGuide`
instead computes ``gamma_i`` from the row itself -- a small network maps the row's
one-hot labels (missing labels: all zeros) to the Dirichlet concentration of
``q(theta_i)`` -- so its parameters are the network's weights plus the globals, whatever
N is (the inference network of a variational autoencoder; Kingma & Welling 2014).
``z`` stays enumerated in the model (``TraceEnum_ELBO(max_plate_nesting=2)``), as with
``guide_enumerated``.

The globals ``alpha`` and ``beta_j`` are the model's sample sites when the model is not
given them: ``globals="map"`` puts point masses on them (MAP, the paper's empirical
Bayes with the spec's weak priors), ``globals="meanfield"`` a LogNormal per ``alpha_h``
and a Dirichlet per ``beta_jh``.  Given to the model as tensors, they are not guided.

Use it with :func:`consensuskit.inference.pyro_svi.fit_svi` (full batch or minibatches)
or :func:`~consensuskit.inference.pyro_svi.stream_svi` (row chunks from an iterator or a
``np.memmap``)::

    guide = AmortizedGuide(n_labels, n_clusters=4)
    fit = stream_svi(bce.model, guide, labels_memmap, n_rows=N,
                     model_kwargs=dict(n_labels=n_labels, n_clusters=4))
    with pyro.get_param_store().scope(fit.param_state):
        alpha, betas = guide.global_means()
        gamma = guide.concentration(labels_chunk)      # (n, K)
"""

from __future__ import annotations

import math

import numpy as np
import pyro
import pyro.distributions as dist
import torch
from pyro.distributions import constraints

from consensuskit.models.convention import as_labels, check_labels, rows_plate

__all__ = ["AmortizedGuide", "onehot_rows"]


def onehot_rows(labels, offsets, dtype=None) -> torch.Tensor:
    """One-hot encoding of label rows on the global vocabulary.

    Parameters
    ----------
    labels : LongTensor (n, M)
        Codes ``0..k_j-1`` per column, ``-1`` missing.
    offsets : LongTensor (M + 1,)
        Start of each column's block, ``offsets[j] = sum_{j' < j} k_j'``; the last
        entry is ``V``.

    Returns
    -------
    Tensor (n, V), ``V = sum_j k_j``: 1 at ``offsets[j] + x_ij`` for every observed
    ``x_ij``; a missing label contributes nothing.
    """
    n, M = labels.shape
    if offsets.numel() != M + 1:
        raise ValueError(f"offsets must have M + 1 = {M + 1} entries; got {offsets.numel()}")
    V = int(offsets[-1])
    idx = torch.where(labels >= 0, labels + offsets[:-1], V)  # missing -> spare column V
    out = torch.zeros(n, V + 1, dtype=dtype or torch.get_default_dtype(),
                      device=labels.device)
    out.scatter_(1, idx, 1.0)
    return out[:, :V]


class AmortizedGuide:
    """Guide for :func:`consensuskit.models.bce.spec.model` with no per-row parameters.

    ``q(theta_i) = Dirichlet(g(x_i))`` with ``g`` a network
    ``onehot(x_i) (V) -> Linear(V, hidden) -> softplus -> Linear(hidden, K) -> softplus
    + min_concentration``; ``q(alpha)``, ``q(beta_j)`` as chosen by ``globals``.

    Parameters
    ----------
    n_labels : sequence of int (M,)
        ``k_j`` of the base clusterings (as passed to the model).
    n_clusters : int
        ``K``.
    hidden : int
        Width of the network's hidden layer.
    globals : {"map", "meanfield"}
        Point masses, or LogNormal (``alpha``) and Dirichlet (``beta_j``) factors, for
        the global sites when the model samples them.
    min_concentration : float
        Floor of every concentration of ``q(theta_i)``: keeps its samples inside the
        simplex's interior, where their log-densities and gradients stay finite.
    name : str
        Prefix of the guide's parameters in the param store.
    dtype : torch dtype
        Of the network and the global parameters, hence of the model's computations
        (the model follows its ``alpha``).  float64 by default: ``q(theta_i)`` and the
        model's ``Dirichlet(alpha)`` have concentrations well below 1, whose samples
        underflow to exactly 0 in float32 often enough (Gamma(0.05) below 1e-38 about
        once in 80 draws) that streaming 1e7 rows hit infinite log-densities and NaN
        gradients within a few chunks.

    The parameter count is ``(V + 1) hidden + (hidden + 1) K`` for the network plus
    ``K + K V`` (MAP) or ``2 K + K V`` (mean-field) for the globals: no N anywhere
    (:meth:`n_parameters`).
    """

    def __init__(self, n_labels, n_clusters, *, hidden=32, globals="map",
                 min_concentration=0.05, name="bce_amortized", dtype=torch.float64):
        if globals not in ("map", "meanfield"):
            raise ValueError(f"globals must be 'map' or 'meanfield'; got {globals!r}")
        self.n_labels = np.asarray(n_labels, dtype=np.int64)
        if self.n_labels.ndim != 1 or (self.n_labels < 1).any():
            raise ValueError("n_labels must be a 1-D sequence of positive ints")
        self.K = int(n_clusters)
        if self.K < 1 or int(hidden) < 1:
            raise ValueError("n_clusters and hidden must be positive")
        self.globals = globals
        self.min_concentration = float(min_concentration)
        self.name = name
        self.dtype = dtype
        self.offsets = torch.as_tensor(np.concatenate([[0], np.cumsum(self.n_labels)]))
        V, M = int(self.offsets[-1]), self.n_labels.size
        self.encoder = torch.nn.Sequential(
            torch.nn.Linear(V, int(hidden)), torch.nn.Softplus(),
            torch.nn.Linear(int(hidden), self.K)).to(self.dtype)
        with torch.no_grad():  # start near guide_enumerated's gamma = 1 + M / K
            last = self.encoder[2]
            last.weight.mul_(0.1)
            last.bias.fill_(math.log(math.expm1(1.0 + M / self.K)))

    # -- the guide ----------------------------------------------------------------------
    def __call__(self, labels=None, *, n_labels, n_clusters, n_rows=None, alpha=None,
                 beta=None, subsample_size=None, subsample=None, **model_kwargs):
        """The guide program (same signature as the model; extra model kwargs ignored).

        Sites: ``alpha`` (K,) and ``beta_{j}`` (K, k_j) when the model samples them;
        ``theta`` (n, K) in the ``"rows"`` plate.
        """
        labels, _, M, dev = check_labels(labels, n_labels, n_rows)
        if labels is None:
            raise ValueError("the amortised guide needs labels (it reads q(theta_i) off x_i)")
        if M != self.n_labels.size or not np.array_equal(np.asarray(n_labels), self.n_labels):
            raise ValueError("n_labels differs from the guide's")
        if int(n_clusters) != self.K:
            raise ValueError(f"n_clusters={n_clusters} but the guide was built for {self.K}")
        pyro.module(self.name, self.encoder)
        if alpha is None:
            self._alpha()
        if beta is None:
            self._betas()
        with rows_plate(labels, n_rows, subsample_size, subsample, dev) as (_, x):
            pyro.sample("theta", dist.Dirichlet(self._concentration(x)))

    def _concentration(self, x):
        h = onehot_rows(x, self.offsets.to(x.device), dtype=self.dtype)
        return torch.nn.functional.softplus(self.encoder(h)) + self.min_concentration

    def _alpha(self):
        K, n = self.K, self.name
        if self.globals == "map":
            a = pyro.param(f"{n}.alpha", lambda: torch.ones(K, dtype=self.dtype),
                           constraint=constraints.positive)
            return pyro.sample("alpha", dist.Delta(a, event_dim=1))
        loc = pyro.param(f"{n}.alpha_loc", lambda: torch.zeros(K, dtype=self.dtype))
        scale = pyro.param(f"{n}.alpha_scale", lambda: torch.full((K,), 0.1, dtype=self.dtype),
                           constraint=constraints.positive)
        return pyro.sample("alpha", dist.LogNormal(loc, scale).to_event(1))

    def _betas(self):
        K, n = self.K, self.name
        with pyro.plate("components", K, dim=-1):
            for j, kj in enumerate(self.n_labels):
                kj = int(kj)
                if self.globals == "map":
                    init = self._beta_init(kj)
                    b = pyro.param(f"{n}.beta_{j}", init, constraint=constraints.simplex)
                    pyro.sample(f"beta_{j}", dist.Delta(b, event_dim=1))
                else:
                    c = pyro.param(f"{n}.beta_conc_{j}",
                                   lambda kj=kj: torch.full((K, kj), 10.0, dtype=self.dtype)
                                   * self._beta_init(kj)() * kj,
                                   constraint=constraints.positive)
                    pyro.sample(f"beta_{j}", dist.Dirichlet(c))

    def _beta_init(self, kj):
        """A random start, each row ~ Dirichlet(1) (a symmetric start never separates
        the clusters; one near uniform separates them slowly)."""
        def init():
            e = torch.empty(self.K, kj, dtype=self.dtype).exponential_()
            return e / e.sum(-1, keepdim=True)
        return init

    # -- reading the fit ----------------------------------------------------------------
    @torch.no_grad()
    def concentration(self, labels) -> torch.Tensor:
        """``gamma`` (n, K): the Dirichlet concentration of ``q(theta_i)`` of each row.

        ``labels`` (n, M) as for the model; memberships are ``gamma / gamma.sum(1)``.
        Reads the network's current weights (run under the fit's param-store scope).
        """
        pyro.module(self.name, self.encoder)
        return self._concentration(as_labels(labels))

    @torch.no_grad()
    def global_means(self):
        """``(alpha (K,), [beta_j (K, k_j)])``: the point values, or the factors' means.

        Read from the current param store (run under the fit's param-store scope).
        """
        store, n = pyro.get_param_store(), self.name
        M = self.n_labels.size
        if self.globals == "map":
            return store[f"{n}.alpha"].detach(), [store[f"{n}.beta_{j}"].detach()
                                                   for j in range(M)]
        loc, scale = store[f"{n}.alpha_loc"].detach(), store[f"{n}.alpha_scale"].detach()
        alpha = torch.exp(loc + 0.5 * scale ** 2)
        betas = []
        for j in range(M):
            c = store[f"{n}.beta_conc_{j}"].detach()
            betas.append(c / c.sum(-1, keepdim=True))
        return alpha, betas

    def n_parameters(self, include_globals=True) -> int:
        """Number of scalar parameters (network, and globals as the model samples them)."""
        net = sum(p.numel() for p in self.encoder.parameters())
        if not include_globals:
            return net
        V = int(self.offsets[-1])
        return net + (1 if self.globals == "map" else 2) * self.K + self.K * V
