"""Which NBCE move settings mix the number of clusters: split R-hat and bulk ESS of the
number of clusters, the log joint, alpha0 and beta over 4 chains x ``--draws`` draws,
for a few settings of the split-merge move on one validation cell's ensemble
(``experiments/nbce_validation.py``), and the CPU seconds of the whole run.

Each setting: ``local_share`` (share of split-merge pairs drawn near each other),
``n_split_merge`` (proposals per sweep), ``scans`` (restricted Gibbs scans after the
sequential launch, Jain & Neal 2004; 0: Dahl's sequential allocation alone), ``thin``.
Chains are untruncated TSB, alpha0 and beta sampled, started uniformly at random over
19 components, ``--burn-in`` sweeps discarded.

    OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1 PYTHONPATH=$PWD python \\
        experiments/nbce_move_mixing.py --cell balance 10 kmeans \\
        --settings 0,100,0,1 0.5,100,0,1 0.5,100,2,1 0.5,100,0,3
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np


def run(X, local_share, n_split_merge, scans, thin, burn_in, draws, chains=4, seed=0):
    from consensuskit.data.ensemble import Ensemble
    from consensuskit.models.nbce.gibbs import GibbsState
    from consensuskit.models.nbce.gibbs.kernels import _seed

    ens = Ensemble.from_labels(X)
    idx = ens.offset_index()
    rng = np.random.RandomState(seed)
    out = {v: np.zeros((chains, draws)) for v in ("n_clusters", "log_joint", "alpha0", "beta")}
    c0 = time.process_time()
    for c in range(chains):
        g = GibbsState(idx, ens.n_labels, rng.randint(0, 19, size=X.shape[0]), 20, 1.0, 0.5,
                       "tsb", unbounded=True)
        g.split_merge_local_share = local_share
        g.split_merge_scans = scans
        _seed(seed * 1000 + c + 11)
        s = 0
        for it in range(burn_in + draws * thin):
            g.iterate(n_split_merge, True)
            if it >= burn_in and (it - burn_in + 1) % thin == 0:
                out["n_clusters"][c, s] = np.count_nonzero(g.cnt)
                out["log_joint"][c, s] = g.log_joint()
                out["alpha0"][c, s], out["beta"][c, s] = g.alpha0, g.beta
                s += 1
    return out, time.process_time() - c0


def main(argv=None):
    from experiments.nbce_validation import ensemble

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cell", nargs=3, default=["balance", "10", "kmeans"],
                   metavar=("DATASET", "M", "FAMILY"))
    p.add_argument("--settings", nargs="+", default=["0,100,0,1", "0.5,100,0,1",
                                                     "0.5,100,2,1", "0.5,100,0,3"],
                   help="local_share,n_split_merge,scans,thin")
    p.add_argument("--burn-in", type=int, default=200)
    p.add_argument("--draws", type=int, default=500)
    a = p.parse_args(argv)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        import arviz as az
    X = ensemble(a.cell[0], int(a.cell[1]), a.cell[2])
    print(f"{a.cell[0]} (N={X.shape[0]}), M={a.cell[1]}, {a.cell[2]}; 4 chains x {a.draws} "
          f"draws after {a.burn_in} sweeps")
    print(f"{'share,s-m,scans,thin':<22}{'cpu s':>7}  " + "  ".join(
        f"{v + ' R-hat/ESS':>22}" for v in ("n_clusters", "log_joint", "alpha0", "beta")))
    for setting in a.settings:
        ls, nsm, scans, thin = setting.split(",")
        out, cpu = run(X, float(ls), int(nsm), int(scans), int(thin), a.burn_in, a.draws)
        cols = [f"{float(az.rhat(x)):>13.3f} / {float(az.ess(x, method='bulk')):>5.0f}"
                for x in out.values()]
        print(f"{setting:<22}{cpu:>7.1f}  " + "  ".join(f"{c:>22}" for c in cols), flush=True)


if __name__ == "__main__":
    main()
