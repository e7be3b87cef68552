"""The ``consensuskit`` command line: ``demo``, ``fit`` and ``reproduce``.

``consensuskit demo``
    Builds an ensemble of 20 k-means partitions of iris, prints the quality of
    each base partition and of every consensus model available.
``consensuskit fit --model bce --n-clusters 3 labels.csv -o out.csv``
    Fits a consensus model to a CSV of base labels (one column per base
    clustering; header optional; empty cell, NaN or -1 = missing) and writes the
    consensus labels (plus membership columns where the model has them).
``consensuskit reproduce <name> [--quick | --smoke] [--out DIR] [--data PATH]``
    Runs a registered paper reproduction (see :mod:`consensuskit.reproduce`);
    the options are passed to reproductions that accept them.

Bad input prints one line ``error: ...`` on stderr and exits with status 2.
"""

from __future__ import annotations

import argparse
import inspect
import os
import sys
import time

import numpy as np

__all__ = ["main", "CONSENSUS_MODELS", "MODEL_CLASSES"]

#: ``--model`` choices of ``fit`` -> class name exported by :mod:`consensuskit`.
MODEL_CLASSES = {
    "mm": "MM",
    "bce": "BCE",
    "gbce": "GBCE",
    "nbce": "NBCE",
    "pcc": "PCC",
    "kcc": "KCC",
    "cspa": "CSPA",
    "hgpa": "HGPA",
    "mcla": "MCLA",
    "hbgf": "HBGF",
    "eac": "EAC",
    "qmi": "QMI",
}


class CLIError(Exception):
    """A user-facing error: printed as one line, exit status 2."""


def _import_estimator(class_name):
    """The estimator class, or raise ModuleNotFoundError if its module is not there yet."""
    import consensuskit

    return getattr(consensuskit, class_name)


def _factory(class_name, **params):
    """A demo entry: ``class_name`` from :mod:`consensuskit` with 3 clusters and ``params``."""

    def make():
        return _import_estimator(class_name)(random_state=0, **params)

    return make


#: Consensus models the demo tries, in order: ``(name, factory)``.  A factory
#: whose estimator module does not exist (a trimmed installation) is skipped.
CONSENSUS_MODELS = [
    ("MM", _factory("MM", n_clusters=3)),
    ("BCE", _factory("BCE", n_clusters=3)),
    ("NBCE (Gibbs)", _factory("NBCE", truncation=10, n_samples=100, burn_in=100, n_chains=2)),
    ("PCC (KL)", _factory("PCC", n_clusters=3, divergence="kl")),
    ("KCC (UH)", _factory("KCC", n_clusters=3, utility="UH")),
    ("CSPA", _factory("CSPA", n_clusters=3)),
    ("HGPA", _factory("HGPA", n_clusters=3)),
    ("MCLA", _factory("MCLA", n_clusters=3)),
    ("HBGF", _factory("HBGF", n_clusters=3)),
    ("EAC (average)", _factory("EAC", n_clusters=3, linkage="average")),
    ("QMI", _factory("QMI", n_clusters=3)),
]


def _is_missing_module(exc: ImportError) -> bool:
    name = getattr(exc, "name", None) or ""
    return isinstance(exc, ModuleNotFoundError) and name.startswith("consensuskit")


def _quality_row(y, labels):
    from . import metrics

    return (
        metrics.micro_precision(y, labels),
        metrics.accuracy(y, labels),
        metrics.adjusted_rand(y, labels),
        metrics.nmi(y, labels),
    )


def _cmd_demo(args, out):
    from . import datasets
    from .ensemble import Ensemble
    from .generate import kmeans_partitions

    X, y = datasets.load("iris")
    M = args.n_partitions
    t0 = time.perf_counter()
    L = kmeans_partitions(X, M, n_clusters=3, random_state=args.random_state,
                          progress=not args.quiet)
    ens = Ensemble.from_labels(L)
    print(
        f"iris: {X.shape[0]} points, {X.shape[1]} features, 3 classes; "
        f"ensemble of {M} k-means partitions (k=3, random init) "
        f"built in {time.perf_counter() - t0:.2f} s",
        file=out,
    )
    header = f"{'partition':<12}{'k':>3}{'MP':>8}{'acc':>8}{'ARI':>8}{'NMI':>8}"
    print("\nbase partitions", file=out)
    print(header, file=out)
    rows = []
    for j in range(M):
        q = _quality_row(y, L[:, j])
        rows.append(q)
        print(f"{j:<12d}{ens.n_labels[j]:>3d}" + "".join(f"{v:>8.3f}" for v in q), file=out)
    Q = np.asarray(rows)
    for name, fn in (("mean", np.mean), ("min", np.min), ("max", np.max)):
        print(f"{name:<15}" + "".join(f"{v:>8.3f}" for v in fn(Q, axis=0)), file=out)

    results = []
    for name, factory in CONSENSUS_MODELS:
        try:
            est = factory()
        except ImportError as exc:
            if _is_missing_module(exc):
                continue  # model not available yet
            raise
        t0 = time.perf_counter()
        est.fit(ens)
        seconds = time.perf_counter() - t0
        ppl = est.perplexity(ens) if hasattr(est, "perplexity") else None
        n_found = int(np.unique(est.labels_).size)
        results.append((name, n_found, _quality_row(y, est.labels_), ppl, seconds))
    if results:
        print("\nconsensus models", file=out)
        print(f"{'model':<15}{'K':>3}{'MP':>8}{'acc':>8}{'ARI':>8}{'NMI':>8}{'perplexity':>12}"
              f"{'time':>8}", file=out)
        for name, n_found, q, ppl, seconds in results:
            p = f"{ppl:>12.4f}" if ppl is not None else f"{'-':>12}"
            print(f"{name:<15}{n_found:>3d}" + "".join(f"{v:>8.3f}" for v in q) + p
                  + f"{seconds:>7.2f}s", file=out)
        print("(K: clusters found; perplexity: training rows, generative models only)",
              file=out)
    else:
        print("\n(no consensus model is available yet)", file=out)
    return 0


def _read_label_csv(path):
    """Read a CSV of base labels; detect a header row; return an int64 matrix (-1 missing)."""
    import pandas as pd

    if not os.path.exists(path):
        raise CLIError(f"file not found: {path}")
    try:
        raw = pd.read_csv(path, header=None, dtype=str, keep_default_na=False,
                          skipinitialspace=True)
    except pd.errors.EmptyDataError as exc:
        raise CLIError(f"{path} is empty") from exc
    except pd.errors.ParserError as exc:
        raise CLIError(f"cannot parse {path}: {exc}") from exc

    def numeric_or_missing(v):
        v = v.strip()
        if v in ("", "NA", "NaN", "nan", "None"):
            return True
        try:
            float(v)
        except ValueError:
            return False
        return True

    has_header = not all(numeric_or_missing(v) for v in raw.iloc[0])
    body = raw.iloc[1:] if has_header else raw
    if body.shape[0] == 0:
        raise CLIError(f"{path} has no rows of labels")
    values = np.empty(body.shape, dtype=np.float64)
    first = 2 if has_header else 1
    for j in range(body.shape[1]):
        col = body.iloc[:, j].str.strip()
        missing = col.isin(["", "NA", "NaN", "nan", "None"])
        num = pd.to_numeric(col.where(~missing), errors="coerce")
        bad = num.isna() & ~missing
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise CLIError(
                f"{path}: line {i + first}, column {j + 1}: {col.iloc[i]!r} is not an "
                "integer label"
            )
        values[:, j] = num.to_numpy(dtype=np.float64)
    return values


def _cmd_fit(args, out):
    import pandas as pd

    from .ensemble import Ensemble

    class_name = MODEL_CLASSES[args.model]
    try:
        cls = _import_estimator(class_name)
    except ImportError as exc:
        raise CLIError(
            f"model {args.model!r} ({class_name}) is not available in this installation "
            f"({exc})"
        ) from exc
    X = _read_label_csv(args.labels)
    ens = Ensemble.from_labels(X)
    if args.n_clusters > ens.n_samples:
        raise CLIError(f"--n-clusters {args.n_clusters} exceeds the {ens.n_samples} rows")
    params = inspect.signature(cls.__init__).parameters
    kwargs = {}
    if "n_clusters" in params:
        kwargs["n_clusters"] = args.n_clusters
    elif "truncation" in params:  # NBCE: K is a truncation level, not a target
        kwargs["truncation"] = args.n_clusters
    if "random_state" in params:
        kwargs["random_state"] = args.random_state
    if "verbose" in params:
        kwargs["verbose"] = not args.quiet
    elif "progress" in params:
        kwargs["progress"] = not args.quiet
    est = cls(**kwargs)
    t0 = time.perf_counter()
    est.fit(ens)
    seconds = time.perf_counter() - t0
    table = {"consensus": np.asarray(est.labels_, dtype=np.int64)}
    member = getattr(est, "membership_", None)
    if member is None and hasattr(est, "predict_proba"):
        member = est.predict_proba(ens)
    if member is not None:
        member = np.asarray(member, dtype=np.float64)
        for k in range(member.shape[1]):
            table[f"p{k}"] = member[:, k]
    df = pd.DataFrame(table)
    if args.output in (None, "-"):
        df.to_csv(out, index=False)
    else:
        df.to_csv(args.output, index=False)
    if not args.quiet:
        extra = ""
        if hasattr(est, "perplexity"):
            extra = f", training perplexity {est.perplexity(ens):.4f}"
        dest = "stdout" if args.output in (None, "-") else args.output
        print(
            f"{class_name}: {ens.n_samples} rows x {ens.n_partitions} base clusterings, "
            f"{len(np.unique(est.labels_))} consensus clusters{extra} "
            f"({seconds:.2f} s); wrote {dest}",
            file=sys.stderr,
        )
    return 0


def _cmd_reproduce(args, out):
    from . import reproduce

    names = reproduce.available()
    if args.name is None or args.name not in reproduce.REGISTRY:
        if args.name is not None:
            print(f"error: no reproduction called {args.name!r}", file=sys.stderr)
        print("available reproductions:", file=out)
        for name in names:
            desc = reproduce.REGISTRY[name].description
            print(f"  {name}" + (f"  {desc}" if desc else ""), file=out)
        if not names:
            print("  (none registered yet)", file=out)
        return 0 if args.name is None else 2
    function = reproduce.REGISTRY[args.name].function
    options = {
        "mode": "smoke" if args.smoke else ("quick" if args.quick else "full"),
        "out": args.out,
        "data": args.data,
        "seed": args.seed,
        "only": args.only,
        "repeats": args.repeats,
    }
    params = inspect.signature(function).parameters
    takes_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    kwargs = {k: v for k, v in options.items() if takes_all or k in params}
    status = function(progress=not args.quiet, **kwargs)
    return int(status or 0)


def _build_parser():
    parser = argparse.ArgumentParser(
        prog="consensuskit",
        description="Probabilistic models for cluster ensembles (consensus clustering).",
    )
    parser.add_argument("--quiet", action="store_true", help="silence progress bars and notes")
    sub = parser.add_subparsers(dest="command", metavar="{demo,fit,reproduce}")
    sub.required = True

    demo = sub.add_parser("demo", help="consensus of k-means partitions of iris")
    demo.add_argument("--n-partitions", type=int, default=20, help="base clusterings (20)")
    demo.add_argument("--random-state", type=int, default=0, help="seed (0)")
    demo.set_defaults(func=_cmd_demo)

    fit = sub.add_parser("fit", help="fit a consensus model to a CSV of base labels")
    fit.add_argument("--model", required=True, choices=sorted(MODEL_CLASSES))
    fit.add_argument("--n-clusters", type=int, required=True,
                     help="number of consensus clusters (NBCE: truncation level)")
    fit.add_argument("labels", help="CSV: one column per base clustering, -1/empty = missing")
    fit.add_argument("-o", "--output", default=None, help="output CSV (default: stdout)")
    fit.add_argument("--random-state", type=int, default=0, help="seed (0)")
    fit.set_defaults(func=_cmd_fit)

    rep = sub.add_parser("reproduce", help="regenerate a published table")
    rep.add_argument("name", nargs="?", default=None, help="reproduction name (omit to list)")
    size = rep.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true",
                      help="few repeats (a few minutes); default is the paper's full size")
    size.add_argument("--smoke", action="store_true",
                      help="tiny sizes (seconds), only to check that everything runs")
    rep.add_argument("--out", default="results",
                     help="folder for <name>.md, <name>.csv and figures (default: results)")
    rep.add_argument("--data", default=None,
                     help="path to an optional large dataset (the kdd99 sample CSV)")
    rep.add_argument("--seed", type=int, default=0, help="base random seed (0)")
    rep.add_argument("--repeats", type=int, default=None,
                     help="override the mode's number of repeats (subsets, runs) to fit a budget")
    rep.add_argument("--only", default=None,
                     help="comma-separated parts to run (e.g. table3,fig4); default all")
    rep.set_defaults(func=_cmd_reproduce)
    return parser


def main(argv=None) -> int:
    """Entry point of the ``consensuskit`` command; returns the exit status."""
    parser = _build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "n_partitions", 1) < 1:
        parser.error("--n-partitions must be >= 1")
    if getattr(args, "n_clusters", 1) < 1:
        parser.error("--n-clusters must be >= 1")
    if getattr(args, "repeats", None) is not None and args.repeats < 1:
        parser.error("--repeats must be >= 1")
    previous = os.environ.get("TQDM_DISABLE")
    if args.quiet:  # silences every tqdm bar, including those inside estimators
        os.environ["TQDM_DISABLE"] = "1"
    try:
        return args.func(args, sys.stdout)
    except (CLIError, ValueError, TypeError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        if args.quiet:
            if previous is None:
                os.environ.pop("TQDM_DISABLE", None)
            else:
                os.environ["TQDM_DISABLE"] = previous


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
