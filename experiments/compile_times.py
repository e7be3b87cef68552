"""Where a cold first ``consensuskit demo`` spends its compilation time, per numba kernel.

Runs ``consensuskit demo --no-figure`` in a new process with an empty numba cache
(``NUMBA_CACHE_DIR`` a fresh temporary folder) and records, for every numba function
that Python calls directly (the compiled callees are part of their caller's time), the
thread CPU seconds of its compilations.  ``NUMBA_NUM_THREADS=1`` makes NBCE run its
chains one after the other, so no compilation waits on another thread's.

Usage::

    python experiments/compile_times.py [--source DIR]   # DIR: a package tree, default here
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, resource, sys, time
from collections import defaultdict
from numba.core.dispatcher import Dispatcher

times = defaultdict(float)
depth = [0]
orig = Dispatcher._compile_for_args

def timed(self, *args, **kws):
    if depth[0]:
        return orig(self, *args, **kws)
    depth[0] += 1
    t = time.thread_time()
    try:
        return orig(self, *args, **kws)
    finally:
        depth[0] -= 1
        times[f"{self.py_func.__module__.split('.')[-1]}.{self.py_func.__name__}"] += (
            time.thread_time() - t)

Dispatcher._compile_for_args = timed
from consensuskit.cli import main
main(["-q", "demo", "--no-figure"])
r = resource.getrusage(resource.RUSAGE_SELF)
print("@@" + json.dumps({"kernels": times, "cpu": r.ru_utime + r.ru_stime}))
"""


def profile(source, cache):
    """``{"kernels": {name: seconds}, "cpu": total}`` of one cold demo from ``source``."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache), PYTHONPATH=str(source),
               NUMBA_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, check=True, cwd=source,
                         capture_output=True, text=True).stdout
    line = next(s for s in out.splitlines() if s.startswith("@@"))
    return json.loads(line[2:])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--source", default=str(ROOT), help="folder holding the consensuskit package")
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        res = profile(a.source, tmp)
    ks = sorted(res["kernels"].items(), key=lambda kv: -kv[1])
    total = sum(v for _, v in ks)
    print(f"cold demo from {a.source}: {res['cpu']:.1f} s CPU in all, "
          f"{total:.1f} s compiling (thread CPU, top-level kernels incl. callees)")
    for name, v in ks:
        if v >= 0.05:
            print(f"  {name:<40} {v:6.2f} s")


if __name__ == "__main__":
    main()
