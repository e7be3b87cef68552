"""Why NBCE's variational LOO is optimistic: PSIS on q, two local corrections, brute force.

NBCE's VB (``inference="vb"``, FSD) fits ``q(pi) = Dir(xi)``, ``q(theta_kj) = Dir(rho_kj)``
and row responsibilities ``r_i``; at its fixed point ``xi = alpha0 / T + sum_i r_i`` and
``rho_k = beta + sum_i r_ik x_i`` (``x_i`` one-hot over all labels).  The brute-force LOO
of VB refits without row i and scores row i by the mean of ``p(x_i | pi, theta)`` over the
refit's q (``loo_vs_bruteforce.py``, estimand "variational").  Since q is a product of
Dirichlets and the likelihood is linear in each factor, that mean is exactly
``sum_k E[pi_k] prod_j E[theta_kj(x_ij)]``, so every estimate below is computed in closed
form from the parameters of a delete-one q:

* ``psis``: ``az.loo`` on ``inference_data_`` (PSIS over draws of the full q), what the
  package gives today;
* ``delete-one``: q with row i's own expected counts removed (``xi - r_i``,
  ``rho - r_i x_i``), everything else held;
* ``linear response``: the first-order change of VB's whole fixed point when row i's weight
  goes from 1 to 0 (the infinitesimal jackknife of Giordano et al. 2019, "A Swiss Army
  Infinitesimal Jackknife"): ``eta_-i = eta - (I - J)^-1 s_i`` with ``eta = (xi, rho)``,
  ``J`` the Jacobian of the fixed-point map (the other rows' responsibilities and the Newton
  updates of alpha0 and beta respond) and ``s_i = (r_i, r_i x_i)``.

Both corrections are local: they follow VB's optimum as row i leaves.  The last columns
say how often a refit without row i landed in another optimum (another number of
clusters than the full fit), which no local correction can follow.

Cases: k-means ensembles of bundled data sets (``small_ensemble``: 4 base clusterings,
k = 3) and noisier ones (``noisy``: 8 noisy copies of a planted 3-cluster partition,
noise 0.4; ``rfs:<data>``: 8 k-means on random feature subsets, k from 2 to 5).

Run: ``PYTHONPATH=. python experiments/vb_loo_linear_response.py [--cases wine noisy:0
rfs:segmentation ...] [--n-rows 30]``.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

from consensuskit.data import datasets, generate
from consensuskit.data.ensemble import as_ensemble
from consensuskit.models.nbce.row_scores import mixture_row_logliks
from consensuskit.models.nbce.vb import onehot_tensor

sys.path.insert(0, str(Path(__file__).resolve().parent))
import loo_vs_bruteforce as lbf  # noqa: E402


def ensemble_of(case, n_rows):
    """An Ensemble for ``case``: a bundled data set's name (k-means, 4 x k = 3),
    ``noisy:<seed>`` or ``rfs:<data>`` (see the module docstring)."""
    kind, _, arg = case.partition(":")
    if not arg:
        return lbf.small_ensemble(case, n_rows)
    if kind == "noisy":
        seed = int(arg)
        truth = np.random.RandomState(seed).randint(0, 3, n_rows)
        return as_ensemble(generate.noisy_copies(truth, 8, noise=0.4, n_labels=4,
                                                 random_state=seed))
    if kind == "rfs":
        F, _ = datasets.load(arg)
        F = F[np.random.RandomState(0).choice(len(F), n_rows, replace=False)]
        return as_ensemble(generate.random_feature_partitions(F, 8, (2, 5), random_state=0))
    raise ValueError(f"unknown case {case!r}")


class FixedPointMap:
    """VB's fixed-point map ``eta -> G(eta)`` at the fitted hyper-parameters (torch, float64).

    ``eta = (xi (T,), rho (T, L) flattened)``.  ``G`` forms E[log pi], E[log theta], takes
    one Newton step of alpha0 and beta from their fitted values (at the fixed point that
    step is zero, and its derivative is the implicit derivative of the hyper-parameters),
    the responsibilities, and the new ``(xi, rho)``."""

    def __init__(self, ens, T, alpha0, beta):
        idx = ens.offset_index()
        self.T, self.M = T, idx.shape[1]
        self.n_labels = np.asarray(ens.n_labels)
        self.L = int(self.n_labels.sum())
        self.col = torch.as_tensor(np.repeat(np.arange(self.M), self.n_labels))
        self.J = torch.as_tensor(self.n_labels, dtype=torch.float64)
        self.X = onehot_tensor(idx, self.L, torch.float64, "cpu")[0].to_dense()  # (N, L)
        self.alpha0, self.beta = float(alpha0), float(beta)

    def expectations(self, eta):
        T, L = self.T, self.L
        xi, rho = eta[:T], eta[T:].reshape(T, L)
        seg = torch.zeros(T, self.M, dtype=eta.dtype).index_add_(1, self.col, rho)
        dg = torch.special.digamma
        return dg(xi) - dg(xi.sum()), dg(rho) - dg(seg)[:, self.col]

    def responsibilities(self, eta):
        e_pi, e_theta = self.expectations(eta)
        return torch.softmax(self.X @ e_theta.T + e_pi, 1)  # (N, T)

    def __call__(self, eta):
        T = self.T
        e_pi, e_theta = self.expectations(eta)
        dg, tg = torch.special.digamma, lambda v: torch.special.polygamma(1, v)
        a = torch.tensor(self.alpha0, dtype=eta.dtype)
        a = a - ((dg(a) - dg(a / T) + e_pi.sum() / T) / (tg(a) - tg(a / T) / T))
        b, J = torch.tensor(self.beta, dtype=eta.dtype), self.J
        g1 = T * (J * dg(J * b) - J * dg(b)).sum() + e_theta.sum()
        g2 = T * (J**2 * tg(J * b) - J * tg(b)).sum()
        b = b - g1 / g2
        r = torch.softmax(self.X @ e_theta.T + e_pi, 1)
        return torch.cat([a / T + r.sum(0), (b + r.T @ self.X).reshape(-1)])


def predictive(row, xi, rho, n_labels):
    """``log sum_k E[pi_k] prod_j E[theta_kj(x_j)]`` of one row (global label index (M,))
    under ``Dir(xi) x prod Dir(rho_kj)``: the exact mean of ``p(x | pi, theta)``."""
    col_sum = np.add.reduceat(rho, np.concatenate([[0], np.cumsum(n_labels)[:-1]]), axis=1)
    log_theta = np.log(rho / np.repeat(col_sum, n_labels, axis=1))
    return float(mixture_row_logliks(row[None], np.log(xi / xi.sum()), log_theta)[0])


def local_loo(est, ens):
    """Per row: (delete-one, linear-response) LOO, the fixed point's residual and the
    number of rows whose linear-response q had a non-positive parameter (NaN there)."""
    _, xi, rho = est._q_params
    T, L = rho.shape
    G = FixedPointMap(ens, T, est.alpha0_, est.beta_)
    eta = torch.cat([torch.as_tensor(xi), torch.as_tensor(rho).reshape(-1)])
    resid = float((G(eta) - eta).abs().max())
    jac = torch.autograd.functional.jacobian(G, eta)
    A = torch.eye(eta.numel(), dtype=eta.dtype) - jac
    r = G.responsibilities(eta)
    S = torch.cat([r, (r[:, :, None] * G.X[:, None, :]).reshape(r.shape[0], -1)], 1)  # (N, D)
    shift = torch.linalg.solve(A, S.T).T.numpy()
    idx, S, eta = ens.offset_index(), S.numpy(), eta.numpy()
    d1, lr, bad = np.empty(len(idx)), np.empty(len(idx)), 0
    for i in range(len(idx)):
        e = eta - S[i]
        d1[i] = predictive(idx[i], e[:T], e[T:].reshape(T, L), ens.n_labels)
        e = eta - shift[i]
        if np.any(e <= 0):
            lr[i], bad = np.nan, bad + 1
        else:
            lr[i] = predictive(idx[i], e[:T], e[T:].reshape(T, L), ens.n_labels)
    return d1, lr, resid, bad


def main(cases, n_rows):
    make, how = lbf.models()["NBCE(VB)"]
    print(f"{'case':24s} {'K':>2} {'bf':>9} | {'psis diff (z)':>19} | {'delete-one (z)':>19} | "
          f"{'linear resp. (z)':>19} | refits in another optimum")
    for case in cases:
        ens = ensemble_of(case, n_rows)
        rows = np.arange(ens.n_samples)
        t0 = time.process_time()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est = make().fit(ens)
            psis, _ = lbf.psis_loo(est.inference_data_)
            bf, bf_var = lbf.bruteforce(make, how, ens, rows)
            other = sum(make().fit(ens.subset(np.setdiff1d(rows, [i]))).n_clusters_
                        != est.n_clusters_ for i in rows)
        d1, lr, resid, bad = local_loo(est, ens)
        line = f"{case:24s} {est.n_clusters_:2d} {bf.sum():9.3f}"
        for v in (psis, d1, lr):
            d = v - bf
            se = np.hypot(np.sqrt(d.size * np.nanvar(d, ddof=1)), np.sqrt(bf_var.sum()))
            line += f" | {np.nansum(d):+7.3f} ± {se:5.3f} ({np.nansum(d) / se:+5.2f})"
        print(line + f" | {other}/{rows.size}  [fixed-point residual {resid:.1e}, "
              f"{bad} rows without a valid q_-i, {time.process_time() - t0:.0f} s CPU]",
              flush=True)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", nargs="+", default=[
        "wine", "iris", "ecoli", "glass", "ionosphere", "house_votes_84", "wdbc", "pima",
        "noisy:0", "noisy:1", "rfs:segmentation", "rfs:yeast_cellcycle_384_std"])
    p.add_argument("--n-rows", type=int, default=30)
    a = p.parse_args()
    torch.set_num_threads(1)
    main(a.cases, a.n_rows)
