"""CSPA, HGPA and MCLA on incomplete and noisy ensembles: ARI and CPU (one process).

Three parts, each printing ARI with the true classes (mean over seeds, its standard
error, min) and the median CPU seconds per fit (``time.process_time``, one thread):

1. **incomplete** -- for each dataset, ``--partitions`` k-means base clusterings with
   ``k_j`` drawn from ``K..K+9`` (glass: 6..15, the construction of issue 27), then a
   fraction ``--missing`` of the labels removed (``generate.drop_labels``);
2. **noisy** -- the same ensembles with, in addition, ``--noise`` of the remaining
   labels replaced by a label drawn uniformly from the column's labels;
3. **planted at scale** -- ``bench_consensus.make_ensemble`` (5 planted groups, 10
   base clusterings with k in 3..10, heavy relabelling noise) at ``--sizes``, with
   HGPA's cut next to the cut of the planted partition: when the planted partition
   cuts every hyperedge, HGPA's objective cannot tell it from any other balanced
   partition.

Rows:

* ``CSPA`` (the default: similarity ``c_ij / n_ij``, normalised spectral cut) and
  ``CSPA metis`` (Strehl & Ghosh's balanced METIS cut of the same graph);
* ``CSPA counts+METIS``: the algorithm ClusterEnsembles' ``cspa`` runs, written here
  from its description (integer co-occurrence counts ``B B^T``, which count a pair
  only over the base clusterings that label both and so are not normalised for
  missing labels, cut by METIS with default options).  It stands in for the peer,
  which is not installable from the package index this machine reaches
  (``experiments/peers/setup_clusterensembles.sh`` exits 3); it is NOT the peer;
* ``HGPA`` (KaHyPar, hyperedge cut, recursive bisection) and ``HGPA km1``: the
  connectivity-minus-one objective ClusterEnsembles' ``hgpa`` asks KaHyPar for
  (the same configuration otherwise), again not the peer itself;
* ``MCLA``;
* ``ClusterEnsembles cspa/hgpa/mcla`` when the peer is importable.

Usage::

    python experiments/bench_graph_consensus.py [--datasets glass iris wine ecoli ...]
        [--seeds 3] [--missing 0.1 0.3] [--noise 0.2] [--sizes 20000] [--skip-scale]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from sklearn.metrics import adjusted_rand_score

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _cpu(fn, *args):
    c0 = time.process_time()
    out = fn(*args)
    return out, time.process_time() - c0


def counts_metis_cspa(X, k, seed=0):
    """ClusterEnsembles' CSPA algorithm: METIS on the raw co-occurrence counts ``B B^T``."""
    import pymetis

    import consensuskit as ck

    B = ck.as_ensemble(X).onehot(dtype=np.float64)
    S = (B @ B.T).tocsr()
    S.setdiag(0)
    S.eliminate_zeros()
    S.sort_indices()
    if S.nnz == 0:
        return np.zeros(X.shape[0], dtype=np.int64)
    res = pymetis.part_graph(k, adjacency=pymetis.CSRAdjacency(S.indptr, S.indices),
                             eweights=S.data.astype(np.int64),
                             options=pymetis.Options(seed=seed))
    return np.asarray(res.vertex_part, dtype=np.int64)


def kahypar_all_hyperedges(ens, k, seed=0):
    """One KaHyPar run of the shipped cut configuration on every hyperedge of two or more
    points, i.e. HGPA before the hyperedges larger than a part were left out."""
    from importlib import resources

    import kahypar

    from consensuskit.consensus.graph import KAHYPAR_CONFIG, hyperedge_sizes_and_pins

    indptr, pins = hyperedge_sizes_and_pins(ens)
    keep = np.flatnonzero(np.diff(indptr) > 1)
    sizes = np.diff(indptr)[keep]
    index = np.concatenate([[0], np.cumsum(sizes)]).astype(np.uint64)
    kept = np.concatenate([pins[indptr[e]:indptr[e + 1]] for e in keep]).astype(np.uint64)
    n = ens.n_samples
    hg = kahypar.Hypergraph(n, keep.size, index.tolist(), kept.tolist(), k,
                            [1] * keep.size, [1] * n)
    ctx = kahypar.Context()
    with resources.as_file(resources.files("consensuskit.consensus").joinpath(
            "data", KAHYPAR_CONFIG["cut"])) as path:
        ctx.loadINIconfiguration(str(path))
    ctx.setK(k)
    ctx.setEpsilon(0.05)
    ctx.setSeed(seed)
    ctx.suppressOutput(True)
    kahypar.partition(hg, ctx)
    return np.fromiter((hg.blockID(i) for i in range(n)), dtype=np.int64, count=n)


def methods(k, with_km1=True):
    import consensuskit as ck

    out = {
        "CSPA": lambda X: ck.CSPA(k, random_state=0).fit(X).labels_,
        "CSPA metis": lambda X: ck.CSPA(k, partitioner="metis", random_state=0).fit(X).labels_,
        "CSPA counts+METIS": lambda X: counts_metis_cspa(X, k),
        "HGPA": lambda X: ck.HGPA(k, random_state=0).fit(X).labels_,
        "MCLA": lambda X: ck.MCLA(k, random_state=0).fit(X).labels_,
    }
    if with_km1:
        out["HGPA km1"] = lambda X: ck.HGPA(k, objective="km1", random_state=0).fit(X).labels_
    try:  # the peer, where it can be installed (experiments/peers/setup_clusterensembles.sh)
        import ClusterEnsembles as CE
    except ImportError:
        return out

    def peer(solver):
        return lambda X: CE.cluster_ensembles(np.where(X < 0, np.nan, X).T.astype(float),
                                              nclass=k, solver=solver, random_state=0)

    for solver in ("cspa", "hgpa", "mcla"):
        out[f"ClusterEnsembles {solver}"] = peer(solver)
    return out


def replace_labels(X, fraction, rng):
    """Replace ``fraction`` of the observed labels by a uniform label of their column."""
    X = X.copy()
    for j in range(X.shape[1]):
        obs = np.flatnonzero(X[:, j] >= 0)
        kj = int(X[obs, j].max()) + 1
        hit = obs[rng.random(obs.size) < fraction]
        X[hit, j] = rng.integers(0, kj, size=hit.size)
    return X


def _summary(title, table):
    print(f"\n{title}")
    print(f"{'dataset':12s} {'missing':>7s} {'method':22s} {'ARI mean':>8s} {'+-SE':>6s} "
          f"{'min':>6s} {'cpu s':>7s}")
    for (ds, miss, name), rows in table.items():
        a = np.asarray(rows)
        se = a[:, 0].std(ddof=1) / np.sqrt(len(a)) if len(a) > 1 else float("nan")
        print(f"{ds:12s} {miss:7.0%} {name:22s} {a[:, 0].mean():8.3f} {se:6.3f} "
              f"{a[:, 0].min():6.3f} {np.median(a[:, 1]):7.3f}", flush=True)


def _ratio_lines(table, ours, theirs):
    """Per (dataset, missing): mean ARI of ``ours`` minus ``theirs``, with the paired SE."""
    keys = sorted({(d, m) for d, m, _ in table})
    diffs = []
    for d, m in keys:
        a = np.asarray(table.get((d, m, ours), []))
        b = np.asarray(table.get((d, m, theirs), []))
        if len(a) and len(a) == len(b):
            diff = a[:, 0] - b[:, 0]
            se = diff.std(ddof=1) / np.sqrt(len(diff)) if len(diff) > 1 else float("nan")
            diffs.append((d, m, diff.mean(), se))
    print(f"\n{ours} minus {theirs} (ARI, paired over seeds):")
    for d, m, mean, se in diffs:
        print(f"  {d:12s} {m:4.0%} {mean:+.3f} +- {se:.3f}")
    if diffs:
        print(f"  cases where {ours} is below by more than 2 SE: "
              f"{sum(mean < -2 * se for *_, mean, se in diffs)} of {len(diffs)}")


def run_datasets(args):
    from consensuskit.data import datasets, generate

    incomplete, noisy = {}, {}
    for ds in args.datasets:
        F, y = datasets.load(ds)
        K = len(np.unique(y))
        fns = methods(K)
        for seed in range(args.seeds):
            X = generate.kmeans_partitions(F, args.partitions, n_clusters=(K, K + 9),
                                           random_state=seed)
            rng = np.random.default_rng(1000 + seed)
            for miss in args.missing:
                Xm = generate.drop_labels(X, miss, random_state=seed)
                Xn = replace_labels(Xm, args.noise, rng)
                for table, data in ((incomplete, Xm), (noisy, Xn)):
                    for name, fn in fns.items():
                        lab, cpu = _cpu(fn, data)
                        table.setdefault((ds, miss, name), []).append(
                            (adjusted_rand_score(y, lab), cpu))
        _summary(f"{ds} so far (incomplete)", {k: v for k, v in incomplete.items() if k[0] == ds})
        _summary(f"{ds} so far (noisy)", {k: v for k, v in noisy.items() if k[0] == ds})
    _summary(f"incomplete: {args.partitions} k-means partitions, k in K..K+9, labels removed",
             incomplete)
    _ratio_lines(incomplete, "CSPA", "CSPA counts+METIS")
    _summary(f"noisy: as above, then {args.noise:.0%} of the labels replaced at random", noisy)
    _ratio_lines(noisy, "CSPA", "CSPA counts+METIS")
    _ratio_lines(noisy, "HGPA", "HGPA km1")


def run_scale(args):
    from bench_consensus import make_ensemble

    import consensuskit as ck
    from consensuskit.consensus.graph import hyperedge_cut

    K = 5
    print("\nplanted at scale (bench_consensus.make_ensemble: 5 groups, M=10, k in 3..10)")
    print(f"{'N':>7s} {'method':22s} {'ARI':>6s} {'cpu s':>8s}  notes")
    for n in args.sizes:
        X, y = make_ensemble(n)
        ens = ck.as_ensemble(X)
        for name in ("CSPA", "MCLA", "HGPA", "HGPA km1"):
            if name == "CSPA":
                est = ck.CSPA(K, random_state=0)
            elif name == "MCLA":
                est = ck.MCLA(K, random_state=0)
            else:
                obj = "km1" if name.endswith("km1") else "cut"
                est = ck.HGPA(K, objective=obj, n_init=args.hgpa_n_init, random_state=0)
            est, cpu = _cpu(est.fit, ens)
            note = ""
            if name.startswith("HGPA"):
                planted = hyperedge_cut(ens, y)
                note = (f"cut {est.edge_cut_} of {est.n_hyperedges_} hyperedges "
                        f"(planted partition: {planted}); largest part "
                        f"{np.bincount(est.labels_).max()} <= {est.max_part_size_}")
            print(f"{n:7d} {name:22s} {adjusted_rand_score(y, est.labels_):6.3f} "
                  f"{cpu:8.2f}  {note}", flush=True)
        if args.before:
            parts, cpu = _cpu(kahypar_all_hyperedges, ens, K)
            print(f"{n:7d} {'HGPA before (1 seed)':22s} {adjusted_rand_score(y, parts):6.3f} "
                  f"{cpu:8.2f}  cut {hyperedge_cut(ens, parts)}: KaHyPar given all "
                  "hyperedges, as before this change", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="+",
                    default=["glass", "iris", "wine", "ecoli", "dermatology_358"])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--partitions", type=int, default=50)
    ap.add_argument("--missing", type=float, nargs="+", default=[0.1, 0.2, 0.3])
    ap.add_argument("--noise", type=float, default=0.2)
    ap.add_argument("--sizes", type=int, nargs="+", default=[20_000])
    ap.add_argument("--hgpa-n-init", type=int, default=1,
                    help="HGPA restarts in the scale part (the estimator's default is 5)")
    ap.add_argument("--before", action="store_true",
                    help="scale part: also one KaHyPar run on all hyperedges (the old HGPA)")
    ap.add_argument("--skip-scale", action="store_true")
    ap.add_argument("--skip-datasets", action="store_true")
    args = ap.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    try:
        import ClusterEnsembles  # noqa: F401
        print("ClusterEnsembles: importable, peer rows included")
    except ImportError:
        print("ClusterEnsembles: not importable here (not on the reachable package index); "
              "peer rows skipped, 'counts+METIS' and 'km1' rows run its algorithms instead")
    if not args.skip_datasets:
        run_datasets(args)
    if not args.skip_scale:
        run_scale(args)


if __name__ == "__main__":
    main()
