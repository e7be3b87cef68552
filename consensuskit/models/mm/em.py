"""MAP-EM for the mixture model of consensus (Topchy, Jain & Punch, 2004), in torch.

Notation (the paper's symbols in brackets):

* ``N`` points, ``M`` base clusterings (the paper's ``H``), column ``j`` has
  ``k_j`` labels (``K(j)``); ``K`` consensus clusters (the paper's ``M``);
* ``pi`` (K,) mixing weights (``alpha_m``); ``theta_jk`` (k_j,) label
  distribution of column ``j`` in component ``k`` (``vartheta_jm``), stored
  for all columns at once as ``log_theta`` of shape (K, V) on the *global
  vocabulary* of size ``V = sum_j k_j``: column ``j`` owns the block
  ``offsets[j]:offsets[j+1]`` (see :meth:`consensuskit.data.ensemble.Ensemble.offsets`);
* responsibilities ``E[z_ik]`` (eq. 13-14) as a (K, N) array ``resp``.

Every array that grows with ``N`` keeps ``N`` as its last, contiguous axis.

Priors and objective.  The engine maximises the *penalised* log-likelihood

    F(pi, theta) = sum_i log sum_k pi_k prod_{j observed in i} theta_jk(x_ij)
                   + log Dir(pi | b 1_K) + sum_{j,k} log Dir(theta_jk | a 1_{k_j})

with ``a = label_prior >= 1`` and ``b = weight_prior >= 1`` (MAP-EM; ``a = b = 1``
is the paper's maximum likelihood).  Missing labels are left out of the
products (the paper's ``prod_j -> prod_{j observed}``).  The M-step is the
closed form maximiser of ``Q + log prior``:

    pi_k        = (N_k + b - 1) / (N + K (b - 1)),       N_k = sum_i E[z_ik]
    theta_jk(r) = (C_jk(r) + a - 1) / (sum_r' C_jk(r') + k_j (a - 1)),
    C_jk(r)     = sum_{i: x_ij = r} E[z_ik]

so ``F`` never decreases between iterations.  The Dirichlet normalising
constants are included, so ``F`` equals the log joint density of the Pyro
model :func:`consensuskit.models.mm.spec.model` with ``z`` summed out.

Speed: grouped joint codes.  A plain E-step gathers ``M`` times from
(K, k_j) tables.  Here consecutive columns are grouped so that the product of
their (possibly missing-extended) label counts stays below ``max_table``; each
group gets a joint code per row (mixed radix) and a (K, prod_j s_j) table of
summed log-probabilities, so the E-step gathers once per *group*
(``M / group size`` times) and the M-step scatters responsibilities once per
group into a joint-count table whose marginals are the per-column counts
``C_jk``.  Arithmetic is identical to the per-column formulas (sums are only
re-associated).  A missing label of column ``j`` gets slot 0 of that column's
extended table, whose log-probability is 0 and whose counts are discarded.

On CPU an iteration runs as two fused numba calls (:mod:`._mm_numba`): one pass over
the rows gives the responsibilities, the log-likelihood and the groups' joint counts
together, and the M-step works from those counts, so no per-column torch operation
is left whose fixed cost would dominate at small N (the torch functions below are the
reference and the path on other devices).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from consensuskit.data.ensemble import LabelData
from consensuskit.inference.driver import Engine
from consensuskit.inference.driver import fit as drive

__all__ = [
    "MMLayout",
    "EM",
    "EMState",
    "prepare",
    "log_likelihood_matrix",
    "e_step",
    "e_step_counts",
    "m_step",
    "m_step_counts",
    "label_counts",
    "log_prior",
    "objective",
    "init_params",
    "run_em",
    "fit_em",
]


@dataclass
class MMLayout:
    """Device-resident layout of an ensemble for the EM engine.

    Attributes
    ----------
    n_samples : int
        ``N``.
    n_labels : ndarray of int64, shape (M,)
        ``k_j``.
    offsets : ndarray of int64, shape (M + 1,)
        Start of each column's block in the global vocabulary.
    has_missing : ndarray of bool, shape (M,)
        Whether column ``j`` has a missing label (then its slots are ``k_j + 1``).
    groups : list of ndarray of int
        Column indices of each group, consecutive.
    codes : torch integer tensor, shape (n_groups, N)
        Joint code of each row in each group (mixed radix, last column fastest), in the
        smallest of int16/int32/int64 that holds the largest table on the CPU (int16 for
        tables below 32768 entries: 0.7 bytes per label at M = 20, k_j = 10, where int64
        took 2.8), at least int32 elsewhere; :meth:`group_index` gives a group's codes
        as an index torch's gathers take.
    device, dtype : torch.device, torch.dtype
        Where and in which precision the parameters live.
    """

    n_samples: int
    n_labels: np.ndarray
    offsets: np.ndarray
    has_missing: np.ndarray
    groups: list
    codes: torch.Tensor
    device: torch.device
    dtype: torch.dtype
    _meta: tuple | None = field(default=None, repr=False)

    @property
    def n_partitions(self) -> int:
        return int(self.n_labels.size)

    @property
    def n_total_labels(self) -> int:
        return int(self.offsets[-1])

    def group_index(self, g: int) -> torch.Tensor:
        """Group ``g``'s codes (N,) as an int64 index (a copy only when stored narrower)."""
        c = self.codes[g]
        return c if c.dtype == torch.int64 else c.long()

    def slots(self, j: int) -> int:
        """Number of table entries of column ``j`` (``k_j``, +1 if it has missing labels)."""
        return int(self.n_labels[j] + self.has_missing[j])

    def group_meta(self) -> tuple:
        """``(offsets, slots, has_missing, group_start, table_offsets)`` as int64 arrays.

        The layout of the fused CPU kernels (:mod:`._mm_numba`): group ``g`` covers
        columns ``group_start[g]:group_start[g+1]``; its joint table has
        ``prod slots`` entries starting at ``table_offsets[g]``.
        """
        if self._meta is None:
            slots = (self.n_labels + self.has_missing).astype(np.int64)
            sizes = [math.prod(int(slots[j]) for j in cols) for cols in self.groups]
            gstart = np.concatenate([[0], np.cumsum([len(c) for c in self.groups])])
            toff = np.concatenate([[0], np.cumsum(sizes)])
            self._meta = (self.offsets.astype(np.int64), slots,
                          self.has_missing.astype(np.int64), gstart.astype(np.int64),
                          toff.astype(np.int64))
        return self._meta

    @property
    def fused(self) -> bool:
        """Whether the fused CPU kernels run this layout (CPU tensors)."""
        return self.device.type == "cpu"


def prepare(codes, n_labels=None, *, device="cpu", dtype=torch.float64,
            max_table="auto") -> MMLayout:
    """Lay out a coded label matrix for the engine.

    Parameters
    ----------
    codes : LabelData, or ndarray of int, shape (N, M)
        The labels as every engine gets them (:meth:`Ensemble.label_data`; its device and
        dtype are then used), or coded ``0..k_j-1`` per column, ``-1`` missing
        (``Ensemble.codes``).
    n_labels : array-like of int, shape (M,)
        ``k_j`` (with a codes array); every code in column ``j`` must be below it.
    device, dtype
        torch device and floating dtype of the parameters.
    max_table : int or "auto"
        Largest joint table (product of slots) of a column group; 1 column per
        group when a single column is already larger.  ``"auto"``:
        ``clip(N // 8, 64, cap)``, so tables stay small beside N; ``cap`` is ``2**12``
        on CPU, where the fused kernel keeps every group's (T, K) log-probability and
        count tables in the core's cache (k_j = 5: groups of 5 columns from N = 25000
        on, so the work per row no longer shrinks as N grows), and ``2**17`` on other
        devices, where fewer, larger gathers pay (k_j = 5, N = 1e6: groups of 7).

    Returns
    -------
    MMLayout
    """
    if isinstance(codes, LabelData):
        data = codes
        n_labels, device, dtype = data.n_labels, data.idx.device, data.n_observed_rows.dtype
        idx = data.idx.cpu().numpy()
        codes = np.where(idx < data.n_total_labels, idx - data.offsets[:-1, None], -1).T
    codes = np.asarray(codes)
    if codes.ndim != 2:
        raise ValueError(f"codes must be 2-D (N, M); got shape {codes.shape}")
    n_labels = np.asarray(n_labels, dtype=np.int64)
    N, M = codes.shape
    if n_labels.shape != (M,):
        raise ValueError(f"n_labels must have shape ({M},); got {n_labels.shape}")
    for j in range(M):  # a column at a time: no (N, M) temporaries
        col = codes[:, j]
        if (col < -1).any() or (col >= n_labels[j]).any():
            raise ValueError("codes must lie in -1..k_j-1 for column j")
    dev = torch.device(device)
    if isinstance(max_table, str) and max_table == "auto":
        max_table = int(np.clip(N // 8, 64, 2**12 if dev.type == "cpu" else 2**17))
    if max_table < 1:
        raise ValueError(f"max_table must be >= 1 or 'auto'; got {max_table}")
    has_missing = np.array([(codes[:, j] < 0).any() for j in range(M)], dtype=bool)
    slots = n_labels + has_missing
    groups, cur, size = [], [], 1
    for j in range(M):
        if cur and size * slots[j] > max_table:
            groups.append(np.array(cur))
            cur, size = [], 1
        cur.append(j)
        size *= int(slots[j])
    groups.append(np.array(cur))
    largest = max(math.prod(int(slots[j]) for j in cols) for cols in groups)
    kinds = (np.int16, np.int32, np.int64) if dev.type == "cpu" else (np.int32, np.int64)
    code_type = next(t for t in kinds if largest - 1 <= np.iinfo(t).max)
    joint = np.empty((len(groups), N), dtype=code_type)
    c = np.empty(N, dtype=np.int64)
    for g, cols in enumerate(groups):
        c[:] = 0
        for j in cols:
            c *= slots[j]
            c += codes[:, j]
            c += has_missing[j]
        joint[g] = c
    return MMLayout(
        n_samples=N,
        n_labels=n_labels,
        offsets=np.concatenate([[0], np.cumsum(n_labels)]).astype(np.int64),
        has_missing=has_missing,
        groups=groups,
        codes=torch.from_numpy(joint).to(dev),
        device=dev,
        dtype=dtype,
    )


def _group_table(layout: MMLayout, log_theta: torch.Tensor, cols) -> torch.Tensor:
    """(K, prod_j s_j) table of ``sum_j log theta_jk(slot_j)`` for one column group."""
    K = log_theta.shape[0]
    tab = None
    for j in cols:
        block = log_theta[:, layout.offsets[j] : layout.offsets[j + 1]]
        if layout.has_missing[j]:
            block = torch.cat([block.new_zeros(K, 1), block], dim=1)
        tab = block if tab is None else (tab[:, :, None] + block[:, None, :]).reshape(K, -1)
    return tab


def log_likelihood_matrix(layout: MMLayout, log_pi, log_theta, *, out=None, tmp=None):
    """``log pi_k + sum_{j observed} log theta_jk(x_ij)``.

    Parameters
    ----------
    layout : MMLayout
    log_pi : Tensor, shape (K,)
    log_theta : Tensor, shape (K, V)
    out : Tensor, shape (K, N), optional
    tmp : Tensor, shape (N,), optional
        Work buffers reused across iterations (avoids re-allocating and
        page-faulting them at every E-step).

    Returns
    -------
    Tensor, shape (K, N)
        Unnormalised log responsibilities ``log pi_k P_k(y_i)`` (eq. 13
        numerator); this is ``out`` when given.
    """
    K, N = log_theta.shape[0], layout.n_samples
    if out is None:
        out = log_theta.new_empty(K, N)
    for g, cols in enumerate(layout.groups):
        tab = _group_table(layout, log_theta, cols)
        if g == 0:
            tab = tab + log_pi[:, None]  # fold log pi into the first (small) table
            torch.index_select(tab, 1, layout.group_index(g), out=out)
            continue
        if tmp is None:
            tmp = log_theta.new_empty(N)
        index = layout.group_index(g)
        for k in range(K):  # one row at a time: the scratch buffer is (N,), not (K, N)
            torch.index_select(tab[k], 0, index, out=tmp)
            out[k] += tmp
    return out


def e_step(layout: MMLayout, log_pi, log_theta, *, work=None):
    """E-step (eq. 13-14 with missing labels skipped).

    Parameters
    ----------
    work : tuple of Tensors of shapes (K, N) and (N,), optional
        Work buffers ``(out, tmp)`` for :func:`log_likelihood_matrix`.

    Returns
    -------
    resp : Tensor, shape (K, N)
        Posterior responsibilities ``E[z_ik]``; columns sum to 1.
    loglik : float
        ``sum_i log sum_k pi_k P_k(y_i)`` (eq. 3), accumulated in float64.

    Notes
    -----
    With ``L`` the log numerators, ``m_i = max_k L_ki`` and ``r_ki`` the
    softmax, ``max_k r_ki = 1 / sum_k exp(L_ki - m_i)``, so
    ``log sum_k exp L_ki = m_i - log max_k r_ki``: the log-likelihood comes
    from the fused softmax without a second pass of ``exp``.
    """
    if layout.fused:
        resp, ll, _ = e_step_counts(layout, log_pi, log_theta)
        return resp, ll
    out, tmp = work if work is not None else (None, None)
    L = log_likelihood_matrix(layout, log_pi, log_theta, out=out, tmp=tmp)
    mx = L.amax(dim=0)
    resp = torch.softmax(L, dim=0)
    rmax = resp.amax(dim=0).log_()
    mx -= rmax  # per-row log-likelihood, in place
    return resp, float(mx.sum(dtype=torch.float64))


def e_step_counts(layout: MMLayout, log_pi, log_theta):
    """E-step with the groups' joint counts, in one pass (fused CPU kernel).

    Returns
    -------
    resp : Tensor, shape (K, N)
    loglik : float
    counts : ndarray of float64, shape (T, K)
        ``sum_{i: code_g(i) = t} E[z_ik]`` for the entries ``t`` of every group's joint
        table (:meth:`MMLayout.group_meta`); :func:`m_step_counts` takes them.
    """
    from consensuskit.models.mm.kernels import e_pass

    K, N = log_theta.shape[0], layout.n_samples
    resp = np.empty((K, N), dtype=_np_dtype(layout.dtype))
    ll, counts = e_pass(log_pi.detach().numpy(), log_theta.detach().numpy(),
                        layout.codes.numpy(), *layout.group_meta(), resp)
    return torch.from_numpy(resp), float(ll), counts


def m_step_counts(layout: MMLayout, counts, *, label_prior=1.0, weight_prior=1.0):
    """:func:`m_step` from the joint counts of :func:`e_step_counts` (fused CPU kernel)."""
    from consensuskit.models.mm.kernels import m_pass

    probe = np.empty(0, dtype=_np_dtype(layout.dtype))
    log_pi, log_theta = m_pass(counts, *layout.group_meta(), float(label_prior),
                               float(weight_prior), probe)
    return torch.from_numpy(log_pi), torch.from_numpy(log_theta)


def _np_dtype(dtype: torch.dtype):
    return torch.empty(0, dtype=dtype).numpy().dtype


def label_counts(layout: MMLayout, resp, *, return_totals=False):
    """``C_jk(r) = sum_{i: x_ij = r} E[z_ik]`` on the global vocabulary, shape (K, V).

    With ``return_totals`` also ``N_k = sum_i E[z_ik]`` (K,), read off the
    first group's joint table (whose slots cover every row) instead of a
    separate pass over ``resp``.
    """
    K = resp.shape[0]
    C = resp.new_zeros(K, layout.n_total_labels)
    Nk = None
    for g, cols in enumerate(layout.groups):
        shape = [layout.slots(j) for j in cols]
        tab = resp.new_zeros(K, math.prod(shape))
        tab.index_add_(1, layout.group_index(g), resp)
        if g == 0:
            Nk = tab.sum(dim=1)
        tab = tab.reshape(K, *shape)
        for pos, j in enumerate(cols):
            other = [d + 1 for d in range(len(cols)) if d != pos]
            marg = tab.sum(dim=other) if other else tab
            if layout.has_missing[j]:
                marg = marg[:, 1:]
            C[:, layout.offsets[j] : layout.offsets[j + 1]] = marg
    return (C, Nk) if return_totals else C


def m_step(layout: MMLayout, resp, *, label_prior=1.0, weight_prior=1.0):
    """MAP M-step (eq. 17, 19 with Dirichlet pseudo-counts ``a - 1`` and ``b - 1``).

    Parameters
    ----------
    resp : Tensor, shape (K, N)
    label_prior : float >= 1
        ``a``, symmetric Dirichlet concentration of every ``theta_jk``.
    weight_prior : float >= 1
        ``b``, symmetric Dirichlet concentration of ``pi``.

    Returns
    -------
    log_pi : Tensor, shape (K,)
    log_theta : Tensor, shape (K, V)
    """
    K = resp.shape[0]
    C, Nk = label_counts(layout, resp, return_totals=True)
    pi = Nk + (weight_prior - 1.0)
    pi_tot = pi.sum()
    pi = pi / pi_tot if pi_tot > 0 else torch.full_like(pi, 1.0 / K)
    C += label_prior - 1.0
    log_theta = torch.empty_like(C)
    for j in range(layout.n_partitions):
        sl = slice(layout.offsets[j], layout.offsets[j + 1])
        block = C[:, sl]
        tot = block.sum(dim=1, keepdim=True)
        uniform = torch.full_like(block, 1.0 / block.shape[1])
        theta = torch.where(tot > 0, block / tot.clamp_min(torch.finfo(C.dtype).tiny), uniform)
        log_theta[:, sl] = theta.log()
    return pi.log(), log_theta


def _xlogy_sum(coef: float, log_x: torch.Tensor) -> float:
    """``coef * sum(log_x)`` with ``0 * log 0 = 0``."""
    if coef == 0.0:
        return 0.0
    return coef * float(log_x.to(torch.float64).sum())


def log_prior(log_pi, log_theta, n_labels, *, label_prior=1.0, weight_prior=1.0) -> float:
    """``log Dir(pi | b) + sum_{j,k} log Dir(theta_jk | a)`` including normalisers."""
    K = int(log_pi.shape[0])
    a, b = float(label_prior), float(weight_prior)
    lp = math.lgamma(K * b) - K * math.lgamma(b) + _xlogy_sum(b - 1.0, log_pi)
    for kj in np.asarray(n_labels):
        lp += K * (math.lgamma(int(kj) * a) - int(kj) * math.lgamma(a))
    lp += _xlogy_sum(a - 1.0, log_theta)
    return lp


def objective(layout, log_pi, log_theta, *, label_prior=1.0, weight_prior=1.0):
    """``(F, loglik)``: penalised and plain log-likelihood at the given parameters."""
    _, ll = e_step(layout, log_pi, log_theta)
    lp = log_prior(
        log_pi, log_theta, layout.n_labels, label_prior=label_prior, weight_prior=weight_prior
    )
    return ll + lp, ll


def init_params(layout: MMLayout, n_clusters: int, *, generator=None):
    """Random start: ``pi`` uniform, each ``theta_jk ~ Dirichlet(1)``.

    Returns ``(log_pi (K,), log_theta (K, V))`` on ``layout.device``.
    """
    K = n_clusters
    V = layout.n_total_labels
    e = torch.empty(K, V, dtype=torch.float64).exponential_(generator=generator)
    log_theta = torch.empty(K, V, dtype=torch.float64)
    for j in range(layout.n_partitions):
        sl = slice(layout.offsets[j], layout.offsets[j + 1])
        log_theta[:, sl] = (e[:, sl] / e[:, sl].sum(dim=1, keepdim=True)).log()
    log_pi = torch.full((K,), -math.log(K), dtype=torch.float64)
    return (
        log_pi.to(device=layout.device, dtype=layout.dtype),
        log_theta.to(device=layout.device, dtype=layout.dtype),
    )


@dataclass
class EMState:
    """State (and result) of MAP-EM: parameters and the responsibilities they give.

    ``resp`` (K, N) are the responsibilities at ``(log_pi, log_theta)``, ``loglik`` the
    plain log-likelihood there and ``objective`` the penalised one ``F``; ``counts`` the
    groups' joint counts of ``resp`` (fused CPU path; None on the torch path).
    """

    log_pi: torch.Tensor
    log_theta: torch.Tensor
    resp: torch.Tensor
    loglik: float
    objective: float
    counts: np.ndarray | None = field(default=None, repr=False)


class EM(Engine):
    """MAP-EM (module docstring) as an engine of :func:`consensuskit.inference.driver.fit`.

    A run starts from ``init`` (``"random"``: :func:`init_params`; a callable
    ``init(run) -> resp`` (K, N): an M-step of those responsibilities; a tuple
    ``(log_pi, log_theta)``: those parameters) followed by an E-step, and records ``F``
    there; a step is an M-step then an E-step.  A run has converged when
    ``|F_t - F_{t-1}| <= tol |F_{t-1}|``.

    ``keep_resp=False``: a finished run's parameters come without ``resp`` (None), so that
    the best run so far does not hold a (K, N) array while the next restart runs; the
    caller recomputes it from the kept parameters (:func:`e_step`: the same values).
    """

    initial_objective = True
    #: restarts at the same optimum (k-means starts often reach it exactly) differ in
    #: ``F`` by rounding only; the fused kernel sums in another order than torch, so
    #: such ties go to the earlier restart rather than to whichever rounds higher
    tie_rtol = 1e-12

    def __init__(self, layout: MMLayout, n_clusters: int, *, label_prior=1.0,
                 weight_prior=1.0, init="random", generator=None, keep_resp=True):
        if not (callable(init) or isinstance(init, tuple) or init == "random"):
            raise ValueError(f"init must be 'random' or a callable; got {init!r}")
        self.layout = layout
        self.K = int(n_clusters)
        self.prior = dict(label_prior=label_prior, weight_prior=weight_prior)
        self.start = init
        self.generator = generator
        self.keep_resp = bool(keep_resp)
        self.work = None

    def _e_step(self, log_pi, log_theta) -> EMState:
        counts = None
        if self.layout.fused:
            resp, ll, counts = e_step_counts(self.layout, log_pi, log_theta)
        else:
            resp, ll = e_step(self.layout, log_pi, log_theta, work=self.work)
        F = ll + log_prior(log_pi, log_theta, self.layout.n_labels, **self.prior)
        return EMState(log_pi, log_theta, resp, ll, F, counts)

    def init(self, rng=None, run=0) -> EMState:
        lay = self.layout
        if callable(self.start):
            resp0 = self.start(run).to(device=lay.device, dtype=lay.dtype)
            log_pi, log_theta = m_step(lay, resp0, **self.prior)
            del resp0
        elif isinstance(self.start, tuple):
            log_pi, log_theta = self.start
        else:
            log_pi, log_theta = init_params(lay, self.K, generator=self.generator)
        if not lay.fused:
            self.work = (log_theta.new_empty(self.K, lay.n_samples),
                         log_theta.new_empty(lay.n_samples))
        return self._e_step(log_pi, log_theta)

    def step(self, state: EMState, rng=None) -> EMState:
        if state.counts is not None:
            log_pi, log_theta = m_step_counts(self.layout, state.counts, **self.prior)
        else:
            log_pi, log_theta = m_step(self.layout, state.resp, **self.prior)
        state.resp = state.counts = None  # free them before the E-step allocates anew
        return self._e_step(log_pi, log_theta)

    def result(self, state: EMState) -> EMState:
        state.counts = None
        if not self.keep_resp:
            state.resp = None
        self.work = None
        return state

    def objective(self, state: EMState) -> float:
        return state.objective

    def converged(self, objectives, tol, state) -> bool:
        return abs(objectives[-1] - objectives[-2]) <= tol * abs(objectives[-2])


def run_em(layout: MMLayout, log_pi, log_theta, *, max_iter=200, tol=1e-6, label_prior=1.0,
           weight_prior=1.0):
    """Iterate E and M steps from the given parameters (one :class:`EM` run).

    Returns the driver's :class:`~consensuskit.inference.driver.Run`: ``params`` an
    :class:`EMState`, ``objectives`` ``F`` at the start and after every iteration.
    """
    engine = EM(layout, log_theta.shape[0], label_prior=label_prior, weight_prior=weight_prior,
                init=(log_pi, log_theta))
    return drive(engine, max_iter=max_iter, tol=tol).best


def fit_em(layout: MMLayout, n_clusters: int, *, n_init=5, max_iter=200, tol=1e-6,
           label_prior=1.0, weight_prior=1.0, init="random", generator=None, verbose=False,
           keep_resp=True):
    """EM with ``n_init`` restarts; returns the run with the highest ``F`` (a driver ``Run``).

    Parameters
    ----------
    init : "random" or callable
        ``"random"``: :func:`init_params`.  A callable ``init(restart) -> resp``
        returns initial responsibilities of shape (K, N) for restart
        ``restart``; an M-step turns them into parameters (the estimator's
        ``init="kmeans"`` is such a callable).
    generator : torch.Generator, optional
        CPU generator for the random starts.
    keep_resp : bool
        False: the returned run's ``resp`` is None (see :class:`EM`).
    """
    engine = EM(layout, n_clusters, label_prior=label_prior, weight_prior=weight_prior,
                init=init, generator=generator, keep_resp=keep_resp)
    return drive(engine, max_iter=max_iter, n_runs=n_init, tol=tol, progress=verbose,
                 desc="MM EM", run_name="restart").best
