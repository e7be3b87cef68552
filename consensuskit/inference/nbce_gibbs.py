"""Collapsed Gibbs sampling for NBCE (paper section 5.1, eq. 5), compiled with numba.

The sampler works on the collapsed space: mixing weights ``pi`` and cluster
parameters ``theta*`` are integrated out (see
:func:`consensuskit.models.nbce.collapsed_log_joint`) and only the indicators
``z`` are sampled.  The conditional of ``z_i`` given the rest is

    p(z_i = k | z_-i, x) ∝ p(z_i = k | z_-i) * prod_{j observed in row i}
                            (beta + N^{-i}_{k, x_ij}) / (k_j beta + N^{-i}_{k j})

where ``N_{kj}`` counts the points of cluster k that column j labels (with no
missing labels it is the cluster size; the paper's eq. 5 writes a product over
all ``j_m``, but only the observed label's factor depends on ``k`` — this is the
correct Dirichlet-multinomial ratio) and

    TSB:  p(z_i=k | z_-i) = (1 + N_k)/(1 + a0 + N_{>=k}) prod_{h<k} (a0 + N_{>h})/(1 + a0 + N_{>=h})
          (for the last component k = T only the product: its stick is 1)
    FSD:  p(z_i=k | z_-i) ∝ a0/T + N_k.

Numerical safety and speed
--------------------------
The weights are computed in *rescaled linear space*: each factor
``(beta + N_{k,x_ij}) / (k_j beta + N_{kj})`` and each prior factor is at most 1,
so nothing overflows, and every 16 columns the running weights are divided by
their maximum when it falls below 1e-100, so M can be in the thousands without
underflow (tested at M = 1000 against the log-space collapsed joint).  The
sampler keeps ``num[l, k] = beta + N_{kl}`` (global label l, contiguous over k)
and ``invden[j, k] = 1/(k_j beta + N_{kj})``; moving one point changes ``2M``
entries of each.  When at least half of the components are occupied, the
weights of all ``T`` are computed contiguously (vectorised, :func:`_weights`).
Otherwise the compact kernel (:func:`_compact`) does ``M`` multiply passes over
the occupied components plus one empty representative (all empty components
share the likelihood factor ``prod_j 1/k_j``); FSD's empty components then share
one summed weight (a new cluster picks one uniformly), and TSB's empty
components after the last occupied one have geometric prior weights, sampled
exactly as a truncated geometric.  No logarithm and no exponential per point.
Missing labels simply skip their column.

Hyper-parameters
----------------
``alpha0`` and ``beta`` are either fixed or updated once per sweep by
univariate slice sampling (stepping out, on the log scale) from their
conditional given ``z``:  ``p(alpha0 | z) ∝ p(z | alpha0) Gamma(alpha0; a, b)``
and ``p(beta | x, z) ∝ p(x | z, beta) Gamma(beta; a, b)``, with Gamma(shape=1,
rate=1) priors by default (``hyper_prior``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numba
import numpy as np
from scipy.special import gammaln
from sklearn.utils import check_random_state

from ..models.nbce import PRIORS, log_prior_partition
from .driver import Engine
from .driver import fit as drive

__all__ = [
    "GibbsState",
    "Chain",
    "GibbsChains",
    "gibbs_step",
    "gibbs_nbce",
    "conditional_probs",
    "co_clustering",
    "point_consensus",
    "draw_counts",
]

_PRIOR_CODE = {"tsb": 0, "fsd": 1}


# ---------------------------------------------------------------------------
# compiled kernels
# ---------------------------------------------------------------------------
@numba.njit(cache=True)
def _seed(s):
    np.random.seed(s)  # noqa: NPY002 - numba's own per-thread generator


_TINY = 1e-100  # rescale the running weights when their maximum drops below this
_BLOCK = 16  # columns between underflow checks


@numba.njit(cache=True, fastmath=True)
def _occupied_likelihood(n, idx, num, invden, occ, n_occ, rep, lik):
    """Rescaled likelihood of row ``n``'s labels under the occupied components.

    ``occ[:n_occ]`` are the occupied components; ``rep >= 0`` appends one empty
    component standing for all of them.  Fills ``lik[:nl]`` (a common factor
    rescales them whenever their maximum drops below ``_TINY``) and returns ``nl``.
    """
    M = idx.shape[1]
    nl = n_occ
    if rep >= 0:
        occ[nl] = rep
        nl += 1
    for j in range(nl):
        lik[j] = 1.0
    for m0 in range(0, M, _BLOCK):
        for m in range(m0, min(M, m0 + _BLOCK)):
            l = idx[n, m]
            if l >= 0:
                for j in range(nl):
                    k = occ[j]
                    lik[j] *= num[l, k] * invden[m, k]
        if m0 + _BLOCK < M:
            mx = 0.0
            for j in range(nl):
                if lik[j] > mx:
                    mx = lik[j]
            if mx < _TINY:
                sc = 1.0 / mx
                for j in range(nl):
                    lik[j] *= sc
    return nl


@numba.njit(cache=True, fastmath=True)
def _weights(n, idx, cnt, num, invden, inv1a, a0, afsd, prior, w, occ, lik):
    """Unnormalised p(z_n = k | z_-n, x) for all k into ``w`` (point n already removed).

    Linear space with rescaling: every factor is <= 1, and every ``_BLOCK``
    columns the likelihood factors are divided by their maximum if it fell below
    ``_TINY``, so no weight that matters can underflow, for any number of columns.
    The likelihood is computed only for the occupied components plus one empty
    representative: all empty components share the same factor
    ``prod_j beta / (k_j beta)``.  ``occ`` and ``lik`` are (T,) work buffers.
    """
    K = w.shape[0]
    M = idx.shape[1]
    if prior == 0:  # TSB
        ge = 0
        for k in range(K):
            ge += cnt[k]
        acc = 1.0
        for k in range(K - 1):
            nk = cnt[k]
            r = inv1a[ge]
            w[k] = acc * (1.0 + nk) * r
            acc *= (a0 + (ge - nk)) * r
            ge -= nk
        w[K - 1] = acc
    else:  # FSD (the constant 1/(alpha0 + N - 1) is dropped)
        for k in range(K):
            w[k] = afsd + cnt[k]
    n_occ = 0
    rep = -1
    for k in range(K):
        if cnt[k] > 0:
            occ[n_occ] = k
            n_occ += 1
        elif rep < 0:
            rep = k
    if 2 * n_occ >= K:  # dense path: contiguous over all components (vectorises)
        for k in range(K):
            lik[k] = 1.0
        for m0 in range(0, M, _BLOCK):
            for m in range(m0, min(M, m0 + _BLOCK)):
                l = idx[n, m]
                if l >= 0:
                    nrow = num[l]
                    irow = invden[m]
                    for k in range(K):
                        lik[k] *= nrow[k] * irow[k]
            if m0 + _BLOCK < M:
                mx = 0.0
                for k in range(K):
                    if lik[k] > mx:
                        mx = lik[k]
                if mx < _TINY:
                    s = 1.0 / mx
                    for k in range(K):
                        lik[k] *= s
        for k in range(K):
            w[k] *= lik[k]
        return
    nl = _occupied_likelihood(n, idx, num, invden, occ, n_occ, rep, lik)
    if rep >= 0:
        e = lik[nl - 1]
        for k in range(K):
            if cnt[k] == 0:
                w[k] *= e
    for j in range(n_occ):
        w[occ[j]] *= lik[j]


@numba.njit(cache=True)
def _move(n, k, delta, idx, cnt, nlk, num, ckm, invden, beta, Jbeta):
    """Add (delta=+1) or remove (delta=-1) point n to/from cluster k."""
    M = idx.shape[1]
    cnt[k] += delta
    for m in range(M):
        l = idx[n, m]
        if l >= 0:
            c = nlk[l, k] + delta
            nlk[l, k] = c
            num[l, k] = beta + c
            cm = ckm[m, k] + delta
            ckm[m, k] = cm
            invden[m, k] = 1.0 / (Jbeta[m] + cm)


@numba.njit(cache=True, fastmath=True)
def _compact(n, idx, cnt, num, invden, inv1a, a0, afsd, prior, w, occ, lik):
    """Compact form of the conditional of z_n, for when few components are occupied.

    Returns ``(ns, tail, last, n_empty)``: slot weights ``w[:ns]`` and the summed
    weight ``tail`` of the remaining components.  TSB: slot s is component s for
    s <= last (the last occupied component; interior empty components included)
    and the tail holds the empty components after ``last``, whose prior weights
    are geometric: component ``last+1+j`` has share ``(1-q) q^j`` of the tail and
    the final component ``q^t`` (``q = alpha0/(1+alpha0)``, ``t = T-2-last``).
    FSD: slots are the occupied components ``occ[:ns]``; the tail holds all empty
    components, equally.  Empty components share the likelihood factor ``e``.
    """
    K = cnt.shape[0]
    n_occ = 0
    rep = -1
    last = -1
    ge = 0
    for k in range(K):
        c = cnt[k]
        ge += c
        if c > 0:
            occ[n_occ] = k
            n_occ += 1
            last = k
        elif rep < 0:
            rep = k
    n_empty = K - n_occ
    nl = _occupied_likelihood(n, idx, num, invden, occ, n_occ, rep, lik)
    e = lik[nl - 1] if rep >= 0 else 0.0
    if prior == 1:  # FSD
        for j in range(n_occ):
            w[j] = (afsd + cnt[occ[j]]) * lik[j]
        return n_occ, n_empty * afsd * e, last, n_empty
    acc = 1.0
    j = 0
    for k in range(last + 1):
        nk = cnt[k]
        if k < K - 1:
            r = inv1a[ge]
            pk = acc * (1.0 + nk) * r
            acc *= (a0 + (ge - nk)) * r
            ge -= nk
        else:
            pk = acc
        if nk > 0:
            w[k] = pk * lik[j]
            j += 1
        else:
            w[k] = pk * e
    tail = acc * e if last < K - 1 else 0.0
    return last + 1, tail, last, n_empty


@numba.njit(cache=True)
def _draw_compact(ns, tail, last, n_empty, w, occ, cnt, a0, inv1a, prior):
    """Sample a component from the compact conditional of :func:`_compact`."""
    K = cnt.shape[0]
    tot = tail
    for s in range(ns):
        tot += w[s]
    u = np.random.random() * tot  # noqa: NPY002 - numba RNG, seeded by _seed
    acc = 0.0
    for s in range(ns):
        acc += w[s]
        if u < acc:
            return s if prior == 0 else occ[s]
    if tail <= 0.0:  # rounding at the very end of the slots
        return ns - 1 if prior == 0 else occ[ns - 1]
    if prior == 0:
        t = K - 2 - last
        if t <= 0:
            return K - 1
        q = a0 * inv1a[0]
        v = np.random.random()  # noqa: NPY002
        if v <= 0.0 or q <= 0.0:
            return last + 1 if q <= 0.0 else K - 1
        jj = math.log(v) / math.log(q)
        if jj >= t:
            return K - 1
        return last + 1 + int(jj)
    m = int(np.random.random() * n_empty)  # noqa: NPY002
    for k in range(K):
        if cnt[k] == 0:
            if m == 0:
                return k
            m -= 1
    return K - 1  # pragma: no cover


@numba.njit(cache=True)
def _draw_many(n, n_draws, idx, cnt, num, invden, inv1a, a0, afsd, prior):
    """Test helper: ``n_draws`` samples of z_n from the compact path (n removed)."""
    K = cnt.shape[0]
    w = np.empty(K)
    occ = np.empty(K, dtype=np.int64)
    lik = np.empty(K)
    out = np.empty(n_draws, dtype=np.int64)
    ns, tail, last, n_empty = _compact(n, idx, cnt, num, invden, inv1a, a0, afsd, prior,
                                       w, occ, lik)
    for i in range(n_draws):
        out[i] = _draw_compact(ns, tail, last, n_empty, w, occ, cnt, a0, inv1a, prior)
    return out


@numba.njit(cache=True, fastmath=True)
def _sweeps(idx, z, cnt, nlk, num, ckm, invden, beta, Jbeta, inv1a, a0, afsd, prior, n_sweeps):
    N = idx.shape[0]
    K = cnt.shape[0]
    w = np.empty(K)
    occ = np.empty(K, dtype=np.int64)
    lik = np.empty(K)
    for _ in range(n_sweeps):
        for n in range(N):
            _move(n, z[n], -1, idx, cnt, nlk, num, ckm, invden, beta, Jbeta)
            n_occ = 0
            for k in range(K):
                if cnt[k] > 0:
                    n_occ += 1
            if 2 * n_occ < K:
                ns, tail, last, n_empty = _compact(n, idx, cnt, num, invden, inv1a, a0, afsd,
                                                   prior, w, occ, lik)
                knew = _draw_compact(ns, tail, last, n_empty, w, occ, cnt, a0, inv1a, prior)
            else:
                _weights(n, idx, cnt, num, invden, inv1a, a0, afsd, prior, w, occ, lik)
                tot = 0.0
                for k in range(K):
                    tot += w[k]
                u = np.random.random() * tot  # noqa: NPY002 - numba RNG, seeded by _seed
                knew = K - 1
                acc = 0.0
                for k in range(K):
                    acc += w[k]
                    if u < acc:
                        knew = k
                        break
            z[n] = knew
            _move(n, knew, 1, idx, cnt, nlk, num, ckm, invden, beta, Jbeta)


@numba.njit(cache=True)
def _tsb_stick_pair(nk, nk1, rest, a0, last):
    """log-prior terms of sticks k and k+1 given N_k, N_{k+1}, N_{>k+1}."""
    v = (math.lgamma(1.0 + nk) + math.lgamma(a0 + nk1 + rest)
         - math.lgamma(1.0 + a0 + nk + nk1 + rest))
    if not last:
        v += math.lgamma(1.0 + nk1) + math.lgamma(a0 + rest) - math.lgamma(1.0 + a0 + nk1 + rest)
    return v


@numba.njit(cache=True)
def _tsb_swaps(cnt, nlk, num, ckm, invden, a0, perm):
    """Metropolis label swaps of adjacent components k <-> k+1 (TSB only).

    The likelihood is invariant to relabelling; only p(z | alpha0) changes, so the
    acceptance ratio needs only three counts.  ``perm`` (T,) accumulates the
    relabelling old -> new to apply to z afterwards.
    """
    K = cnt.shape[0]
    rest = 0
    for k in range(K):
        rest += cnt[k]
    inv = np.empty(K, dtype=np.int64)
    for k in range(K):
        inv[perm[k]] = k
    for k in range(K - 1):
        rest -= cnt[k]
        r = rest - cnt[k + 1]  # N_{>k+1}
        a, b = cnt[k], cnt[k + 1]
        if a == b:
            continue
        last = k + 1 == K - 1
        d = _tsb_stick_pair(b, a, r, a0, last) - _tsb_stick_pair(a, b, r, a0, last)
        if d >= 0.0 or np.random.random() < math.exp(d):  # noqa: NPY002 - numba RNG
            cnt[k], cnt[k + 1] = b, a
            for l in range(nlk.shape[0]):
                t = nlk[l, k]
                nlk[l, k] = nlk[l, k + 1]
                nlk[l, k + 1] = t
                u = num[l, k]
                num[l, k] = num[l, k + 1]
                num[l, k + 1] = u
            for m in range(ckm.shape[0]):
                t = ckm[m, k]
                ckm[m, k] = ckm[m, k + 1]
                ckm[m, k + 1] = t
                u = invden[m, k]
                invden[m, k] = invden[m, k + 1]
                invden[m, k + 1] = u
            # the components now at slots k, k+1 came from old slots inv[k+1], inv[k]
            o1, o2 = inv[k], inv[k + 1]
            inv[k], inv[k + 1] = o2, o1
            perm[o2] = k
            perm[o1] = k + 1
        rest = cnt[k + 1] + r  # N_{>k} after a possible swap


# ---------------------------------------------------------------------------
# state
# ---------------------------------------------------------------------------
class GibbsState:
    """Sufficient statistics of one chain plus the tables the kernels read.

    Attributes
    ----------
    z : int64 (N,)            indicators
    cnt : int64 (T,)          N_k
    nlk : int64 (L, T)        N_{k l}, global label l (offset index)
    ckm : int64 (M, T)        N_{k j}: points of cluster k labelled by column j
    num : float64 (L, T)      beta + N_{k l}
    invden : float64 (M, T)   1 / (k_j beta + N_{k j})
    """

    def __init__(self, idx, n_labels, z, truncation, alpha0, beta, prior):
        self.idx = np.ascontiguousarray(idx, dtype=np.int64)
        self.n_labels = np.asarray(n_labels, dtype=np.int64)
        self.T = int(truncation)
        if prior not in PRIORS:
            raise ValueError(f"prior must be 'tsb' or 'fsd'; got {prior!r}")
        self.prior = prior
        N, M = self.idx.shape
        self.L = int(self.n_labels.sum())
        self.col_of = np.repeat(np.arange(M), self.n_labels)
        self.z = np.ascontiguousarray(z, dtype=np.int64).copy()
        if self.z.shape != (N,) or self.z.min() < 0 or self.z.max() >= self.T:
            raise ValueError(f"initial z must have shape ({N},) with values in [0, {self.T})")
        self.cnt = np.bincount(self.z, minlength=self.T).astype(np.int64)
        self.nlk = np.zeros((self.L, self.T), dtype=np.int64)
        self.ckm = np.zeros((M, self.T), dtype=np.int64)
        rows, cols = np.nonzero(self.idx >= 0)
        np.add.at(self.nlk, (self.idx[rows, cols], self.z[rows]), 1)
        np.add.at(self.ckm, (cols, self.z[rows]), 1)
        self.set_hyper(alpha0, beta)

    def set_hyper(self, alpha0, beta):
        """Set alpha0 and beta and rebuild the derived tables."""
        self.alpha0 = float(alpha0)
        self.beta = float(beta)
        N = self.idx.shape[0]
        self.Jbeta = self.n_labels.astype(np.float64) * self.beta
        self.num = self.beta + self.nlk.astype(np.float64)
        self.invden = 1.0 / (self.Jbeta[:, None] + self.ckm)
        self.inv1a = 1.0 / (1.0 + self.alpha0 + np.arange(N + 1, dtype=np.float64))
        self.afsd = self.alpha0 / self.T

    @property
    def prior_code(self):
        return _PRIOR_CODE[self.prior]

    def _move_args(self):
        return (self.idx, self.cnt, self.nlk, self.num, self.ckm, self.invden, self.beta,
                self.Jbeta)

    def sweep(self, n_sweeps=1):
        """Run ``n_sweeps`` systematic-scan sweeps over all points (compiled)."""
        _sweeps(
            self.idx, self.z, self.cnt, self.nlk, self.num, self.ckm, self.invden, self.beta,
            self.Jbeta, self.inv1a, self.alpha0, self.afsd, self.prior_code, int(n_sweeps),
        )

    def label_swaps(self):
        """One pass of adjacent label-swap Metropolis moves (TSB; no-op for FSD).

        TSB is not exchangeable, so the order of the components matters and plain
        single-site Gibbs changes it only slowly; these moves keep the posterior
        invariant and let large clusters move to the front.
        """
        if self.prior != "tsb":
            return
        perm = np.arange(self.T, dtype=np.int64)
        _tsb_swaps(self.cnt, self.nlk, self.num, self.ckm, self.invden, self.alpha0, perm)
        self.z = perm[self.z]

    def log_prior(self, alpha0=None):
        a0 = self.alpha0 if alpha0 is None else alpha0
        return log_prior_partition(self.cnt, a0, self.prior)

    def log_lik(self, beta=None):
        b = self.beta if beta is None else beta
        # same value as models.nbce.log_likelihood_collapsed, from the kept N_kj
        Jb = self.n_labels[:, None] * b
        nz = self.nlk[self.nlk > 0]
        return float(
            np.sum(gammaln(Jb) - gammaln(Jb + self.ckm)) + np.sum(gammaln(b + nz) - gammaln(b))
        )

    def log_joint(self):
        """Collapsed log p(x, z | alpha0, beta) of the current state."""
        return self.log_prior() + self.log_lik()


def conditional_probs(state: GibbsState, n: int) -> np.ndarray:
    """The sampler's conditional p(z_n = k | z_-n, x), shape (T,), via the compiled kernel.

    Leaves ``state`` unchanged.  Used to test the kernel against brute force.
    """
    k = int(state.z[n])
    _move(n, k, -1, *state._move_args())
    w = np.empty(state.T)
    _weights(n, state.idx, state.cnt, state.num, state.invden, state.inv1a, state.alpha0,
             state.afsd, state.prior_code, w, np.empty(state.T, dtype=np.int64),
             np.empty(state.T))
    _move(n, k, 1, *state._move_args())
    return w / w.sum()


def conditional_probs_compact(state: GibbsState, n: int) -> np.ndarray:
    """The same conditional as :func:`conditional_probs`, computed by the compact
    kernel the sweep uses when fewer than half of the components are occupied,
    expanded back to shape (T,).  Leaves ``state`` unchanged."""
    k0 = int(state.z[n])
    _move(n, k0, -1, *state._move_args())
    T = state.T
    w, occ, lik = np.empty(T), np.empty(T, dtype=np.int64), np.empty(T)
    ns, tail, last, n_empty = _compact(n, state.idx, state.cnt, state.num, state.invden,
                                       state.inv1a, state.alpha0, state.afsd,
                                       state.prior_code, w, occ, lik)
    full = np.zeros(T)
    if state.prior == "tsb":
        full[:ns] = w[:ns]
        if last < T - 1:
            q = state.alpha0 / (1.0 + state.alpha0)
            t = T - 2 - last
            full[last + 1:T - 1] = tail * (1 - q) * q ** np.arange(t)
            full[T - 1] = tail * q**t
    else:
        full[occ[:ns]] = w[:ns]
        full[state.cnt == 0] = tail / n_empty
    _move(n, k0, 1, *state._move_args())
    return full / full.sum()


def sample_conditional(state: GibbsState, n: int, n_draws: int) -> np.ndarray:
    """``n_draws`` samples of z_n from the compact sampling path (for tests)."""
    k0 = int(state.z[n])
    _move(n, k0, -1, *state._move_args())
    out = _draw_many(n, int(n_draws), state.idx, state.cnt, state.num, state.invden,
                     state.inv1a, state.alpha0, state.afsd, state.prior_code)
    _move(n, k0, 1, *state._move_args())
    return out


# ---------------------------------------------------------------------------
# hyper-parameter updates
# ---------------------------------------------------------------------------
def _slice_log(logf, x0, rng, width=1.0, max_steps=20):
    """One univariate slice-sampling update of ``x`` > 0 on the log scale.

    ``logf(x)`` is the log density of x; the sampled variable is u = log x, whose
    density is ``logf(e^u) + u`` (Jacobian).
    """
    def g(u):
        return logf(math.exp(u)) + u

    u0 = math.log(x0)
    gy = g(u0) + math.log(rng.random_sample())
    lo = u0 - width * rng.random_sample()
    hi = lo + width
    for _ in range(max_steps):
        if g(lo) <= gy:
            break
        lo -= width
    for _ in range(max_steps):
        if g(hi) <= gy:
            break
        hi += width
    for _ in range(100):
        u = lo + (hi - lo) * rng.random_sample()
        if g(u) > gy:
            return math.exp(u)
        if u < u0:
            lo = u
        else:
            hi = u
    return x0  # pragma: no cover - shrinkage always ends in practice


def _log_gamma_pdf(x, shape, rate):
    return shape * math.log(rate) - gammaln(shape) + (shape - 1) * math.log(x) - rate * x


def update_hyper(state: GibbsState, rng, hyper_prior=((1.0, 1.0), (1.0, 1.0))):
    """Slice-sample alpha0 | z and beta | x, z (Gamma priors), then refresh the tables."""
    (aa, ab), (ba, bb) = hyper_prior
    a0 = _slice_log(lambda a: state.log_prior(a) + _log_gamma_pdf(a, aa, ab), state.alpha0, rng)
    b = _slice_log(lambda b: state.log_lik(b) + _log_gamma_pdf(b, ba, bb), state.beta, rng)
    state.set_hyper(a0, b)


# ---------------------------------------------------------------------------
# one sweep, and the chains as an engine of the fit driver
# ---------------------------------------------------------------------------
def gibbs_step(state: GibbsState, rng, update_hyperparameters=True,
               hyper_prior=((1.0, 1.0), (1.0, 1.0))) -> GibbsState:
    """One sweep of the sampler: every ``z_i`` once, the TSB label swaps, then (if asked)
    alpha0 and beta.  numba's generator is re-seeded from ``rng`` first, so the chain is
    a function of ``rng``'s state."""
    _seed(int(rng.randint(0, 2**31 - 1)))
    state.sweep(1)
    state.label_swaps()
    if update_hyperparameters:
        update_hyper(state, rng, hyper_prior)
    return state


@dataclass
class Chain:
    """One chain's state for the driver: the sampler, sweeps done, the draws kept so far.

    ``draws`` maps a name to an array over the chain's ``n_samples`` draws (see
    :func:`gibbs_nbce`); entries past ``n_draws`` are not filled yet.
    """

    gibbs: GibbsState
    sweeps: int
    draws: dict
    n_draws: int = 0
    log_joint: float = math.nan


class GibbsChains(Engine):
    """Collapsed Gibbs chains as an engine of :func:`consensuskit.inference.driver.fit`.

    A step is :func:`gibbs_step`; after ``burn_in`` sweeps every ``thin``-th state is
    kept; the objective is the collapsed log joint.  Arguments as :func:`gibbs_nbce`.
    """

    def __init__(self, idx, n_labels, truncation, *, prior, alpha0, beta,
                 update_hyperparameters, hyper_prior, n_samples, burn_in, thin, init,
                 store_z, store_counts):
        self.idx = idx
        self.n_labels = n_labels
        self.T = int(truncation)
        self.prior = prior
        self.alpha0, self.beta = alpha0, beta
        self.update_hyperparameters = bool(update_hyperparameters)
        self.hyper_prior = hyper_prior
        self.S, self.burn_in, self.thin = int(n_samples), int(burn_in), int(thin)
        self.z0 = None if init is None else np.asarray(init)
        self.store_z, self.store_counts = store_z, store_counts

    def _empty_draws(self):
        N, M = self.idx.shape
        S, T, L = self.S, self.T, int(np.sum(self.n_labels))
        d = {"counts": np.zeros((S, T), dtype=np.int64), "log_joint": np.zeros(S),
             "n_occupied": np.zeros(S, dtype=np.int64), "alpha0": np.zeros(S),
             "beta": np.zeros(S)}
        if self.store_counts:
            d["label_counts"] = np.zeros((S, T, L), dtype=np.int32)
            d["col_counts"] = np.zeros((S, T, M), dtype=np.int32)
        if self.store_z:
            d["z"] = np.zeros((S, N), dtype=np.int32)
        return d

    def init(self, rng, run=0):
        if self.z0 is None:
            z0 = rng.randint(0, self.T, size=self.idx.shape[0])
        else:
            z0 = self.z0[run] if self.z0.ndim == 2 else self.z0
        g = GibbsState(self.idx, self.n_labels, z0, self.T, self.alpha0, self.beta, self.prior)
        return Chain(g, 0, self._empty_draws())

    def step(self, state: Chain, rng) -> Chain:
        g = gibbs_step(state.gibbs, rng, self.update_hyperparameters, self.hyper_prior)
        it = state.sweeps
        state.sweeps += 1
        state.log_joint = g.log_joint()
        if it >= self.burn_in and (it - self.burn_in + 1) % self.thin == 0:
            s, d = state.n_draws, state.draws
            d["counts"][s] = g.cnt
            if self.store_counts:
                d["label_counts"][s] = g.nlk.T
                d["col_counts"][s] = g.ckm.T
            d["log_joint"][s] = state.log_joint
            d["n_occupied"][s] = np.count_nonzero(g.cnt)
            d["alpha0"][s] = g.alpha0
            d["beta"][s] = g.beta
            if self.store_z:
                d["z"][s] = g.z
            state.n_draws += 1
        return state

    def objective(self, state: Chain) -> float:
        return state.log_joint

    def info(self, state: Chain) -> dict:
        return {"draws": state.n_draws, "gibbs": state.gibbs}


def gibbs_nbce(
    idx,
    n_labels,
    truncation,
    *,
    prior="tsb",
    alpha0=1.0,
    beta=0.5,
    update_hyperparameters=True,
    hyper_prior=((1.0, 1.0), (1.0, 1.0)),
    n_samples=200,
    burn_in=100,
    thin=1,
    n_chains=2,
    init=None,
    random_state=None,
    store_z=True,
    store_counts="auto",
    verbose=False,
    callback=None,
    checkpoint=None,
    checkpoint_every=10,
    resume=None,
):
    """Run ``n_chains`` collapsed Gibbs chains for NBCE (:class:`GibbsChains` under the driver).

    Parameters
    ----------
    idx : int array, shape (N, M)
        Global label index (:meth:`Ensemble.offset_index`), ``-1`` missing.
    n_labels : int array, shape (M,)
        ``k_j``.
    truncation : int
        T, the number of components.
    prior : {"tsb", "fsd"}
    alpha0, beta : float
        Fixed values, or starting values when ``update_hyperparameters``.
    update_hyperparameters : bool
        Slice-sample alpha0 and beta once per sweep (see module docstring).
    n_samples, burn_in, thin : int
        Per chain: ``burn_in`` discarded sweeps, then ``n_samples`` retained draws,
        one every ``thin`` sweeps.
    n_chains : int
    init : None or int array (N,) or (n_chains, N)
        Initial indicators; default uniform at random over the T components.
    random_state : None, int or RandomState
    store_counts : bool or "auto"
        Keep each draw's ``label_counts`` / ``col_counts`` (T x L and T x M per
        draw).  "auto": only if they take at most 256 MB; otherwise they can be
        recomputed from ``z`` with :func:`draw_counts`.
    store_z : bool
        Keep the retained indicator vectors (needed for co-clustering and the
        point consensus).
    callback, checkpoint, checkpoint_every, resume
        As in :func:`consensuskit.inference.driver.fit`: the snapshot after every sweep
        has ``chain``, ``iteration`` (sweeps done in this chain), ``draws`` (retained so
        far in it), ``gibbs`` (the :class:`GibbsState`), ``state`` (the :class:`Chain`)
        and ``rng`` (the generator's state).  A resumed run's later sweeps are those of
        the uninterrupted run.

    Returns
    -------
    dict with arrays over (chain, draw):
        ``z`` (C, S, N) int32 (if store_z), ``counts`` (C, S, T) int64,
        ``label_counts`` (C, S, T, L) int32, ``col_counts`` (C, S, T, M) int32
        (if stored, see ``store_counts``),
        ``log_joint`` (C, S), ``n_occupied`` (C, S), ``alpha0`` (C, S), ``beta`` (C, S);
        ``log_joint_trace`` (C, sweeps) (every sweep, burn-in included);
        ``n_draws`` (C,) draws retained per chain; ``stopped`` (the callback stopped the
        run); and ``prior``, ``truncation``, ``n_labels``.
    """
    if prior not in PRIORS:
        raise ValueError(f"prior must be 'tsb' or 'fsd'; got {prior!r}")
    rng = check_random_state(random_state)
    idx = np.ascontiguousarray(idx, dtype=np.int64)
    N, M = idx.shape
    T = int(truncation)
    if T < 2:
        raise ValueError(f"truncation must be >= 2; got {truncation}")
    L = int(np.sum(n_labels))
    C, S = int(n_chains), int(n_samples)
    if store_counts == "auto":
        store_counts = C * S * T * (L + M) * 4 <= 256 * 2**20
    engine = GibbsChains(idx, n_labels, T, prior=prior, alpha0=alpha0, beta=beta,
                         update_hyperparameters=update_hyperparameters,
                         hyper_prior=hyper_prior, n_samples=S, burn_in=burn_in, thin=thin,
                         init=init, store_z=store_z, store_counts=store_counts)
    total = burn_in + S * thin
    fit = drive(engine, max_iter=total, n_runs=C, tol=None, rng=rng, select="all",
                callback=callback, checkpoint=checkpoint, checkpoint_every=checkpoint_every,
                resume=resume, progress=verbose, desc="NBCE Gibbs", run_name="chain",
                unit="sweep")
    empty = engine._empty_draws()
    out = {key: np.zeros((C,) + v.shape, dtype=v.dtype) for key, v in empty.items()}
    out["log_joint_trace"] = np.full((C, total), np.nan)
    out["n_draws"] = np.zeros(C, dtype=np.int64)
    for c, run in enumerate(fit.runs):
        for key, v in run.params.draws.items():
            out[key][c] = v
        out["log_joint_trace"][c, :len(run.objectives)] = run.objectives
        out["n_draws"][c] = run.params.n_draws
    out.update(stopped=fit.stopped, prior=prior, truncation=T,
               n_labels=np.asarray(n_labels, dtype=np.int64))
    return out


def draw_counts(idx, z, truncation, n_labels):
    """Label counts ``N_kl`` (T, L) and per-column counts ``N_kj`` (T, M) of one draw."""
    idx = np.asarray(idx)
    z = np.asarray(z, dtype=np.int64)
    T = int(truncation)
    L = int(np.sum(n_labels))
    M = idx.shape[1]
    rows, cols = np.nonzero(idx >= 0)
    zr = z[rows]
    Nkl = np.bincount(zr * L + idx[rows, cols], minlength=T * L).reshape(T, L)
    Nkm = np.bincount(zr * M + cols, minlength=T * M).reshape(T, M)
    return Nkl, Nkm


# ---------------------------------------------------------------------------
# posterior summaries
# ---------------------------------------------------------------------------
def _pairs_for(N, max_pairs, rng):
    from ..ensemble import sample_pairs

    total = N * (N - 1) // 2
    if total <= max_pairs:
        i, j = np.triu_indices(N, k=1)
        return np.stack([i, j], axis=1)
    return sample_pairs(N, max_pairs, rng)


def co_clustering(z_draws, pairs=None):
    """Posterior co-clustering probabilities P(z_i = z_j | x).

    Parameters
    ----------
    z_draws : int array, shape (S, N)
        Retained draws (all chains stacked).
    pairs : None or int array (P, 2)
        None: the dense (N, N) matrix (N <= 5000 only); otherwise the
        probabilities of these pairs only, shape (P,), in O(S P) time.
    """
    Z = np.asarray(z_draws)
    S, N = Z.shape
    if pairs is None:
        if N > 5_000:
            raise ValueError(
                f"dense co-clustering for N={N} needs an {N}x{N} array; pass pairs= "
                "(e.g. consensuskit.ensemble.sample_pairs) for N > 5000"
            )
        P = np.zeros((N, N))
        for s in range(S):
            P += Z[s][:, None] == Z[s][None, :]
        return P / S
    pairs = np.asarray(pairs)
    return (Z[:, pairs[:, 0]] == Z[:, pairs[:, 1]]).mean(axis=0)


def point_consensus(z_draws, max_pairs=200_000, random_state=None):
    """Label-switching-free point estimate: the retained draw closest to the posterior
    co-clustering matrix in squared loss (Dahl's least-squares clustering).

    For ``N(N-1)/2 > max_pairs`` the loss is evaluated on ``max_pairs`` sampled pairs.

    Returns
    -------
    labels : int64 (N,), relabelled to 0..K-1 by decreasing cluster size
    best : int, index of the chosen draw in ``z_draws``
    """
    Z = np.asarray(z_draws)
    S, N = Z.shape
    rng = check_random_state(random_state)
    pairs = _pairs_for(N, max_pairs, rng)
    same = Z[:, pairs[:, 0]] == Z[:, pairs[:, 1]]  # (S, P)
    p = same.mean(axis=0)
    loss = ((same - p[None, :]) ** 2).sum(axis=1)
    best = int(np.argmin(loss))
    return relabel_by_size(Z[best]), best


def relabel_by_size(z):
    """Relabel a partition to 0..K-1 with cluster 0 the largest."""
    uniq, inv, cnt = np.unique(z, return_inverse=True, return_counts=True)
    order = np.argsort(-cnt, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return rank[inv].astype(np.int64)
