"""External quality measures of a (consensus) clustering against ground truth.

All hard-partition measures take two 1-D label vectors of equal length.  Labels
may be any integers (or other sortable values); they need not be 0-based and the
two vectors may hold different numbers of clusters.  Where the cluster-ensemble
papers define a measure their definition is used, as stated per function.

==========================  ===============================================
:func:`micro_precision`     BCE / MM papers' micro-precision (purity)
:func:`f1_measure`          NBCE paper's F1 (cluster-wise precision/recall)
:func:`accuracy`            Hungarian-matched accuracy (PCC's H criterion)
:func:`adjusted_rand`       Hubert-Arabie adjusted Rand index
:func:`nmi`                 normalised mutual information
:func:`variation_of_information`  Meila's VI
:func:`normalized_variation_of_information`  KCC paper's VI_n
:func:`van_dongen`          van Dongen criterion (KCC paper's VD_n)
:func:`js_criterion`        PCC's J criterion for soft partitions
==========================  ===============================================
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "contingency",
    "micro_precision",
    "f1_measure",
    "accuracy",
    "adjusted_rand",
    "nmi",
    "variation_of_information",
    "normalized_variation_of_information",
    "van_dongen",
    "js_criterion",
]


def _as_array(x):
    """``x`` as a numpy array (a torch tensor detached and copied to the CPU)."""
    try:
        import torch

        if isinstance(x, torch.Tensor):
            x = x.detach().cpu().numpy()
    except ImportError:  # pragma: no cover
        pass
    return np.asarray(x)


def _labels_1d(y, name):
    a = _as_array(y)
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D of shape (n_samples,); got shape {a.shape}")
    if a.size == 0:
        raise ValueError(f"{name} is empty")
    if a.dtype.kind == "f":
        if not np.isfinite(a).all():
            i = int(np.flatnonzero(~np.isfinite(a))[0])
            raise ValueError(f"{name} has a non-finite label at position {i}")
        if (a != np.round(a)).any():
            i = int(np.flatnonzero(a != np.round(a))[0])
            raise ValueError(f"{name}[{i}] = {a[i]!r} is not an integer label")
    return a


def _check_pair(y_true, y_pred):
    a = _labels_1d(y_true, "y_true")
    b = _labels_1d(y_pred, "y_pred")
    if a.shape[0] != b.shape[0]:
        raise ValueError(
            f"y_true and y_pred have different lengths: {a.shape[0]} and {b.shape[0]}"
        )
    return a, b


def contingency(y_true, y_pred) -> np.ndarray:
    """Contingency table ``T[c, h] = |{i : y_true[i] = c-th class, y_pred[i] = h-th cluster}|``.

    Returns
    -------
    ndarray of int64, shape (n_classes, n_clusters)
        Rows follow the sorted distinct values of ``y_true``, columns those of ``y_pred``.
    """
    a, b = _check_pair(y_true, y_pred)
    _, ia = np.unique(a, return_inverse=True)
    _, ib = np.unique(b, return_inverse=True)
    ia = ia.reshape(-1)
    ib = ib.reshape(-1)
    T = np.zeros((ia.max() + 1, ib.max() + 1), dtype=np.int64)
    np.add.at(T, (ia, ib), 1)
    return T


def micro_precision(y_true, y_pred) -> float:
    """Micro-precision ``MP = sum_h a_h / n`` (BCE paper, Sec. 6; MM paper).

    ``a_h`` is the number of points of consensus cluster ``h`` that belong to the
    true class with the largest overlap with ``h`` (each cluster is assigned to
    its majority class; several clusters may share a class).  ``0 < MP <= 1``;
    1 means every cluster is pure.  This is also known as purity.
    """
    T = contingency(y_true, y_pred)
    return float(T.max(axis=0).sum() / T.sum())


def f1_measure(y_true, y_pred) -> float:
    """F1-measure as defined in the NBCE paper (Wang, Domeniconi & Laskey 2010, Sec. 6).

    With consensus clusters ``A_1..A_h`` (from ``y_pred``) and true classes
    ``B_1..B_k`` (from ``y_true``)::

        P(A_i, B_j) = |A_i & B_j| / |A_i|        R(A_i, B_j) = |A_i & B_j| / |B_j|
        P = (1/h) sum_i max_j P(A_i, B_j)        R = (1/h) sum_i max_j R(A_i, B_j)
        F1 = 2 P R / (P + R)

    i.e. precision and recall are each averaged over the consensus clusters,
    every cluster taking its best-matching class.  (The converted paper text
    writes the sums to ``k``; the ``1/h`` normaliser fixes the sum to run over
    the ``h`` clusters of ``A``.)
    """
    T = contingency(y_true, y_pred).astype(np.float64)  # (classes k, clusters h)
    size_a = T.sum(axis=0)  # |A_i|
    size_b = T.sum(axis=1)  # |B_j|
    P = (T / size_a[None, :]).max(axis=0).mean()
    R = (T / size_b[:, None]).max(axis=0).mean()
    if P + R == 0:  # pragma: no cover - impossible for non-empty input
        return 0.0
    return float(2.0 * P * R / (P + R))


def accuracy(y_true, y_pred) -> float:
    """Accuracy after the best one-to-one matching of clusters to classes.

    ``H = (1/n) max_v sum_j |P_j & Q_{v_j}|`` (Meila 2003; PCC paper eq. 11; the
    MM paper reports ``1 - H`` as error).  The matching is solved exactly with
    the Hungarian method (``scipy.optimize.linear_sum_assignment``).  When the
    numbers of clusters and classes differ, the surplus clusters (or classes)
    stay unmatched, which is the same as padding with empty clusters.
    """
    from scipy.optimize import linear_sum_assignment

    T = contingency(y_true, y_pred)
    r, c = linear_sum_assignment(T, maximize=True)
    return float(T[r, c].sum() / T.sum())


def adjusted_rand(y_true, y_pred) -> float:
    """Adjusted Rand index (Hubert & Arabie 1985), via scikit-learn."""
    from sklearn.metrics import adjusted_rand_score

    a, b = _check_pair(y_true, y_pred)
    return float(adjusted_rand_score(a, b))


def nmi(y_true, y_pred, *, average_method: str = "geometric") -> float:
    """Normalised mutual information ``I(A;B) / mean(H(A), H(B))`` via scikit-learn.

    The default ``average_method="geometric"`` divides by ``sqrt(H(A) H(B))``,
    the normalisation of Strehl & Ghosh (2002) used throughout the
    cluster-ensemble literature.  scikit-learn's own default is "arithmetic";
    "min" and "max" are accepted as well.  Two single-cluster labelings give 1.
    """
    from sklearn.metrics import normalized_mutual_info_score

    if average_method not in ("geometric", "arithmetic", "min", "max"):
        raise ValueError(
            "average_method must be 'geometric', 'arithmetic', 'min' or 'max'; "
            f"got {average_method!r}"
        )
    a, b = _check_pair(y_true, y_pred)
    return float(normalized_mutual_info_score(a, b, average_method=average_method))


def variation_of_information(y_true, y_pred, *, base: float = np.e) -> float:
    """Variation of information ``VI = H(A) + H(B) - 2 I(A;B) = H(A|B) + H(B|A)`` (Meila 2003).

    A distance between partitions: 0 iff they are equal up to relabeling, at
    most ``log(n)``.  ``base`` is the base of the logarithm (natural by default).
    """
    if not base > 1:
        raise ValueError(f"base must be > 1; got {base!r}")
    T = contingency(y_true, y_pred).astype(np.float64)
    p = T / T.sum()
    pa = p.sum(axis=1)
    pb = p.sum(axis=0)
    nz = p > 0
    outer = np.outer(pa, pb)
    # VI = -sum p_ab [log(p_ab / p_a) + log(p_ab / p_b)]
    vi = -np.sum(p[nz] * (2.0 * np.log(p[nz]) - np.log(outer[nz])))
    return float(max(vi, 0.0) / np.log(base))


def normalized_variation_of_information(y_true, y_pred) -> float:
    """Normalised variation of information ``VI_n = 1 - 2 I(A;B) / (H(A) + H(B))``.

    The KCC paper's ``VI_n`` (Lin et al. 2023, Sec. 3.4 and Table 9, citing
    Cover & Thomas), as computed by the authors' ``exMeasure``: Meila's
    ``VI = H(A) + H(B) - 2 I(A;B)`` divided by ``H(A) + H(B)``.  The base of the
    logarithm cancels.  ``0 <= VI_n <= 1``; 0 iff the partitions are equal up
    to relabeling (two single-cluster labelings, where ``H(A) + H(B) = 0``,
    give 0); 1 iff they are independent.  Lower is better.

    Parameters
    ----------
    y_true, y_pred : array-like of shape (n_samples,)
        Hard labels.

    Returns
    -------
    float in [0, 1].
    """
    T = contingency(y_true, y_pred).astype(np.float64)
    p = T / T.sum()
    pa = p.sum(axis=1)
    pb = p.sum(axis=0)
    h = -np.sum(pa * np.log(pa)) - np.sum(pb * np.log(pb))  # marginals are > 0
    if h <= 0.0:
        return 0.0
    nz = p > 0
    mi = np.sum(p[nz] * np.log(p[nz] / np.outer(pa, pb)[nz]))
    return float(min(max(1.0 - 2.0 * mi / h, 0.0), 1.0))


def van_dongen(y_true, y_pred, *, normalized: bool = True) -> float:
    """van Dongen criterion (van Dongen 2000), normalised as in the KCC paper's ``VD_n``.

    With the contingency table ``n_ij`` (classes ``i``, clusters ``j``), row sums
    ``n_i.``, column sums ``n_.j`` and ``n`` points::

        VD   = (2n - sum_i max_j n_ij - sum_j max_i n_ij) / (2n)
        VD_n = (2n - sum_i max_j n_ij - sum_j max_i n_ij)
               / (2n - max_i n_i. - max_j n_.j)

    ``VD_n`` is the normalisation of Wu, Xiong & Chen (KDD 2009) used by the KCC
    package's ``exMeasure`` (Lin et al. 2023, Table 10): the denominator is the
    criterion's largest value for the given marginals.  Both are 0 iff the
    partitions agree up to relabeling (two single-cluster labelings give 0) and
    are symmetric in the two arguments.  Lower is better.

    Parameters
    ----------
    y_true, y_pred : array-like of shape (n_samples,)
        Hard labels.
    normalized : bool, default True
        Return ``VD_n`` (True) or ``VD`` (False).

    Returns
    -------
    float in [0, 1].
    """
    if not isinstance(normalized, (bool, np.bool_)):
        raise TypeError(f"normalized must be a bool; got {normalized!r}")
    T = contingency(y_true, y_pred)
    n = int(T.sum())
    num = 2 * n - int(T.max(axis=1).sum()) - int(T.max(axis=0).sum())
    if not normalized:
        return float(num / (2 * n))
    den = 2 * n - int(T.sum(axis=1).max()) - int(T.sum(axis=0).max())
    if den == 0:  # both labelings have a single cluster, hence num == 0
        return 0.0
    return float(num / den)


def _soft(U, name):
    A = _as_array(U)
    if A.ndim == 1:  # hard labels -> one-hot rows
        a = _labels_1d(A, name)
        _, inv = np.unique(a, return_inverse=True)
        inv = inv.reshape(-1)
        out = np.zeros((a.size, inv.max() + 1))
        out[np.arange(a.size), inv] = 1.0
        return out
    if A.ndim != 2:
        raise ValueError(
            f"{name} must be (n_samples, n_clusters) memberships or 1-D labels; got {A.shape}"
        )
    if A.shape[0] == 0 or A.shape[1] == 0:
        raise ValueError(f"{name} is empty: shape {A.shape}")
    A = A.astype(np.float64)
    if not np.isfinite(A).all():
        raise ValueError(f"{name} has non-finite entries")
    if (A < 0).any():
        i, j = np.argwhere(A < 0)[0]
        raise ValueError(f"{name}[{i}, {j}] = {A[i, j]!r} is negative; rows must be distributions")
    s = A.sum(axis=1)
    bad = np.abs(s - 1.0) > 1e-6
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"row {i} of {name} sums to {s[i]!r}, not 1")
    return A


def _js_terms(p, q):
    """``0.5 [p log2(2p/(p+q)) + q log2(2q/(p+q))]`` elementwise with 0 log 0 = 0."""
    m = p + q
    out = np.zeros(np.broadcast(p, q).shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        tp = np.where(p > 0, p * np.log2(2.0 * p / m), 0.0)
        tq = np.where(q > 0, q * np.log2(2.0 * q / m), 0.0)
    out += 0.5 * (tp + tq)
    return out


def js_criterion(U, V) -> float:
    """The PCC paper's J criterion between two soft partitions (Lourenco et al. 2015, Sec. 7).

    ``J(Y, Z) = (1/n) min_P sum_i D_JS(z_i || P y_i)`` where ``P`` runs over the
    permutations of clusters and ``D_JS`` is the Jensen-Shannon divergence in
    bits, so ``0 <= J <= 1``.  Because ``D_JS`` is a sum of per-coordinate terms
    ``phi(z_ia, y_ib)``, the minimum over permutations is a linear assignment on
    the cost ``C[a, b] = sum_i phi(z_ia, y_ib)``, solved exactly with the
    Hungarian method.  A partition with fewer clusters is padded with zero
    columns, as in the paper.

    Parameters
    ----------
    U, V : array-like, shape (n_samples, K_U) and (n_samples, K_V)
        Row-stochastic membership matrices (1-D label vectors are turned into
        one-hot rows).

    Returns
    -------
    float in [0, 1]; 0 iff the partitions agree up to a permutation of clusters.
    """
    from scipy.optimize import linear_sum_assignment

    A = _soft(U, "U")
    B = _soft(V, "V")
    if A.shape[0] != B.shape[0]:
        raise ValueError(f"U and V have different numbers of rows: {A.shape[0]} and {B.shape[0]}")
    K = max(A.shape[1], B.shape[1])
    A = np.pad(A, ((0, 0), (0, K - A.shape[1])))
    B = np.pad(B, ((0, 0), (0, K - B.shape[1])))
    cost = np.zeros((K, K))
    step = max(1, 2**22 // (K * K))  # bound the (rows, K, K) temporary to ~32 MB
    for start in range(0, A.shape[0], step):
        a = A[start : start + step]
        b = B[start : start + step]
        cost += _js_terms(a[:, :, None], b[:, None, :]).sum(axis=0)  # (K, K)
    r, c = linear_sum_assignment(cost)
    return float(min(max(cost[r, c].sum() / A.shape[0], 0.0), 1.0))
