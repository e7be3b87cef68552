"""Benchmark: the first ``consensuskit demo`` after a fresh install, with and without warm-up.

Each run is a new process with its own empty numba cache (``NUMBA_CACHE_DIR`` set to
a fresh temporary folder), so nothing compiled earlier is reused:

``cold``
    ``consensuskit demo --no-figure`` with an empty cache: what a first demo costs
    when nothing was compiled at install (compilation included).
``warmup``
    ``consensuskit warmup`` into a second empty cache: the compilation moved to
    install time (``make`` runs it after ``pip install``).
``after warmup``
    ``consensuskit demo --no-figure`` with that cache: the first demo after ``make``.
``baseline cold``
    With ``--baseline-rev REV``: the demo of the package as it was at git revision
    REV (``git archive``), empty cache.

CPU seconds are the child process's user + system time (``resource.getrusage``),
beside wall seconds; medians of ``--repeats``.  On a shared machine compare CPU.

Usage::

    python experiments/bench_first_demo.py --repeats 1 --baseline-rev 2e4de80
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def run(argv, source, cache):
    """(cpu seconds, wall seconds) of ``consensuskit argv`` from ``source`` with ``cache``."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache), PYTHONPATH=str(source))
    code = "import sys; from consensuskit.cli import main; sys.exit(main(sys.argv[1:]))"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    w = time.perf_counter()
    subprocess.run([sys.executable, "-c", code, "-q", *argv], env=env, check=True,
                   stdout=subprocess.DEVNULL, cwd=source)
    wall = time.perf_counter() - w
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def baseline_tree(rev, into):
    """The package at git revision ``rev`` unpacked under ``into``."""
    tar = subprocess.run(["git", "archive", rev, "consensuskit"], cwd=ROOT, check=True,
                         capture_output=True).stdout
    with tarfile.open(fileobj=BytesIO(tar)) as t:
        t.extractall(into, filter="data")
    return into


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--baseline-rev", default=None,
                   help="also time the demo of the package at this git revision (cold)")
    a = p.parse_args(argv)
    demo = ["demo", "--no-figure"]
    rows = {"cold": [], "warmup": [], "after warmup": []}
    if a.baseline_rev:
        rows[f"baseline {a.baseline_rev} cold"] = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        base = baseline_tree(a.baseline_rev, tmp / "base") if a.baseline_rev else None
        for r in range(a.repeats):
            rows["cold"].append(run(demo, ROOT, tmp / f"cold{r}"))
            rows["warmup"].append(run(["warmup"], ROOT, tmp / f"warm{r}"))
            rows["after warmup"].append(run(demo, ROOT, tmp / f"warm{r}"))
            if base is not None:
                rows[f"baseline {a.baseline_rev} cold"].append(run(demo, base, tmp / f"b{r}"))
    print(f"first `consensuskit demo --no-figure` in a new process, fresh numba cache; "
          f"medians of {a.repeats}")
    for name, t in rows.items():
        cpu, wall = np.median(np.asarray(t), 0)
        print(f"  {name:<24} {cpu:7.1f} s CPU  {wall:7.1f} s wall")


if __name__ == "__main__":
    main()
