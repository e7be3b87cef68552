"""Our resampling consensus and partition consensus beside the R packages' numbers.

Reads the fixtures written by ``experiments/make_r_fixtures.R`` (ConsensusClusterPlus
and clue) and prints, side by side:

1. ConsensusClusterPlus, one recorded run per dataset (iris, wine, glass; 50
   resamples, pItem 0.8, hc average, euclidean): CDF area, delta area and PAC per K
   computed by R and by ``ResamplingConsensus.fit_resamples`` on R's resampled
   partitions (the largest absolute difference), and the K each criterion picks.
2. Five independent runs each (R: seeds 1-5; ours: ``random_state`` 0-4; 100
   resamples): mean CDF area per K with its standard error, the z-score of the
   difference, and the K chosen by PAC in every run.
3. clue: medoid index, dissimilarity sums, SE objective and memberships.

Usage::

    python experiments/compare_r_consensus.py [--figure iris_resampling.png]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import linear_sum_assignment

ROOT = Path(__file__).resolve().parent.parent / "tests" / "data"
KS = list(range(2, 9))


def ccp_same_resamples(name):
    from consensuskit.consensus.resampling import ResamplingConsensus, choose_k

    R = pd.read_csv(ROOT / "ccp" / f"{name}_resamples.csv.gz")
    res = {k: R[[c for c in R.columns if c.startswith(f"k{k}_")]].to_numpy() for k in KS}
    ours = ResamplingConsensus(data="features").fit_resamples(res)
    r = pd.read_csv(ROOT / "ccp" / f"{name}_summary.csv")
    table = pd.DataFrame({
        "R area": r.area.to_numpy(), "our area": ours.area_,
        "R delta": r.delta.to_numpy(), "our delta": ours.delta_area_,
        "R PAC": r.pac.to_numpy(), "our PAC": ours.pac_,
    }, index=pd.Index(KS, name="K"))
    print(f"\n== {name}: R's 50 resamples (seed 1), statistics by each side")
    print(table.round(6).to_string())
    da, dd, dp = (np.abs(r.area - ours.area_).max(), np.abs(r.delta - ours.delta_area_).max(),
                  np.abs(r.pac - ours.pac_).max())
    print(f"max |difference|: area {da:.1e}, delta {dd:.1e}, PAC {dp:.1e}")
    for crit in ("pac", "delta_area"):
        print(f"chosen K by {crit}: R {choose_k(KS, pac=r.pac, delta=r.delta, criterion=crit)}"
              f", ours {choose_k(KS, pac=ours.pac_, delta=ours.delta_area_, criterion=crit)}")


def ccp_independent(name, figure=None):
    from consensuskit.consensus.resampling import ResamplingConsensus, choose_k

    F = pd.read_csv(ROOT / "ccp" / f"{name}_features.csv.gz").to_numpy()
    runs = pd.read_csv(ROOT / "ccp" / f"{name}_runs.csv")
    ra = runs.pivot(index="seed", columns="k", values="area").to_numpy()
    rp = runs.pivot(index="seed", columns="k", values="pac").to_numpy()
    rd = runs.pivot(index="seed", columns="k", values="delta").to_numpy()
    t0, c0 = time.perf_counter(), time.process_time()
    fits = [ResamplingConsensus(data="features", n_resamples=100, random_state=s).fit(F)
            for s in range(5)]
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    oa = np.array([f.area_ for f in fits])
    se_r, se_o = ra.std(0, ddof=1) / np.sqrt(5), oa.std(0, ddof=1) / np.sqrt(5)
    table = pd.DataFrame({
        "R area": ra.mean(0), "R SE": se_r, "our area": oa.mean(0), "our SE": se_o,
        "z": (oa.mean(0) - ra.mean(0)) / np.sqrt(se_r**2 + se_o**2),
        "R PAC": rp.mean(0), "our PAC": np.array([f.pac_ for f in fits]).mean(0),
    }, index=pd.Index(KS, name="K"))
    print(f"\n== {name}: 5 independent runs per side, 100 resamples "
          f"(ours: {cpu / 5:.2f} s CPU, {wall / 5:.2f} s wall per run)")
    print(table.round(4).to_string())
    print("chosen K by PAC:        R", [choose_k(KS, pac=p) for p in rp],
          " ours", [f.n_clusters_ for f in fits])
    print("chosen K by delta area: R", [choose_k(KS, delta=d, criterion="delta_area") for d in rd],
          " ours", [choose_k(KS, delta=f.delta_area_, criterion="delta_area") for f in fits])
    if figure:
        import matplotlib

        matplotlib.use("Agg")
        fits[0].plot().savefig(figure, dpi=110)
        print("figure:", figure)


def clue_cases():
    from consensuskit.consensus.partition import LeastSquaresConsensus, MedoidConsensus

    print("\n== clue: cl_medoid and cl_consensus(method = 'SE'), 50 random starts each side")
    rows = []
    for name in ["ckme", "iris", "wine", "glass"]:
        X = pd.read_csv(ROOT / "clue" / f"{name}_labels.csv.gz").to_numpy()
        parts = pd.read_csv(ROOT / "clue" / f"{name}_partitions.csv")
        res = pd.read_csv(ROOT / "clue" / f"{name}_result.csv").iloc[0]
        U = pd.read_csv(ROOT / "clue" / f"{name}_se_membership.csv.gz").to_numpy()
        med = MedoidConsensus().fit(X)
        se = LeastSquaresConsensus(int(res.k), weights=parts.weight.to_numpy(), n_init=50,
                                   random_state=0).fit(X)
        r, c = linear_sum_assignment(U.T @ se.membership_, maximize=True)
        rows.append({
            "ensemble": f"{name} {X.shape[0]}x{X.shape[1]}", "K": int(res.k),
            "R medoid": int(res.medoid), "our medoid": med.medoid_,
            "max|dsum diff|": np.abs(parts.dissimilarity_sum - med.dissimilarity_sums_).max(),
            "R SE objective": res.se_objective, "our SE objective": se.objective_,
            "max|U diff|": np.abs(U[:, r] - se.membership_[:, c]).max(),
        })
    print(pd.DataFrame(rows).to_string(index=False))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--figure", default=None, help="write iris's resampling-consensus figure")
    args = ap.parse_args(argv)
    for name in ["iris", "wine", "glass"]:
        ccp_same_resamples(name)
    for name in ["iris", "wine", "glass"]:
        ccp_independent(name, args.figure if name == "iris" else None)
    clue_cases()


if __name__ == "__main__":
    main()
