"""Run time of the numba kernels against the package at an earlier git revision, in one process.

Changes made for compile time (how kernels are inlined, wrapped and dispatched) must not
cost run time.  This loads the package as it was at ``--baseline-rev`` (``git archive``,
imported under another name, with its own numba cache) beside the current one and times
both on the same inputs, alternating, medians of ``--repeats`` (CPU seconds,
``time.process_time``, one thread; the set-up of a run is not timed):

``NBCE sweep``
    Gibbs sweeps plus TSB label swaps (what ``bench_nbce.py`` times) at matched
    occupancy: both from the same burnt-in state, N = 1e4, M = 10, K in {20, 100}.
``NBCE iteration``
    Full iterations (sweep, 20 split-merge and group moves, label swaps, slice updates
    of alpha0 and beta) at the demo's size (N = 112, M = 20, K = 10) and at N = 1e4.
``PCC``
    Dense and pair-mode descents, KL and L2, 4000 coordinate steps (N = 600, K = 4).
``MM``
    ``MM.fit``, 10 EM iterations, N = 1e5, M = 20, K = 4.

Each row says whether both gave the same result (draws, iterates or log-likelihood),
which they should: the changes are to compilation, not arithmetic.  BCE's kernel has its
own comparison: ``bench_bce.py --only kernel --baseline-rev REV``.

Usage::

    python experiments/bench_kernels_vs_rev.py --baseline-rev 303afb5 [--repeats 5]
"""

from __future__ import annotations

import argparse
import importlib
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))

from bench_first_demo import baseline_tree  # noqa: E402
from bench_nbce import planted_codes  # noqa: E402

OLD = "consensuskit_rev"


def load_revision(rev, into):
    """The package at git revision ``rev``, importable as :data:`OLD` from ``into``."""
    baseline_tree(rev, into)
    (Path(into) / "consensuskit").rename(Path(into) / OLD)
    sys.path.insert(0, str(into))


def modules(old, now):
    """``{package name: module}`` for the revision (module path ``old``, as it was before
    the family packages) and the current tree (``now``)."""
    return {"rev": importlib.import_module(f"{OLD}.{old}"),
            "now": importlib.import_module(f"consensuskit.{now}")}


def timed(fn):
    """``(CPU seconds, result)`` of ``fn()``."""
    t = time.process_time()
    out = fn()
    return time.process_time() - t, out


def compare(label, run, repeats):
    """``run(which)`` -> ``(seconds, results)`` for both packages, alternating; print the
    median seconds, their ratio and whether the results are identical."""
    times = {"rev": [], "now": []}
    out = {}
    run("rev"), run("now")  # compile (or load from the cache) outside the timings
    for _ in range(repeats):
        for which in ("rev", "now"):
            t, out[which] = run(which)
            times[which].append(t)
    rev, now = np.median(times["rev"]), np.median(times["now"])
    same = all(np.array_equal(a, b) for a, b in zip(out["rev"], out["now"]))
    print(f"  {label:<40} {rev:8.4f} {now:8.4f} {rev / now:7.2f}x   {same}", flush=True)


def bench_nbce(repeats):
    g = modules("inference.nbce_gibbs", "models.nbce.gibbs")
    rng = np.random.default_rng(0)
    cases = [("sweep", 10_000, 10, 20, 10), ("sweep", 10_000, 10, 100, 10),
             ("iteration", 112, 20, 10, 100), ("iteration", 10_000, 10, 100, 5)]
    for kind, N, M, K, n_it in cases:
        idx, nl = planted_codes(rng, N, M, 8 if M == 10 else 3)
        st = g["now"].GibbsState(idx, nl, rng.integers(0, K, N), K, 1.0, 0.5, "fsd")
        gen = np.random.RandomState(1)
        for _ in range(20):
            g["now"].gibbs_step(st, gen, 10, False)
        z = g["now"].relabel_by_size(st.z)
        for prior in ("tsb", "fsd"):
            def run(which, idx=idx, nl=nl, z=z, K=K, prior=prior, kind=kind, n_it=n_it):
                mod = g[which]
                s = mod.GibbsState(idx, nl, z, K, 1.0, 0.5, prior)
                gen = np.random.RandomState(2)
                mod._seed(3)  # numba's generator: one per thread, shared by both packages

                def go():
                    for _ in range(n_it):
                        if kind == "sweep":
                            s.sweep(1)
                            s.label_swaps()
                        else:
                            mod.gibbs_step(s, gen, 20, True)
                    return s.z, s.hyp

                return timed(go)

            compare(f"NBCE {kind} N={N} K={K} {prior} ({np.unique(z).size} occ.)", run,
                    repeats)


def bench_pcc(repeats):
    p = modules("inference.pcc_descent", "models.pcc.descent")
    from consensuskit.data.ensemble import Ensemble, sample_pairs

    rng = np.random.default_rng(0)
    n, M, K = 600, 20, 4
    z = rng.integers(0, 5, n)
    X = np.column_stack([np.where(rng.random(n) < 0.2, rng.integers(0, 5, n), z)
                         for _ in range(M)])
    C, N = (a.astype(float) for a in Ensemble.from_labels(X).coassociation())
    Y0 = rng.dirichlet(np.ones(K), size=n)
    pairs = sample_pairs(n, 20_000, np.random.RandomState(0))
    pc, pn = C[pairs[:, 0], pairs[:, 1]], N[pairs[:, 0], pairs[:, 1]]
    for div in ("kl", "l2"):
        for mode in ("dense", "pairs"):
            def run(which, div=div, mode=mode):
                mod = p[which]
                if mode == "dense":
                    t, r = timed(lambda: mod.pcc_descent_dense(C, N, Y0, div, max_iter=4000,
                                                               tol=0))
                else:
                    t, r = timed(lambda: mod.pcc_descent_pairs(pairs, pc, pn, Y0, div,
                                                               max_iter=4000, tol=0))
                return t, (r.Y, r.objective)

            compare(f"PCC {mode} {div} n={n} K={K}", run, repeats)


def bench_mm(repeats):
    import torch

    m = modules("estimators.mm", "models.mm.estimator")
    rng = np.random.default_rng(0)
    N, M, K = 100_000, 20, 4
    z = rng.integers(0, K, N)
    X = np.column_stack([np.where(rng.random(N) < 0.3, rng.integers(0, 5, N),
                                  rng.integers(0, 5, K)[z]) for _ in range(M)])
    torch.set_num_threads(1)

    def run(which):
        est = m[which].MM(n_clusters=K, max_iter=10, tol=0, n_init=1, random_state=0)
        t, est = timed(lambda: est.fit(X))
        return t, (np.asarray(est.log_likelihood_),)

    compare(f"MM fit, 10 iterations, N={N} M={M} K={K}", run, repeats)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline-rev", required=True)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--only", nargs="+", default=["nbce", "pcc", "mm"])
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        load_revision(a.baseline_rev, tmp)
        print(f"CPU seconds, medians of {a.repeats}; 'speed' = revision / now (> 1: faster "
              f"now); 'same': identical results")
        print(f"  {'':<40} {a.baseline_rev:>8} {'now':>8} {'speed':>8}   same")
        for name in a.only:
            {"nbce": bench_nbce, "pcc": bench_pcc, "mm": bench_mm}[name](a.repeats)


if __name__ == "__main__":
    main()
