"""The fuzzer's outcome table (issue 28, Must show 3): random label inputs as users hold
them (numpy arrays of every dtype, lists, pandas frames, torch tensors, masked arrays,
memoryviews, with names, big integers, missing entries and bad values) fitted by every
estimator; each outcome sorted by ``tests/_fuzz_inputs.judge`` against the input's
meaning.  Goal: only "correct" and "clear error".

    PYTHONPATH=. python experiments/fuzz_inputs.py --n 100              # this checkout
    PYTHONPATH=/path/to/old/checkout python experiments/fuzz_inputs.py  # a baseline

The same seeds give the same inputs in both runs (the generator lives in this
checkout's ``tests/``, only the package under test changes).
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

from _fuzz_inputs import OUTCOMES, judge, random_input  # noqa: E402

#: every estimator and its tiny-fit settings (as tests/_factories.py; written out here so
#: that an older checkout, without the families' records, runs the same fits)
FAST = {
    "MM": {"n_init": 1, "max_iter": 20}, "BCE": {"n_init": 1, "max_iter": 10},
    "GBCE": {"n_init": 1, "max_iter": 10},
    "NBCE": {"truncation": 4, "n_samples": 5, "burn_in": 2, "n_chains": 1},
    "PCC": {}, "KCC": {"n_init": 1}, "CSPA": {}, "HGPA": {"n_init": 1}, "MCLA": {},
    "HBGF": {"n_init": 1}, "EAC": {}, "QMI": {"n_init": 1},
    "ResamplingConsensus": {"n_resamples": 5, "k_range": (2, 3)}, "MajorityVote": {},
    "IVC": {"n_init": 1}, "IPVC": {"n_init": 1}, "MedoidConsensus": {},
    "LeastSquaresConsensus": {"n_init": 1},
}
ESTIMATORS = list(FAST)


def make_fast(name):
    import consensuskit

    kw = dict(FAST[name], random_state=0)
    if name != "NBCE":
        kw["n_clusters"] = 2
    return getattr(consensuskit, name)(**kw)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100, help="inputs per estimator")
    ap.add_argument("--examples", type=int, default=3, help="examples shown per bad outcome")
    ap.add_argument("--limit", type=float, default=30.0, help="seconds that count as a hang")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    import consensuskit

    print(f"consensuskit from {os.path.dirname(consensuskit.__file__)}")
    table = {}
    shown = collections.defaultdict(list)
    t0 = time.monotonic()
    good = np.array([[0, 1, 5], [0, 1, 5], [0, 1, 7], [1, 0, 7], [1, 0, 7], [1, 2, 7]])
    for name in ESTIMATORS:  # compile numba kernels before anything is timed
        make_fast(name).fit(good)
    for name in ESTIMATORS:
        counts = collections.Counter()
        for seed in range(args.n):
            X, expected, what = random_input(np.random.default_rng(seed))
            outcome, detail = judge(lambda name=name: make_fast(name), X, expected,
                                    limit=args.limit)
            counts[outcome] += 1
            if outcome not in ("correct", "clear error"):
                shown[outcome].append(f"{name} seed {seed} {what}: {detail}")
        table[name] = counts
    print(f"{args.n} inputs per estimator, {time.monotonic() - t0:.0f} s\n")
    print(f"{'estimator':22s} " + " ".join(f"{o:>13s}" for o in OUTCOMES))
    total = collections.Counter()
    for name, counts in table.items():
        total.update(counts)
        print(f"{name:22s} " + " ".join(f"{counts[o]:13d}" for o in OUTCOMES))
    print(f"{'all':22s} " + " ".join(f"{total[o]:13d}" for o in OUTCOMES))
    for outcome, lines in shown.items():
        kinds = collections.Counter(line.split(": ", 1)[0].split()[-2] for line in lines)
        print(f"\n{outcome}: {len(lines)} (by input kind: {dict(kinds)}); examples:")
        seen = set()
        for line in lines:
            key = line.split(" seed")[1].split(":")[0].split()[1]
            if key in seen:
                continue
            seen.add(key)
            print("  " + line[:260])
            if len(seen) >= args.examples * 3:
                break


if __name__ == "__main__":
    main()
