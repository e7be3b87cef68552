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
# # Extending a model: BCE with a reliability per base clustering
#
# BCE (Bayesian cluster ensembles) treats every base clustering alike.  Here we
# write a variant in which base clustering `j` is *reliable* with probability
# `rho_j`: an observed label `x_ij` either comes from the row's consensus (through
# `z_ij ~ theta_i` and the label distribution `beta_j[z_ij]`, as in BCE) or, with
# probability `1 - rho_j`, from a background distribution `b_j` that ignores the row:
#
# ```
# alpha_h ~ Gamma(2, 2)                         (K,)
# rho_j   ~ Beta(2, 1)                          (M,)
# beta_jh ~ Dirichlet(c_beta 1_{k_j})           c_beta < 1: each cluster maps to few labels
# b_j     ~ Dirichlet(1_{k_j})
# theta_i ~ Dirichlet(alpha);  z_ij ~ Categorical(theta_i)
# x_ij    ~ Categorical(rho_j beta_j[z_ij] + (1 - rho_j) b_j)
# ```
#
# For a single label the mixture is again a categorical distribution, so what makes
# `rho_j` mean something is the sparse prior on `beta`: a base clustering whose labels
# are spread evenly over the consensus clusters is explained more cheaply as
# "unreliable".
#
# The point of this notebook is *how little* a researcher writes: the rows part
# (`theta`, the enumerated `z`, missing labels, the plates) is BCE's spec
# `consensuskit.models.bce.model`, called with the variant's label distributions; the
# estimator `ck.PyroConsensus` fits it (SVI with an automatic guide, or NUTS), predicts,
# scores held-out rows with a standard error, and hands ArviZ a `log_likelihood`
# group; `ck.compare` ranks it against the built-in models.

# %% tags=["parameters"]
import os

# small sizes (what the tests and `make notebooks` run); CONSENSUSKIT_QUICK=0 for a fuller run
QUICK = os.environ.get("CONSENSUSKIT_QUICK", "1") != "0"

# %%
import warnings

import arviz as az
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pyro
import pyro.distributions as dist
import torch

import consensuskit as ck
from consensuskit import datasets, generate, metrics
from consensuskit.evaluation.comparison import plot_comparison
from consensuskit.evaluation.figures import save_figure  # PNG into $CONSENSUSKIT_FIGURES
from consensuskit.models import bce

torch.set_num_threads(1)
N_STEPS = 300 if QUICK else 2000
K = 3
NOISE = [0.2, 0.4, 0.6, 0.8, 1.0, 1.0]  # corruption level of the corrupted clusterings

# %% [markdown]
# ## An ensemble with corrupted base clusterings
#
# Six clean base clusterings (k-means with `k = 3` on random feature subsets) and six
# corrupted ones (k-means on all features, then a fraction `eta` of the labels
# replaced by uniform random labels; `eta = 1` is pure noise).  Each column's accuracy
# against the wine cultivars measures how good it really is.  A quarter of the rows is
# held out.

# %%
features, truth = datasets.load("wine")
F = (features - features.mean(0)) / features.std(0)
rs = np.random.RandomState(0)
clean = generate.random_feature_partitions(F, 6, n_clusters=K, random_state=0)
corrupted = generate.kmeans_partitions(F, len(NOISE), n_clusters=K, random_state=1)
for j, eta in enumerate(NOISE):
    flip = rs.rand(len(truth)) < eta
    corrupted[flip, j] = rs.randint(0, K, flip.sum())
X = np.column_stack([clean, corrupted])
noise_level = np.array([0.0] * clean.shape[1] + NOISE)
column_accuracy = np.array([metrics.accuracy(truth, X[:, j]) for j in range(X.shape[1])])
perm = rs.permutation(len(truth))
n_test = len(truth) // 4
X_test, X_train = X[np.sort(perm[:n_test])], X[np.sort(perm[n_test:])]
pd.DataFrame({"noise": noise_level, "accuracy": column_accuracy}).T.round(2)

# %% [markdown]
# ## The variant: 14 lines on top of BCE's spec
#
# It follows the package's calling convention (`labels` (N, M) with `-1` missing,
# `n_labels`, `n_clusters`; `labels=None` simulates), because it only adds global
# sites and passes `alpha` and the mixed label distributions to `bce.model`, whose
# parameters accept tensors.  No guide is written.  `PyroConsensus`'s default SVI
# starts at the posterior mode (L-BFGS on the model's potential from several prior
# draws), integrates each row's own `theta_i` out by likelihood weighting (`z` stays
# enumerated), fits a full-covariance Gaussian guide over the global sites (at most 500
# unconstrained dimensions; mean field above) and stops on an ELBO plateau.

# %%
def bce_reliability(labels=None, *, n_labels, n_clusters, c_beta=0.2, **kw):
    """BCE with a reliability rho_j per base clustering (labels (N, M), -1 missing)."""
    alpha = pyro.sample("alpha", dist.Gamma(torch.full((n_clusters,), 2.0), 2.0).to_event(1))
    with pyro.plate("clusterings_rho", len(n_labels)):
        rho = pyro.sample("rho", dist.Beta(torch.tensor(2.0), torch.tensor(1.0)))
    betas = []
    for j, k in enumerate(n_labels):
        with pyro.plate(f"clusters_{j}", n_clusters):
            beta_j = pyro.sample(f"beta_{j}", dist.Dirichlet(torch.full((k,), c_beta)))
        b_j = pyro.sample(f"background_{j}", dist.Dirichlet(torch.ones(k)))
        betas.append(rho[j] * beta_j + (1 - rho[j]) * b_j)
    return bce.model(labels, n_labels=n_labels, n_clusters=n_clusters, alpha=alpha,
                     beta=betas, **kw)


# %% [markdown]
# Because it is a generative program, `pyro.infer.Predictive` simulates from it (prior
# draws of every site and a synthetic ensemble):

# %%
with torch.random.fork_rng():
    pyro.set_rng_seed(0)
    prior = pyro.infer.Predictive(bce_reliability, num_samples=2)(
        None, n_labels=[3] * 12, n_clusters=K, n_rows=5)
{name: tuple(v.shape) for name, v in prior.items() if name in ("rho", "theta", "x")}

# %% [markdown]
# ## Fit, predict, score

# %%
variant = ck.PyroConsensus(bce_reliability, n_clusters=K, num_steps=N_STEPS,
                           random_state=0, n_posterior_draws=20 if QUICK else 100)
variant.fit(X_train)
ppl, se = variant.perplexity(X_test, return_se=True, unknown="missing")
print(f"held-out perplexity {ppl:.4f} ± {se:.4f}; ARI of the consensus against the "
      f"cultivars {metrics.adjusted_rand(truth[np.sort(perm[n_test:])], variant.labels_):.3f}")
rho = variant.posterior_samples_["rho"].reshape(-1, X.shape[1]).mean(0)

# %% [markdown]
# ## Learned reliabilities vs the real quality of each base clustering

# %%
fig, ax = plt.subplots(figsize=(6.5, 4.5))
sc = ax.scatter(column_accuracy, rho, c=noise_level, cmap="coolwarm", s=70, edgecolors="k")
for j in range(X.shape[1]):
    ax.annotate(str(j), (column_accuracy[j], rho[j]), xytext=(4, 4),
                textcoords="offset points", fontsize=8)
ax.set_xlabel("accuracy of base clustering j against the cultivars")
ax.set_ylabel("posterior mean of rho_j")
ax.set_ylim(-0.05, 1.05)
ax.set_title("reliability vs quality (colour: injected noise level)")
fig.colorbar(sc, ax=ax, label="fraction of labels replaced")
save_figure(fig, "extending_reliability")
spearman = pd.Series(rho).corr(pd.Series(column_accuracy), method="spearman")
print("Spearman correlation rho vs accuracy:", round(spearman, 3))
pd.DataFrame({"noise": noise_level, "accuracy": column_accuracy, "rho": rho}).round(3)

# %% [markdown]
# ## Ranked against the built-in models
#
# `ck.compare` fits every estimator on the same training rows and scores the same
# held-out rows.  Besides each held-out perplexity with its Monte-Carlo SE it reports
# the *paired* difference of held-out log-likelihood to the best model (`elpd_diff`,
# summed over rows) with its SE: the rows' own variability cancels in the pairing, so
# this is the column that says whether two models can be told apart.

# %%
table = ck.compare({
    "MM": ck.MM(K, random_state=0),
    "BCE": ck.BCE(K, random_state=0),
    "NBCE": ck.NBCE(truncation=10, n_samples=100 if QUICK else 500,
                    burn_in=100 if QUICK else 500, n_chains=2, random_state=0),
    "BCE + reliability": variant,
}, X_train, X_test, unknown="missing", refit=False)
fig = plot_comparison(table)
save_figure(fig, "extending_perplexity")
table.round(4)

# %% [markdown]
# The same per-row log-likelihoods are in each fit's ArviZ `log_likelihood` group, so
# PSIS-LOO on the training rows is one call wherever a fit has posterior draws (NBCE's
# Gibbs draws; the variant's draws from its variational posterior; point estimates
# such as BCE's CAVI fit have a single draw and no LOO).  ArviZ's warnings are printed,
# not hidden: a high Pareto k makes a row's LOO unreliable, and the comparison table above
# already says so per model (`pareto_k_max`, `share_k_above_0.7`, `reliable`):

# %%
fits = table.attrs["estimators"]
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    loo_table = az.compare({n: e.inference_data_ for n, e in fits.items()
                            if e.inference_data_.log_likelihood["x"].shape[1] > 1})
for w in caught:
    print(f"warning: {w.message}")
print(table[["pareto_k_max", "share_k_above_0.7", "reliable"]])
loo_table.round(3)

# %% [markdown]
# **Reading the results.** The reliabilities of clean clusterings stay high and fall
# with the injected noise; pure-noise clusterings get low `rho`, so their labels no
# longer pull the consensus.  Whether that predicts held-out labels better is what the
# table answers, with standard errors.  For the gold-standard posterior of a small
# variant, `ck.PyroConsensus(bce_reliability, n_clusters=K, inference="nuts")` runs
# NUTS with `z` enumerated; `docs/extending.md` lists what else the hub gives.
