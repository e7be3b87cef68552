"""One chain's sufficient statistics and the tables its kernels read (:class:`GibbsState`),
with its single-site conditional and one Gibbs iteration."""

from __future__ import annotations

import numpy as np
from scipy.special import gammaln

from consensuskit.models.nbce.gibbs.kernels import _conditional_nb, _log_joint_nb, _seed, _sweeps
from consensuskit.models.nbce.gibbs.moves import (
    _block_moves,
    _label_swaps,
    _refresh_tables,
    _update_hyper,
    identical_row_groups,
)
from consensuskit.models.nbce.gibbs.rows import sampler_rows
from consensuskit.models.nbce.gibbs.split_merge import _split_merge
from consensuskit.models.nbce.gibbs.summaries import draw_counts
from consensuskit.models.nbce.priors import get_prior

__all__ = ["GibbsState", "conditional_probs", "sample_conditional", "gibbs_step"]

#: default share of split-merge proposals whose pair is drawn near each other
SPLIT_MERGE_LOCAL_SHARE = 0.5
#: default restricted Gibbs scans of a split-merge proposal (0: sequential allocation only)
SPLIT_MERGE_SCANS = 0


# ---------------------------------------------------------------------------
# state
# ---------------------------------------------------------------------------
class GibbsState:
    """Sufficient statistics of one chain plus the tables the kernels read.

    Attributes
    ----------
    rows : (codes, offsets)   the labels the kernels read (:func:`sampler_rows`)
    z : int64 (N,)            indicators
    cnt : int64 (T,)          N_k
    nlk : int64 (L, T)        N_{k l}, global label l (offset index)
    ckm : int64 (M, T)        N_{k j}: points of cluster k labelled by column j
    num : float64 (L, T)      beta + N_{k l}
    invden : float64 (M, T)   1 / (k_j beta + N_{k j})
    unbounded : bool          TSB without truncation (below)

    With ``unbounded`` the model is the untruncated stick-breaking prior (a Dirichlet
    process over labelled components) and ``T`` is only the size of the tables: a window
    onto labels ``0 .. T-1`` whose last component is kept empty.  Every kernel then
    computes its transition from z alone, as if the tables were infinite: whatever
    would touch a label ``>= T-1`` stops the kernel, the tables grow (:meth:`grow`:
    zero counts appended, z unchanged) and the kernel continues where it stopped.
    So the chain is the untruncated sampler, nothing is truncated, and ``T`` is a
    function of the path, not a parameter of the model.
    """

    def __init__(self, rows, n_labels, z, truncation, alpha0, beta, prior, unbounded=False):
        self.rows = sampler_rows(rows)
        self.n_labels = np.asarray(n_labels, dtype=np.int64)
        self.T = int(truncation)
        self.prior_obj = get_prior(prior)
        self.prior = self.prior_obj.name
        self.unbounded = bool(unbounded)
        if self.unbounded and self.prior_obj.code != 0:
            raise ValueError("unbounded=True needs the stick-breaking prior (tsb)")
        N, M = self.rows[0].shape
        self.L = int(self.n_labels.sum())
        self.col_of = np.repeat(np.arange(M), self.n_labels)
        z = np.ascontiguousarray(z, dtype=np.int64)  # the caller's array when already so
        top = z.max() + 2 if self.unbounded else self.T
        if z.shape != (N,) or z.min() < 0 or (z.max() >= self.T and not self.unbounded):
            raise ValueError(f"initial z must have shape ({N},) with values in [0, {self.T})")
        #: groups of identical rows, moved together (:func:`_block_moves`); found before
        #: the chain's own (N,) arrays are made, so that the search's (N,) hashes and sort
        #: order are gone by then (at 1e7 rows they were the fit's peak, issue 27)
        self.group_ptr, self.group_rows = identical_row_groups(self.rows[0])
        self.z = z.copy()
        self.T = max(self.T, int(top))
        self.cnt = np.bincount(self.z, minlength=self.T).astype(np.int64)
        nkl, nkm = draw_counts(self.rows, self.z, self.T, self.n_labels)  # one compiled pass
        self.nlk = np.ascontiguousarray(nkl.T)
        self.ckm = np.ascontiguousarray(nkm.T)
        #: split-merge and slice counters, see :meth:`iterate`
        self.stats = np.zeros(7, dtype=np.int64)
        #: share of split-merge pairs drawn near each other (see
        #: :func:`~consensuskit.models.nbce.gibbs.split_merge._draw_pair`), their weights
        #: by the number of differing columns d: ``exp(-d)``
        self.split_merge_local_share = SPLIT_MERGE_LOCAL_SHARE
        self.near_weights = np.exp(-np.arange(M + 1, dtype=np.float64))
        #: restricted Gibbs scans after the sequential launch of a split-merge proposal
        #: (Jain & Neal 2004; :func:`~consensuskit.models.nbce.gibbs.split_merge._launch_and_scan`)
        self.split_merge_scans = SPLIT_MERGE_SCANS
        #: added to split-merge log acceptance ratios (splits +, merges -): 0.0; set only
        #: by the negative controls of the tests (a sampler that must fail them)
        self.split_merge_log_ratio_error = 0.0
        self.hyp = np.empty(2)
        self.Jbeta = np.empty(M)
        self.num = np.empty((self.L, self.T))
        self.invden = np.empty((M, self.T))
        self.inv1a = np.empty(N + 1)
        self.set_hyper(alpha0, beta)

    def __setstate__(self, state):
        # a chain pickled (checkpointed) before the kernels read (codes, offsets) holds
        # its global label index as ``idx``
        if "idx" in state and "rows" not in state:
            state["rows"] = sampler_rows(state.pop("idx"))
        self.__dict__.update(state)

    @property
    def alpha0(self):
        return float(self.hyp[0])

    @property
    def beta(self):
        return float(self.hyp[1])

    @property
    def afsd(self):
        return self.alpha0 / self.T

    def set_hyper(self, alpha0, beta):
        """Set alpha0 and beta and rebuild the derived tables."""
        self.hyp[0], self.hyp[1] = float(alpha0), float(beta)
        _refresh_tables(self.nlk, self.ckm, self.num, self.invden, self.Jbeta, self.inv1a,
                        self.n_labels, self.alpha0, self.beta)

    @property
    def prior_code(self):
        return self.prior_obj.code

    def grow(self, label=None):
        """Enlarge the tables (unbounded TSB) so that component ``label`` exists and the
        last component is empty: zero counts appended, by at least half the size."""
        need = self.T if label is None else int(label) + 2
        if need <= self.T and self.cnt[-1] == 0:
            return
        T = max(need, self.T + max(self.T // 2, 4))
        if T > 10 * self.rows[0].shape[0] + 1000:
            raise RuntimeError(f"NBCE: a label of {T - 2} was drawn for {self.rows[0].shape[0]} "
                               "points (alpha0 far too large?)")
        pad = T - self.T
        self.cnt = np.concatenate([self.cnt, np.zeros(pad, dtype=np.int64)])
        self.nlk = np.ascontiguousarray(np.pad(self.nlk, ((0, 0), (0, pad))))
        self.ckm = np.ascontiguousarray(np.pad(self.ckm, ((0, 0), (0, pad))))
        self.num = np.empty((self.L, T))
        self.invden = np.empty((self.rows[0].shape[1], T))
        self.T = T
        self.set_hyper(self.alpha0, self.beta)

    def _add_rows(self, rows, label):
        """Put ``rows`` (out of the counts) in component ``label`` (after :meth:`grow`)."""
        codes, offsets = self.rows
        for n in np.atleast_1d(rows):
            self.z[n] = label
            self.cnt[label] += 1
            obs = np.flatnonzero(codes[n] >= 0)
            self.nlk[offsets[obs] + codes[n, obs], label] += 1
            self.ckm[obs, label] += 1
        self.set_hyper(self.alpha0, self.beta)

    def _move_args(self):
        return (self.rows, self.cnt, self.nlk, self.num, self.ckm, self.invden, self.beta,
                self.Jbeta)

    def iterate(self, n_split_merge=0, update_hyper=False,
                hyper_prior=((1.0, 1.0), (1.0, 1.0))):
        """One iteration of the chain: a systematic Gibbs sweep over the points, then
        ``n_split_merge`` split-merge moves and (if that is positive) a Gibbs move of
        every group of identical rows in turn (cost O(groups x T x M), at most a sweep's),
        then (TSB) adjacent label swaps, then (if ``update_hyper``) slice updates
        of alpha0 | z and beta | x, z; ``stats`` accumulates their counts (see
        :func:`gibbs_nbce`).

        Each move is its own compiled kernel, called from here (microseconds each),
        so a run compiles only the moves it uses and no kernel links all of them:
        one fused kernel cost about 1.5 s more CPU to compile in a fresh installation.
        Draws from numba's generator of the calling thread (seed it with ``_seed``).
        """
        n_split_merge = int(n_split_merge)
        self.sweep(1)
        if n_split_merge > 0:
            self.split_merge(n_split_merge)
            self.group_moves()
        self.label_swaps()
        if update_hyper:
            hp = np.asarray(hyper_prior, dtype=np.float64).reshape(4)
            _update_hyper(self.cnt, self.nlk, self.num, self.ckm, self.invden, self.Jbeta,
                          self.inv1a, self.hyp, self.n_labels, self.prior_code, hp, self.stats)

    def sweep(self, n_sweeps=1):
        """Run ``n_sweeps`` systematic-scan sweeps over all points (compiled)."""
        for _ in range(int(n_sweeps) if self.unbounded else 1):
            start = 0
            while True:
                stop = _sweeps(
                    self.rows, self.z, self.cnt, self.nlk, self.num, self.ckm, self.invden,
                    self.beta, self.Jbeta, self.inv1a, self.alpha0, self.afsd, self.prior_code,
                    1 if self.unbounded else int(n_sweeps), start, self.unbounded)
                if stop < 0:
                    break
                self.grow(self.z[stop])
                self._add_rows(stop, self.z[stop])
                start = stop + 1

    def split_merge(self, n_proposals=1):
        """``n_proposals`` split-merge Metropolis-Hastings moves (:func:`_split_merge`)."""
        left = int(n_proposals)
        while left > 0:
            left -= _split_merge(self.rows, self.z, self.cnt, self.nlk, self.num, self.ckm,
                                 self.invden, self.beta, self.Jbeta, self.alpha0,
                                 self.prior_code, left, self.stats, self.unbounded,
                                 float(self.split_merge_local_share), self.near_weights,
                                 getattr(self, "split_merge_log_ratio_error", 0.0),
                                 int(self.split_merge_scans))
            if self.unbounded:
                self.grow()

    def group_moves(self, n_moves=None):
        """Gibbs moves of groups of identical rows (:func:`_block_moves`); all groups
        in turn by default."""
        n = self.group_ptr.size - 1 if n_moves is None else int(n_moves)
        start = 0
        while True:
            stop = _block_moves(self.rows, self.z, self.cnt, self.nlk, self.num, self.ckm,
                                self.invden, self.beta, self.Jbeta, self.alpha0,
                                self.prior_code, self.group_ptr, self.group_rows, start, n,
                                self.stats, self.unbounded)
            if stop.move < 0:
                break
            self.grow(stop.label)
            g = stop.group
            self._add_rows(self.group_rows[self.group_ptr[g]:self.group_ptr[g + 1]],
                           stop.label)
            start = stop.move + 1

    def label_swaps(self):
        """One pass of adjacent label-swap Metropolis moves (TSB; no-op for FSD).

        TSB is not exchangeable, so the order of the components matters and plain
        single-site Gibbs changes it only slowly; these moves keep the posterior
        invariant and let large clusters move to the front.
        """
        if self.prior_code != 0:
            return
        start = 0
        while True:
            stop = _label_swaps(self.z, self.cnt, self.nlk, self.num, self.ckm, self.invden,
                                self.alpha0, start, self.unbounded)
            if stop < 0:
                break
            self.grow(self.T - 1)
            start = stop

    def log_prior(self, alpha0=None):
        a0 = self.alpha0 if alpha0 is None else alpha0
        return self.prior_obj.log_prior(self.cnt, a0)

    def log_lik(self, beta=None):
        b = self.beta if beta is None else beta
        # same value as models.nbce.log_likelihood_collapsed, from the kept N_kj
        Jb = self.n_labels[:, None] * b
        nz = self.nlk[self.nlk > 0]
        return float(
            np.sum(gammaln(Jb) - gammaln(Jb + self.ckm)) + np.sum(gammaln(b + nz) - gammaln(b))
        )

    def log_joint(self):
        """Collapsed log p(x, z | alpha0, beta) of the current state (compiled)."""
        return _log_joint_nb(self.cnt, self.nlk, self.ckm, self.n_labels, self.alpha0,
                             self.beta, self.prior_code)


def _conditional(state: GibbsState, n: int, n_draws: int):
    return _conditional_nb(int(n), int(state.z[n]), int(n_draws), state.rows, state.cnt,
                           state.nlk, state.num, state.ckm, state.invden, state.beta,
                           state.Jbeta, state.inv1a, state.alpha0, state.afsd,
                           state.prior_code)


def conditional_probs(state: GibbsState, n: int) -> np.ndarray:
    """The sweep's conditional p(z_n = k | z_-n, x), shape (T,), computed by the
    kernels the sweep uses (slot layout, empty components scored once, TSB tail as a
    truncated geometric).  Leaves ``state`` unchanged.  Used to test the kernel
    against brute force."""
    full, _ = _conditional(state, n, 0)
    return full / full.sum()


def sample_conditional(state: GibbsState, n: int, n_draws: int) -> np.ndarray:
    """``n_draws`` samples of z_n by the sweep's sampling kernel (for tests; numba's
    generator, seeded by ``_seed``).  Leaves ``state`` unchanged."""
    return _conditional(state, n, n_draws)[1]


# ---------------------------------------------------------------------------
# one iteration, and the chains as an engine of the fit driver
# ---------------------------------------------------------------------------
def gibbs_step(state: GibbsState, rng, n_split_merge=0, update_hyperparameters=True,
               hyper_prior=((1.0, 1.0), (1.0, 1.0))) -> GibbsState:
    """One iteration of the sampler (:meth:`GibbsState.iterate`): every ``z_i`` once,
    ``n_split_merge`` split-merge and group moves, the TSB label swaps, then (if asked)
    alpha0 and beta.  numba's generator is re-seeded from ``rng`` first, so the chain is
    a function of ``rng``'s state."""
    _seed(int(rng.randint(0, 2**31 - 1)))
    state.iterate(n_split_merge, update_hyperparameters, hyper_prior)
    return state
