# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Quickstart: every consensuskit model on iris
#
# We build an ensemble of k-means base clusterings of the iris data, fit every
# consensus model of the suite on the same label matrix and compare them:
#
# * the **generative** models (MM, BCE, GBCE, NBCE) also report the perplexity of
#   the base labels, on the training rows and on held-out rows (1/4 of the data)
#   that the model has never seen;
# * the **consensus functions** (PCC, KCC, CSPA, HGPA, MCLA, HBGF, EAC, QMI) give a
#   consensus partition only.
#
# Partitions are compared with the true species by micro-precision, accuracy
# (Hungarian-matched), adjusted Rand index and NMI.  With `QUICK = True` (what the
# test suite runs) the ensemble is small and there is one repetition; set
# `QUICK = False` for averages over several ensembles.

# %% tags=["parameters"]
import os

# small sizes (what the tests and `make notebooks` run); CONSENSUSKIT_QUICK=0 for a fuller run
QUICK = os.environ.get("CONSENSUSKIT_QUICK", "1") != "0"

# %%
if QUICK:
    N_PARTITIONS, N_REPEATS, NBCE_DRAWS = 10, 1, 100
else:
    N_PARTITIONS, N_REPEATS, NBCE_DRAWS = 30, 5, 500
K = 3  # number of consensus clusters for the models that need it

# %% [markdown]
# ## Data and ensemble
#
# `kmeans_partitions` runs k-means with random initialisation and a random number
# of clusters in 2..6 per base clustering.  The label matrix `X` has one column
# per base clustering; rows are split into training and held-out rows.

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from consensuskit import datasets, generate, metrics
from consensuskit.evaluation.figures import save_figure  # PNG into $CONSENSUSKIT_FIGURES

features, truth = datasets.load("iris")
X = generate.kmeans_partitions(features, N_PARTITIONS, n_clusters=(2, 6), random_state=0)
print("label matrix", X.shape, "labels per base clustering", X.max(0) + 1)

rs = np.random.RandomState(0)
perm = rs.permutation(len(truth))
n_test = len(truth) // 4
test_rows, train_rows = np.sort(perm[:n_test]), np.sort(perm[n_test:])

# %% [markdown]
# ## The models
#
# Every estimator follows scikit-learn conventions: hyper-parameters in the
# constructor, `fit(X)`, the hard consensus in `labels_`.  GBCE also takes the
# original features (`fit(X, features=F)`).  NBCE infers the number of clusters
# (`truncation` is only an upper bound).

# %%
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


GENERATIVE = {"MM", "BCE", "GBCE", "NBCE"}

# %%
import time
import warnings

rows = []
for rep in range(N_REPEATS):
    if rep > 0:  # a fresh ensemble per repetition
        X = generate.kmeans_partitions(features, N_PARTITIONS, n_clusters=(2, 6),
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
table.round(3)

# %% [markdown]
# Perplexity is `exp(-log p(labels) / number of observed labels)`: 1 would mean
# the labels are predicted perfectly; a model that guesses uniformly among the
# `k_j` labels of each base clustering gets about the average `k_j`.  BCE and GBCE
# estimate `log p` by importance sampling (see `docs/bce.md`), MM computes it
# exactly and NBCE averages the predictive over its Gibbs draws (`docs/nbce.md`).
# GBCE's perplexity is of the labels only (features integrated out), so it is
# directly comparable with BCE's.
#
# ## Comparison plot

# %%
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
save_figure(fig, "quickstart_comparison")

# %% [markdown]
# **Reading the table.** NBCE chooses its own number of clusters (column
# `clusters`, averaged over repetitions); with more clusters than species,
# accuracy (one-to-one matching) penalises it while micro-precision (each
# cluster to its majority species) does not, and its perplexity is lower partly
# because more clusters fit the labels more closely.  GBCE differs from BCE only
# through the features; with tens of base clusterings the labels outweigh the
# four iris features, so the two nearly coincide here (raise `feature_weight` or
# lower `label_weight` to give the features more say, see `docs/gbce.md`).
#
# ## Where to go next
#
# * `02_posterior_analysis.ipynb`: the NBCE posterior (chains, R-hat, number of
#   clusters, co-clustering, uncertain points).
# * `03_extending_a_model.ipynb`: writing a new Pyro variant of BCE and comparing
#   it with BCE by held-out perplexity.
# * `docs/*.md`: one page per model (derivations, engines, measured results).
