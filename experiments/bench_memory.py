"""Peak memory per label of ``Ensemble.from_labels`` and of BCE, MM and NBCE fits.

Each case runs in a fresh subprocess (``python bench_memory.py --case NAME --n N --m M``)
that builds an (N, M) int8 label matrix (K planted clusters, 10 labels per column, 5%
missing), then runs the case; the parent reads the child's ``ru_maxrss`` (peak resident
set, input included) and prints it in GiB and in bytes per label (``N * M``), beside the
baseline of a child that only imports the package and builds the input (``input``; the
imports alone are ~0.3 GiB, so bytes per label mean something only for large N) and the
child's CPU and wall seconds.  ``PYTHONPATH`` picks the checkout measured (e.g. main's, for
the numbers before a change).  One thread (OMP/MKL/NUMBA threads 1).

Fits are short (a few iterations, one restart): memory, not convergence, is measured.
``bce_membership`` is ``bce`` followed by a read of ``membership_``, which BCE forms from
``gamma_`` on first read, not during ``fit``; ``bce_defaults`` is BCE with every default
(k-means init, 3 chains auditioned, 200 sweeps on 10,000 rows) but ``final_sweeps``.
BCE's default (collapsed Gibbs) runs ``n_sweeps`` on 10,000 rows and then 60 sweeps over
all rows; ``--final-sweeps S`` (default 60, the estimator's) sets the latter for a run at
1e7 rows (memory does not depend on it once it is at least 3, so that draws are pooled:
compare two values at 1e6).  ``nbce`` is a short fit (truncation 8, 2 draws, one chain);
``nbce_defaults`` is NBCE with every default (4 chains x 500 draws, whose stored draws
of z are most of its memory; run it at N = 1e4-1e5, not 1e7).  ``--where`` prints where
the resident set grew.

Usage::

    python experiments/bench_memory.py [--n 1000000] [--m 20] [--cases input,from_labels,...]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np

CASES = ["input", "from_labels", "bce", "bce_float32", "bce_membership", "bce_defaults", "mm",
         "mm_restarts", "nbce", "nbce_defaults"]


def labels(n, m, k=10, seed=0, missing=0.05):
    """(n, m) int8 labels, built a column at a time (no int64 (n, m) temporary)."""
    rng = np.random.default_rng(seed)
    z = rng.integers(4, size=n).astype(np.int8)
    X = np.empty((n, m), dtype=np.int8)
    for j in range(m):
        col = np.where(rng.random(n) < 0.7, z, rng.integers(k, size=n).astype(np.int8))
        col[rng.random(n) < missing] = -1
        X[:, j] = col
    X[:, 0] = z  # every row keeps an observed label
    return X


class PeakWhere:
    """Where the resident set grows: a thread polls RSS every ``interval`` s and, each time
    it passes its previous maximum by ``step`` bytes, records the main thread's innermost
    project frames (allocations made inside torch, numpy or numba show up at the project
    line that called them; a peak shorter than the interval can be missed)."""

    def __init__(self, interval=0.002, step=16 * 2**20):
        import threading

        self.interval, self.step = interval, step
        self.page = os.sysconf("SC_PAGE_SIZE")
        self.records, self.top = [], 0
        self.main = threading.main_thread().ident
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()

    def _rss(self):
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * self.page

    def _poll(self):
        import traceback

        while not self.stop.wait(self.interval):
            rss = self._rss()
            if rss > self.top + self.step:
                self.top = rss
                frame = sys._current_frames().get(self.main)
                stack = [f"{os.path.relpath(fs.filename)}:{fs.lineno} {fs.name}"
                         for fs in traceback.extract_stack(frame)
                         if "consensuskit" in fs.filename][-4:]
                self.records.append((rss, stack))

    def report(self):
        self.stop.set()
        self.thread.join()
        return [{"rss": r, "stack": s} for r, s in self.records]


def run_case(case, n, m, where=False, final_sweeps=60):
    import torch  # noqa: F401  (every case, "input" included, pays the same imports)

    import consensuskit  # noqa: F401

    X = labels(n, m)
    probe = PeakWhere() if where else None
    c0, t0 = time.process_time(), time.perf_counter()
    if case == "from_labels":
        from consensuskit.data.ensemble import Ensemble

        Ensemble.from_labels(X)
    elif case in ("bce", "bce_float32", "bce_membership", "bce_defaults"):
        from consensuskit import BCE
        from consensuskit.models.bce.collapsed_gibbs import CollapsedGibbsEM

        CollapsedGibbsEM.__init__.__kwdefaults__["final_sweeps"] = final_sweeps
        if case == "bce_defaults":
            BCE(n_clusters=4, random_state=0).fit(X)
        else:
            est = BCE(n_clusters=4, max_iter=3, n_init=1, init="random",
                      n_perplexity_samples=10,
                      dtype="float32" if case == "bce_float32" else "float64",
                      random_state=0).fit(X)
            if case == "bce_membership":  # float64, and membership_ read after the fit
                est.membership_  # noqa: B018  (formed on first read)
    elif case in ("mm", "mm_restarts"):
        from consensuskit import MM

        # mm_restarts: the default 5 restarts (the best one's results kept across them)
        MM(n_clusters=4, max_iter=3, n_init=5 if case == "mm_restarts" else 1,
           random_state=0).fit(X)
    elif case == "nbce":
        from consensuskit import NBCE

        NBCE(truncation=8, n_samples=2, burn_in=1, n_chains=1, random_state=0).fit(X)
    elif case == "nbce_defaults":  # every default: 4 chains x 500 draws of z kept
        from consensuskit import NBCE

        NBCE(random_state=0).fit(X)
    elif case != "input":
        raise SystemExit(f"unknown case {case}")
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if probe is not None:
        for r in probe.report():
            print(f"  {r['rss'] / 2**30:7.3f} GiB  " + " <- ".join(reversed(r["stack"])),
                  file=sys.stderr)
    print(json.dumps({"case": case, "peak": peak, "cpu": cpu, "wall": wall}))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--m", type=int, default=20)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--where", action="store_true",
                    help="print, per case, the project lines at which the resident set grew")
    ap.add_argument("--final-sweeps", type=int, default=60)
    ap.add_argument("--case", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.case:
        run_case(args.case, args.n, args.m, where=args.where, final_sweeps=args.final_sweeps)
        return
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", NUMBA_NUM_THREADS="1",
               OPENBLAS_NUM_THREADS="1")
    n_lab = args.n * args.m
    print(f"N={args.n:,} x M={args.m}: {n_lab:,} labels (int8 input "
          f"{n_lab / 2**30:.3f} GiB); peak RSS of a fresh process per case, input included; "
          f"BCE final sweeps {args.final_sweeps}")
    print(f"{'case':14s} {'peak GiB':>9s} {'B/label':>8s} {'above input':>12s} "
          f"{'CPU s':>7s} {'wall s':>7s}")
    base = None
    for case in args.cases.split(","):
        proc = subprocess.run([sys.executable, __file__, "--case", case, "--n", str(args.n),
                               "--m", str(args.m), "--final-sweeps", str(args.final_sweeps)]
                              + (["--where"] if args.where else []),
                              env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"{case:14s} failed: {proc.stderr.strip().splitlines()[-1:]}")
            continue
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        if args.where:
            print("\n".join(ln for ln in proc.stderr.splitlines() if ln.startswith("  ")))
        if case == "input":
            base = r["peak"]
        above = "" if base is None else f"{(r['peak'] - base) / n_lab:.1f}"
        print(f"{case:14s} {r['peak'] / 2**30:9.3f} {r['peak'] / n_lab:8.1f} {above:>12s} "
              f"{r['cpu']:7.2f} {r['wall']:7.2f}")
    _ = resource


if __name__ == "__main__":
    main()
