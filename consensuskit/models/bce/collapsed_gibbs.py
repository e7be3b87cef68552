"""BCE's (alpha, beta) by Monte Carlo EM on a collapsed Gibbs sampler (the default estimate).

Why not the mean-field bound
----------------------------
The bound that the paper's variational EM maximises is biased in ``alpha``: with a
factorised ``q(theta) q(z)`` it cannot represent how a row's assignments move together,
and pays for it with a larger ``alpha`` (``sum(alpha)`` 40-105 where the truth is
0.2-8 on BCE's own data, issue 24), and ``beta`` is then fitted against that ``alpha``.
The marginal likelihood ``p(X | alpha, beta)`` has no such bias; its maximiser is what
this module estimates.

The method
----------
BCE is latent Dirichlet allocation (LDA) with the rows as documents and every base
clustering its own vocabulary.  We follow the standard recipe for LDA's
hyper-parameters:

* ``theta_i`` and ``beta`` are integrated out and the assignments ``z`` sampled by
  collapsed Gibbs (Griffiths & Steyvers 2004; kernel in
  :mod:`consensuskit.models.bce.gibbs_kernels`), with ``beta_jh ~ Dirichlet(eta)``,
  a symmetric prior whose ``eta`` is estimated too;
* ``alpha`` (asymmetric) and ``eta`` by Minka's fixed point on the sampled counts
  (``eta`` at its limit, found by Newton's method: :func:`minka_eta`), ``alpha``
  computed from count histograms (Wallach 2008; Wallach, Mimno & McCallum 2009,
  "Rethinking LDA: why priors matter", who show that an asymmetric ``alpha`` estimated
  this way is what fits held-out documents)::

      alpha_h <- alpha_h sum_c H_hc [psi(c + alpha_h) - psi(alpha_h)]
                 / sum_v G_v [psi(v + A) - psi(A)]

  (``H_hc``: rows with ``n_ih = c``; ``G_v``: rows with ``V_i = v`` labels;
  ``A = sum(alpha)``);
* the schedule is stochastic EM, then Monte Carlo EM: in the first half of the sweeps
  the hyper-parameters follow each sweep's counts (one draw per row, which is enough to
  move fast while they are far off); in the second half the histograms and label counts
  are pooled over all sweeps since then, and the fixed point is solved on the pool (an
  average over the sampler's draws of the expected complete-data log-likelihood, the
  Monte Carlo E-step), so the final ``alpha``/``eta`` are not one draw's;
* ``beta`` is the posterior mean given the pooled counts,
  ``(c_rh + eta) / (c_jh + k_j eta)``, a point estimate that the row likelihood
  (:func:`consensuskit.models.bce.alpha.exact_log_marginal`) and fold-in use;
* ``alpha`` starts at 1 per cluster (above the estimates the grid of issue 24 needs)
  so that EM approaches it from above: from below, a sampler whose rows sit in one
  cluster each sees only one-cluster rows and EM creeps away from the mixture limit
  ``alpha -> 0`` very slowly (the stuck ``sum(alpha) ~ 0.3`` of ``"iw"``).

Each chain starts from the estimator's initial ``beta`` (k-means on the one-hot rows
by default).  Chains are compared after the fit by an honest criterion: the log
marginal likelihood of (a subset of) the training rows at each chain's estimate,
exact where ``C(M + K, K)`` is small, by importance sampling otherwise (see
:class:`consensuskit.models.bce.estimator.BCE`).

The estimates are returned as a :class:`GibbsResult` whose ``gamma`` is
``alpha + mean over draws of n_i``: normalised, it is the Monte Carlo estimate of the
exact posterior mean ``E[theta_i | x_i]`` (``E[theta_i | z_i] = (alpha + n_i) / (A + V_i)``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from scipy.special import gammaln

from consensuskit.inference.driver import Engine
from consensuskit.models.bce import gibbs_kernels

__all__ = ["GibbsResult", "CollapsedGibbsEM", "FeatureColumns", "minka_alpha", "minka_eta",
           "smallest_int", "ALPHA_RANGE", "ETA_RANGE"]

#: alpha_h is kept in this range; a fixed point that leaves it is clipped and counted
#: (``GibbsResult.n_alpha_clipped``): below, a cluster that lost every label; above, a
#: cluster that takes every label of every row equally (no longer a Dirichlet worth fitting)
ALPHA_RANGE = (1e-6, 1e4)
#: eta likewise (below: columns whose labels are split perfectly by the clusters)
ETA_RANGE = (1e-4, 1e4)


def smallest_int(top: int) -> np.dtype:
    """The smallest signed integer type holding ``-1..top`` (assignments, counts)."""
    for t in (np.int8, np.int16, np.int32):
        if top <= np.iinfo(t).max:
            return np.dtype(t)
    return np.dtype(np.int64)


def minka_alpha(hist, v_hist, alpha, *, n_iter: int = 100, rtol: float = 1e-6):
    """Minka's fixed point for an asymmetric Dirichlet from count histograms.

    Parameters
    ----------
    hist : ndarray (K, C + 1)
        ``hist[h, c]``: (weighted) number of rows with ``c`` labels in cluster ``h``.
    v_hist : ndarray (C + 1,)
        ``v_hist[v]``: (weighted) number of rows with ``v`` observed labels.
    alpha : ndarray (K,), the start.

    Returns
    -------
    alpha : ndarray (K,), clipped to :data:`ALPHA_RANGE`
    n_clipped : int, entries clipped
    """
    # psi(c + a) - psi(a) = sum_{t < c} 1 / (a + t): the update needs only the tail
    # counts T_ht = sum_{c > t} H_hc (and the rows' V_t), no digamma; numba kernel
    hist = np.asarray(hist, dtype=np.float64)
    v_hist = np.asarray(v_hist, dtype=np.float64)
    tail = np.ascontiguousarray(np.cumsum(hist[:, :0:-1], axis=1)[:, ::-1])  # (K, C)
    v_tail = np.ascontiguousarray(np.cumsum(v_hist[:0:-1])[::-1])  # (C,)
    a = np.array(alpha, dtype=np.float64)
    gibbs_kernels.minka_alpha_tails(tail, v_tail, a, int(n_iter), float(rtol), *ALPHA_RANGE)
    n_clipped = int(((a <= ALPHA_RANGE[0]) | (a >= ALPHA_RANGE[1])).sum())
    return a, n_clipped


def minka_eta(clab, ccol, label_column, n_labels, eta, *, n_iter: int = 100,
              rtol: float = 1e-6):
    """Minka's fixed point for the symmetric ``eta`` of every ``beta_jh ~ Dirichlet(eta)``.

    ``clab`` (L, K) label-by-cluster counts (possibly averaged over draws), ``ccol``
    (M, K) their column totals, ``label_column`` (L,) the column of each label,
    ``n_labels`` (M,) ``k_j``::

        eta <- eta sum_{r,h} [psi(c_rh + eta) - psi(eta)]
               / sum_{j,h} k_j [psi(c_jh + k_j eta) - psi(k_j eta)]

    Returns ``(eta, clipped)``.  The fixed point's limit, the maximum-likelihood ``eta``
    given the counts, is found by Newton's method in ``log eta`` (a few steps where the
    iteration above takes 30-100; in a numba kernel,
    :func:`~consensuskit.models.bce.gibbs_kernels.minka_eta_newton`); ``n_iter`` caps its
    steps and ``rtol`` is the relative move at which it stops.
    """
    e = gibbs_kernels.minka_eta_newton(
        np.ascontiguousarray(clab, dtype=np.float64), np.ascontiguousarray(ccol,
                                                                           dtype=np.float64),
        np.ascontiguousarray(n_labels, dtype=np.float64), float(eta), int(n_iter),
        float(rtol), *ETA_RANGE)
    return e, bool(e <= ETA_RANGE[0] or e >= ETA_RANGE[1])


@dataclass
class FeatureColumns:
    """GBCE's features as further columns of every row (weights 1: the generative model).

    ``values`` (N, D) float64 (anything where not observed), ``observed`` (N, D) bool;
    ``center``, ``spread`` (D,) and ``smoothing`` ``nu``: the Gaussians' M-step adds
    ``nu`` pseudo-observations at each feature's overall mean with its overall variance
    (GBCE's eqs. 16-17 with ``feature_smoothing``,
    :func:`consensuskit.models.gbce.cavi.update_gaussian`).
    """

    values: np.ndarray
    observed: np.ndarray
    center: np.ndarray
    spread: np.ndarray
    smoothing: float

    def statistics(self, zf, K):
        """``W, S1, S2`` (K, D): counts, sums of ``o - center`` and of its square per cluster."""
        D = self.values.shape[1]
        W, S1, S2 = np.zeros((K, D)), np.zeros((K, D)), np.zeros((K, D))
        for f in range(D):
            obs = self.observed[:, f]
            z = zf[obs, f]
            d = self.values[obs, f] - self.center[f]
            W[:, f] = np.bincount(z, minlength=K)
            S1[:, f] = np.bincount(z, weights=d, minlength=K)
            S2[:, f] = np.bincount(z, weights=d * d, minlength=K)
        return W, S1, S2

    def gaussians(self, W, S1, S2):
        """``(mu, sigma2, n_floored)`` from the statistics (eqs. 16-17 with smoothing)."""
        den = W + self.smoothing
        safe = np.where(den > 0, den, 1.0)
        delta = S1 / safe
        var = (S2 - S1 * delta + self.smoothing * self.spread[None, :]) / safe
        var = np.where(den > 0, var, self.spread[None, :])  # an empty cluster: the prior's
        tiny = np.finfo(np.float64).tiny
        n_floored = int((var < tiny).sum())
        return self.center[None, :] + delta, np.maximum(var, tiny), n_floored


@dataclass
class ChainState:
    """One chain: the assignments, their counts, the hyper-parameters and the pooled draws."""

    z: np.ndarray
    nrow: np.ndarray
    clab: np.ndarray
    ccol: np.ndarray
    alpha: np.ndarray
    eta: float
    sweep: int = 0
    n_pooled: int = 0
    hist_sum: np.ndarray | None = None
    clab_sum: np.ndarray | None = None
    nrow_sum: np.ndarray | None = None
    n_alpha_clipped: int = 0
    n_eta_clipped: int = 0
    zf: np.ndarray | None = None
    mu: np.ndarray | None = None
    sigma2: np.ndarray | None = None
    feature_sums: np.ndarray | None = None  # pooled (3, K, D) W, S1, S2
    n_variance_floored: int = 0
    rows: np.ndarray | None = None  # the rows sampled so far (None: all)


@dataclass
class GibbsState:
    """The engine's state: the chains still running (one after the audition) and the
    audition's scores (``score`` of each chain's estimate then; empty before)."""

    chains: list
    sweep: int = 0
    audition_scores: list = field(default_factory=list)
    kept_chain: int = 0


@dataclass
class GibbsResult:
    """A chain's estimate (the driver's ``params``), in the CAVI engines' layout.

    ``alpha`` (K,), ``beta`` (K, L) the posterior-mean label distributions, ``gamma``
    (K, N) ``alpha + mean n_i`` (see the module docstring), torch tensors;
    ``eta``; ``n_pooled`` draws pooled; the clip counts of the fixed points (summed over
    the sweeps); ``audition_scores``: every chain's score at the audition, ``kept_chain``
    the one continued; ``log_marginal``: the final estimate's score, filled in by the
    estimator.
    """

    alpha: torch.Tensor
    beta: torch.Tensor
    gamma: torch.Tensor
    eta: float
    n_pooled: int
    n_alpha_clipped: int = 0
    n_eta_clipped: int = 0
    audition_scores: list = field(default_factory=list)
    kept_chain: int = 0
    log_marginal: float = float("nan")
    mu: torch.Tensor | None = None
    sigma2: torch.Tensor | None = None
    n_variance_floored: int = 0


class CollapsedGibbsEM(Engine):
    """Engine (:mod:`consensuskit.inference.driver`): one step is one sweep plus an M-step.

    Several starts cost little more than one: ``n_chains`` chains run side by side for the
    first ``audition`` sweeps, then each chain's current estimate (``alpha``, ``beta`` the
    posterior mean of its counts) is scored by ``score`` (the estimator passes the log
    marginal likelihood of a fixed subset of training rows, with common random numbers)
    and only the best continues to ``n_sweeps``.  By then the stochastic-EM phase has
    found the chain's mode (the starts differ by which labels each cluster takes), not yet
    refined it.

    Memory: the labels are read in place (``codes``, the ensemble's int8 codes); the
    assignments ``z`` (N, M) and row counts ``n_i`` (N, K) are kept in the smallest
    integer types that hold ``K - 1`` and the most labels of a row, and the pooled row
    counts in the smallest that holds their sum over the sweeps; ``gamma`` is filled a
    block of rows at a time.  At K, M < 128 that is 1 + K / M bytes per label for the
    chain plus 2 K / M for the pooled counts (``experiments/bench_memory.py``).

    Parameters
    ----------
    codes : ndarray (N, M) signed int
        Label codes per column (:attr:`~consensuskit.data.ensemble.Ensemble.codes`: ``r``
        in ``0..k_j-1``), -1 where missing; not copied when already a signed integer array.
    offsets : ndarray (M + 1,)
        Column ``j``'s labels are the global labels ``offsets[j] + r``.
    n_clusters : int
    init_beta : callable(rng) -> ndarray (K, L)
        The starting label distributions of a chain.
    n_sweeps : int
        Sweeps of the kept chain; the second half is pooled (module docstring).
    n_chains : int
        Starts.
    audition : int or None
        Sweeps before the chains are compared (None: ``max(10, n_sweeps // 8)``).
    score : callable(alpha Tensor (K,), beta Tensor (K, L)[, mu, sigma2]) -> float, or None
        Higher is better; required with ``n_chains > 1`` (with ``features`` it also
        receives the Gaussians' ``mu``, ``sigma2`` (K, D)).
    max_rows : int or None
        With more rows than this (and no features), the EM sweeps run on a random subset
        of ``max_rows`` rows (the same for every chain); then the other rows are added
        (:func:`~consensuskit.models.bce.gibbs_kernels.add_rows`) and ``final_sweeps``
        sweeps over all rows at the estimated ``alpha``, ``eta`` give ``beta`` and the
        memberships (the last two thirds pooled).  The hyper-parameters need far fewer
        rows than ``beta`` and the memberships; this keeps the cost near one sweep per
        row per iteration of the mean-field fit.  None: all rows throughout.
    final_sweeps : int
    features : FeatureColumns or None
        GBCE: every observed feature is a further column of its row with its own
        assignment (:func:`~consensuskit.models.bce.gibbs_kernels.feature_sweep`), and
        ``mu``, ``sigma2`` are estimated with ``alpha`` (stochastic, then Monte Carlo EM).
    alpha0, eta0 : float
        Starting hyper-parameters (alpha per cluster).
    dtype, device : the torch dtype/device of the returned tensors.
    """

    def __init__(self, codes, offsets, n_clusters: int, init_beta, *, n_sweeps: int = 200,
                 n_chains: int = 1, audition=None, score=None, features=None,
                 max_rows=10_000, final_sweeps: int = 60, alpha0: float = 1.0,
                 eta0: float = 0.5, dtype=torch.float64, device="cpu"):
        codes = np.asarray(codes)
        if codes.dtype.kind != "i":
            raise ValueError(f"codes must be signed integers; got {codes.dtype}")
        self.codes = codes
        self.offsets = np.asarray(offsets, dtype=np.int64)
        self.K = int(n_clusters)
        self.init_beta = init_beta
        self.n_sweeps = int(n_sweeps)
        self.burn_in = self.n_sweeps // 2
        self.n_chains = int(n_chains)
        self.audition = (max(10, self.n_sweeps // 8) if audition is None
                         else int(audition))
        if self.n_chains > 1 and score is None:
            raise ValueError("n_chains > 1 needs a score to choose the chain")
        self.score = score
        self.alpha0, self.eta0 = float(alpha0), float(eta0)
        self.dtype, self.device = dtype, device
        N, M = self.codes.shape
        self.n_labels = np.diff(self.offsets).astype(np.float64)
        self.label_column = np.repeat(np.arange(M), np.diff(self.offsets))
        self.features = features
        self.subsample = features is None and max_rows is not None and N > int(max_rows)
        self.max_rows = None if max_rows is None else int(max_rows)
        self.final_sweeps = int(final_sweeps) if self.subsample else 0
        self.total_sweeps = self.n_sweeps + self.final_sweeps
        self._subset_codes = {}
        self.max_count = int(M + (0 if features is None else features.values.shape[1]))
        # labels per row in the smallest type that holds M (int8 below 128 columns)
        self.V = np.zeros(N, dtype=smallest_int(M))
        for j in range(M):  # a column at a time: no (N, M) temporary
            self.V += self.codes[:, j] >= 0
        if features is not None:
            self.V = self.V + features.observed.sum(1)
        self.v_hist = np.bincount(self.V, minlength=self.max_count + 1).astype(np.float64)
        # the smallest types that hold an assignment, a row count, and a row count summed
        # over every pooled sweep (integer sums: the mean is the same as a float64 sum's)
        self.z_dtype = smallest_int(self.K - 1)
        self.count_dtype = smallest_int(self.max_count)
        self.sum_dtype = smallest_int(self.max_count * self.total_sweeps)

    # ---------------------------------------------------------------- protocol
    def init(self, rng, run: int = 0):
        rows = None
        if self.subsample:
            rows = np.sort(rng.choice(self.codes.shape[0], self.max_rows, replace=False))
        return GibbsState(chains=[self._init_chain(rng, rows) for _ in range(self.n_chains)])

    def step(self, state: GibbsState, rng):
        for chain in state.chains:
            self._step_chain(chain, rng)
        state.sweep += 1
        if len(state.chains) > 1 and state.sweep >= self.audition:
            scores = [self._score(c) for c in state.chains]
            best = int(np.argmax(scores))
            state.audition_scores, state.kept_chain = scores, best
            state.chains = [state.chains[best]]
        return state

    def objective(self, state: GibbsState) -> float:
        """The collapsed log joint ``log p(x, z | alpha, eta)`` of the (first) chain's draw."""
        chain = state.chains[0]
        a = chain.alpha
        A = a.sum()
        C = self.max_count
        hist = np.zeros((self.K, C + 1))
        gibbs_kernels.count_histogram(chain.nrow, C, hist)
        c = np.arange(C + 1)
        rows = float((hist * (gammaln(c[None, :] + a[:, None]) - gammaln(a[:, None]))).sum()
                     + (self._v_hist(chain) * (gammaln(A) - gammaln(c + A))).sum())
        e, kj = chain.eta, self.n_labels[:, None]
        labels = float((gammaln(chain.clab + e) - gammaln(e)).sum()
                       + (gammaln(kj * e) - gammaln(chain.ccol + kj * e)).sum())
        out = rows + labels
        if self.features is not None:  # log N(o | mu_z, sigma2_z) of the assigned features
            fc = self.features
            mu, s2 = chain.mu, chain.sigma2
            zf = np.where(fc.observed, chain.zf, 0)
            f = np.arange(fc.values.shape[1])[None, :]
            m, v = mu[zf, f], s2[zf, f]
            ll = -0.5 * ((fc.values - m) ** 2 / v + np.log(2 * np.pi * v))
            out += float(ll[fc.observed].sum())
        return out

    def result(self, state: GibbsState) -> GibbsResult:
        """The kept chain's estimate.  It uses the state up: the chain's per-row arrays
        (``z``, ``nrow``, ``nrow_sum``) are released (set to None), as the driver drops the
        state after this call; a snapshot a callback kept without copying sees them so."""
        if len(state.chains) > 1:  # stopped before the audition: score them now
            scores = [self._score(c) for c in state.chains]
            state.audition_scores, state.kept_chain = scores, int(np.argmax(scores))
            state.chains = [state.chains[state.kept_chain]]
        chain = state.chains[0]
        if chain.rows is not None:  # stopped on the subset: give every row its draw
            self._add_other_rows(chain, seed=chain.sweep)
        alpha, beta, extra = self._estimate(chain)
        # the run is over and the state spent: drop the chain's (N, M) assignments (and
        # its current row counts when the pooled ones give gamma) before the (K, N)
        # gamma is formed, so that they are never held together (issue 27)
        chain.z = None
        if chain.n_pooled:
            chain.nrow = None
        gamma = self._gamma(chain)
        chain.nrow = chain.nrow_sum = None
        return GibbsResult(alpha=alpha, beta=beta, **extra,
                           n_variance_floored=chain.n_variance_floored,
                           gamma=gamma,
                           eta=float(chain.eta), n_pooled=int(chain.n_pooled),
                           n_alpha_clipped=chain.n_alpha_clipped,
                           n_eta_clipped=chain.n_eta_clipped,
                           audition_scores=list(state.audition_scores),
                           kept_chain=int(state.kept_chain))

    def info(self, state: GibbsState) -> dict:
        c = state.chains[0]
        return {"alpha": c.alpha.copy(), "eta": c.eta, "sweep": state.sweep,
                "n_chains_running": len(state.chains)}

    # ---------------------------------------------------------------- one chain
    def _codes(self, chain: ChainState):
        """The label codes of the rows the chain samples (a cached subset, or all)."""
        if chain.rows is None:
            return self.codes
        key = id(chain.rows)
        if key not in self._subset_codes:
            self._subset_codes = {key: np.ascontiguousarray(self.codes[chain.rows])}
        return self._subset_codes[key]

    def _v_hist(self, chain: ChainState):
        if chain.rows is None:
            return self.v_hist
        return np.bincount(self.V[chain.rows], minlength=self.max_count + 1).astype(np.float64)

    def _init_chain(self, rng, rows=None) -> ChainState:
        codes = self.codes if rows is None else np.ascontiguousarray(self.codes[rows])
        N, M = codes.shape
        L = int(self.offsets[-1])
        beta0 = np.asarray(self.init_beta(rng), dtype=np.float64).reshape(self.K, L)
        z = np.empty((N, M), dtype=self.z_dtype)
        nrow = np.zeros((N, self.K), dtype=self.count_dtype)
        clab = np.zeros((L, self.K), dtype=np.int32)
        ccol = np.zeros((M, self.K), dtype=np.int32)
        log_beta = np.ascontiguousarray(np.log(np.maximum(beta0, 1e-300)).T)
        gibbs_kernels.initial_assignments(codes, self.offsets, log_beta, 0.5,
                                          rng.randint(2**31 - 1), z, nrow, clab, ccol)
        chain = ChainState(z=z, nrow=nrow, clab=clab, ccol=ccol,
                           alpha=np.full(self.K, self.alpha0), eta=self.eta0, rows=rows)
        if self.features is not None:
            self._init_features(chain, rng)
        return chain

    def _init_features(self, chain: ChainState, rng):
        """Gaussians weighted by the rows' label assignments, then one feature draw each."""
        fc = self.features
        share = (chain.nrow + 1e-3) / (chain.nrow + 1e-3).sum(1, keepdims=True)  # (N, K)
        d = np.where(fc.observed, fc.values - fc.center[None, :], 0.0)
        obs = fc.observed.astype(np.float64)
        W, S1, S2 = share.T @ obs, share.T @ d, share.T @ (d * d)
        chain.mu, chain.sigma2, _ = fc.gaussians(W, S1, S2)
        zf = np.full(fc.values.shape, -1, dtype=np.int32)
        first = np.argmax(chain.nrow + rng.random_sample(chain.nrow.shape), axis=1)
        zf[:] = np.where(fc.observed, first[:, None], -1)
        np.add.at(chain.nrow, (np.nonzero(fc.observed)[0], zf[fc.observed]), 1)
        chain.zf = zf
        self._feature_sweep(chain, rng)

    def _step_chain(self, chain: ChainState, rng):
        if chain.sweep >= self.n_sweeps:  # the final sweeps over all rows (max_rows)
            return self._final_step(chain, rng)
        gibbs_kernels.sweep(self._codes(chain), self.offsets, chain.z, chain.nrow, chain.clab,
                            chain.ccol, chain.alpha, chain.eta, self.n_labels,
                            rng.randint(2**31 - 1))
        if self.features is not None:
            self._feature_sweep(chain, rng)
            stats = np.stack(self.features.statistics(chain.zf, self.K))
        chain.sweep += 1
        C = self.max_count
        hist = np.zeros((self.K, C + 1))
        gibbs_kernels.count_histogram(chain.nrow, C, hist)
        if chain.sweep <= self.burn_in:  # stochastic EM: this sweep's draw
            clab, ccol = chain.clab, chain.ccol
            if self.features is not None:
                chain.mu, chain.sigma2, fl = self.features.gaussians(*stats)
                chain.n_variance_floored += fl
        else:  # Monte Carlo EM: every draw since the burn-in
            if chain.hist_sum is None:
                chain.hist_sum = np.zeros_like(hist)
                chain.clab_sum = np.zeros(chain.clab.shape)
                chain.nrow_sum = np.zeros(chain.nrow.shape, dtype=self.sum_dtype)
            chain.hist_sum += hist
            chain.clab_sum += chain.clab
            chain.nrow_sum += chain.nrow
            chain.n_pooled += 1
            hist = chain.hist_sum / chain.n_pooled
            clab = chain.clab_sum / chain.n_pooled
            ccol = self._column_totals(clab)
            if self.features is not None:
                chain.feature_sums = stats if chain.feature_sums is None else (
                    chain.feature_sums + stats)
                chain.mu, chain.sigma2, fl = self.features.gaussians(
                    *(chain.feature_sums / chain.n_pooled))
                chain.n_variance_floored += fl
        chain.alpha, clipped = minka_alpha(hist, self._v_hist(chain), chain.alpha)
        chain.n_alpha_clipped += clipped
        chain.eta, e_clipped = minka_eta(clab, ccol, self.label_column, self.n_labels,
                                         chain.eta)
        chain.n_eta_clipped += int(e_clipped)

    def _final_step(self, chain: ChainState, rng):
        """After ``n_sweeps`` on a subset: add the other rows once, then sweep all of them
        at fixed ``alpha``, ``eta``, pooling ``beta``'s counts and the memberships over the
        last two thirds of ``final_sweeps``."""
        if chain.rows is not None:
            self._add_other_rows(chain, rng.randint(2**31 - 1))
        gibbs_kernels.sweep(self.codes, self.offsets, chain.z, chain.nrow, chain.clab, chain.ccol,
                            chain.alpha, chain.eta, self.n_labels, rng.randint(2**31 - 1))
        chain.sweep += 1
        if chain.sweep > self.n_sweeps + self.final_sweeps // 3:
            if chain.clab_sum is None:
                chain.clab_sum = np.zeros(chain.clab.shape)
                chain.nrow_sum = np.zeros(chain.nrow.shape, dtype=self.sum_dtype)
            chain.clab_sum += chain.clab
            chain.nrow_sum += chain.nrow
            chain.n_pooled += 1

    def _add_other_rows(self, chain: ChainState, seed: int):
        """Extend a chain on a row subset to every row (their first draws conditional on
        the subset's counts); the pooled draws restart."""
        N, M = self.codes.shape
        z = np.full((N, M), -1, dtype=self.z_dtype)
        nrow = np.zeros((N, self.K), dtype=self.count_dtype)
        z[chain.rows], nrow[chain.rows] = chain.z, chain.nrow
        rest = np.ones(N, dtype=bool)
        rest[chain.rows] = False
        rest = np.flatnonzero(rest)
        gibbs_kernels.add_rows(self.codes, self.offsets, rest, z, nrow, chain.clab, chain.ccol,
                               chain.alpha, chain.eta, self.n_labels, seed)
        chain.z, chain.nrow, chain.rows = z, nrow, None
        chain.n_pooled, chain.clab_sum, chain.nrow_sum = 0, None, None

    def _feature_sweep(self, chain: ChainState, rng):
        fc = self.features
        gibbs_kernels.feature_sweep(fc.values, fc.observed, chain.zf, chain.nrow, chain.mu,
                                    chain.sigma2, chain.alpha, rng.randint(2**31 - 1))

    def _score(self, chain: ChainState) -> float:
        alpha, beta, extra = self._estimate(chain)
        return float(self.score(alpha, beta, *extra.values()))

    def _gamma(self, chain: ChainState, block_rows: int = 65536):
        """``alpha + mean n_i`` as a (K, N) tensor of the engine's dtype, filled a block of
        rows at a time (no (N, K) float64 temporaries): the pooled draws' mean, or the
        current draw before the pooled half."""
        N = (chain.nrow_sum if chain.n_pooled else chain.nrow).shape[0]
        out = np.empty((self.K, N), dtype=torch.empty(0, dtype=self.dtype).numpy().dtype)
        for start in range(0, N, block_rows):
            rows = slice(start, min(N, start + block_rows))
            if chain.n_pooled:
                mean = chain.nrow_sum[rows] / chain.n_pooled
            else:
                mean = chain.nrow[rows].astype(np.float64)
            out[:, rows] = (mean + chain.alpha).T
        return torch.as_tensor(out, device=self.device)

    def _estimate(self, chain: ChainState):
        """``(alpha, beta (K, L)`` tensors, ``{"mu", "sigma2"}`` with features) of a chain:
        pooled draws, or the current one before the pooled half."""
        if chain.n_pooled:
            clab = chain.clab_sum / chain.n_pooled
        else:
            clab = chain.clab.astype(np.float64)
        ccol = self._column_totals(clab)
        e = chain.eta
        beta = (clab + e) / (ccol[self.label_column]
                             + self.n_labels[self.label_column, None] * e)
        t = dict(dtype=self.dtype, device=self.device)
        extra = {}
        if self.features is not None:
            extra = {"mu": torch.as_tensor(chain.mu.copy(), **t),
                     "sigma2": torch.as_tensor(chain.sigma2.copy(), **t)}
        return (torch.as_tensor(chain.alpha.copy(), **t),
                torch.as_tensor(np.ascontiguousarray(beta.T), **t), extra)

    def _column_totals(self, clab):
        """``c_jh = sum_{r in column j} c_rh`` -> (M, K)."""
        out = np.zeros((self.codes.shape[1], self.K))
        np.add.at(out, self.label_column, clab)
        return out
