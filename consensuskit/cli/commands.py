"""The ``consensuskit`` command line: ``demo``, ``fit``, ``reproduce`` and ``warmup``.

``consensuskit demo [--figure PATH]``
    Builds an ensemble of 20 k-means partitions of iris, prints the quality of
    each base partition and of every consensus model available (generative
    models: held-out perplexity ± SE) and draws a figure of the comparison.
``consensuskit fit --model bce --n-clusters 3 labels.csv -o out.csv``
    Fits a consensus model to a CSV of base labels (one column per base
    clustering; integer or named labels; header and index column optional;
    empty field, NA or -1 = missing) and writes the consensus labels (plus
    membership columns where the model has them).  Every hyper-parameter of the
    model is an option (``consensuskit fit --model nbce --help`` lists NBCE's);
    ``--heldout-fraction`` or ``--heldout FILE`` reports a held-out perplexity.
``consensuskit reproduce <name> [--quick | --smoke] [--out DIR] [--data PATH]``
    Runs a registered paper reproduction (see :mod:`reproduce`);
    the options are passed to reproductions that accept them.
``consensuskit warmup``
    Compiles the numba kernels of BCE, NBCE and PCC once into numba's on-disk cache
    (see :mod:`consensuskit.cli.warmup`), so that a first demo or fit does not compile;
    ``make`` runs it after installing.

``--quiet`` (``-q``) may come anywhere on the line.  Bad input prints one line
``error: ...`` on stderr and exits with status 2; messages about a file count
its lines and columns from 1, as an editor shows them (see
:mod:`consensuskit.io.label_files`).
"""

from __future__ import annotations

import argparse
import inspect
import os
import sys
import time
import warnings

import numpy as np

from consensuskit.cli import demo
from consensuskit.cli.demo import CONSENSUS_MODELS
from consensuskit.cli.options import add_estimator_options
from consensuskit.io.label_files import (
    check_observed,
    encode_like,
    read_feature_table,
    read_label_table,
)

__all__ = ["main", "CONSENSUS_MODELS", "MODEL_CLASSES", "model_classes"]

#: ``--model`` choices of ``fit`` for the consensus functions -> class name exported by
#: :mod:`consensuskit`; the model families' choices come from their records.
CONSENSUS_FUNCTIONS = {
    "kcc": "KCC",
    "cspa": "CSPA",
    "hgpa": "HGPA",
    "mcla": "MCLA",
    "hbgf": "HBGF",
    "eac": "EAC",
    "qmi": "QMI",
    "resampling": "ResamplingConsensus",
    "vote": "MajorityVote",
    "ivc": "IVC",
    "ipvc": "IPVC",
    "medoid": "MedoidConsensus",
    "least-squares": "LeastSquaresConsensus",
}


def model_classes() -> dict:
    """``--model`` choice -> class name exported by :mod:`consensuskit`: every model
    family's (its record's ``name`` and ``estimator``,
    :func:`consensuskit.models.family.families`), then the consensus functions'."""
    from consensuskit.models.family import families

    return {f.name: f.estimator for f in families()} | CONSENSUS_FUNCTIONS


#: :func:`model_classes` when this module was imported.
MODEL_CLASSES = model_classes()

NUMBERING = "Messages count file lines and columns from 1, as an editor shows them."

class CLIError(Exception):
    """A user-facing error: printed as one line, exit status 2."""


def _import_estimator(class_name):
    """The estimator class, or raise ModuleNotFoundError if its module is not there yet."""
    return demo._import_estimator(class_name)


def _cmd_demo(args, out):
    figure = None if args.no_figure else args.figure
    demo.run(out, n_partitions=args.n_partitions, random_state=args.random_state,
             figure=figure, progress=not args.quiet)
    return 0


def _cmd_warmup(args, out):
    from consensuskit.cli.warmup import warm_up

    c, w = time.process_time(), time.perf_counter()
    warm_up(None if args.quiet else out)
    if not args.quiet:
        print(f"{'warm-up':<22} {time.process_time() - c:6.1f} s CPU  "
              f"{time.perf_counter() - w:6.1f} s wall", file=out)
    return 0


def _note(args, text):
    if not args.quiet:
        print(text, file=sys.stderr)


def _estimator_kwargs(args, cls):
    """The model options given on the command line, plus seed and progress settings."""
    params = inspect.signature(cls.__init__).parameters
    kwargs = {name[len("param__"):]: value for name, value in vars(args).items()
              if name.startswith("param__")}
    if "random_state" in params:
        kwargs["random_state"] = args.random_state
    if "verbose" in params:
        kwargs["verbose"] = not args.quiet
    elif "progress" in params:
        kwargs["progress"] = not args.quiet
    return kwargs


def _split(args, table):
    """(train rows, test rows or None) of the label file."""
    from consensuskit.evaluation.heldout import split_rows

    if args.heldout_fraction is None:
        return np.arange(table.codes.shape[0]), None
    try:
        train, test = split_rows(table.codes.shape[0], args.heldout_fraction, args.random_state)
    except ValueError as exc:
        raise CLIError(f"--heldout-fraction: {exc}") from exc
    check_observed(table, train, " among the training rows (change --random-state or "
                   "--heldout-fraction)")
    return train, test


def _unseen_to_missing(args, table, train, test):
    """Held-out rows' codes; a label no training row shows: error or missing (--unknown-labels)."""
    codes = table.codes[test].copy()
    n_unknown = 0
    for j in range(codes.shape[1]):
        seen = np.zeros(len(table.categories[j]) + 1, dtype=bool)
        seen[table.codes[train, j][table.codes[train, j] >= 0]] = True
        bad = (codes[:, j] >= 0) & ~seen[np.maximum(codes[:, j], 0)]
        if bad.any() and args.unknown_labels == "error":
            i = test[np.flatnonzero(bad)[0]]
            value = table.categories[j][table.codes[i, j]]
            raise CLIError(
                f"{table.where(i, j)}: held-out label {value!r} occurs in no training row of "
                "this column; pass --unknown-labels missing to count such labels as missing")
        codes[bad, j] = -1
        n_unknown += int(bad.sum())
    return codes, n_unknown


def _fit_class(args):
    """``(class name, class)`` of ``--model``, checked against the other options."""
    class_name = model_classes()[args.model]
    try:
        cls = _import_estimator(class_name)
    except ImportError as exc:
        raise CLIError(
            f"model {args.model!r} ({class_name}) is not available in this installation "
            f"({exc})"
        ) from exc
    if getattr(args, "n_clusters_misplaced", None) is not None:
        raise CLIError(f"{class_name} infers the number of clusters and has no --n-clusters; "
                       "--truncation sets its upper bound")
    wants_heldout = args.heldout is not None or args.heldout_fraction is not None
    if wants_heldout and not hasattr(cls, "perplexity"):
        generative = sorted(m for m, c in model_classes().items()
                            if hasattr(_import_estimator(c), "perplexity"))
        raise CLIError(f"a held-out perplexity needs a generative model ({', '.join(generative)}"
                       f"); {args.model} gives a consensus partition only")
    return class_name, cls


#: first characters that make a spreadsheet read a cell as a formula (CSV injection)
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_safe(values):
    """Text cells that a spreadsheet would run as a formula (``=HYPERLINK(...)``, ``+1+1``,
    ``@SUM``), prefixed with a single quote so they are shown as text; numbers (``-3``)
    are left as they are.  ``values``: a string or an array of strings."""
    def one(v):
        text = str(v)
        if text.startswith(FORMULA_STARTS):
            try:
                float(text)
                return v
            except ValueError:
                return "'" + text
        return v

    if isinstance(values, str):
        return one(values)
    return np.array([one(v) for v in values], dtype=object)


def _consensus_table(table, est, ens, train, test, test_codes, test_features):
    """The output table: the label file's index column (if any), ``split`` (with a held-out
    fraction), ``consensus`` and the memberships ``p0 .. p{K-1}`` of every row; held-out
    rows labelled by fold-in (``predict_proba`` of ``test_codes``, ``test_features``)."""
    import pandas as pd

    table_out = {}
    if table.index is not None:
        table_out[table.index_name] = csv_safe(table.index)  # no formula reaches a sheet
    labels = np.full(table.codes.shape[0], -1, dtype=np.int64)
    labels[train] = np.asarray(est.labels_, dtype=np.int64)
    member = getattr(est, "membership_", None)
    if member is None and hasattr(est, "predict_proba"):
        member = est.predict_proba(ens)
    proba = None
    if test is not None:
        table_out["split"] = np.where(np.isin(np.arange(labels.size), test), "heldout", "train")
        if hasattr(est, "predict_proba"):
            proba = np.asarray(est.predict_proba(test_codes, unknown="missing",
                                                 **test_features))
            labels[test] = proba.argmax(1)
    table_out["consensus"] = labels
    if member is not None:
        member = np.asarray(member, dtype=np.float64)
        full = np.full((labels.size, member.shape[1]), np.nan)
        full[train] = member
        if test is not None and proba is not None and proba.shape[1] == member.shape[1]:
            full[test] = proba
        for k in range(member.shape[1]):
            table_out[f"p{k}"] = full[:, k]
    df = pd.DataFrame(table_out)
    df.columns = [csv_safe(str(c)) for c in df.columns]
    return df


def _cmd_fit(args, out):
    from consensuskit.data.ensemble import Ensemble
    from consensuskit.evaluation.heldout import heldout_perplexity

    class_name, cls = _fit_class(args)
    table = read_label_table(args.labels, header=args.header, index_col=args.index_col,
                             allow_singletons=args.allow_singletons)
    train, test = _split(args, table)
    n_train = train.size
    n_clusters = getattr(args, "param__n_clusters", None)
    if n_clusters is not None and n_clusters > n_train:
        raise CLIError(f"--n-clusters {n_clusters} exceeds the {n_train} rows it is fitted on")
    fit_kwargs = {}
    if getattr(args, "features", None) is not None:
        F = read_feature_table(args.features, table.codes.shape[0])
        fit_kwargs["features"] = F[train]
    elif hasattr(args, "features"):  # a model that takes features, given none
        _note(args, f"{class_name} without --features: no feature columns, so the fit is "
                    "the labels-only model (GBCE without features is BCE)")
    other, n_unknown = None, 0  # held-out labels checked before the fit, to fail fast
    if args.heldout is not None:
        other, n_unknown = encode_like(table, args.heldout, unknown=args.unknown_labels)
    if test is not None:
        test_codes, n_unknown = _unseen_to_missing(args, table, train, test)
    ens = Ensemble.from_labels(table.codes[train])
    est = cls(**_estimator_kwargs(args, cls))
    t0 = time.perf_counter()
    est.fit(ens, **fit_kwargs)
    seconds = time.perf_counter() - t0

    if test is None:
        test_codes = test_features = None
    else:
        test_features = {"features": F[test]} if "features" in fit_kwargs else {}
    df = _consensus_table(table, est, ens, train, test, test_codes, test_features)
    held = None
    if test is not None:
        held = heldout_perplexity(est, test_codes, unknown="missing",
                                  random_state=args.random_state)
    if args.output in (None, "-"):
        df.to_csv(out, index=False)
    else:
        df.to_csv(args.output, index=False)

    if args.heldout is not None:
        held = heldout_perplexity(est, other.codes, unknown="missing",
                                  random_state=args.random_state)
    dest = "stdout" if args.output in (None, "-") else args.output
    header = "header on line 1" if table.header else "no header line"
    sep = "" if table.delimiter == "," else f", separator {table.delimiter!r}"
    named = ", ".join(table.column_label(j) for j in table.recoded)
    recoded = f"; named labels recoded in {named}" if named else ""
    _note(args, f"read {table.codes.shape[0]} rows x {table.codes.shape[1]} base clusterings "
                f"from {args.labels} ({header}{recoded}{sep})")
    extra = ""
    if hasattr(est, "perplexity") and args.training_perplexity:
        t1 = time.perf_counter()
        extra = (f", training perplexity {est.perplexity(ens):.4f} "
                 f"({time.perf_counter() - t1:.2f} s)")
    _note(args, f"{class_name}: fitted on {n_train} rows, "
                f"{len(np.unique(est.labels_))} consensus clusters{extra} "
                f"({seconds:.2f} s); wrote {dest}")
    if held is not None:
        where = args.heldout if args.heldout is not None else (
            f"{held.n_rows} held-out rows ({args.heldout_fraction:g} of {args.labels})")
        unknown = (f"; {n_unknown} label(s) never seen in training counted as missing"
                   if n_unknown else "")
        # a requested result: printed even with --quiet
        print(f"held-out perplexity on {where}: {held}{unknown}", file=sys.stderr)
    return 0


def _import_reproductions():
    """The repository's ``reproduce`` package (paper reproductions live beside
    ``experiments/``, outside the installed package): found on ``sys.path`` or in the
    checkout this package was installed from; a clear error from a wheel."""
    import importlib
    from pathlib import Path

    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "reproduce" / "__init__.py").is_file() and str(checkout) not in sys.path:
        sys.path.insert(0, str(checkout))
    try:
        return importlib.import_module("reproduce")
    except ModuleNotFoundError:
        raise SystemExit(
            "error: `consensuskit reproduce` needs a checkout of the consensuskit repository "
            "(its reproduce/ folder holds the paper reproductions and their tables); this "
            f"installation at {checkout} has none. Clone the repository and run it there "
            "(`pip install -e .` in the clone).") from None


def _cmd_reproduce(args, out):
    reproduce = _import_reproductions()

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


def _show_warning(message, category, filename, lineno, file=None, line=None):
    """A warning as one line ``warning: ...`` on stderr (shown even with --quiet)."""
    print(f"warning: {message} ({category.__name__})", file=sys.stderr)


def _model_in(argv):
    """The value of ``--model`` on a ``fit`` command line, or None (first parsing pass)."""
    argv = list(argv)
    if "fit" not in argv:
        return None
    for i, arg in enumerate(argv):
        if arg == "--model" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--model="):
            return arg.split("=", 1)[1]
    return None


def _build_parser(model=None):
    """The argument parser; ``model`` (a ``--model`` name) adds that model's options to ``fit``."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS,
                        help="silence progress bars and notes (anywhere on the line)")
    parser = argparse.ArgumentParser(
        prog="consensuskit", parents=[common],
        description="Probabilistic models for cluster ensembles (consensus clustering).",
        epilog=NUMBERING,
    )
    sub = parser.add_subparsers(dest="command", metavar="{demo,fit,reproduce,warmup}")
    sub.required = True

    demo_cmd = sub.add_parser("demo", parents=[common],
                              help="consensus of k-means partitions of iris, with a figure")
    demo_cmd.add_argument("--n-partitions", type=int, default=20, help="base clusterings (20)")
    demo_cmd.add_argument("--random-state", type=int, default=0, help="seed (0)")
    demo_cmd.add_argument("--figure", default="consensuskit_demo.png",
                          help="where to write the figure (default: consensuskit_demo.png)")
    demo_cmd.add_argument("--no-figure", action="store_true", help="print the tables only")
    demo_cmd.set_defaults(func=_cmd_demo, command_parser=demo_cmd)

    fit = sub.add_parser(
        "fit", parents=[common], help="fit a consensus model to a CSV of base labels",
        description="Fit a consensus model to a CSV of base labels and write the consensus. "
                    "Run 'consensuskit fit --model NAME --help' for the model's own options.",
        epilog=NUMBERING)
    fit.add_argument("--model", required=True, choices=sorted(model_classes()))
    fit.add_argument("labels", help="CSV: one column per base clustering; integer or named "
                                    "labels; empty, NA or -1 = missing")
    fit.add_argument("-o", "--output", default=None, help="output CSV (default: stdout)")
    fit.add_argument("--random-state", type=int, default=0,
                     help="seed of the model and of the held-out split (0)")
    data = fit.add_argument_group("reading the label file")
    data.add_argument("--header", action=argparse.BooleanOptionalAction, default=None,
                      help="line 1 is (not) a header; default: decided from the content, "
                           "an error if it cannot be")
    data.add_argument("--index-col", metavar="COL", default=None,
                      help="column of row identifiers (header name or number from 1): not a "
                           "clustering; copied to the output")
    data.add_argument("--allow-singletons", action="store_true",
                      help="accept a column with a different label on every line (refused by "
                           "default as an ID column)")
    held = fit.add_argument_group("held-out perplexity (generative models)")
    where = held.add_mutually_exclusive_group()
    where.add_argument("--heldout-fraction", type=float, default=None, metavar="F",
                       help="hold out this fraction of the rows (random, --random-state): fit on "
                            "the rest, label the held-out rows by fold-in (column 'split') and "
                            "report their perplexity ± SE")
    where.add_argument("--heldout", metavar="FILE", default=None,
                       help="a second label file, same columns: report its perplexity ± SE")
    fit.add_argument("--training-perplexity", action="store_true",
                     help="also report the training perplexity (a generative model's score "
                          "of every training row: can take as long as the fit, or longer)")
    held.add_argument("--unknown-labels", choices=("error", "missing"), default="error",
                      help="a held-out label that training never showed: an error (default) "
                           "or counted as missing")
    if model in model_classes():
        try:
            cls = _import_estimator(model_classes()[model])
        except ImportError:
            cls = None  # reported by the fit command
        if cls is not None:
            group = fit.add_argument_group(f"{cls.__name__} options (its constructor's "
                                           "parameters; unset = the model's default)")
            add_estimator_options(group, cls, taken=set(fit._option_string_actions))
            params = inspect.signature(cls.__init__).parameters
            if "n_clusters" not in params:
                fit.add_argument("--n-clusters", dest="n_clusters_misplaced", type=int,
                                 default=None, help=argparse.SUPPRESS)
            if "features" in inspect.signature(cls.fit).parameters:
                group.add_argument("--features", metavar="FILE", default=None,
                                   help="CSV of numeric features, one line per label line "
                                        "(header optional)")
    fit.set_defaults(func=_cmd_fit, command_parser=fit)

    rep = sub.add_parser("reproduce", parents=[common], help="regenerate a published table")
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
    rep.set_defaults(func=_cmd_reproduce, command_parser=rep)

    warm_help = ("compile the numba kernels once into numba's cache (run at install, so "
                 "that a first demo or fit does not compile)")
    warm = sub.add_parser("warmup", parents=[common], help=warm_help,
                          description=warm_help[0].upper() + warm_help[1:] + ".")
    warm.set_defaults(func=_cmd_warmup, command_parser=warm)
    return parser


def main(argv=None) -> int:
    """Entry point of the ``consensuskit`` command; returns the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    model = _model_in(argv)
    parser = _build_parser(model)
    args = parser.parse_args(argv)
    args.quiet = getattr(args, "quiet", False)
    command = args.command_parser  # its errors carry the command's usage line
    if getattr(args, "n_partitions", 1) < 1:
        command.error("--n-partitions must be >= 1")
    if getattr(args, "repeats", None) is not None and args.repeats < 1:
        command.error("--repeats must be >= 1")
    if args.command == "fit":
        try:
            params = inspect.signature(
                _import_estimator(model_classes()[args.model]).__init__).parameters
        except ImportError:
            params = {}
        if "n_clusters" in params and not hasattr(args, "param__n_clusters"):
            command.error(f"--n-clusters is required for --model {args.model}")
        if getattr(args, "param__n_clusters", 1) < 1:
            command.error("--n-clusters must be >= 1")
    previous = os.environ.get("TQDM_DISABLE")
    if args.quiet:  # silences every tqdm bar, including those inside estimators
        os.environ["TQDM_DISABLE"] = "1"
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning  # restored on exit
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
