"""Processes sharing numba's on-disk cache and compiling at the same time (issue 28).

Each round empties a private cache folder (``NUMBA_CACHE_DIR``: a cold cache, so every
process compiles and writes), then

1. *compile*: ``--procs`` processes at once, each fitting MM with its own K (MM's E-step
   kernel is compiled per K, so they all add entries to one function's cache index).
   Each process imports and prepares its data first, then waits for a common start time
   (import time under load varies by seconds and would spread the writes apart);
2. *load*: the same ``--procs`` processes again, now reading every kernel from the cache.

A process that compiled a kernel runs its own in-memory code, so a corrupted index
entry shows only in phase 2, when a process loads code written by another: a crash
(``SystemError: NRT_adapt_ndarray_to_python`` in the issue) or a different result.
A round passes when every process of both phases exits 0 with the lower bound of the
reference (a process that ran alone on a cold cache).

``--unlocked`` removes consensuskit's lock on numba's cache index in every child (numba's
own behaviour: the negative control).

``--fork`` makes a round cheap: the children are forked from this interpreter (consensuskit
and the data already loaded, MM's kernel module *not* imported, so each child imports it
with its round's fresh cache folder, compiles MM's three kernels and writes them: the
cache is as cold as in a fresh interpreter) and released together through a pipe.
After the compile phase the round also counts the E-step index's entries and data files
(one per K when no entry was lost).

    PYTHONPATH=. python experiments/numba_cache_race.py --rounds 20 --procs 4 [--unlocked]
    PYTHONPATH=. python experiments/numba_cache_race.py --fork --rounds 40 --procs 4 [--unlocked]
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
import sys, time
import numpy as np
import consensuskit as ck
from consensuskit.data.generate import noisy_copies
K, start, unlocked = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3] == "1"
from numba.core import caching
if unlocked:
    cls = caching.IndexDataCacheFile
    cls.save, cls.load = cls.save.__wrapped__, cls.load.__wrapped__
X = noisy_copies(np.repeat(np.arange(K), 15), 6, noise=0.2, random_state=K)
while time.time() < start:
    time.sleep(0.005)
mm = ck.MM(n_clusters=K, n_init=1, max_iter=15, random_state=0).fit(X)
print(repr(float(mm.lower_bound_)))
"""


def run_phase(cache, procs, env, unlocked, lead=None):
    """``procs`` children (K = 2, 3, ...) released together ``lead`` s from now (None: run
    one after the other); (exit code, stdout, last stderr line) per child."""
    ps, out = [], []
    start = 0.0 if lead is None else time.time() + lead
    for k in range(2, 2 + procs):
        # run from the cache folder's parent: the package comes from PYTHONPATH, not cwd
        p = subprocess.Popen([sys.executable, "-c", CHILD, str(k), repr(start),
                              "1" if unlocked else "0"], env=env, cwd=os.path.dirname(cache),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        ps.append(p)
        if lead is None:
            o, e = p.communicate()
            out.append((p.returncode, o, e))
    if lead is not None:
        for p in ps:
            o, e = p.communicate()
            out.append((p.returncode, o, e))
    return [(rc, o.strip(), e.strip().splitlines()[-1] if e.strip() else "")
            for rc, o, e in out]


# --------------------------------------------------------------------------- fork mode
def _fork_child(K, X, cache, gate, out_path, unlocked):
    os.environ["NUMBA_CACHE_DIR"] = cache
    from numba.core.config import reload_config

    reload_config()
    from numba.core import caching

    if unlocked:
        cls = caching.IndexDataCacheFile
        cls.save, cls.load = cls.save.__wrapped__, cls.load.__wrapped__
    import consensuskit as ck

    if gate is not None:
        os.read(gate, 1)
    try:
        mm = ck.MM(n_clusters=K, n_init=1, max_iter=15, random_state=0).fit(X)
        text, code = repr(float(mm.lower_bound_)), 0
    except BaseException as exc:  # noqa: BLE001
        text, code = f"{type(exc).__name__}: {exc}"[:300], 1
    with open(out_path, "w") as fh:
        fh.write(f"{code} {text}")
    return code


def fork_phase(cache, data, unlocked, serial=False):
    """One forked child per K, released together (or one after the other);
    (exit code, lower bound or error) per K."""
    r, w = os.pipe()
    pids = []
    for K, X in data.items():
        out_path = f"{cache}.out-{K}"
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = _fork_child(K, X, cache, None if serial else r, out_path, unlocked)
            finally:
                os._exit(code)
        pids.append((pid, out_path))
        if serial:
            os.waitpid(pid, 0)
    if not serial:
        os.write(w, b"g" * len(pids))
    res = []
    for pid, out_path in pids:
        rc = 0 if serial else os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        try:
            with open(out_path) as fh:
                code, text = fh.read().split(" ", 1)
            os.unlink(out_path)
        except (OSError, ValueError):
            code, text = "1", f"no output (exit {rc})"
        res.append((rc or int(code), text))
    os.close(r)
    os.close(w)
    return res


def e_pass_files(cache):
    """(index entries, data files) of MM's E-step kernel in ``cache``."""
    import pickle

    nbi = nbc = 0
    entries = None
    for folder, _, names in os.walk(cache):
        for n in names:
            if "e_pass" not in n:
                continue
            nbc += n.endswith(".nbc")
            if n.endswith(".nbi"):
                nbi += 1
                with open(os.path.join(folder, n), "rb") as fh:
                    pickle.load(fh)  # numba's version
                    _stamp, overloads = pickle.loads(fh.read())
                entries = len(overloads)
    return entries, nbc


def main_fork(args):
    import numpy as np

    from consensuskit.data.generate import noisy_copies

    ks = list(range(2, 2 + args.procs))
    data = {K: noisy_copies(np.repeat(np.arange(K), 15), 6, noise=0.2, random_state=K)
            for K in ks}
    assert "consensuskit.models.mm.kernels" not in sys.modules
    with tempfile.TemporaryDirectory() as tmp:
        cache = os.path.join(tmp, "ref-cache")
        ref = [t for _, t in fork_phase(cache, data, unlocked=False, serial=True)]
        print(f"reference lower bounds (K = {ks}): {ref}", flush=True)
        assert "consensuskit.models.mm.kernels" not in sys.modules
        bad_rounds, lost = 0, 0
        counts = {"compile": [0, 0], "load": [0, 0]}
        t0 = time.monotonic()
        for i in range(args.rounds):
            cache = os.path.join(tmp, f"cache-{i}")
            os.makedirs(cache)
            bad = False
            for phase in ("compile", "load"):
                out = fork_phase(cache, data, args.unlocked)
                crashed = [(K, t) for K, (rc, t) in zip(ks, out) if rc != 0]
                diff = [K for K, (rc, t), r in zip(ks, out, ref) if rc == 0 and t != r]
                counts[phase][0] += len(crashed)
                counts[phase][1] += len(diff)
                if phase == "compile":
                    entries, nbc = e_pass_files(cache)
                    if entries != len(ks) or nbc != len(ks):
                        lost += 1
                        bad = True
                        print(f"round {i}: E-step index has {entries} entries and {nbc} data "
                              f"files for {len(ks)} K", flush=True)
                if crashed or diff:
                    bad = True
                    print(f"round {i} {phase}: crashed {crashed}; different result for K "
                          f"{diff}", flush=True)
            shutil.rmtree(cache, ignore_errors=True)
            bad_rounds += bad
            if not args.quiet or bad:
                print(f"round {i}: {'FAIL' if bad else 'ok'} "
                      f"({time.monotonic() - t0:.0f} s so far)", flush=True)
        mode = "UNLOCKED (numba's own)" if args.unlocked else "locked (consensuskit)"
        print(f"fork, {mode}: {args.rounds} rounds x {args.procs} processes x 2 phases: "
              f"{bad_rounds} failed rounds ({lost} with E-step index entries lost); compile "
              f"phase {counts['compile'][0]} crashed / {counts['compile'][1]} different; load "
              f"phase {counts['load'][0]} crashed / {counts['load'][1]} different "
              f"({time.monotonic() - t0:.0f} s wall)")
    return 1 if bad_rounds else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--unlocked", action="store_true",
                    help="numba's own unlocked cache index (negative control)")
    ap.add_argument("--lead", type=float, default=15.0,
                    help="seconds from launch to the common start (covers the imports)")
    ap.add_argument("--fork", action="store_true", help="cheap rounds: forked children")
    ap.add_argument("--quiet", action="store_true", help="print failed rounds only")
    args = ap.parse_args()
    if args.fork:
        return main_fork(args)
    env = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1", MKL_NUM_THREADS="1")
    with tempfile.TemporaryDirectory() as tmp:
        cache = os.path.join(tmp, "numba-cache")
        env["NUMBA_CACHE_DIR"] = cache
        shutil.rmtree(cache, ignore_errors=True)
        ref = [r[1] for r in run_phase(cache, args.procs, env, unlocked=False)]
        print(f"reference lower bounds (K = 2..{1 + args.procs}): {ref}", flush=True)
        bad_rounds = 0
        counts = {"compile": [0, 0], "load": [0, 0]}  # [crashes, different results]
        t0 = time.monotonic()
        for i in range(args.rounds):
            shutil.rmtree(cache, ignore_errors=True)
            os.makedirs(cache)
            bad = False
            for phase in ("compile", "load"):
                out = run_phase(cache, args.procs, env, args.unlocked, lead=args.lead)
                crashed = [(k + 2, rc, err) for k, (rc, _, err) in enumerate(out) if rc != 0]
                diff = [k + 2 for k, (rc, o, _) in enumerate(out) if rc == 0 and o != ref[k]]
                counts[phase][0] += len(crashed)
                counts[phase][1] += len(diff)
                if crashed or diff:
                    bad = True
                    print(f"round {i} {phase}: crashed (K, rc, last line) {crashed}; "
                          f"different result for K {diff}", flush=True)
            bad_rounds += bad
            print(f"round {i}: {'FAIL' if bad else 'ok'} "
                  f"({time.monotonic() - t0:.0f} s so far)", flush=True)
        mode = "UNLOCKED (numba's own)" if args.unlocked else "locked (consensuskit)"
        print(f"{mode}: {args.rounds} rounds x {args.procs} processes x 2 phases: "
              f"{bad_rounds} failed rounds; compile phase {counts['compile'][0]} crashed / "
              f"{counts['compile'][1]} different; load phase {counts['load'][0]} crashed / "
              f"{counts['load'][1]} different ({time.monotonic() - t0:.0f} s)")
    return 1 if bad_rounds else 0


if __name__ == "__main__":
    sys.exit(main())
