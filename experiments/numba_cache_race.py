"""Processes sharing numba's on-disk cache and compiling at the same time (issue 28).

Each round empties a private cache folder (``NUMBA_CACHE_DIR``), then starts ``--procs``
processes at once, each fitting MM with its own K (the E-step kernel is compiled per K,
so they all write entries of the same function's index) and BCE; a round passes when
every process exits 0 and its fit equals the reference fit of a process that ran alone.
Before the fix ~1 round in 3 crashed with ``SystemError`` (``NRT_adapt_ndarray_to_python``):
one process loaded a kernel compiled for another K.

    PYTHONPATH=. python experiments/numba_cache_race.py --rounds 100 --procs 4
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

CHILD = r"""
import sys, numpy as np
import consensuskit as ck
print(ck.__file__, file=sys.stderr)
from consensuskit.data.generate import noisy_copies
K = int(sys.argv[1])
X = noisy_copies(np.repeat(np.arange(K), 15), 6, noise=0.2, random_state=K)
mm = ck.MM(n_clusters=K, n_init=1, max_iter=15, random_state=0).fit(X)
bce = ck.BCE(n_clusters=K, n_init=1, max_iter=5, random_state=0).fit(X)
print(repr(float(mm.lower_bound_)), repr(float(bce.lower_bound_)))
"""


def run_round(cache, procs, env, serial=False):
    shutil.rmtree(cache, ignore_errors=True)
    os.makedirs(cache)
    out, ps = [], []
    for k in range(2, 2 + procs):
        # run from the cache folder's parent: the package comes from PYTHONPATH, not cwd
        ps.append(subprocess.Popen([sys.executable, "-c", CHILD, str(k)], env=env,
                                   cwd=os.path.dirname(cache), stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True))
        if serial:
            out.append((ps[-1].wait(), *ps[-1].communicate()))
    return out if serial else [(p.wait(), *p.communicate()) for p in ps]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--procs", type=int, default=4)
    args = ap.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
    with tempfile.TemporaryDirectory() as tmp:
        cache = os.path.join(tmp, "numba-cache")
        env["NUMBA_CACHE_DIR"] = cache
        ref = [r[1] for r in run_round(cache, args.procs, env, serial=True)]
        failures = wrong = 0
        t0 = time.monotonic()
        for i in range(args.rounds):
            out = run_round(cache, args.procs, env)
            bad = [(k, rc, err.strip().splitlines()[-1] if err.strip() else "")
                   for k, (rc, _, err) in enumerate(out) if rc != 0]
            diff = [k for k, (rc, o, _) in enumerate(out) if rc == 0 and o != ref[k]]
            failures += bool(bad)
            wrong += bool(diff)
            if bad or diff:
                print(f"round {i}: crashed {bad} different {diff}", flush=True)
        print(f"{args.rounds} rounds x {args.procs} processes: {failures} rounds with a "
              f"crash, {wrong} with a different result ({time.monotonic() - t0:.0f} s)")
    return 1 if failures or wrong else 0


if __name__ == "__main__":
    sys.exit(main())
