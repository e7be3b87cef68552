"""Chains under the fit driver (:class:`GibbsChains`) and :func:`gibbs_nbce`, the entry
point: defaults, threads, burn-in, thinning and the kept draws."""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numba
import numpy as np
from sklearn.utils import check_random_state

from consensuskit.inference.driver import Engine
from consensuskit.inference.driver import fit as drive
from consensuskit.models.nbce.gibbs.rows import sampler_rows
from consensuskit.models.nbce.gibbs.state import GibbsState, gibbs_step
from consensuskit.models.nbce.priors import get_prior

__all__ = ["Chain", "ChainPlan", "ChainRuns", "GibbsChains", "gibbs_nbce", "INITIAL_TABLE_SIZE",
           "default_thin", "draw_z_dtype"]


@dataclass
class Chain:
    """One chain's state for the driver: the sampler, its own generator, sweeps done,
    the draws kept so far.

    ``draws`` maps a name to an array over the chain's ``n_samples`` draws (see
    :func:`gibbs_nbce`); entries past ``n_draws`` are not filled yet.  Each chain draws
    only from ``rng`` (seeded from the run's generator once, before any chain starts),
    so chains can run in any order, or at the same time, with the same result.
    """

    gibbs: GibbsState
    rng: np.random.RandomState
    sweeps: int
    draws: dict
    n_draws: int = 0
    log_joint: float = math.nan


class GibbsChains(Engine):
    """Collapsed Gibbs chains as an engine of :func:`consensuskit.inference.driver.fit`.

    A step is :func:`gibbs_step` with the chain's own generator; after ``burn_in``
    sweeps every ``thin``-th state is kept; the objective is the collapsed log joint.
    Arguments as :func:`gibbs_nbce`; ``chain_seeds`` (n_chains,) seeds the chains.
    """

    def __init__(self, rows, n_labels, truncation, *, prior, alpha0, beta,
                 update_hyperparameters, hyper_prior, n_samples, burn_in, thin, init,
                 store_z, store_counts, n_split_merge, chain_seeds, unbounded=False):
        self.rows = rows
        self.n_labels = n_labels
        self.T = int(truncation)
        self.unbounded = bool(unbounded)
        self.prior = prior
        self.alpha0, self.beta = alpha0, beta
        self.update_hyperparameters = bool(update_hyperparameters)
        self.hyper_prior = hyper_prior
        self.S, self.burn_in, self.thin = int(n_samples), int(burn_in), int(thin)
        self.z0 = None if init is None else np.asarray(init)
        self.store_z, self.store_counts = store_z, store_counts
        self.n_split_merge = int(n_split_merge)
        self.chain_seeds = np.asarray(chain_seeds)

    def _empty_draws(self, T=None):
        N, M = self.rows[0].shape
        S, T, L = self.S, self.T if T is None else int(T), int(np.sum(self.n_labels))
        d = {"counts": np.zeros((S, T), dtype=np.int64), "log_joint": np.zeros(S),
             "n_occupied": np.zeros(S, dtype=np.int64), "alpha0": np.zeros(S),
             "beta": np.zeros(S)}
        if self.store_counts:
            d["label_counts"] = np.zeros((S, T, L), dtype=np.int32)
            d["col_counts"] = np.zeros((S, T, M), dtype=np.int32)
        if self.store_z:
            d["z"] = np.zeros((S, N), dtype=draw_z_dtype(T))
        return d

    def init(self, rng=None, run=0):
        crng = np.random.RandomState(int(self.chain_seeds[run]))
        if self.z0 is None:
            # unbounded: the tables' last component starts empty
            z0 = crng.randint(0, self.T - self.unbounded, size=self.rows[0].shape[0])
        else:
            z0 = self.z0[run] if self.z0.ndim == 2 else self.z0
        g = GibbsState(self.rows, self.n_labels, z0, self.T, self.alpha0, self.beta, self.prior,
                       unbounded=self.unbounded)
        return Chain(g, crng, 0, self._empty_draws(g.T))

    def step(self, state: Chain, rng=None) -> Chain:
        g = gibbs_step(state.gibbs, state.rng, self.n_split_merge,
                       self.update_hyperparameters, self.hyper_prior)
        it = state.sweeps
        state.sweeps += 1
        state.log_joint = g.log_joint()
        if it >= self.burn_in and (it - self.burn_in + 1) % self.thin == 0:
            _widen_draws(state.draws, g.T)
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
        return {"draws": state.n_draws, "gibbs": state.gibbs, "chain_seeds": self.chain_seeds}


def draw_z_dtype(T) -> np.dtype:
    """The type of the stored draws of z with ``T`` components: int16 while every label
    fits (``T <= 32,768``: half the memory of int32, the draws being most of a fit's
    memory at large N, issue 27), else int32."""
    return np.dtype(np.int16 if T - 1 <= np.iinfo(np.int16).max else np.int32)


def _widen_draws(draws, T):
    """Pad the per-draw component axis of ``draws`` with empty components up to ``T``
    (the untruncated sampler's tables grew; the added labels are empty in every earlier
    draw, so zero counts are exact), and widen the stored z when a label of ``T``
    components no longer fits its type."""
    for key, axis in (("counts", 1), ("label_counts", 1), ("col_counts", 1)):
        if key in draws and draws[key].shape[axis] < T:
            pad = [(0, 0)] * draws[key].ndim
            pad[axis] = (0, T - draws[key].shape[axis])
            draws[key] = np.pad(draws[key], pad)
    if "z" in draws and np.iinfo(draws["z"].dtype).max < T - 1:
        draws["z"] = draws["z"].astype(draw_z_dtype(T))


class _OneChain(Engine):
    """Chain ``c`` of ``engine`` as a single-run engine (for running chains on threads)."""

    def __init__(self, engine, c):
        self.engine, self.c = engine, c

    def init(self, rng=None, run=0):
        return self.engine.init(rng, self.c)

    def step(self, state, rng=None):
        return self.engine.step(state, rng)

    def objective(self, state):
        return self.engine.objective(state)


def _default_split_merge(n_points):
    """Split-merge proposals per sweep for ``n_split_merge=None``: 100.

    The count does not depend on N, so the work per sweep is linear in N: a split
    allocates the points of one cluster, a merge is decided from the count tables
    (O(L + M + T)) unless the tables leave it open, and then allocates at most the
    points of its two clusters (:func:`_split_merge`).  Twenty was enough on iris and
    wine (``experiments/nbce_mixing.py``); on ensembles with 30-45 clusters
    (balance, segmentation: ``experiments/nbce_validation.py``) 100 proposals with every
    identical-row group moved each sweep gave split R-hat 1.03-1.06 for the log joint
    where 20 gave 1.1-1.3, for 1.5x the CPU time.
    The count is fixed for the whole run: a count chosen from the current state (say
    the occupied components) would make the iteration's kernel depend on the state
    and no longer keep the posterior invariant.
    """
    return 0 if n_points < 2 else 100


#: work (rows x columns) per retained draw that the default thinning aims at, and its
#: largest value (:func:`default_thin`)
THIN_WORK, MAX_DEFAULT_THIN = 100_000, 5


def default_thin(n_points, n_columns):
    """Sweeps per retained draw for ``thin=None``: ``THIN_WORK // (N * M)``, between 1 and
    ``MAX_DEFAULT_THIN``.

    Small ensembles get several sweeps per draw, large ones one: a fit's sampling work is
    about the same up to N * M = 1e5 (2 sweeps per draw at N = 2000, M = 20; 5 at N = 625,
    M = 10) and linear in N beyond (1 sweep per draw from N * M = 1e5).  The number of
    clusters mixes slowest: on balance (625 rows, M = 10, about 45 clusters) its bulk
    ESS over 4 chains x 500 draws was 94 with one sweep per draw and 244 with three
    (``experiments/nbce_validation.py``).  A function of the data's shape only, fixed for
    the run, so each chain is still a Markov chain with the posterior invariant.
    """
    return int(min(MAX_DEFAULT_THIN, max(1, THIN_WORK // max(1, n_points * n_columns))))


def _numba_thread_setting():
    """numba's thread count, without starting numba's threading layer.

    ``numba.get_num_threads()`` starts that layer, and its OpenMP start-up resets the
    OpenMP thread count that torch shares, so a user's ``torch.set_num_threads(1)``
    would silently become numba's count (every later torch op then runs on all
    cores).  The chains run on a Python thread pool and need no numba threads, so the
    layer is left alone unless something else started it.
    """
    from numba.np.ufunc import parallel

    if parallel._is_initialized:
        return numba.get_num_threads()
    return int(numba.config.NUMBA_NUM_THREADS)


def _resolve_n_jobs(n_jobs, n_chains):
    """Threads to run chains on: ``None`` means numba's thread setting
    (``numba.get_num_threads()``, i.e. ``NUMBA_NUM_THREADS``); -1 all cores."""
    if n_jobs is None:
        n = _numba_thread_setting()
    elif n_jobs == -1:
        n = os.cpu_count() or 1
    else:
        n = int(n_jobs)
        if n < 1:
            raise ValueError(f"n_jobs must be a positive int, -1 or None; got {n_jobs!r}")
    return max(1, min(n, n_chains))


@dataclass(frozen=True)
class ChainPlan:
    """What :func:`gibbs_nbce` will run, its arguments checked and resolved: the engine,
    the sweeps per chain, the threads and whether the chains run in turn."""

    engine: GibbsChains
    total_sweeps: int
    workers: int
    sequential: bool


@dataclass(frozen=True)
class ChainRuns:
    """The finished chains: one driver run per chain (its ``params`` a :class:`Chain`,
    its ``objectives`` the log joint after every sweep) and whether a callback stopped
    the run."""

    runs: list
    stopped: bool


#: initial size of the tables of the untruncated sampler (they grow as needed)
INITIAL_TABLE_SIZE = 20


def _plan(rows, n_labels, truncation, *, prior, alpha0, beta, update_hyperparameters,
          hyper_prior, n_samples, burn_in, thin, n_chains, n_split_merge, n_jobs, init, rng,
          store_z, store_counts, callback, checkpoint, resume) -> ChainPlan:
    """Check the arguments of :func:`gibbs_nbce` and build its :class:`ChainPlan`."""
    prior_obj = get_prior(prior)
    N, M = rows[0].shape
    unbounded = truncation is None
    if unbounded and prior_obj.code != 0:
        raise ValueError("truncation=None (no truncation) needs prior='tsb'; FSD is "
                         "defined for a fixed number of components")
    T = INITIAL_TABLE_SIZE if unbounded else int(truncation)
    if T < 2:
        raise ValueError(f"truncation must be >= 2 or None; got {truncation}")
    C, S = int(n_chains), int(n_samples)
    thin = default_thin(N, M) if thin is None else int(thin)
    if thin < 1:
        raise ValueError(f"thin must be >= 1 or None; got {thin!r}")
    n_sm = _default_split_merge(N) if n_split_merge is None else int(n_split_merge)
    if n_sm < 0:
        raise ValueError(f"n_split_merge must be >= 0 or None; got {n_split_merge!r}")
    if store_counts == "auto":
        store_counts = C * S * T * (int(np.sum(n_labels)) + M) * 4 <= 256 * 2**20
    chain_seeds = rng.randint(0, 2**31 - 1, size=C)
    if resume is not None and "chain_seeds" in resume:
        chain_seeds = np.asarray(resume["chain_seeds"])
    engine = GibbsChains(rows, n_labels, T, prior=prior_obj, alpha0=alpha0, beta=beta,
                         update_hyperparameters=update_hyperparameters,
                         hyper_prior=hyper_prior, n_samples=S, burn_in=burn_in, thin=thin,
                         init=init, store_z=store_z, store_counts=store_counts,
                         n_split_merge=n_sm, chain_seeds=chain_seeds, unbounded=unbounded)
    workers = _resolve_n_jobs(n_jobs, C)
    sequential = (workers == 1 or callback is not None or checkpoint is not None
                  or resume is not None)
    return ChainPlan(engine, int(burn_in) + S * thin, workers, sequential)


def _run_chains(plan: ChainPlan, n_chains, rng, verbose, callback, checkpoint,
                checkpoint_every, resume) -> ChainRuns:
    """Run the chains of ``plan``: in turn under the fit driver (callback, checkpoints,
    resume), or each on its own thread."""
    if plan.sequential:
        fit = drive(plan.engine, max_iter=plan.total_sweeps, n_runs=n_chains, tol=None,
                    rng=rng, select="all", callback=callback, checkpoint=checkpoint,
                    checkpoint_every=checkpoint_every, resume=resume, progress=verbose,
                    desc="NBCE Gibbs", run_name="chain", unit="sweep")
        return ChainRuns(fit.runs, bool(fit.stopped))

    def one(c):
        return drive(_OneChain(plan.engine, c), max_iter=plan.total_sweeps, n_runs=1,
                     tol=None, select="all", progress=verbose,
                     desc=f"NBCE Gibbs chain {c + 1}", unit="sweep").runs[0]

    with ThreadPoolExecutor(max_workers=plan.workers) as pool:
        return ChainRuns(list(pool.map(one, range(n_chains))), False)


def _collect(plan: ChainPlan, chains: ChainRuns, n_labels) -> dict:
    """Stack the chains' draws over (chain, draw), the component axis padded with empty
    components to the largest table size any chain reached."""
    engine = plan.engine
    C = len(chains.runs)
    T = max([engine.T] + [run.params.gibbs.T for run in chains.runs])
    for run in chains.runs:
        _widen_draws(run.params.draws, T)
    empty = engine._empty_draws(T)
    out = {key: np.zeros((C,) + v.shape, dtype=v.dtype) for key, v in empty.items()}
    out["log_joint_trace"] = np.full((C, plan.total_sweeps), np.nan)
    out["n_draws"] = np.zeros(C, dtype=np.int64)
    out["move_stats"] = np.zeros((C, 7), dtype=np.int64)
    for c, run in enumerate(chains.runs):
        for key, v in run.params.draws.items():
            out[key][c] = v
        run.params.draws = {}  # stacked: each chain's copy goes as soon as it is in out
        out["log_joint_trace"][c, :len(run.objectives)] = run.objectives
        out["n_draws"][c] = run.params.n_draws
        out["move_stats"][c] = run.params.gibbs.stats
    out.update(stopped=chains.stopped, prior=engine.prior.name, truncation=T, thin=engine.thin,
               unbounded=engine.unbounded, n_labels=np.asarray(n_labels, dtype=np.int64))
    return out


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
    n_split_merge=None,
    n_jobs=None,
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

    Each iteration of a chain is a systematic Gibbs sweep over the points,
    ``n_split_merge`` split-merge moves and as many moves of groups of identical rows,
    adjacent label swaps (TSB) and slice updates of ``alpha0 | z`` and ``beta | x, z``
    (:meth:`GibbsState.iterate`).  The pieces: :func:`_plan` (arguments checked, a
    :class:`ChainPlan`), :func:`_run_chains` (:class:`ChainRuns`), :func:`_collect`.

    Parameters
    ----------
    idx : int array, shape (N, M), or a pair ``(codes, offsets)``
        Global label index (:meth:`Ensemble.offset_index`), ``-1`` missing, read as
        int16 when it is int16 (no copy: fewer than 32,768 labels), else as int32; or
        the labels' codes per column (N, M) (``-1`` missing) with each column's offset
        (M,), read as C-ordered codes of their own type (:func:`~consensuskit.models.
        nbce.gibbs.rows.sampler_rows`: int8 codes take half the int16 index's memory).
    n_labels : int array, shape (M,)
        ``k_j``.
    truncation : int or None
        T, the number of components; ``None`` (TSB only): no truncation -- the
        untruncated stick-breaking prior, whose tables start at
        :data:`INITIAL_TABLE_SIZE` components and grow (:class:`GibbsState`).
    prior : {"tsb", "fsd"} or a :class:`~consensuskit.models.nbce.priors.PartitionPrior`
    alpha0, beta : float
        Fixed values, or starting values when ``update_hyperparameters``.
    update_hyperparameters : bool
        Slice-sample alpha0 and beta once per sweep (see module docstring).
    n_samples, burn_in : int
        Per chain: ``burn_in`` discarded sweeps, then ``n_samples`` retained draws.
    thin : int or None
        One draw kept every ``thin`` sweeps (None: :func:`default_thin`, 1 to 5 by the
        ensemble's size).
    n_chains : int
    n_split_merge : int or None
        Split-merge proposals per sweep, and as many moves of groups of identical
        rows (None: :func:`_default_split_merge`; 0: single-site Gibbs only).
    n_jobs : int, -1 or None
        Threads the chains run on (None: numba's thread setting); the draws do not
        depend on it.  With a ``callback``, ``checkpoint`` or ``resume`` the chains run
        one after the other.
    init : None or int array (N,) or (n_chains, N)
        Initial indicators; default uniform at random over the T components (the
        first T-1 without truncation).
    random_state : None, int or RandomState
        Draws one seed per chain; each chain then has its own generator.
    store_counts : bool or "auto"
        Keep each draw's ``label_counts`` / ``col_counts``; "auto": if they take at most
        256 MB at the initial T (else :func:`draw_counts` recomputes them from ``z``).
    store_z : bool
        Keep the retained indicators (for co-clustering and the point consensus).
    callback, checkpoint, checkpoint_every, resume
        As in :func:`consensuskit.inference.driver.fit`: the snapshot after every sweep
        has ``chain``, ``iteration`` (sweeps done in this chain), ``draws`` (retained so
        far in it), ``gibbs`` (the :class:`GibbsState`), ``state`` (the :class:`Chain`),
        ``chain_seeds`` and ``rng`` (the generator's state).  A resumed run's later
        sweeps are those of the uninterrupted run.

    Returns
    -------
    dict with arrays over (chain, draw):
        ``z`` (C, S, N) int16, int32 beyond 32,768 components (:func:`draw_z_dtype`; if
        store_z), ``counts`` (C, S, T) int64,
        ``label_counts`` (C, S, T, L) int32, ``col_counts`` (C, S, T, M) int32
        (if stored, see ``store_counts``),
        ``log_joint`` (C, S), ``n_occupied`` (C, S), ``alpha0`` (C, S), ``beta`` (C, S);
        ``log_joint_trace`` (C, sweeps) (every sweep, burn-in included);
        ``n_draws`` (C,) draws retained per chain; ``move_stats`` (C, 7) int64: accepted
        splits, accepted merges, proposed splits, proposed merges, splits impossible for
        want of an empty component, slice updates that kept the old value, group moves
        that changed a component; ``stopped`` (the callback stopped the run); and
        ``thin`` (the sweeps per draw used), ``prior``, ``truncation`` (T: without
        truncation the largest table size reached, whose last component is empty in
        every draw), ``unbounded``, ``n_labels``.
    """
    rng = check_random_state(random_state)
    rows = sampler_rows(idx)
    plan = _plan(rows, n_labels, truncation, prior=prior, alpha0=alpha0, beta=beta,
                 update_hyperparameters=update_hyperparameters, hyper_prior=hyper_prior,
                 n_samples=n_samples, burn_in=burn_in, thin=thin, n_chains=n_chains,
                 n_split_merge=n_split_merge, n_jobs=n_jobs, init=init, rng=rng,
                 store_z=store_z, store_counts=store_counts, callback=callback,
                 checkpoint=checkpoint, resume=resume)
    chains = _run_chains(plan, int(n_chains), rng, verbose, callback, checkpoint,
                         checkpoint_every, resume)
    return _collect(plan, chains, n_labels)
