"""SBC p-values of NBCE's Gibbs sampler: every case of tests/test_sbc_nbce.py, correct
sampler and negative controls (beta 40% off, alpha0 50% off), at the slow-suite size.

    PYTHONPATH=$PWD python experiments/nbce_sbc.py [--reps 1000]

Prints per case the Bonferroni-corrected p-value and each statistic's chi-square
p-value; the slow tests assert p > 1e-3 for the correct sampler and p < 1e-3 for
the controls with exactly these settings.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.test_sbc_nbce import CASES, SLOW, sbc_ranks, uniformity_pvalue  # noqa: E402

CONTROLS = {"correct": {}, "beta x1.4": {"sampler_b": 1.4}, "alpha0 x1.5": {"sampler_a0": 1.5}}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=SLOW["reps"])
    p.add_argument("--cases", nargs="*", default=sorted(CASES))
    a = p.parse_args(argv)
    settings = dict(SLOW, reps=a.reps)
    runs = [(c, "correct") for c in a.cases]
    runs += [(c, k) for c in ("tsb_fixed", "fsd_fixed") for k in ("beta x1.4", "alpha0 x1.5")]
    print(f"SBC, {settings}; p = Bonferroni min over the statistics")
    for case, control in runs:
        t0, c0 = time.perf_counter(), time.process_time()
        ranks, names, occ = sbc_ranks(case, seed=7, **settings, **CONTROLS[control])
        pval, ps = uniformity_pvalue(ranks, settings["n_post"])
        stats = " ".join(f"{n}={q:.2g}" for n, q in zip(names, ps))
        print(f"{case:<12} {control:<12} p={pval:<9.3g} [{stats}] true K mean {occ.mean():.1f} "
              f"({time.perf_counter() - t0:.0f} s wall, {time.process_time() - c0:.0f} s cpu)",
              flush=True)


if __name__ == "__main__":
    main()
