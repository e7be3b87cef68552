"""Per-row predictive log-likelihood and memberships of any spec, from Pyro's own machinery.

For a spec that follows the convention of :mod:`consensuskit.models` (a ``"rows"`` plate at
dim -1, labels observed inside it, discrete per-row latents marked for enumeration) and
fixed values of its global sites (a point estimate or one posterior draw), the log
predictive probability of row ``i`` is::

    log p(x_i | globals) = log E_{u_i ~ p(u_i | globals)} [ sum_{z_i} p(x_i, z_i | u_i, globals) ]

where ``u_i`` are the row's continuous latents (e.g. BCE's ``theta_i``) and ``z_i`` its
enumerated ones.  The sum over ``z_i`` is exact: the model is run under
:class:`pyro.poutine.enum` and its factors are contracted with
:func:`pyro.ops.contract.contract_to_tensor` down to the ``rows`` plate, as
``TraceEnum_ELBO`` does.  The expectation over ``u_i`` is importance sampling with the
prior as proposal (likelihood weighting): ``S`` particles in a vectorised plate; with no
continuous local latent (MM, NBCE) one particle gives the exact value and zero error.

The same contraction, kept open over an enumerated membership site, gives its posterior
(MM's ``z_i``); a continuous membership site (BCE's ``theta_i``) gets its
importance-weighted posterior mean.

A *collapsed* spec, whose rows plate holds only an observed site with the exact row
marginal (:func:`consensuskit.models.bce.spec.model_collapsed`), needs neither: its log density
is the exact ``log p(x_i | globals)`` (zero variance), and if that row distribution has a
``membership(value)`` method (n, K) it is the row's membership.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np
import pyro
import torch
from pyro import poutine
from pyro.ops import packed
from pyro.ops.contract import contract_to_tensor
from pyro.poutine.util import site_is_subsample

__all__ = ["RowScores", "SiteRoles", "site_roles", "score_rows", "score_rows_draws",
           "row_log_weights",
           "logmeanexp_rows", "combine_draws"]

ROWS = "rows"
_PARTICLES = "_ck_particles"


@dataclass
class SiteRoles:
    """Which sample sites of a spec are global, row-local, enumerated or observed;
    ``scaled``: the observed row sites whose log-density carries a scale other than 1
    (``poutine.scale``), which every per-row score then counts times that scale."""

    globals: list
    locals: list
    enumerated: list
    observed: list
    max_plate_nesting: int
    membership: str | None
    scaled: list = field(default_factory=list)


@dataclass
class RowScores:
    """Per-row results of :func:`score_rows`.

    log_lik : ndarray (n,)   estimate of ``log p(x_i | globals)``
    var : ndarray (n,)       its Monte-Carlo variance (delta method; 0 when exact)
    membership : ndarray (n, K) or None
    """

    log_lik: np.ndarray
    var: np.ndarray
    membership: np.ndarray | None = None


def _frames(site):
    return [f.name for f in site["cond_indep_stack"] if f.vectorized]


def site_roles(model, labels, model_kwargs, n_clusters=None) -> SiteRoles:
    """Trace ``model`` once on ``labels`` and sort its sample sites by role.

    The membership site is a row-local continuous site with event shape (K,) (e.g.
    ``theta``), else an enumerated site in the rows plate alone with K values (``z``), else
    an observed row site whose distribution has a ``membership`` method (a collapsed spec).
    """
    tr = poutine.trace(model).get_trace(labels, **model_kwargs)
    roles = SiteRoles([], [], [], [], 1, None)
    nest = 1
    for name, site in tr.nodes.items():
        if site["type"] != "sample" or site_is_subsample(site):
            continue
        frames = _frames(site)
        nest = max(nest, len(frames))
        if site["is_observed"]:
            roles.observed.append(name)
            if ROWS in frames and _scaled(site["scale"]):
                roles.scaled.append(name)
        elif ROWS not in frames:
            roles.globals.append(name)
        elif site["infer"].get("enumerate") == "parallel":
            roles.enumerated.append(name)
        else:
            roles.locals.append(name)
    roles.max_plate_nesting = nest
    K = n_clusters
    for name in roles.locals:
        ev = tr.nodes[name]["fn"].event_shape
        if len(ev) == 1 and (K is None or ev[0] == K):
            roles.membership = name
            break
    else:
        for name in roles.enumerated:
            if _frames(tr.nodes[name]) == [ROWS]:
                roles.membership = name
                break
        else:
            for name in roles.observed:
                if _row_membership(tr.nodes[name]["fn"]) is not None:
                    roles.membership = name
                    break
    return roles


def _scaled(scale) -> bool:
    """A site's scale other than 1 anywhere (a number or a tensor of weights)."""
    if torch.is_tensor(scale):
        return not bool((scale == 1).all())
    return scale != 1


def _row_membership(fn):
    """The ``membership(value)`` method of an observed row distribution (a collapsed spec's,
    e.g. :class:`~consensuskit.models.bce.marginal.BCERowMarginal`), through Pyro's
    expand/mask wrappers; None if it has none."""
    while fn is not None:
        if callable(getattr(fn, "membership", None)):
            return fn.membership
        fn = getattr(fn, "base_dist", None)
    return None


def row_log_weights(model, labels, globals_, model_kwargs, roles, num_particles):
    """Likelihood-weighting log weights ``log sum_{z_i} p(x_i, z_i | u_i^s, globals)``,
    a tensor (S, n) that keeps its graph (gradients flow to ``globals_`` and, through
    reparametrised prior draws, to the hyper-parameters of the local latents ``u``)."""
    return _row_log_weights(model, labels, globals_, model_kwargs, roles, num_particles)[0]


def _row_log_weights(model, labels, globals_, model_kwargs, roles, num_particles,
                     membership=None):
    P = roles.max_plate_nesting
    S = num_particles if roles.locals else 1
    cond = poutine.condition(model, data=globals_)

    def vectorised():
        if S == 1:  # exact: no particle plate (a size-1 dim is in no packed factor)
            return cond(labels, **model_kwargs)
        with pyro.plate(_PARTICLES, S, dim=-(P + 1)):
            return cond(labels, **model_kwargs)

    tr = poutine.trace(poutine.enum(vectorised, first_available_dim=-(P + 2))).get_trace()
    tr.compute_log_prob()
    tr.pack_tensors()
    sym = tr.plate_to_symbol
    tree, sum_dims, member_symbol, member_dim = OrderedDict(), set(), None, None
    for name, site in tr.nodes.items():
        if site["type"] != "sample" or site_is_subsample(site) or ROWS not in _frames(site):
            continue
        enum_symbol = site["infer"].get("_enumerate_symbol")
        if not (site["is_observed"] or enum_symbol is not None):
            continue  # a local latent drawn from its prior: its density cancels
        ordinal = frozenset(sym[f] for f in _frames(site))
        tree.setdefault(ordinal, []).append(site["packed"]["log_prob"])
        if enum_symbol is not None:
            sum_dims.add(enum_symbol)
            if name == membership:
                member_symbol, member_dim = enum_symbol, site["infer"]["_enumerate_dim"]
    # size-1 dims (one row, one particle) appear in no packed factor: leave them out
    present = set().union(*(t._pyro_dims for terms in tree.values() for t in terms))
    target = frozenset(d for d in ({sym[_PARTICLES], sym[ROWS]} if S > 1 else {sym[ROWS]})
                       if d in present)
    n = labels.shape[0]

    def particles_by_rows(t):
        t = t.reshape(t.shape[-(P + 1)] if t.dim() > P else 1, -1)
        return t.expand(S, n) if t.shape[0] == S else t.reshape(1, -1).expand(S, n)

    lw = packed.unpack(contract_to_tensor(tree, sum_dims, target_ordinal=target),
                       tr.symbol_to_dim)
    lw = particles_by_rows(lw).double()  # (S, n)
    return lw, (tr, tree, sum_dims, target, member_symbol, member_dim, S, n, P)


def _score_chunk(model, labels, globals_, model_kwargs, roles, num_particles, membership):
    lw, (tr, tree, sum_dims, target, member_symbol, member_dim, S, n, P) = _row_log_weights(
        model, labels, globals_, model_kwargs, roles, num_particles, membership)
    ll, ll_var = logmeanexp_rows(lw)
    m = None
    if membership in roles.observed:  # exact, from the row distribution
        site = tr.nodes[membership]
        m = _row_membership(site["fn"])(site["value"]).detach().double()
        m = m.reshape(-1, n, m.shape[-1])[0]
    elif membership in roles.locals:
        v = tr.nodes[membership]["value"]
        v = v.reshape(S, n, v.shape[-1]).double()
        w = torch.softmax(lw, 0)
        m = (w[..., None] * v).sum(0)
    elif member_symbol is not None:
        lz = packed.unpack(contract_to_tensor(tree, sum_dims, target_ordinal=target,
                                              target_dims={member_symbol}), tr.symbol_to_dim)
        lz = lz.unsqueeze(-1).transpose(-1, member_dim - 1)  # enum values last
        K = lz.shape[-1]
        lz = lz.reshape(-1, n, K) if lz.shape[-(P + 2)] == S else lz.reshape(1, n, K)
        m = torch.softmax(torch.logsumexp(lz.double(), 0), -1)
    return ll.cpu().numpy(), ll_var.cpu().numpy(), m


def logmeanexp_rows(lw: torch.Tensor, log_q: torch.Tensor | None = None):
    """Per row of ``lw`` (S, n): ``log mean_s exp lw[s, i]`` and its delta-method variance (n,).

    ``log_q`` (S, n), optional: each particle's log proposal probability of what it drew
    (a discrete proposal).  A row whose particles all carry one weight has sample variance
    0, yet the proposal gave what it did not draw the mass ``delta = 1 - max_s q_s``, and
    the weight drawn is off by about that share (issue 24: 4e-5 nats over 58 rows with an
    SE of 0).  Such a row's variance is then ``delta (1 - delta) / S``: the delta-method
    variance of the estimate if the undrawn outcomes had weight 0."""
    S = lw.shape[0]
    mx = lw.max(0).values
    w = torch.exp(lw - mx)
    mean = w.mean(0)
    var = w.var(0) / (S * mean**2) if S > 1 else torch.zeros_like(mean)
    if log_q is not None:
        one_weight = mx == lw.min(0).values
        # the proposal mass not drawn (log q <= 0 but for rounding)
        delta = (-torch.expm1(log_q.max(0).values)).clamp(min=0.0)
        var = torch.where(one_weight, delta * (1.0 - delta) / S, var)
    return torch.log(mean) + mx, var


def score_rows(model, labels, globals_, *, model_kwargs, roles: SiteRoles,
               num_particles=1000, membership=False, chunk_size=None,
               seed=None) -> RowScores:
    """Per-row ``log p(x_i | globals)`` (and memberships) of ``labels`` (n, M).

    Parameters
    ----------
    model : callable following the spec convention
    labels : LongTensor (n, M)
    globals_ : dict site name -> value (one point of the global sites)
    model_kwargs : dict
        ``n_labels``, ``n_clusters`` and any hyper-parameters (not ``n_rows``).
    roles : SiteRoles from :func:`site_roles`
    num_particles : int
        Importance samples per row for the continuous local latents.
    membership : bool
        Also return the posterior membership of each row, (n, K).
    chunk_size : int, optional
        Rows per vectorised pass (default: about 2e6 / (S * M * K) rows).
    seed : int, optional
        Seeds the particles (the global RNG state is restored afterwards).
    """
    n, M = labels.shape
    K = int(model_kwargs.get("n_clusters", 8))
    S = num_particles if roles.locals else 1
    chunk = chunk_size or max(1, int(4e6 // (S * M * K)))
    lls, vs, ms = [], [], []
    with torch.random.fork_rng(), poutine.block():
        if seed is not None:
            pyro.set_rng_seed(int(seed))
        for start in range(0, n, chunk):
            args = (model, labels[start:start + chunk], globals_, model_kwargs, roles,
                    num_particles, roles.membership if membership else None)
            ll, v, m = _score_chunk(*args)
            lls.append(ll)
            vs.append(v)
            ms.append(None if m is None else m.cpu().numpy())
    mem = None if not membership or ms[0] is None else np.concatenate(ms)
    return RowScores(np.concatenate(lls), np.concatenate(vs), mem)


def score_rows_draws(model, labels, draws, *, model_kwargs, roles, num_particles=500,
                     membership=False, seed=None, progress=False):
    """:func:`score_rows` for every posterior draw of the global sites.

    ``draws``: dict site -> tensor (D, ...).  Returns ``(log_lik (D, n), var (D, n),
    membership (D, n, K) or None)``.
    """
    D = len(next(iter(draws.values()))) if draws else 1
    it = range(D)
    if progress:
        from tqdm.auto import tqdm

        it = tqdm(it, desc="scoring draws")
    L, V, Ms = [], [], []
    for d in it:
        sc = score_rows(model, labels, {k: v[d] for k, v in draws.items()},
                        model_kwargs=model_kwargs, roles=roles, num_particles=num_particles,
                        membership=membership, seed=None if seed is None else seed + d)
        L.append(sc.log_lik)
        V.append(sc.var)
        Ms.append(sc.membership)
    mem = np.stack(Ms) if membership and Ms[0] is not None else None
    return np.stack(L), np.stack(V), mem


def combine_draws(L, V):
    """Posterior predictive per row from per-draw estimates: ``log mean_d p_di``.

    ``L``, ``V``: (D, n) per-draw log-likelihoods and their Monte-Carlo variances.
    Returns ``(log_lik (n,), var (n,))``; the variance adds the importance-sampling
    error of each draw and, with ``D > 1``, the spread over draws treated as
    independent (the Monte-Carlo error of the posterior average).
    """
    D = L.shape[0]
    mx = L.max(0)
    w = np.exp(L - mx)
    mean = w.mean(0)
    ll = np.log(mean) + mx
    r = w / mean
    var = (r**2 * V).sum(0) / D**2
    if D > 1:
        var = var + r.var(0, ddof=1) / D
    return ll, var




