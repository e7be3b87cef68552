"""The MM spec's collapsed potential and its gradient, derived by hand (numba).

For NUTS on :mod:`consensuskit.models.mm.spec` with ``z`` summed out.  The unconstrained
parameters are Pyro's: ``u_pi`` (K-1,) and ``u_theta_j`` (K, k_j - 1), mapped to the simplex
by the stick-breaking transform ``y = SB(x)``::

    xo_l = x_l - log(k - 1 - l),  s_l = sigmoid(xo_l)
    log y_l = log s_l + sum_{m<l} log(1 - s_m)   (l < k-1),   log y_{k-1} = sum_m log(1 - s_m)
    log|det J| = sum_{l<k-1} (-xo_l + log s_l + log y_l)

and ``U = -[log Dir(pi; b) + sum_jk log Dir(theta_jk; a) + sum_i log sum_k pi_k
prod_{j observed} theta_jk(x_ij) + log|det J|]`` (Pyro's potential of the spec, constants
included).  The gradient: with ``r_ik`` the posterior of ``z_i``, ``dF/dlog pi_k = sum_i r_ik
+ b - 1`` and ``dF/dlog theta_jkl = sum_{i: x_ij = l} r_ik + a - 1``; through the transform,
with ``g_l`` the derivative with respect to ``log y_l`` plus one for ``l < k-1`` (the
Jacobian's ``log y`` term) and ``S_l = sum_{m>l} g_m``,
``dF/dx_l = g_l (1 - s_l) - s_l S_l - s_l``.  One pass over the labels, O(N M K).
"""

from __future__ import annotations

import math

import numba
import numpy as np
import torch
from pyro.distributions import constraints
from torch.distributions import biject_to

from consensuskit.inference.compiled_potential import FlatPotential

__all__ = ["mm_potential", "mm_value_and_grad", "parameter_layout"]


def parameter_layout(n_labels, n_clusters):
    """Offsets of the flat unconstrained vector and of the flat ``log theta`` table.

    Returns ``(u_offsets (M+2,), t_offsets (M+1,))``: ``u[u_offsets[0]:u_offsets[1]]`` is
    ``u_pi`` (K-1,), ``u[u_offsets[j+1]:u_offsets[j+2]]`` is ``u_theta_j`` (K, k_j-1) row-major;
    column ``t_offsets[j] + l`` of the (K, sum k_j) table is label ``l`` of column ``j``.
    """
    K = int(n_clusters)
    kj = np.asarray(n_labels, dtype=np.int64)
    sizes = np.concatenate([[K - 1], K * (kj - 1)])
    u_off = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    t_off = np.concatenate([[0], np.cumsum(kj)]).astype(np.int64)
    return u_off, t_off


@numba.njit(cache=True, nogil=True)
def _sb_forward(x, logy):
    """Stick-breaking: fill ``logy`` (k,) from ``x`` (k-1,); return log|det J|."""
    km1 = x.shape[0]
    acc = 0.0  # sum of log(1 - s) so far
    logdet = 0.0
    for l in range(km1):
        xo = x[l] - math.log(km1 - l)
        # log sigmoid(xo) and log(1 - sigmoid(xo)) = log sigmoid(-xo), stably
        if xo >= 0:
            ls = -math.log1p(math.exp(-xo))
            l1s = -xo + ls
        else:
            l1s = -math.log1p(math.exp(xo))
            ls = xo + l1s
        logy[l] = ls + acc
        logdet += -xo + ls + logy[l]
        acc += l1s
    logy[km1] = acc
    return logdet


@numba.njit(cache=True, nogil=True)
def _sb_backward(x, g, out, sign, jacobian):
    """``out[l] = sign * dF/dx_l`` given ``g`` = dF/dlog y (k,) (+ the Jacobian's terms)."""
    km1 = x.shape[0]
    S = g[km1]
    jac = 1.0 if jacobian else 0.0
    for l in range(km1 - 1, -1, -1):
        xo = x[l] - math.log(km1 - l)
        s = 1.0 / (1.0 + math.exp(-xo))
        gl = g[l] + jac
        out[l] = sign * (gl * (1.0 - s) - s * S - jac * s)
        S += gl


@numba.njit(cache=True, nogil=True)
def mm_value_and_grad(u, codes, n_labels, K, a, b, const, grad, jacobian=True):
    """``U(u)`` of the MM spec (returned) and ``dU/du`` (written into ``grad``).

    ``jacobian=False`` leaves out ``log|det J|``: then ``U = -log p(X, pi, theta)`` at the
    mapped point, the loss of MAP by SVI (Pyro optimises a MAP guide's simplex parameters
    through the same stick-breaking map, without a Jacobian).

    u : float64 (P,), the flat unconstrained parameters (:func:`parameter_layout`)
    codes : integer (N, M), -1 missing (any integer dtype)
    n_labels : int64 (M,)
    K : int; a, b : float (label and weight priors); const : float (the priors' normalisers)
    grad : float64 (P,), overwritten
    """
    N, M = codes.shape
    L = 0
    for j in range(M):
        L += n_labels[j]
    logpi = np.empty(K)
    logdet = _sb_forward(u[0:K - 1], logpi)
    table = np.empty((K, L))
    tmp = np.empty(L)
    pos_u = K - 1
    pos_t = 0
    for j in range(M):
        k = n_labels[j]
        for c in range(K):
            logdet += _sb_forward(u[pos_u:pos_u + k - 1], tmp[:k])
            for l in range(k):
                table[c, pos_t + l] = tmp[l]
            pos_u += k - 1
        pos_t += k
    logp = 0.0
    for c in range(K):
        logp += (b - 1.0) * logpi[c]
        for t in range(L):
            logp += (a - 1.0) * table[c, t]
    t_off = np.empty(M, np.int64)
    pos_t = 0
    for j in range(M):
        t_off[j] = pos_t
        pos_t += n_labels[j]
    gpi = np.full(K, b - 1.0)
    gt = np.full((K, L), a - 1.0)
    ll = np.empty(K)
    loglik = 0.0
    for i in range(N):
        for c in range(K):
            ll[c] = logpi[c]
        for j in range(M):
            x = codes[i, j]
            if x >= 0:
                col = t_off[j] + x
                for c in range(K):
                    ll[c] += table[c, col]
        mx = ll[0]
        for c in range(1, K):
            if ll[c] > mx:
                mx = ll[c]
        s = 0.0
        for c in range(K):
            ll[c] = math.exp(ll[c] - mx)
            s += ll[c]
        loglik += mx + math.log(s)
        for c in range(K):
            r = ll[c] / s
            gpi[c] += r
            for j in range(M):
                x = codes[i, j]
                if x >= 0:
                    gt[c, t_off[j] + x] += r
    _sb_backward(u[0:K - 1], gpi, grad[0:K - 1], -1.0, jacobian)
    pos_u = K - 1
    for j in range(M):
        k = n_labels[j]
        for c in range(K):
            _sb_backward(u[pos_u:pos_u + k - 1], gt[c, t_off[j]:t_off[j] + k],
                         grad[pos_u:pos_u + k - 1], -1.0, jacobian)
            pos_u += k - 1
    if not jacobian:
        logdet = 0.0
    return -(loglik + logp + const + logdet)


def mm_potential(labels, *, n_labels, n_clusters, label_prior=1.0, weight_prior=1.0,
                 dtype=torch.float64, compile=False, **unused) -> FlatPotential:
    """The collapsed potential of the MM spec (``z`` summed out) with its gradient by hand.

    Value and gradient in one numba pass over the labels
    (:func:`mm_value_and_grad`, the derivation in this module's docstring);
    equal to Pyro's potential of :mod:`consensuskit.models.mm.spec`, constants included
    (``tests/test_compiled_potential.py``).  The labels are read in their own integer type.

    Parameters
    ----------
    labels : integer array or Tensor (N, M), -1 missing
    n_labels, n_clusters, label_prior, weight_prior : as in the spec (numeric priors only:
        a tensor prior of a wrapping hyper-prior model needs :func:`traced_potential`).
    compile : ignored (already compiled); accepted so ``build_potential``'s option passes.
    """
    fixed = sorted(k for k in ("pi", "theta") if unused.get(k) is not None)
    if fixed:
        # the hand-written gradient is over pi and theta as free sites; a variant that
        # fixes or computes them must take the traced path, not be silently ignored
        raise ValueError(f"mm_potential samples pi and theta; {fixed} given: use "
                         "build_potential(..., method='traced') for a spec with fixed or "
                         "computed parameters")
    codes = labels.codes if hasattr(labels, "codes") else labels
    codes = codes.numpy() if torch.is_tensor(codes) else np.asarray(codes)
    if codes.ndim != 2 or codes.dtype.kind not in "iu":
        raise ValueError(f"labels must be an integer (N, M) array; got {codes.dtype} "
                         f"{codes.shape}")
    codes = np.ascontiguousarray(codes)
    N, M = codes.shape
    kj = np.asarray([int(k) for k in n_labels], dtype=np.int64)
    K = int(n_clusters)
    if len(kj) != M:
        raise ValueError(f"labels has {M} columns but n_labels has {len(kj)}")
    if codes.size and (codes.max(axis=0) >= kj).any():
        raise ValueError("a label code is >= its column's n_labels")
    if isinstance(label_prior, torch.Tensor) or isinstance(weight_prior, torch.Tensor):
        raise TypeError("mm_potential takes numeric priors; a tensor prior (hyper-prior "
                        "from a wrapping model) needs traced_potential")
    if dtype != torch.float64:
        raise ValueError("the hand-written MM potential is float64 (NUTS needs it)")
    a, b = float(label_prior), float(weight_prior)
    lg = math.lgamma
    const = lg(K * b) - K * lg(b) + sum(K * (lg(k * a) - k * lg(a)) for k in kj)
    u_off, _ = parameter_layout(kj, K)
    names = ["pi"] + [f"theta_{j}" for j in range(M)]
    shapes = [torch.Size([K - 1])] + [torch.Size([K, int(k) - 1]) for k in kj]
    simplex = biject_to(constraints.simplex)
    transforms = {n: simplex.inv for n in names}
    P = int(u_off[-1])

    def flat_value_and_grad(u, jacobian=True):
        grad = np.empty(P)
        return mm_value_and_grad(u, codes, kj, K, a, b, const, grad, jacobian), grad

    def split(value, grad):
        g = torch.from_numpy(grad)
        return (torch.tensor(value, dtype=torch.float64),
                tuple(g[u_off[i]:u_off[i + 1]].view(s) for i, s in enumerate(shapes)))

    def value_and_grad(*parts):
        u = np.concatenate([p.reshape(-1).numpy() for p in parts])
        return split(*flat_value_and_grad(u))

    def map_value_and_grad(*parts):
        u = np.concatenate([p.reshape(-1).numpy() for p in parts])
        return split(*flat_value_and_grad(u, jacobian=False))

    # FlatPotential packs the sites sorted by name ("theta_10" before "theta_2"): entry p of
    # the packed vector is entry layout[p] of the flat layout above
    layout = np.concatenate([np.arange(u_off[i], u_off[i + 1])
                             for i in sorted(range(M + 1), key=names.__getitem__)])

    def packed_value_and_grad(u):
        flat = np.empty(P)
        flat[layout] = u.numpy()
        value, grad = flat_value_and_grad(flat)
        return torch.tensor(value, dtype=torch.float64), torch.from_numpy(grad[layout])

    def init(generator=None):
        g = generator if generator is not None else np.random.default_rng()
        vals = [g.dirichlet(np.full(K, b))] + [g.dirichlet(np.full(int(k), a), size=K)
                                                for k in kj]
        return {n: simplex.inv(torch.as_tensor(v, dtype=torch.float64).clamp_min(1e-300))
                for n, v in zip(names, vals)}

    return FlatPotential(names, shapes, transforms, value_and_grad, "hand-written", init,
                         map_value_and_grad, packed_value_and_grad=packed_value_and_grad)
