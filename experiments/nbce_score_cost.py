"""What a researcher waits for after a default NBCE fit: the first ``inference_data_``
(the leave-one-out log-likelihood of every draw), the training perplexity and
``predict_proba``, in CPU seconds, and the compiled per-draw row scores beside the
plain numpy sum over every component on the same draws (their ratio).

    OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1 python experiments/nbce_score_cost.py \\
        --datasets letter_AJ segmentation --algorithm gmm --prior tsb

One default fit per dataset (N at most 2,000 rows, M = 20, as ``nbce_validation.py``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import numpy as np
from scipy.special import logsumexp

sys.path.insert(0, os.path.dirname(__file__))
from nbce_validation import ensemble  # noqa: E402


def _cpu(f):
    c0 = time.process_time()
    out = f()
    return time.process_time() - c0, out


def numpy_row_logliks(est, idx, draws):
    """(len(draws), n): per draw, the log-sum over every component of the posterior-mean
    parameters (:func:`predictive_parameters`, :func:`component_loglik`)."""
    from consensuskit.models.nbce.predictive import component_loglik, predictive_parameters

    o = est.samples_
    D, T = o["log_joint"].size, o["counts"].shape[-1]
    out = []
    for d in draws:
        lp, lt = predictive_parameters(
            o["counts"].reshape(D, T)[d], o["label_counts"].reshape(D, T, -1)[d],
            o["col_counts"].reshape(D, T, -1)[d], o["alpha0"].flat[d], o["beta"].flat[d],
            o["n_labels"], o["prior"])
        out.append(logsumexp(lp[None] + component_loglik(idx, lt), axis=1))
    return np.stack(out)


def run(name, algorithm, prior, n_reference):
    import consensuskit as ck

    X = ensemble(name, 20, algorithm)
    est = ck.NBCE(prior=prior, random_state=1000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit, _ = _cpu(lambda: est.fit(X))
        idata, _ = _cpu(lambda: est.inference_data_)
        perp, _ = _cpu(lambda: est.perplexity(X))
        proba, _ = _cpu(lambda: est.predict_proba(X))
    o = est.samples_
    D = o["log_joint"].size
    draws = np.linspace(0, D - 1, n_reference).astype(int)
    idx = est._train_index()
    ref_cpu, ref = _cpu(lambda: numpy_row_logliks(est, idx, draws))
    all_cpu, got = _cpu(lambda: est._row_logliks_gibbs(idx))
    err = float(np.abs(got[draws] - ref).max())
    per_ref, per_got = ref_cpu / draws.size, all_cpu / D
    print(f"{name:14s} {prior} {algorithm:6s} N={X.shape[0]} draws={D} "
          f"T={o['counts'].shape[-1]} occupied<={int(o['n_occupied'].max())}: fit {fit:.1f} s, "
          f"first inference_data_ {idata:.1f} s, perplexity(train) {perp:.1f} s, "
          f"predict_proba(train) {proba:.1f} s CPU", flush=True)
    print(f"  row scores per draw: numpy sum over every component {1e3 * per_ref:.1f} ms "
          f"({draws.size} draws), compiled {1e3 * per_got:.2f} ms ({D} draws): "
          f"ratio {per_ref / per_got:.1f}x; largest difference {err:.1e} nats", flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", nargs="+", default=["letter_AJ"])
    p.add_argument("--algorithm", default="gmm")
    p.add_argument("--prior", default="tsb", choices=["tsb", "fsd"])
    p.add_argument("--reference-draws", type=int, default=40)
    a = p.parse_args(argv)
    for name in a.datasets:
        run(name, a.algorithm, a.prior, a.reference_draws)


if __name__ == "__main__":
    main()
