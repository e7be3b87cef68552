"""Size and load time of the safe file format (version 2: JSON tree + .npz) against the
old pickle format (version 1), for every estimator (issue 28, Must show 1).

    PYTHONPATH=. OMP_NUM_THREADS=1 python experiments/persistence_format.py --n 2000

Each estimator is fitted once on noisy copies of a planted partition (N rows, M base
clusterings); its file is written in both formats, then loaded ``--repeats`` times
each (median wall and CPU seconds).  The old format is written here exactly as
consensuskit wrote it (header line + pickle) and read with ``load(trust=True)``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pickle
import statistics
import sys
import tempfile
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

from _factories import ESTIMATORS, make_fast  # noqa: E402

from consensuskit.data.generate import noisy_copies  # noqa: E402
from consensuskit.io import persistence  # noqa: E402


def write_old(est, path):
    """The version-1 writer: magic, JSON header, pickle of the state (as before)."""
    state = {k: persistence.decode(*persistence.encode(v)) for k, v in vars(est).items()}
    payload = pickle.dumps({"state": state}, protocol=pickle.HIGHEST_PROTOCOL)
    cls = type(est)
    header = {"format_version": 1, "class": f"{cls.__module__}:{cls.__qualname__}",
              "kind": "estimator", "sha256": hashlib.sha256(payload).hexdigest(),
              "n_bytes": len(payload)}
    with open(path, "wb") as fh:
        fh.write(persistence.MAGIC + json.dumps(header).encode() + b"\n" + payload)


def timed(fn, repeats):
    wall, cpu = [], []
    for _ in range(repeats):
        w, c = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - w)
        cpu.append(time.process_time() - c)
    return statistics.median(wall), statistics.median(cpu)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--m", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    X = noisy_copies(np.repeat(np.arange(3), args.n // 3), args.m, noise=0.2,
                     random_state=0)
    print(f"N={X.shape[0]} M={X.shape[1]}; medians of {args.repeats} loads\n")
    print(f"{'estimator':22s} {'old KiB':>9s} {'new KiB':>9s} {'size':>6s} "
          f"{'old ms':>8s} {'new ms':>8s} {'load':>6s} {'old cpu':>8s} {'new cpu':>8s}")
    ratios_size, ratios_time = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for name in ESTIMATORS:
            est = make_fast(name, **({"truncation": 4} if name == "NBCE" else {"n_clusters": 3}))
            est.fit(X)
            old, new = os.path.join(tmp, "old.ck"), os.path.join(tmp, "new.ck")
            write_old(est, old)
            persistence.save(est, new)
            so, sn = os.path.getsize(old), os.path.getsize(new)
            (wo, co) = timed(lambda old=old: persistence.load(old, trust=True), args.repeats)
            (wn, cn) = timed(lambda new=new: persistence.load(new), args.repeats)
            ratios_size.append(sn / so)
            ratios_time.append(wn / wo)
            print(f"{name:22s} {so / 1024:9.1f} {sn / 1024:9.1f} {sn / so:6.2f} "
                  f"{wo * 1e3:8.2f} {wn * 1e3:8.2f} {wn / wo:6.2f} {co * 1e3:8.2f} "
                  f"{cn * 1e3:8.2f}")
    print(f"\nnew/old: size median {statistics.median(ratios_size):.2f} "
          f"(range {min(ratios_size):.2f}-{max(ratios_size):.2f}), load time median "
          f"{statistics.median(ratios_time):.2f} (range {min(ratios_time):.2f}-"
          f"{max(ratios_time):.2f})")


if __name__ == "__main__":
    main()
