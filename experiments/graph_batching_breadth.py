"""The traced potential with and without batching of its repeated operations
(:mod:`consensuskit.inference.graph_batching`), on the specs a user's NUTS fit traces
(GBCE's aside: they need features), on three bundled data sets and three base-clustering
families.

Per case (spec, data set, family, M): the traced potential built twice, as
``PyroConsensus(inference="nuts")`` builds it (TorchScript executor), with ``batch=False``
and ``batch=True``; prints the ATen calls per gradient before and after, the CPU of one
potential + gradient on each (median of ``--repeats`` timings of 30 calls, the two sides
timed in turn, one thread), their ratio, the build's CPU, and the largest difference
between the two graphs' outputs at five prior draws (value and gradients, relative to
``1 + |U|``), beside Pyro's own check (``fallbacks``: empty when the batched graph passed
it); where batching saves no calls the recorded graph is kept (``build["batched"]``
False, said on the line).  Specs: MM's spec, BCE's collapsed spec, NBCE's spec, and the
four users' variants of ``user_variants.py`` (notebook 03's reliability variant among
them).  Families: k-means with k = 3 (``kmeans``), k drawn per column from 2 to 6 with
k-means on random feature subsets (``rfs``) or k-means, average and Ward linkage in turn
(``mixed``): columns with different k give sites of different shapes, so fewer repeats to
batch.  ``tests/test_graph_batching.py`` runs a slice of it as a slow test.

Usage: OMP_NUM_THREADS=1 python experiments/graph_batching_breadth.py [--rows 40]
       [--datasets wine iris glass] [--families kmeans rfs mixed] [--m 4 12] [--specs ...]
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
import warnings

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
import loo_vs_bruteforce as lbf  # noqa: E402
import user_variants  # noqa: E402
from bench_vs_numpyro import median_cpu  # noqa: E402

from consensuskit.inference.compiled_potential import traced_potential  # noqa: E402
from consensuskit.models.bce import spec as bce  # noqa: E402
from consensuskit.models.mm import spec as mm  # noqa: E402
from consensuskit.models.nbce import spec as nbce  # noqa: E402


def specs():
    """name -> (model, extra keyword arguments, max_plate_nesting)."""
    return {
        "MM spec": (mm.model, {}, 1),
        "BCE collapsed spec": (bce.model_collapsed, {}, 1),
        "NBCE spec": (nbce.model, {}, 2),
        "BCE reliability (nb 03)": (user_variants.bce_reliability, {"c_beta": 0.2}, 2),
        "BCE alpha hyperprior": (user_variants.bce_alpha_hyperprior, {}, 2),
        "BCE alpha hyperprior, collapsed": (user_variants.bce_alpha_hyperprior_collapsed, {}, 1),
        "MM hierarchical": (user_variants.mm_hierarchical, {}, 1),
    }


def one_case(model, extra, nesting, ens, repeats):
    lab = torch.as_tensor(ens.codes.astype(np.int64))
    kw = dict(n_labels=[int(k) for k in ens.n_labels], n_clusters=3, **extra)
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        for batch in (False, True):
            c = time.process_time()
            tp = traced_potential(model, (lab,), kw, max_plate_nesting=nesting, compile="jit",
                                  batch=batch)
            build = time.process_time() - c
            p = tp.init(np.random.default_rng(0))
            parts = [p[k] for k in tp.names]
            out[batch] = dict(tp=tp, build=build, method=tp.method, fallbacks=list(tp.fallbacks),
                              call=functools.partial(tp.value_and_grad, *parts), us=[],
                              batched=tp.build.get("batched"),
                              calls=tp.build.get("calls_after" if tp.build.get("batched")
                                                 else "calls_before"))
    for _ in range(repeats):  # in turn, so that a change of load hits both sides alike
        for batch in (False, True):
            out[batch]["us"].append(1e6 * median_cpu(out[batch]["call"], 1, 30))
    for batch in (False, True):
        out[batch]["us"] = float(np.median(out[batch]["us"]))
    plain, batched = out[False]["tp"], out[True]["tp"]
    worst = 0.0
    for i in range(5):
        p = plain.init(np.random.default_rng(100 + i))
        parts = [p[k] for k in plain.names]
        u0, g0 = plain.value_and_grad(*parts)
        u1, g1 = batched.value_and_grad(*parts)
        scale = 1.0 + float(u0.abs())
        diffs = [float((u1 - u0).abs())] + [float((b - a).abs().max()) for a, b in zip(g0, g1)]
        worst = max(worst, max(diffs) / scale)
    calls_before = batched.build.get("calls_before")
    return dict(calls_before=calls_before, calls_after=out[True]["calls"],
                us_plain=out[False]["us"], us_batched=out[True]["us"],
                build_plain=out[False]["build"], build_batched=out[True]["build"],
                method=out[True]["method"], fallbacks=out[True]["fallbacks"], worst=worst,
                batched=out[True]["batched"],
                dtype=str(plain.init(np.random.default_rng(0))[plain.names[0]].dtype))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=40)
    ap.add_argument("--datasets", nargs="+", default=["wine", "iris", "glass"])
    ap.add_argument("--families", nargs="+", default=["kmeans", "rfs", "mixed"])
    ap.add_argument("--m", nargs="+", type=int, default=[4, 12])
    ap.add_argument("--specs", nargs="+", default=None, help="substrings of spec names")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    chosen = {k: v for k, v in specs().items()
              if not args.specs or any(s.lower() in k.lower() for s in args.specs)}
    print(f"{args.rows} rows, K = 3; CPU us per potential + gradient (TorchScript), median of "
          f"{args.repeats} x 30 calls; 'worst': largest |batched - plain| / (1 + |U|) over "
          "five prior draws")
    print(f"{'spec':32s} {'data':6s} {'family':6s} {'M':>3s} {'calls':>11s} {'plain us':>9s} "
          f"{'batched':>8s} {'ratio':>6s} {'build s':>11s} {'worst':>8s}  method / fallbacks")
    ratios = []
    case = 0
    for name, (model, extra, nesting) in chosen.items():
        for family in args.families:
            for m in args.m:
                data = args.datasets[case % len(args.datasets)]
                case += 1
                ens = lbf.small_ensemble(data, args.rows, n_partitions=m, n_clusters=3,
                                         seed=case, family=family)
                try:
                    r = one_case(model, extra, nesting, ens, args.repeats)
                except Exception as exc:  # noqa: BLE001 - a case that fails is reported
                    print(f"{name:32s} {data:6s} {family:6s} {m:3d} FAILED: "
                          f"{type(exc).__name__}: {str(exc)[:120]}", flush=True)
                    continue
                ratio = r["us_plain"] / r["us_batched"]
                ratios.append(ratio)
                print(f"{name:32s} {data:6s} {family:6s} {m:3d} "
                      f"{r['calls_before']:5d}->{r['calls_after']:<5d} {r['us_plain']:9.0f} "
                      f"{r['us_batched']:8.0f} {ratio:6.2f} "
                      f"{r['build_plain']:5.1f}/{r['build_batched']:<5.1f} {r['worst']:8.1e}  "
                      f"{r['method']} {r['dtype']}"
                      f"{'' if r['batched'] else ' (batching saved no calls: not used)'} "
                      f"{r['fallbacks'] or ''}", flush=True)
    if ratios:
        print(f"cases {len(ratios)}; speed-up plain/batched: min {min(ratios):.2f}, median "
              f"{np.median(ratios):.2f}, max {max(ratios):.2f}")


if __name__ == "__main__":
    main()
