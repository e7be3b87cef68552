"""``consensuskit demo``: every consensus model on k-means partitions of iris, a table and a figure.

The ensemble is built on all 150 rows; the models are fitted on a random 3/4 of
them and scored against the species on those rows, and the generative ones
also on the held-out quarter (perplexity of the base labels, with its standard
error over rows, see :mod:`consensuskit.evaluation.heldout`).  The figure shows the
co-association matrix of the training rows ordered by a consensus, each
model's ARI and the held-out perplexities with error bars.
"""

from __future__ import annotations

import time

import numpy as np

__all__ = ["CONSENSUS_MODELS", "consensus_models", "run", "draw_figure"]


def _import_estimator(class_name):
    """The estimator class exported by :mod:`consensuskit` (ImportError if not installed)."""
    import consensuskit

    return getattr(consensuskit, class_name)


def _factory(class_name, **params):
    """A demo entry: ``class_name`` from :mod:`consensuskit` with ``params`` and seed 0."""

    def make():
        return _import_estimator(class_name)(random_state=0, **params)

    return make


def consensus_models() -> list:
    """The demo's models, in order: ``(name, factory)``; every model family's demo entries
    (its record's ``demo``, :func:`consensuskit.models.family.families`), then the
    consensus functions'.  A factory whose estimator module does not exist (a trimmed
    installation) is skipped."""
    from consensuskit.models.family import families

    return [(title, _factory(f.estimator, **params))
            for f in families() for title, params in f.demo] + [
        ("KCC (UH)", _factory("KCC", n_clusters=3, utility="UH")),
        ("CSPA", _factory("CSPA", n_clusters=3)),
        ("HGPA", _factory("HGPA", n_clusters=3)),
        ("MCLA", _factory("MCLA", n_clusters=3)),
        ("HBGF", _factory("HBGF", n_clusters=3)),
        ("EAC (average)", _factory("EAC", n_clusters=3, linkage="average")),
        ("QMI", _factory("QMI", n_clusters=3)),
        # the base partitions' VI-optimal partition (at most 3 clusters): consensuskit.posterior
        ("Partition (VI)", _factory("PartitionConsensus", loss="vi", max_n_clusters=3)),
    ]


#: Consensus models the demo tries, in order: ``(name, factory)``
#: (:func:`consensus_models` when this module was imported).
CONSENSUS_MODELS = consensus_models()


def _is_missing_module(exc: ImportError) -> bool:
    name = getattr(exc, "name", None) or ""
    return isinstance(exc, ModuleNotFoundError) and name.startswith("consensuskit")


def _quality_row(y, labels):
    from consensuskit.evaluation import metrics

    return (
        metrics.micro_precision(y, labels),
        metrics.accuracy(y, labels),
        metrics.adjusted_rand(y, labels),
        metrics.nmi(y, labels),
    )


def run(out, *, n_partitions=20, random_state=0, heldout_fraction=0.25, figure=None,
        progress=True, models=None):
    """Print the demo's tables to ``out``; draw the figure to ``figure`` (a path) if given.

    Returns the list of model results ``(name, n_found, quality, heldout, seconds, labels)``.
    """
    from consensuskit.data import datasets
    from consensuskit.data.ensemble import Ensemble
    from consensuskit.data.generate import kmeans_partitions
    from consensuskit.evaluation.heldout import heldout_perplexity, split_rows

    models = CONSENSUS_MODELS if models is None else models
    X, y = datasets.load("iris")
    M = n_partitions
    t0 = time.perf_counter()
    L = kmeans_partitions(X, M, n_clusters=3, random_state=random_state, progress=progress)
    ens = Ensemble.from_labels(L)
    train, test = split_rows(len(y), heldout_fraction, random_state)
    print(
        f"iris: {X.shape[0]} points, {X.shape[1]} features, 3 classes; "
        f"ensemble of {M} k-means partitions (k=3, random init) "
        f"built in {time.perf_counter() - t0:.2f} s",
        file=out,
    )
    header = f"{'partition':<12}{'k':>3}{'MP':>8}{'acc':>8}{'ARI':>8}{'NMI':>8}"
    print("\nbase partitions (all rows)", file=out)
    print(header, file=out)
    rows = []
    for j in range(M):
        q = _quality_row(y, L[:, j])
        rows.append(q)
        print(f"{j:<12d}{ens.n_labels[j]:>3d}" + "".join(f"{v:>8.3f}" for v in q), file=out)
    Q = np.asarray(rows)
    for name, fn in (("mean", np.mean), ("min", np.min), ("max", np.max)):
        print(f"{name:<15}" + "".join(f"{v:>8.3f}" for v in fn(Q, axis=0)), file=out)

    train_ens = Ensemble.from_labels(L[train])
    results = []
    for name, factory in models:
        try:
            est = factory()
        except ImportError as exc:
            if _is_missing_module(exc):
                continue  # model not available yet
            raise
        t0 = time.perf_counter()
        est.fit(train_ens)
        seconds = time.perf_counter() - t0
        held = heldout_perplexity(est, L[test]) if hasattr(est, "perplexity") else None
        n_found = int(np.unique(est.labels_).size)
        results.append((name, n_found, _quality_row(y[train], est.labels_), held, seconds,
                        np.asarray(est.labels_)))
    if not results:
        print("\n(no consensus model is available yet)", file=out)
        return results
    print(f"\nconsensus models (fitted on {train.size} rows, {test.size} held out)", file=out)
    print(f"{'model':<15}{'K':>3}{'MP':>8}{'acc':>8}{'ARI':>8}{'NMI':>8}"
          f"{'held-out perplexity':>22}{'time':>8}", file=out)
    for name, n_found, q, held, seconds, _ in results:
        p = f"{held.perplexity:>13.4f} ± {held.se:.4f}" if held is not None else f"{'-':>22}"
        print(f"{name:<15}{n_found:>3d}" + "".join(f"{v:>8.3f}" for v in q) + p
              + f"{seconds:>7.2f}s", file=out)
    print("(K: clusters found; scores on the training rows; perplexity of the held-out rows' "
          "base labels ± its SE over rows, generative models only)", file=out)
    if figure is not None:
        draw_figure(figure, train_ens, y[train], results)
        print(f"\nwrote the figure to {figure}", file=out)
    return results


def draw_figure(path, ensemble, truth, results):
    """Co-association ordered by a consensus, ARI per model, held-out perplexity ± SE."""
    import matplotlib
    from matplotlib.figure import Figure  # no pyplot: the caller's backend is left alone

    by_name = {r[0]: r for r in results}
    shown = next((n for n in ("BCE", "MM") if n in by_name), results[0][0])
    labels = by_name[shown][5]
    c, n = ensemble.coassociation()
    P = c / np.maximum(n, 1)
    order = np.lexsort((truth, labels))

    from mpl_toolkits.axes_grid1 import make_axes_locatable

    fig = Figure(figsize=(16, 5.4))
    grid = fig.add_gridspec(1, 3, width_ratios=[1.2, 1, 1], wspace=0.45)
    ax_c = fig.add_subplot(grid[0])
    im = ax_c.imshow(P[np.ix_(order, order)], cmap="viridis", vmin=0, vmax=1,
                     interpolation="nearest")
    for edge in np.flatnonzero(np.diff(labels[order])) + 0.5:
        ax_c.axhline(edge, color="w", lw=0.8)
        ax_c.axvline(edge, color="w", lw=0.8)
    ax_c.set_yticks([])
    ax_c.set_xlabel(f"{len(truth)} training rows, ordered by the {shown} consensus")
    ax_c.set_title("co-association: share of base clusterings\nthat put two rows together")
    divider = make_axes_locatable(ax_c)
    strip = divider.append_axes("left", size="4%", pad=0.05)
    species = matplotlib.colormaps["tab10"](np.asarray(truth)[order] % 10)[:, None, :3]
    strip.imshow(species, aspect="auto", interpolation="nearest")
    strip.set_xticks([])
    strip.set_yticks([])
    strip.set_ylabel("true species (colour)")
    fig.colorbar(im, cax=divider.append_axes("right", size="4%", pad=0.08))

    ax_a = fig.add_subplot(grid[1])
    names = [r[0] for r in results]
    ari = [r[2][2] for r in results]
    ypos = np.arange(len(names))[::-1]
    ax_a.barh(ypos, ari, color="tab:blue")
    ax_a.set_yticks(ypos, names)
    ax_a.set_xlim(min(0.0, min(ari)), 1)
    ax_a.set_xlabel("adjusted Rand index against the species")
    ax_a.set_title("consensus quality (training rows)")

    ax_p = fig.add_subplot(grid[2])
    gen = [r for r in results if r[3] is not None]
    if gen:
        ypos = np.arange(len(gen))[::-1]
        ppl = np.array([r[3].perplexity for r in gen])
        se = np.array([r[3].se for r in gen])
        ax_p.errorbar(ppl, ypos, xerr=2 * np.nan_to_num(se), fmt="o", color="tab:red",
                      capsize=5)
        ax_p.set_yticks(ypos, [r[0] for r in gen])
        ax_p.set_ylim(-0.7, len(gen) - 0.3)
        ax_p.set_xlabel("held-out perplexity of the base labels\n(lower is better; bars ± 2 SE "
                        "over rows)")
        ax_p.margins(x=0.4)
    else:
        ax_p.text(0.5, 0.5, "no generative model", ha="center", va="center")
        ax_p.set_axis_off()
    ax_p.set_title(f"generative models on {gen[0][3].n_rows} held-out rows" if gen else "")
    fig.savefig(path, dpi=110, bbox_inches="tight")
    return path
