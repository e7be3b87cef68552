"""How many of NBCE's retained draws does the SALSO search need?  Cost and loss, side by side.

For each cell (a bundled dataset, rows subsampled to at most 2,000, an ensemble as in
``nbce_validation.py``, a prior), NBCE is fitted with its defaults except
``point_estimate="dahl"`` (so the fit itself runs no search), and the VI point estimate is
then searched on the posterior's draws with ``max_draws`` = all, 1000, 500 and 250 (evenly
spaced; :meth:`consensuskit.posterior.PartitionPosterior.point_estimate`), two search
seeds each, one thread.  Each row prints the search's CPU seconds and the expected VI loss
of its estimate **over all draws**, minus the best full search's, in units of that loss's
Monte Carlo standard error (ArviZ ``mcse`` of the mean over the chains' per-draw losses).
A difference well under 1 SE is one the draws cannot tell apart.

    PYTHONPATH=$PWD python experiments/partition_search_draws.py \\
        --cells segmentation,20,rfs,tsb balance,10,kmeans,fsd --cache /tmp/nbce_draws
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from nbce_validation import ensemble  # noqa: E402

CELLS = ("segmentation,20,rfs,tsb", "pendigits,20,kmeans,fsd", "letter_AJ,20,gmm,tsb",
         "balance,10,kmeans,fsd", "chess_krvskp,10,rfs,tsb",
         "wine_quality_white_3class,20,mixed,fsd", "wine,10,kmeans,tsb",
         "yeast_cellcycle_384_std,20,gmm,fsd")
MAX_DRAWS = (None, 1000, 500, 250)


def fit_draws(name, M, family, prior, seed, cache):
    """(chains, draws, N) retained z draws of a default NBCE fit (no search), and its CPU s."""
    path = None if cache is None else os.path.join(
        cache, f"{name}_{M}_{family}_{prior}_{seed}.npz")
    if path is not None and os.path.exists(path):
        f = np.load(path)
        return f["z"], float(f["cpu"])
    from consensuskit.models.nbce.estimator import NBCE

    X = ensemble(name, M, family)
    c0 = time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = NBCE(prior=prior, point_estimate="dahl", random_state=seed).fit(X)
    cpu = time.process_time() - c0
    z = np.asarray(est.samples_["z"])
    if path is not None:
        os.makedirs(cache, exist_ok=True)
        np.savez(path, z=z, cpu=cpu)
    return z, cpu


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cells", nargs="+", default=list(CELLS),
                    help="dataset,M,family,prior (default: eight cells)")
    ap.add_argument("--seed", type=int, default=1, help="the fit's random_state")
    ap.add_argument("--search-seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--cache", default=None, help="folder to keep the fits' draws in")
    args = ap.parse_args(argv)
    import arviz as az

    from consensuskit.posterior import PartitionPosterior

    print(f"{'cell':<40} {'draws':>5} {'seed':>4} {'cpu s':>6} {'E[VI] all':>10} "
          f"{'- best full':>11} {'/ MCSE':>7} {'K':>3}", flush=True)
    for cell in args.cells:
        name, M, family, prior = cell.split(",")
        z, fit_cpu = fit_draws(name, int(M), family, prior, args.seed, args.cache)
        C, D, N = z.shape
        pp = PartitionPosterior(z.reshape(C * D, N))
        rows = []
        for md in MAX_DRAWS:
            for s in args.search_seeds:
                c0 = time.process_time()
                labels, info = pp.point_estimate(loss="vi", max_draws=md, n_jobs=1,
                                                 random_state=s)
                rows.append((md, s, time.process_time() - c0, info.expected_loss,
                             info.n_draws, info.n_clusters, labels))
        full = [r for r in rows if r[0] is None]
        best = min(full, key=lambda r: r[3])
        per_draw = pp.loss_to_draws(best[6], loss="vi").reshape(C, D)
        mcse = float(np.ravel(az.mcse(per_draw, method="mean"))[0])  # (chains, draws)
        label = f"{name} M{M} {family} {prior} (N {N}, fit {fit_cpu:.0f} s)"
        for _md, s, cpu, el, nd, k, _labels in rows:
            print(f"{label:<40} {nd:>5} {s:>4} {cpu:>6.1f} {el:>10.5f} "
                  f"{el - best[3]:>+11.5f} {(el - best[3]) / mcse:>+7.2f} {k:>3}", flush=True)
        print(f"{'':<40} MCSE of E[VI] {mcse:.5f}; mean clusters per draw "
              f"{pp.n_clusters_draws.mean():.1f}", flush=True)


if __name__ == "__main__":
    main()
