"""Write the tutorial notebooks in ``notebooks/`` from the cell sources below.

The notebooks are generated (outputs cleared) so that their code can be reviewed
and linted as plain text and so that git holds no execution output::

    python experiments/build_notebooks.py            # (re)write notebooks/*.ipynb
    python experiments/build_notebooks.py --check    # exit 1 if a notebook is stale

Each notebook has a cell tagged ``parameters`` holding ``QUICK`` (small sizes,
used by ``tests/test_notebooks.py``) and reads the figure directory from the
environment variable ``CONSENSUSKIT_FIGURES`` (default ``notebooks/figures``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

NOTEBOOK_DIR = Path(__file__).resolve().parent.parent / "notebooks"

KERNELSPEC = {"display_name": "Python 3", "language": "python", "name": "python3"}

# Cells are (kind, source) with kind "md", "code" or "parameters".
FIGURE_SETUP = """\
import os
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

torch.set_num_threads(1)
FIGURES = Path(os.environ.get("CONSENSUSKIT_FIGURES", "figures"))
FIGURES.mkdir(parents=True, exist_ok=True)


def save(fig, name):
    \"\"\"Save a figure as PNG into FIGURES (what the tests check) and return its path.\"\"\"
    path = FIGURES / f"{name}.png"
    fig.savefig(path, dpi=100, bbox_inches="tight")
    return path
"""

QUICKSTART = [
    ("md", """\
# Quickstart: every consensuskit model on iris

We build an ensemble of k-means base clusterings of the iris data, fit every
consensus model of the suite on the same label matrix and compare them:

* the **generative** models (MM, BCE, GBCE, NBCE) also report the perplexity of
  the base labels, on the training rows and on held-out rows (1/4 of the data)
  that the model has never seen;
* the **consensus functions** (PCC, KCC, CSPA, HGPA, MCLA, HBGF, EAC, QMI) give a
  consensus partition only.

Partitions are compared with the true species by micro-precision, accuracy
(Hungarian-matched), adjusted Rand index and NMI.  With `QUICK = True` (what the
test suite runs) the ensemble is small and there is one repetition; set
`QUICK = False` for averages over several ensembles."""),
    ("parameters", """\
QUICK = True  # small sizes for the test suite; False for a fuller run"""),
    ("code", FIGURE_SETUP),
    ("code", """\
if QUICK:
    N_PARTITIONS, N_REPEATS, NBCE_DRAWS = 10, 1, 100
else:
    N_PARTITIONS, N_REPEATS, NBCE_DRAWS = 30, 5, 500
K = 3  # number of consensus clusters for the models that need it"""),
    ("md", """\
## Data and ensemble

`kmeans_partitions` runs k-means with random initialisation and a random number
of clusters in 2..6 per base clustering.  The label matrix `X` has one column
per base clustering; rows are split into training and held-out rows."""),
    ("code", """\
from consensuskit import datasets, ensemble, metrics

features, truth = datasets.load("iris")
X = ensemble.kmeans_partitions(features, N_PARTITIONS, n_clusters=(2, 6), random_state=0)
print("label matrix", X.shape, "labels per base clustering", X.max(0) + 1)

rs = np.random.RandomState(0)
perm = rs.permutation(len(truth))
n_test = len(truth) // 4
test_rows, train_rows = np.sort(perm[:n_test]), np.sort(perm[n_test:])"""),
    ("md", """\
## The models

Every estimator follows scikit-learn conventions: hyper-parameters in the
constructor, `fit(X)`, the hard consensus in `labels_`.  GBCE also takes the
original features (`fit(X, features=F)`).  NBCE infers the number of clusters
(`truncation` is only an upper bound)."""),
    ("code", """\
from consensuskit import (BCE, CSPA, EAC, GBCE, HBGF, HGPA, KCC, MCLA, MM, NBCE, PCC,
                          QMI)


def make_models(seed):
    return {
        "MM": MM(K, random_state=seed),
        "BCE": BCE(K, random_state=seed),
        "GBCE": GBCE(K, random_state=seed),
        "NBCE": NBCE(truncation=10, n_samples=NBCE_DRAWS, burn_in=NBCE_DRAWS // 2,
                     n_chains=2, random_state=seed),
        "PCC": PCC(K, random_state=seed),
        "KCC (UH)": KCC(K, utility="UH", random_state=seed),
        "CSPA": CSPA(K, random_state=seed),
        "HGPA": HGPA(K, random_state=seed),
        "MCLA": MCLA(K, random_state=seed),
        "HBGF": HBGF(K, random_state=seed),
        "EAC (average)": EAC(K, random_state=seed),
        "QMI": QMI(K, random_state=seed),
    }


GENERATIVE = {"MM", "BCE", "GBCE", "NBCE"}"""),
    ("code", """\
import time
import warnings

rows = []
for rep in range(N_REPEATS):
    if rep > 0:  # a fresh ensemble per repetition
        X = ensemble.kmeans_partitions(features, N_PARTITIONS, n_clusters=(2, 6),
                                       random_state=rep)
    X_train, X_test = X[train_rows], X[test_rows]
    y_train = truth[train_rows]
    for name, model in make_models(rep).items():
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            if name == "GBCE":
                model.fit(X_train, features=features[train_rows])
            else:
                model.fit(X_train)
        row = {
            "model": name, "repeat": rep, "seconds": time.perf_counter() - t0,
            "clusters": len(np.unique(model.labels_)),
            "micro-precision": metrics.micro_precision(y_train, model.labels_),
            "accuracy": metrics.accuracy(y_train, model.labels_),
            "ARI": metrics.adjusted_rand(y_train, model.labels_),
            "NMI": metrics.nmi(y_train, model.labels_),
        }
        if name in GENERATIVE:
            row["perplexity (train)"] = model.perplexity(X_train)
            # a held-out label value never seen in training counts as missing
            row["perplexity (held-out)"] = model.perplexity(X_test, unknown="missing")
        rows.append(row)

results = pd.DataFrame(rows)
table = results.drop(columns="repeat").groupby("model", sort=False).mean()
table.round(3)"""),
    ("md", """\
Perplexity is `exp(-log p(labels) / number of observed labels)`: 1 would mean
the labels are predicted perfectly; a model that guesses uniformly among the
`k_j` labels of each base clustering gets about the average `k_j`.  BCE and GBCE
estimate `log p` by importance sampling (see `docs/bce.md`), MM computes it
exactly and NBCE averages the predictive over its Gibbs draws (`docs/nbce.md`).
GBCE's perplexity is of the labels only (features integrated out), so it is
directly comparable with BCE's.

## Comparison plot"""),
    ("code", """\
scores = ["micro-precision", "accuracy", "ARI", "NMI"]
fig, axes = plt.subplots(1, 2, figsize=(14, 4.5), gridspec_kw={"width_ratios": [3, 1.3]})
table[scores].plot.bar(ax=axes[0], width=0.8)
axes[0].set_ylim(0, 1.05)
axes[0].set_ylabel("score against the iris species (training rows)")
axes[0].set_xlabel("")
axes[0].legend(loc="lower right", ncol=4, fontsize=8)
axes[0].set_title(f"consensus quality, {N_PARTITIONS} k-means base clusterings")
gen = table.loc[[m for m in table.index if m in GENERATIVE],
                ["perplexity (train)", "perplexity (held-out)"]]
gen.plot.bar(ax=axes[1], width=0.7, color=["tab:gray", "tab:red"])
axes[1].set_ylim(1, max(1.05, float(np.nanmax(gen.to_numpy())) * 1.1))
axes[1].set_ylabel("perplexity of the base labels (lower is better)")
axes[1].set_xlabel("")
axes[1].set_title("generative models")
fig.tight_layout()
save(fig, "quickstart_comparison")"""),
    ("md", """\
## Where to go next

* `02_posterior_analysis.ipynb`: the NBCE posterior (chains, R-hat, number of
  clusters, co-clustering, uncertain points).
* `03_extending_a_model.ipynb`: writing a new Pyro variant of BCE and comparing
  it with BCE by held-out perplexity.
* `docs/*.md`: one page per model (derivations, engines, measured results)."""),
]

POSTERIOR = [
    ("md", """\
# Posterior analysis of NBCE with ArviZ

NBCE (nonparametric Bayesian clustering ensembles) puts a truncated Dirichlet
process prior on the consensus clusters, so the number of clusters has a
posterior.  Its collapsed Gibbs sampler keeps the draws of several chains; the
estimator exposes them as an ArviZ `InferenceData` (`inference_data_`) with
label-permutation invariant quantities only (log joint, number of occupied
clusters, the hyper-parameters `alpha0` and `beta`), so R-hat and effective
sample sizes are meaningful despite label switching.

This notebook checks the chains (trace, R-hat, ESS), looks at the posterior of
the number of clusters, at the posterior co-clustering matrix and at the points
whose consensus cluster is least certain."""),
    ("parameters", """\
QUICK = True  # small sizes for the test suite; False for a fuller run"""),
    ("code", FIGURE_SETUP),
    ("code", """\
if QUICK:
    N_PARTITIONS, N_CHAINS, N_DRAWS, BURN_IN = 10, 2, 150, 50
else:
    N_PARTITIONS, N_CHAINS, N_DRAWS, BURN_IN = 30, 4, 2000, 500"""),
    ("code", """\
import arviz as az

from consensuskit import NBCE, datasets, ensemble, metrics

features, truth = datasets.load("iris")
X = ensemble.kmeans_partitions(features, N_PARTITIONS, n_clusters=(2, 6), random_state=1)
nbce = NBCE(truncation=15, prior="tsb", inference="gibbs", n_samples=N_DRAWS,
            burn_in=BURN_IN, n_chains=N_CHAINS, random_state=0).fit(X)
idata = nbce.inference_data_
print("point consensus:", nbce.n_clusters_, "clusters; accuracy vs species",
      round(metrics.accuracy(truth, nbce.labels_), 3),
      "ARI", round(metrics.adjusted_rand(truth, nbce.labels_), 3))"""),
    ("md", """\
## Chains: trace plot, R-hat and ESS

`alpha0` (DP concentration) and `beta` (Dirichlet parameter of the label
distributions) are slice-sampled after every sweep.  R-hat near 1 (ArviZ's rank
normalised split R-hat; < 1.01 is the usual target for a final analysis) and a
bulk ESS of a few hundred mean the chains agree.  In quick mode the chains are
short, so expect larger R-hat values."""),
    ("code", """\
var_names = ["log_joint", "n_clusters", "alpha0", "beta"]
axes = az.plot_trace(idata, var_names=var_names, compact=False, figsize=(12, 8))
fig = axes.ravel()[0].figure
fig.tight_layout()
save(fig, "posterior_trace")"""),
    ("code", """\
summary = az.summary(idata, var_names=var_names)
summary"""),
    ("md", """\
## Posterior of the number of clusters

`n_clusters_draws_` (chain, draw) counts the occupied clusters of each draw.
The TSB prior lets small clusters appear and vanish, so the posterior typically
spreads over a few values; the point consensus (Dahl's least-squares draw) is
one of them."""),
    ("code", """\
counts = pd.Series(nbce.n_clusters_draws_.ravel()).value_counts(normalize=True).sort_index()
fig, ax = plt.subplots(figsize=(6, 3.5))
ax.bar(counts.index, counts.values, color="tab:blue")
ax.axvline(nbce.n_clusters_, color="tab:red", ls="--", label="point consensus")
ax.axvline(3, color="k", ls=":", label="iris species")
ax.set_xlabel("number of occupied clusters")
ax.set_ylabel("posterior probability")
ax.set_xticks(counts.index)
ax.legend()
save(fig, "posterior_n_clusters")
counts.round(3)"""),
    ("md", """\
## Co-clustering matrix

`co_clustering()` is the posterior probability `P(z_i = z_j | X)` that two
points share a consensus cluster, averaged over all retained draws of all
chains.  Ordering the rows by the point consensus shows the blocks; grey
off-block mass marks points that the posterior does not assign firmly."""),
    ("code", """\
P = nbce.co_clustering()
order = np.lexsort((truth, nbce.labels_))  # by consensus cluster, then species
fig, ax = plt.subplots(figsize=(6.5, 5.5))
im = ax.imshow(P[np.ix_(order, order)], cmap="magma", vmin=0, vmax=1, interpolation="nearest")
edges = np.flatnonzero(np.diff(nbce.labels_[order])) + 0.5
for e in edges:
    ax.axhline(e, color="w", lw=0.6)
    ax.axvline(e, color="w", lw=0.6)
ax.set_title("posterior co-clustering, rows ordered by the point consensus")
ax.set_xlabel("point")
ax.set_ylabel("point")
fig.colorbar(im, ax=ax, label="P(same cluster)")
save(fig, "posterior_coclustering")"""),
    ("md", """\
## The least certain points

Two measures of how uncertain a point's cluster is:

* `1 - max_c membership_[i, c]`: the posterior probability that point `i` is
  *not* in its most probable consensus cluster (draw clusters matched to the
  consensus clusters);
* the mean binary entropy of its co-clustering row,
  `mean_j H(P_ij)`: 0 when every pair is certainly together or certainly apart.

We show them on the first two principal components of the iris features, with
the ten least certain points circled."""),
    ("code", """\
from sklearn.decomposition import PCA

doubt = 1.0 - nbce.membership_.max(axis=1)
Pc = np.clip(P, 1e-12, 1 - 1e-12)
pair_entropy = -(Pc * np.log2(Pc) + (1 - Pc) * np.log2(1 - Pc))
np.fill_diagonal(pair_entropy, 0.0)
row_entropy = pair_entropy.sum(1) / (len(P) - 1)
print("Spearman correlation of the two measures:",
      round(pd.Series(doubt).corr(pd.Series(row_entropy), method="spearman"), 3))

xy = PCA(n_components=2).fit_transform((features - features.mean(0)) / features.std(0))
top = np.argsort(-row_entropy)[:10]
fig, axes = plt.subplots(1, 2, figsize=(13, 5))
for ax, values, title in [(axes[0], doubt, "1 - max posterior membership"),
                          (axes[1], row_entropy, "co-clustering row entropy (bits)")]:
    sc = ax.scatter(xy[:, 0], xy[:, 1], c=values, cmap="viridis", s=25)
    ax.scatter(xy[top, 0], xy[top, 1], s=160, facecolors="none", edgecolors="tab:red",
               label="10 least certain (entropy)")
    for c in np.unique(nbce.labels_):
        m = xy[nbce.labels_ == c].mean(0)
        ax.annotate(f"cluster {c}", m, fontsize=9, weight="bold")
    ax.set_title(title)
    ax.set_xlabel("PC 1")
    ax.set_ylabel("PC 2")
    fig.colorbar(sc, ax=ax)
axes[0].legend(loc="lower right")
fig.tight_layout()
save(fig, "posterior_uncertain_points")
pd.DataFrame({"species": truth[top], "consensus": nbce.labels_[top],
              "1 - max membership": doubt[top], "row entropy": row_entropy[top]},
             index=top).round(3)"""),
    ("md", """\
The least certain points sit where the versicolor and virginica species overlap
(and where base clusterings with more than three clusters cut the data): the
posterior says so instead of hiding it in a hard assignment."""),
]


EXTENDING = []


def _notebook(cells) -> nbformat.NotebookNode:
    nb = new_notebook()
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    nb.metadata["language_info"] = {"name": "python"}
    out = []
    for i, (kind, source) in enumerate(cells):
        if kind == "md":
            cell = new_markdown_cell(source)
        else:
            cell = new_code_cell(source)
            if kind == "parameters":
                cell.metadata["tags"] = ["parameters"]
        cell["id"] = f"cell-{i:02d}"
        out.append(cell)
    nb.cells = out
    nbformat.validate(nb)
    return nb


def notebooks() -> dict[str, nbformat.NotebookNode]:
    """File name -> notebook (outputs cleared)."""
    return {
        "01_quickstart.ipynb": _notebook(QUICKSTART),
        "02_posterior_analysis.ipynb": _notebook(POSTERIOR),
        "03_extending_a_model.ipynb": _notebook(EXTENDING),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="do not write; exit 1 if a notebook differs from its source")
    args = parser.parse_args(argv)
    NOTEBOOK_DIR.mkdir(exist_ok=True)
    stale = []
    for name, nb in notebooks().items():
        path = NOTEBOOK_DIR / name
        text = nbformat.writes(nb) + "\n"
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
            print("wrote", path)
    if stale:
        print("stale:", ", ".join(stale), "- run python experiments/build_notebooks.py")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
