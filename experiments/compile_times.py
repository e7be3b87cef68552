"""Where a cold first ``consensuskit demo`` spends its compilation time, per numba kernel.

Runs ``consensuskit demo --no-figure`` in a new process with an empty numba cache
(``NUMBA_CACHE_DIR`` a fresh temporary folder) and records, for every numba function
that Python calls directly (the compiled callees are part of their caller's time), the
thread CPU seconds of its compilations.  ``NUMBA_NUM_THREADS=1`` makes NBCE run its
chains one after the other, so no compilation waits on another thread's.

With ``--baseline-rev REV`` the package at git revision REV (``git archive``) is
profiled too, the two alternating ``--repeats`` times (on a shared machine CPU time
drifts with the load, so only runs close in time compare); medians, per kernel and
per module.

Usage::

    python experiments/compile_times.py [--baseline-rev REV] [--repeats R]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np
from bench_first_demo import baseline_tree

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
from consensuskit.cli.commands import main
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
    p.add_argument("--baseline-rev", default=None)
    p.add_argument("--repeats", type=int, default=1)
    a = p.parse_args(argv)
    runs = defaultdict(list)
    with tempfile.TemporaryDirectory() as tmp:
        sources = {"now": ROOT}
        if a.baseline_rev:
            sources = {a.baseline_rev: baseline_tree(a.baseline_rev, Path(tmp) / "base"), **sources}
        for r in range(a.repeats):
            for name, src in sources.items():
                runs[name].append(profile(src, Path(tmp) / f"cache-{name}-{r}"))
    names = list(sources)
    med = {n: {"cpu": float(np.median([x["cpu"] for x in runs[n]]))} for n in names}
    kernels = sorted({k for n in names for x in runs[n] for k in x["kernels"]})
    for n in names:
        for k in kernels:
            med[n][k] = float(np.median([x["kernels"].get(k, 0.0) for x in runs[n]]))
    print(f"cold `consensuskit demo --no-figure`, fresh numba cache, medians of {a.repeats}: "
          "compile seconds (thread CPU) of each kernel Python calls, its callees included")
    print(f"  {'kernel':<40}" + "".join(f"{n:>10}" for n in names))
    modules = sorted({k.split(".")[0] for k in kernels})
    for mod in modules:
        for k in sorted((k for k in kernels if k.startswith(mod + ".")),
                        key=lambda k: -max(med[n][k] for n in names)):
            if max(med[n][k] for n in names) >= 0.05:
                print(f"  {k:<40}" + "".join(f"{med[n][k]:10.2f}" for n in names))
        print(f"  {'  ' + mod + ' (all)':<40}"
              + "".join(f"{sum(v for k, v in med[n].items() if k.startswith(mod + '.')):10.2f}"
                        for n in names))
    print(f"  {'compiling (all)':<40}"
          + "".join(f"{sum(v for k, v in med[n].items() if k != 'cpu'):10.2f}" for n in names))
    print(f"  {'process CPU (all)':<40}" + "".join(f"{med[n]['cpu']:10.2f}" for n in names))


if __name__ == "__main__":
    main()
