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
# # The posterior over partitions of an NBCE fit
#
# NBCE (nonparametric Bayesian clustering ensembles) puts a truncated Dirichlet
# process prior on the consensus clusters, so the consensus clustering itself has a
# posterior: a distribution over partitions of the points, which the collapsed Gibbs
# sampler represents by its draws.  Bayesian clustering summarises such a posterior
# with decision theory (Binder 1978; Dahl 2006; Wade & Ghahramani 2018; Dahl, Johnson &
# Müller 2022): the partition minimising the posterior expected Variation-of-Information
# (VI) or Binder loss, a credible ball around it, the posterior similarity matrix (PSM)
# and per-point confidence.
#
# The fit hands its draws over as `nbce.partition_posterior_`, a
# `consensuskit.PartitionPosterior`, and its `labels_` is already the VI-optimal
# partition (`NBCE(point_estimate="vi")`, the default).  This notebook checks the chains
# with ArviZ (label-switching-free quantities only), then compares the VI and Binder
# estimates, draws the PSM, the credible ball and the posterior of the number of
# clusters, and finds the points whose cluster is least certain.

# %% tags=["parameters"]
import os

# small sizes (what the tests and `make notebooks` run); CONSENSUSKIT_QUICK=0 for a fuller run
QUICK = os.environ.get("CONSENSUSKIT_QUICK", "1") != "0"

# %%
if QUICK:
    N_PARTITIONS, N_CHAINS, N_DRAWS, BURN_IN = 10, 2, 150, 50
else:
    N_PARTITIONS, N_CHAINS, N_DRAWS, BURN_IN = 10, 4, 2000, 500

# %%
import arviz as az
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from consensuskit import NBCE, datasets, generate, metrics
from consensuskit.evaluation.figures import save_figure  # PNG into $CONSENSUSKIT_FIGURES

features, truth = datasets.load("iris")
X = generate.kmeans_partitions(features, N_PARTITIONS, n_clusters=(2, 6), random_state=1)
nbce = NBCE(truncation=15, prior="tsb", inference="gibbs", n_samples=N_DRAWS,
            burn_in=BURN_IN, n_chains=N_CHAINS, random_state=0).fit(X)
idata = nbce.inference_data_
pp = nbce.partition_posterior_  # one partition per retained draw, all chains
print(pp)
print("VI point estimate (labels_):", nbce.n_clusters_, "clusters; accuracy vs species",
      round(metrics.accuracy(truth, nbce.labels_), 3),
      "ARI", round(metrics.adjusted_rand(truth, nbce.labels_), 3))

# %% [markdown]
# ## Chains: trace plot, R-hat and ESS
#
# `alpha0` (DP concentration) and `beta` (Dirichlet parameter of the label
# distributions) are slice-sampled after every sweep.  R-hat near 1 (ArviZ's rank
# normalised split R-hat; < 1.01 is the usual target for a final analysis) and a
# bulk ESS of a few hundred mean the chains agree.

# %%
var_names = ["log_joint", "n_clusters", "alpha0", "beta"]
axes = az.plot_trace(idata, var_names=var_names, compact=False, figsize=(12, 8))
fig = axes.ravel()[0].figure
fig.tight_layout()
save_figure(fig, "posterior_trace")

# %%
summary = az.summary(idata, var_names=var_names)
summary

# %% [markdown]
# **What R-hat tells here.** Each Gibbs iteration also proposes split-merge moves
# and moves whole groups of identical rows, so chains pass between ways of splitting
# the species into clusters. With 4 chains of 2000 draws (`QUICK = False`) R-hat was
# 1.00 and the bulk ESS above 1200 for all four quantities; the quick run above uses
# 2 short chains, so expect R-hat a little above 1.01 there. (Round 1's single-site
# sampler gave R-hat about 2 on this ensemble: each chain stayed in its own mode.)

# %% [markdown]
# ## Point estimates: VI, Binder and the best draw
#
# `labels_` minimises the posterior expected VI loss, found by SALSO search over all
# partitions (not only the draws).  The Binder loss (a = 1) counts pairs of points
# clustered differently; its optimum tends to keep more, smaller clusters, while VI tends to
# merge clusters the posterior is unsure about (Wade & Ghahramani 2018); on a concentrated
# posterior the estimates can coincide, and the table shows whether they do here.  For comparison: Dahl's least-squares draw, the
# draw with the smallest expected Binder loss (NBCE's `point_estimate="dahl"`).  Each
# estimate's expected loss under both losses (VI in bits), from the draws:

# %%
est_vi = nbce.labels_
est_binder, info_binder = pp.point_estimate(loss="binder", random_state=0)
binder_of_draws = [pp.expected_loss(pp.draw(s), "binder") for s in range(pp.n_draws)]
est_dahl = pp.draw(int(np.argmin(binder_of_draws)))
estimates = {"VI (labels_)": est_vi, "Binder": est_binder, "Dahl's draw": est_dahl}
table = pd.DataFrame({
    name: {"clusters": int(np.unique(e).size),
           "expected VI": pp.expected_loss(e, "vi"),
           "expected Binder": pp.expected_loss(e, "binder"),
           "accuracy vs species": metrics.accuracy(truth, e),
           "ARI vs species": metrics.adjusted_rand(truth, e)}
    for name, e in estimates.items()}).T
table.round(4)

# %% [markdown]
# ## Posterior of the number of clusters
#
# The number of occupied clusters of each draw.  Base clusterings with up to six clusters
# split the species, so NBCE may well find more than three consensus clusters; small
# clusters can appear and vanish between draws.  The dashed lines mark the point
# estimates' numbers of clusters.

# %%
vals, probs = pp.n_clusters_distribution()
counts = pd.Series(probs, index=vals)
fig, ax = plt.subplots(figsize=(7, 3.8))
pp.plot_n_clusters(ax=ax)
for (name, e), colour, ls in zip(estimates.items(), ["tab:red", "tab:blue", "tab:green"],
                                 [(0, (6, 6)), (6, (6, 6)), (3, (2, 10))]):  # visible if equal
    ax.axvline(np.unique(e).size, color=colour, ls=ls, lw=2, label=name)
ax.axvline(3, color="k", ls=":", label="iris species")
ax.legend(fontsize=8)
save_figure(fig, "posterior_n_clusters")
per_chain = pd.DataFrame({f"chain {c}": pd.Series(k).value_counts(normalize=True)
                          for c, k in enumerate(nbce.n_clusters_draws_)}).fillna(0.0)
per_chain.reindex(counts.index, fill_value=0.0).assign(**{"all chains": counts}).round(3)

# %% [markdown]
# ## Posterior similarity matrix
#
# `pp.psm()` is the posterior probability that two points share a cluster, over all
# draws of all chains (dense here; at large N, `psm(pairs=...)` or `psm(block=...)`).
# `plot_psm` orders the points by the VI estimate's clusters (larger first, within a
# cluster by decreasing confidence) and draws its cluster boundaries; grey mass off the
# diagonal blocks marks points the posterior does not place firmly.

# %%
P = pp.psm()
fig, ax = plt.subplots(figsize=(6.5, 5.5))
pp.plot_psm(est_vi, ax=ax)
save_figure(fig, "posterior_coclustering")

# %% [markdown]
# ## Credible ball around the VI estimate
#
# The 95% credible ball (Wade & Ghahramani 2018) is the smallest VI ball around the
# estimate that holds 95% of the posterior mass.  Its bounds summarise how far the
# posterior reaches: the *horizontal* bound is the partition in the ball farthest from
# the estimate, the *upper vertical* bound the farthest among those with the fewest
# clusters, the *lower vertical* bound the farthest among those with the most clusters.

# %%
from sklearn.decomposition import PCA

xy = PCA(n_components=2).fit_transform((features - features.mean(0)) / features.std(0))
ball = pp.credible_ball(est_vi, level=0.95, loss="vi")
print(f"radius {ball.radius:.3f} bits; {int(ball.in_ball.sum())} of {pp.n_draws} draws "
      "in the ball")
print("bounds: horizontal", len(ball.horizontal), "partition(s) at VI",
      round(ball.dist_horizontal, 3), "| upper vertical", ball.n_clusters_upper_vertical,
      "clusters | lower vertical", ball.n_clusters_lower_vertical, "clusters")
fig = pp.plot_credible_ball(ball, X=xy)
save_figure(fig, "posterior_credible_ball")

# %% [markdown]
# ## The least certain points
#
# Two per-point measures of how uncertain a point's cluster is:
#
# * `1 - pp.item_confidence(est_vi)`: one minus the mean posterior similarity of the point
#   to the members of its estimated cluster (salso's and mcclust's "psm within cluster");
# * `1 - max_c membership_[i, c]`: the share of draws in which the point's cluster maps
#   (by its largest overlap) to another consensus cluster than its most voted one.
#
# We show them on the first two principal components of the iris features, the ten least
# certain points by each measure circled.

# %%
confidence = pp.item_confidence(est_vi)
doubt = 1.0 - nbce.membership_.max(axis=1)
print("Spearman correlation of the two measures:",
      round(pd.Series(1 - confidence).corr(pd.Series(doubt), method="spearman"), 3))
fig, axes = plt.subplots(1, 2, figsize=(13, 5))
for ax, values, title in [(axes[0], 1 - confidence, "1 - item confidence (VI estimate)"),
                          (axes[1], doubt, "1 - max membership")]:
    top = np.argsort(-values, kind="stable")[:10]
    sc = ax.scatter(xy[:, 0], xy[:, 1], c=values, cmap="viridis", s=25)
    ax.scatter(xy[top, 0], xy[top, 1], s=160, facecolors="none", edgecolors="tab:red",
               label="10 least certain")
    ax.set_title(title)
    ax.set_xlabel("PC 1")
    ax.set_ylabel("PC 2")
    fig.colorbar(sc, ax=ax)
axes[0].legend(loc="lower right")
fig.tight_layout()
save_figure(fig, "posterior_uncertain_points")
top = np.argsort(confidence, kind="stable")[:10]
pd.DataFrame({"species": truth[top], "VI estimate": est_vi[top],
              "item confidence": confidence[top], "1 - max membership": doubt[top]},
             index=top).round(3)

# %% [markdown]
# In the run shown, the points of lowest item confidence lie in the versicolor/virginica
# cloud (right), where the species overlap and the base clusterings cut the data
# differently.  The membership measure misses some of them: a draw that splits an estimated
# cluster maps both parts to it (each draw cluster goes to the consensus cluster it overlaps
# most), so the point still votes for its cluster while item confidence sees that half of the
# cluster's members are not with it.  The membership measure's largest values can sit inside
# setosa, which the base clusterings cut in two and whose points move between the two halves.
# Setosa is never put with another species.  The posterior reports this doubt instead of hiding it in a
# hard assignment.
