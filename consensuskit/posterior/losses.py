"""Losses between partitions and their posterior expectations over a set of draws.

Every loss here is computed from the contingency table of the candidate partition with each
draw (O(N S) time, O(S L K) memory for K candidate clusters and at most L clusters per draw),
never from an N x N matrix.  Definitions (``n_k``: estimate cluster sizes, ``m_l``: draw
cluster sizes, ``n_kl``: their overlaps, ``N`` items, logarithms base 2):

* ``binder(a)``: ``(a sum_l m_l^2 + (2 - a) sum_k n_k^2 - 2 sum_kl n_kl^2) / N^2``: over the
  N^2 ordered pairs, cost ``a`` for a pair the draw joins and the estimate splits, ``b = 2 - a``
  for a pair the estimate joins and the draw splits (salso's ``binder(a)``; ``a = 1`` is
  mcclust.ext's Binder distance, the share of disagreeing ordered pairs).
* ``vi(a)``: ``((2 - a) sum_k n_k log n_k + a sum_l m_l log m_l - 2 sum_kl n_kl log n_kl) / N``
  ``= a H(U|V) + (2 - a) H(V|U)`` for estimate U and draw V, in bits: ``a`` weighs splitting
  what the draw joins, as in Binder (``a = 1``: the variation of information, Meila 2007).
* ``nvi``: VI divided by the joint entropy ``H(U, V)`` (salso's NVI), 0 for two one-cluster
  partitions.
* ``omari``: one minus the adjusted Rand index (Hubert & Arabie 1985); 0 when both partitions
  are the same trivial partition (salso scores that case as 1).

The expected loss of a partition is the mean of its loss against the S draws.
"""

from __future__ import annotations

import numbers

import numpy as np

from . import _kernels as _k

__all__ = [
    "LOSSES",
    "expected_loss",
    "loss_to_draws",
    "binder_loss",
    "vi_loss",
    "nvi_loss",
    "omari_loss",
]

#: loss name -> kernel code
LOSSES = {"vi": _k.VI, "binder": _k.BINDER, "nvi": _k.NVI, "omari": _k.OMARI}

#: bytes of contingency counts one pass may hold before the draws are processed in blocks
_TABLE_BYTES = 1 << 27


def check_loss(loss, a=1.0):
    """Validate a loss name and its cost parameter; returns ``(name, code, a)``."""
    if not isinstance(loss, str) or loss.lower() not in LOSSES:
        raise ValueError(f"loss must be one of {sorted(LOSSES)}; got {loss!r}")
    name = loss.lower()
    if isinstance(a, bool) or not isinstance(a, numbers.Real) or not np.isfinite(a):
        raise ValueError(f"a must be a finite real number; got {a!r}")
    a = float(a)
    if name in ("vi", "binder") and not 0.0 <= a <= 2.0:
        raise ValueError(f"a must be in [0, 2] for {name} (b = 2 - a); got {a}")
    if name in ("nvi", "omari") and a != 1.0:
        raise ValueError(f"{name} has no cost parameter: a must be 1; got {a}")
    return name, LOSSES[name], a


def f_table(code, n):
    """``(ftab, fdo)``: ``ftab[c] = f(c)`` for c = 0..n+1, and ``fdo[0] = 0``, ``fdo[c + 1] =
    f(c + 1) - f(c)`` for c = 0..n (the kernels' ``fd`` is the view ``fdo[1:]``; see
    _kernels).  Built in place, with one (n,) temporary: at 1e7 items the five of a
    vectorised formula came to the search's peak (issue 27)."""
    ftab = np.arange(n + 2, dtype=np.float64)
    if code in (_k.VI, _k.NVI):
        ftab[1:] *= np.log2(ftab[1:])  # f(0) = 0 log 0 = 0
    elif code == _k.BINDER:
        ftab *= ftab
    else:
        ftab *= ftab - 1.0
    fdo = np.empty(n + 2)
    fdo[0] = 0.0
    np.subtract(ftab[1:], ftab[:-1], out=fdo[1:])
    return ftab, fdo


def _as_partition(partition, n):
    z = np.asarray(partition)
    if z.ndim != 1 or z.shape[0] != n:
        raise ValueError(f"partition must have shape ({n},); got {z.shape}")
    if z.size and not np.issubdtype(z.dtype, np.integer):
        if not np.all(np.isfinite(z)) or not np.all(z == np.round(z)):
            raise ValueError("partition must hold integer labels")
    _, inv = np.unique(z, return_inverse=True)
    return inv.astype(np.int64).ravel(), int(inv.max()) + 1 if inv.size else 0


def _sums(z, K, lab, L, code):
    """(E, D (S,), T (S,), item_mates (N,)) of partition ``z`` against the item-major draws."""
    N, S = lab.shape
    ftab, _ = f_table(code, N)
    D = np.empty(S)
    T = np.empty(S)
    mates = np.zeros(N, dtype=np.int64)
    E = np.zeros(1)
    block = max(1, int(_TABLE_BYTES // max(1, 4 * L * K)))
    tmp = np.zeros(N, dtype=np.int64)
    for s0 in range(0, S, block):
        s1 = min(S, s0 + block)
        sub = np.ascontiguousarray(lab[:, s0:s1]) if (s0, s1) != (0, S) else lab
        _k.table_sums(z, K, sub, L, ftab, E, D[s0:s1], T[s0:s1], tmp)
        mates += tmp
    return float(E[0]), D, T, mates


def loss_to_draws_prepared(z, K, lab, L, loss="vi", a=1.0):
    """Per-draw losses (S,) of partition ``z`` (labels 0..K-1) against item-major draws."""
    name, code, a = check_loss(loss, a)
    N = lab.shape[0]
    E, D, T, _ = _sums(z, K, lab, L, code)
    return np.array([_k.draw_loss(code, a, E, D[s], T[s], float(N)) for s in range(D.shape[0])])


def prepare_draws(draws):
    """Validate ``draws`` (S, N) integer labels (one draw per row) and return the item-major,
    per-draw relabelled array ``lab`` (N, S) (uint16 when every draw has < 65535 clusters, else
    int32) and the number of clusters of each draw ``k`` (S,)."""
    X = np.asarray(draws)
    if X.ndim != 2:
        raise ValueError(f"draws must be a 2-d array of shape (S, N); got {X.ndim} dimensions")
    S, N = X.shape
    if S < 1 or N < 1:
        raise ValueError(f"draws must have at least one draw and one item; got shape {X.shape}")
    if X.dtype == bool or not (np.issubdtype(X.dtype, np.integer)
                               or np.issubdtype(X.dtype, np.floating)):
        raise ValueError(f"draws must hold integer cluster labels; got dtype {X.dtype}")
    if np.issubdtype(X.dtype, np.floating):
        if not np.all(np.isfinite(X)):
            raise ValueError("draws contain NaN or infinite values; every item needs a label "
                             "in every draw")
        if not np.all(X == np.round(X)):
            raise ValueError("draws must hold integer cluster labels; got non-integer values")
        X = X.astype(np.int64)
    lo, hi = int(X.min()), int(X.max())
    if lo < 0:
        raise ValueError(f"draws contain a negative label ({lo}); every item needs a label in "
                         "every draw (missing labels are not allowed here)")
    if hi >= 4 * N + 1024:
        X = np.vstack([np.unique(r, return_inverse=True)[1].reshape(1, -1) for r in X])
    X = np.ascontiguousarray(X)
    k = np.zeros(S, dtype=np.int64)
    # a draw has at most min(N, max label + 1) clusters: uint16 whenever that is < 65535
    small = min(N, int(X.max()) + 1) < 65535
    lab = np.empty((N, S), dtype=np.uint16 if small else np.int32)
    _k.relabel_rows(X, lab, k)
    return lab, k


def expected_loss(partition, draws, loss="vi", a=1.0):
    """Posterior expected loss of ``partition`` (N,) against ``draws`` (S, N): the mean loss.

    ``loss`` is ``"vi"``, ``"binder"``, ``"nvi"`` or ``"omari"``; ``a`` the cost parameter of
    VI and Binder (module docstring).  Cost O(N S), no N x N matrix.
    """
    return float(loss_to_draws(partition, draws, loss, a).mean())


def loss_to_draws(partition, draws, loss="vi", a=1.0):
    """Loss (S,) of ``partition`` (N,) against each row of ``draws`` (S, N)."""
    check_loss(loss, a)
    lab, k = prepare_draws(draws)
    z, K = _as_partition(partition, lab.shape[0])
    return loss_to_draws_prepared(z, K, lab, int(k.max()), loss, a)


def binder_loss(partition, draws, a=1.0):
    """Expected Binder loss (salso's ``binder(a)``, b = 2 - a) of ``partition`` (N,)."""
    return expected_loss(partition, draws, "binder", a)


def vi_loss(partition, draws, a=1.0):
    """Expected variation of information (bits; generalised by ``a``) of ``partition`` (N,)."""
    return expected_loss(partition, draws, "vi", a)


def nvi_loss(partition, draws):
    """Expected normalised VI (VI / joint entropy) of ``partition`` (N,)."""
    return expected_loss(partition, draws, "nvi")


def omari_loss(partition, draws):
    """Expected one-minus-adjusted-Rand-index of ``partition`` (N,)."""
    return expected_loss(partition, draws, "omari")
