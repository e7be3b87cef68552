"""Write the tutorial notebooks in ``notebooks/`` from the cell sources below.

The notebooks are generated (outputs cleared) so that their code can be reviewed
and linted as plain text and so that git holds no execution output::

    python experiments/build_notebooks.py            # (re)write notebooks/*.ipynb
    python experiments/build_notebooks.py --check    # exit 1 if a notebook is stale
    python experiments/build_notebooks.py --execute 03_extending_a_model.ipynb --full \
        --output /tmp/03_full.ipynb --figures /tmp/figures   # run one, fuller mode

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
from consensuskit import datasets, generate, metrics

features, truth = datasets.load("iris")
X = generate.kmeans_partitions(features, N_PARTITIONS, n_clusters=(2, 6), random_state=0)
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
**Reading the table.** NBCE chooses its own number of clusters (column
`clusters`, averaged over repetitions); with more clusters than species,
accuracy (one-to-one matching) penalises it while micro-precision (each
cluster to its majority species) does not, and its perplexity is lower partly
because more clusters fit the labels more closely.  GBCE differs from BCE only
through the features; with tens of base clusterings the labels outweigh the
four iris features, so the two nearly coincide here (raise `feature_weight` or
lower `label_weight` to give the features more say, see `docs/gbce.md`).

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
    N_PARTITIONS, N_CHAINS, N_DRAWS, BURN_IN = 10, 4, 2000, 500"""),
    ("code", """\
import arviz as az

from consensuskit import NBCE, datasets, generate, metrics

features, truth = datasets.load("iris")
X = generate.kmeans_partitions(features, N_PARTITIONS, n_clusters=(2, 6), random_state=1)
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
bulk ESS of a few hundred mean the chains agree."""),
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
**What R-hat tells here.** On this ensemble the chains usually do *not* agree
on `log_joint` and `n_clusters`: in our runs R-hat was about 2 with 4 chains of
2000 draws (`QUICK = False`), while `alpha0` and `beta` looked fine.  Each chain
settles on its own way of splitting the species into clusters; moving between
these modes means moving a whole group of points, which a single-site Gibbs
sweep almost never does.  The pooled summaries below (number of clusters,
co-clustering, uncertain points) therefore mix the chains' modes: read them
per chain as well, and run more chains before drawing conclusions."""),
    ("md", """\
## Posterior of the number of clusters

`n_clusters_draws_` (chain, draw) counts the occupied clusters of each draw.
Base clusterings with up to six clusters split the species, so NBCE may
well find more than three consensus clusters; small clusters can appear and
vanish between draws.  The point consensus (Dahl's least-squares draw) is one
draw's clustering."""),
    ("code", """\
counts = pd.Series(nbce.n_clusters_draws_.ravel()).value_counts(normalize=True).sort_index()
per_chain = pd.DataFrame({f"chain {c}": pd.Series(k).value_counts(normalize=True)
                          for c, k in enumerate(nbce.n_clusters_draws_)}).fillna(0.0)
per_chain = per_chain.reindex(counts.index, fill_value=0.0)
fig, ax = plt.subplots(figsize=(7, 3.8))
width = 0.8 / (per_chain.shape[1] + 1)
ax.bar(counts.index - 0.4 + width / 2, counts.values, width, color="k", label="all chains")
for c, col in enumerate(per_chain.columns):
    ax.bar(counts.index - 0.4 + width * (c + 1.5), per_chain[col].values, width, alpha=0.8,
           label=col)
ax.axvline(nbce.n_clusters_, color="tab:red", ls="--", label="point consensus")
ax.axvline(3, color="k", ls=":", label="iris species")
ax.set_xlabel("number of occupied clusters")
ax.set_ylabel("posterior probability")
ax.set_xticks(range(min(3, counts.index.min()), counts.index.max() + 1))
ax.legend(fontsize=8)
save(fig, "posterior_n_clusters")
per_chain.assign(**{"all chains": counts}).round(3)"""),
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
the ten least certain points by each measure circled.  When chains disagree on
how to split a group, the entropy marks the whole group, while the membership
measure (clusters matched to the point consensus) marks the points between
groups."""),
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
fig, axes = plt.subplots(1, 2, figsize=(13, 5))
for ax, values, title in [(axes[0], doubt, "1 - max posterior membership"),
                          (axes[1], row_entropy, "co-clustering row entropy (bits)")]:
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
save(fig, "posterior_uncertain_points")
top = np.argsort(-doubt, kind="stable")[:10]
pd.DataFrame({"species": truth[top], "consensus": nbce.labels_[top],
              "1 - max membership": doubt[top], "row entropy": row_entropy[top]},
             index=top).round(3)"""),
    ("md", """\
The table lists the ten points with the lowest maximum membership.  In our runs
they lie in the versicolor/virginica cloud (right), where the species overlap
and the base clusterings cut the data differently.  By the membership measure
setosa (left) is never in doubt; where the entropy is raised over the whole
setosa group, the chains split that group in different ways (the R-hat problem
above), which is a statement about the sampler more than about the points.
The posterior reports this doubt instead of hiding it in
a hard assignment."""),
]


EXTENDING = [
    ("md", """\
# Extending a model: BCE with a learned reliability per base clustering

BCE (Bayesian cluster ensembles) treats every base clustering alike.  Here we
write a variant in Pyro in which base clustering `j` is *reliable* with
probability `rho_j`: an observed label `x_ij` either comes from the row's
consensus (through `z_ij ~ theta_i` and the label distribution `beta_j[z_ij]`,
as in BCE) or, with probability `1 - rho_j`, from a background distribution
`b_j` of base clustering `j` that ignores the row:

```
theta_i ~ Dirichlet(alpha)                    alpha : (K,)   learned (type-II ML)
beta_jh ~ Dirichlet(c_beta 1)                 (M, K, k)      c_beta < 1: sparse
b_j     ~ Dirichlet(c_back 1)                 (M, k)
z_ij    ~ Categorical(theta_i)
x_ij    ~ rho_j Categorical(beta_j[z_ij]) + (1 - rho_j) Categorical(b_j)
                                              rho : (M,)     learned (type-II ML)
```

**Identifiability.** For a single label the mixture is again a categorical
distribution, `beta'_j[h] = rho_j beta_j[h] + (1 - rho_j) b_j`, so with `beta`
and `b` as free point estimates this model is only a re-parametrisation of BCE
and `rho_j` would mean nothing.  What identifies `rho_j` is the prior: the
label distributions of the consensus clusters get a *sparse* Dirichlet prior
(`c_beta < 1`: each consensus cluster maps to few labels), so a base clustering
whose labels are spread evenly over all consensus clusters is explained more
cheaply as "unreliable" (small `rho_j`, labels from `b_j`).  We therefore keep
`beta` and `b` Bayesian (Dirichlet variational posteriors) and fit `rho` and
`alpha` by maximising the ELBO (evidence), with SVI.

We test it on the wine data with an ensemble in which half of the base
clusterings are deliberately corrupted: a fraction of their labels is replaced by
uniformly random labels."""),
    ("parameters", """\
QUICK = True  # small sizes for the test suite; False for a fuller run"""),
    ("code", FIGURE_SETUP),
    ("code", """\
import pyro
import pyro.distributions as dist
import pyro.poutine as poutine
from pyro.distributions import constraints
from pyro.infer import SVI, TraceEnum_ELBO
from pyro.ops.indexing import Vindex

from consensuskit import BCE, Ensemble, datasets, generate, metrics
from consensuskit.inference import bce_cavi
from consensuskit.models import bce

torch.set_default_dtype(torch.float64)
if QUICK:
    N_STEPS, N_SEEDS, IS_SAMPLES = 300, 1, 500
else:
    N_STEPS, N_SEEDS, IS_SAMPLES = 3000, 3, 5000
K = 3
NOISE = [0.2, 0.4, 0.6, 0.8, 1.0, 1.0]  # corruption level of the corrupted clusterings"""),
    ("md", """\
## An ensemble with corrupted base clusterings

Six clean base clusterings (k-means with `k = 3` on random halves of the
standardised features) and six corrupted ones (k-means on all features, then a
fraction `eta` of the labels replaced by uniform random labels; `eta = 1` is
pure noise).  Each column's accuracy against the wine cultivars measures how
good it really is.  A quarter of the rows is held out for the perplexity."""),
    ("code", """\
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
test_rows, train_rows = np.sort(perm[:n_test]), np.sort(perm[n_test:])
ens_train = Ensemble.from_labels(X[train_rows])
ens_test = ens_train.encode(X[test_rows], unknown="missing")
codes = torch.as_tensor(ens_train.codes.T.copy())  # (M, N) as the Pyro models expect
n_labels = ens_train.n_labels
M = codes.shape[0]
assert (n_labels == K).all(), "this notebook's variant assumes k_j = K labels everywhere"
pd.DataFrame({"noise": noise_level, "accuracy": column_accuracy}).T.round(2)"""),
    ("md", """\
## The Pyro model and guide

The rows part is BCE's: the same `"rows"` (dim -1) and `"clusterings"` (dim -2)
plates, `z` enumerated in parallel and summed out exactly by `TraceEnum_ELBO`,
missing labels masked.  So we can reuse BCE's guide for the rows,
`consensuskit.models.bce.guide_enumerated` (`q(theta_i) = Dirichlet(gamma_i)`),
and add Dirichlet factors for `beta` and `b`.  All `k_j` are equal here, which
avoids BCE's padding of `beta` (`bce.pad_beta`) for ragged label counts."""),
    ("code", """\
def reliability_model(codes, n_labels, n_clusters, *, learn_rho=True, c_beta=0.2, c_back=1.0):
    \"\"\"BCE with reliability rho_j per base clustering; codes (M, N), -1 = missing.

    learn_rho=False fixes rho = 1: plain BCE with Dirichlet priors on beta
    (the same code path, so the comparison isolates the reliability).
    \"\"\"
    M, N = codes.shape
    k = int(n_labels[0])
    alpha = pyro.param("alpha", lambda: torch.ones(n_clusters), constraint=constraints.positive)
    if learn_rho:
        rho = pyro.param("rho", lambda: torch.full((M,), 0.5),
                         constraint=constraints.unit_interval)
    else:
        rho = torch.ones(M)
    with pyro.plate("clusterings_g", M, dim=-2), pyro.plate("clusters_g", n_clusters, dim=-1):
        beta = pyro.sample("beta", dist.Dirichlet(torch.full((k,), c_beta)))  # (M, K, k)
    with pyro.plate("clusterings_b", M, dim=-1):
        back = pyro.sample("background", dist.Dirichlet(torch.full((k,), c_back)))  # (M, k)
    # per (j, h) label distribution of the mixture: (M, K, k)
    mix = rho[:, None, None] * beta + (1 - rho)[:, None, None] * back[:, None, :]
    j_index = torch.arange(M)[:, None]
    with pyro.plate("rows", N, dim=-1):
        theta = pyro.sample("theta", dist.Dirichlet(alpha))  # (N, K)
        with pyro.plate("clusterings", M, dim=-2):
            z = pyro.sample("z", dist.Categorical(theta), infer={"enumerate": "parallel"})
            probs = Vindex(mix)[j_index, z, :]  # (M, N, k), or (K, M, 1, k) enumerated
            with poutine.mask(mask=codes >= 0):
                pyro.sample("x", dist.Categorical(probs), obs=codes.clamp(min=0))


def reliability_guide(codes, n_labels, n_clusters, **kwargs):
    \"\"\"q(beta_jh) = Dir(lambda_jh), q(b_j) = Dir(mu_j), q(theta_i) = Dir(gamma_i) (BCE's).\"\"\"
    M, N = codes.shape
    k = int(n_labels[0])
    # random start (seeded by pyro.set_rng_seed) breaks the symmetry between clusters
    lam = pyro.param("lambda", lambda: 1.0 + 5.0 * torch.rand(M, n_clusters, k),
                     constraint=constraints.positive)
    mu = pyro.param("mu", lambda: torch.full((M, k), 10.0), constraint=constraints.positive)
    with pyro.plate("clusterings_g", M, dim=-2), pyro.plate("clusters_g", n_clusters, dim=-1):
        pyro.sample("beta", dist.Dirichlet(lam))
    with pyro.plate("clusterings_b", M, dim=-1):
        pyro.sample("background", dist.Dirichlet(mu))
    bce.guide_enumerated(codes, n_labels, n_clusters)  # theta


def fit_svi(learn_rho, seed):
    pyro.clear_param_store()
    pyro.set_rng_seed(seed)
    svi = SVI(lambda *a: reliability_model(*a, learn_rho=learn_rho), reliability_guide,
              pyro.optim.Adam({"lr": 0.05}), TraceEnum_ELBO(max_plate_nesting=2))
    losses = [svi.step(codes, n_labels, K) for _ in range(N_STEPS)]
    ps = pyro.get_param_store()
    lam, mu = ps["lambda"].detach(), ps["mu"].detach()
    rho = ps["rho"].detach().clone() if learn_rho else torch.ones(M)
    # posterior means of beta and b, combined into the mixture's label distributions
    mix = (rho[:, None, None] * lam / lam.sum(-1, keepdim=True)
           + (1 - rho)[:, None, None] * (mu / mu.sum(-1, keepdim=True))[:, None, :])
    return {"alpha": ps["alpha"].detach().clone(), "betas": [mix[j] for j in range(M)],
            "rho": rho.numpy(), "losses": np.array(losses)}"""),
    ("md", """\
## Held-out perplexity: one estimator for every model

Both models are scored with the same importance-sampling estimator as the `BCE`
estimator (`docs/bce.md`): for each held-out row, `gamma_i` is folded in with
alpha and the label distributions fixed (`bce_cavi.fold_in`), then with `S`
draws `theta_s ~ Dirichlet(gamma_i)`

```
log w_is   = log Dir(theta_s | alpha) - log Dir(theta_s | gamma_i)
             + sum_j log sum_h theta_sh beta'_j(h, x_ij)
log p(x_i) ~ log mean_s w_is
```

with `beta'` the posterior mean of the mixture's label distributions for the
Pyro models (a plug-in, like the point estimates of BCE itself).  The mean of
the weights is unbiased for `p(x_i)`; its log is biased low, so perplexities
are slightly conservative.  Below, the function is first checked against
`BCE.perplexity` on the same fitted BCE."""),
    ("code", """\
def perplexity_is(alpha, betas, ens, n_samples=IS_SAMPLES, seed=0):
    \"\"\"exp(-log p / #observed labels) by importance sampling; returns (perplexity, se).\"\"\"
    data = bce_cavi.prepare_data(ens)
    beta = bce_cavi.pack_beta(betas, dtype=torch.float64)  # (K, sum_j k_j)
    alpha = torch.as_tensor(alpha, dtype=torch.float64)
    gamma = bce_cavi.fold_in(alpha, beta, data)  # (K, n)
    gen = torch.Generator().manual_seed(seed)
    shape = gamma.T.unsqueeze(0).expand(n_samples, -1, -1).contiguous()  # (S, n, K)
    g = torch._standard_gamma(shape, generator=gen)
    theta = (g / g.sum(-1, keepdim=True)).clamp_min(1e-300)
    logw = dist.Dirichlet(alpha).log_prob(theta) - dist.Dirichlet(gamma.T).log_prob(theta)
    beta_ext = bce_cavi._extend(beta)  # extra column of ones for missing labels
    for j in range(data.n_partitions):
        idx, mask = data.column(j)
        ll = torch.log((theta.permute(0, 2, 1) * beta_ext[:, idx]).sum(1))  # (S, n)
        logw = logw + (ll if mask is None else ll * mask)
    total = float((torch.logsumexp(logw, 0) - np.log(n_samples)).sum())
    w = torch.exp(logw - logw.max(0).values)
    se_total = float(torch.sqrt((w.var(0) / (n_samples * w.mean(0) ** 2)).sum()))
    n_obs = int((ens.codes >= 0).sum())
    ppl = float(np.exp(-total / n_obs))
    return ppl, ppl * se_total / n_obs  # delta method


bce_cavi_model = BCE(K, random_state=0, n_perplexity_samples=IS_SAMPLES).fit(ens_train)
print("BCE.perplexity (held-out):", np.round(bce_cavi_model.perplexity(
    ens_test.codes, return_se=True, unknown="missing"), 4))
print("perplexity_is  (held-out):", np.round(perplexity_is(
    bce_cavi_model.alpha_, bce_cavi_model.beta_, ens_test), 4))"""),
    ("md", """\
## Fit: plain BCE vs BCE with reliabilities

`learn_rho=False` is the same Pyro program with `rho = 1`, i.e. BCE with
Dirichlet priors on its label distributions, so the difference isolates the
reliability weights.  We also list the `BCE` estimator (variational EM, point
estimates of beta)."""),
    ("code", """\
runs = {"BCE (Pyro, rho = 1)": [], "BCE + reliability (Pyro)": []}
for seed in range(N_SEEDS):
    runs["BCE (Pyro, rho = 1)"].append(fit_svi(False, seed))
    runs["BCE + reliability (Pyro)"].append(fit_svi(True, seed))

ppl, se = perplexity_is(bce_cavi_model.alpha_, bce_cavi_model.beta_, ens_test)
rows = [{"model": "BCE estimator (CAVI)", "seed": 0,
         "train": perplexity_is(bce_cavi_model.alpha_, bce_cavi_model.beta_, ens_train)[0],
         "held-out": ppl, "held-out se": se, "final -ELBO": np.nan}]
for name, fits in runs.items():
    for seed, r in enumerate(fits):
        ppl, se = perplexity_is(r["alpha"], r["betas"], ens_test)
        rows.append({"model": name, "seed": seed,
                     "train": perplexity_is(r["alpha"], r["betas"], ens_train)[0],
                     "held-out": ppl, "held-out se": se,
                     "final -ELBO": r["losses"][-50:].mean()})
comparison = pd.DataFrame(rows)
comparison.round(4)"""),
    ("code", """\
summary = comparison.groupby("model", sort=False)[["train", "held-out", "held-out se"]].mean()
fig, axes = plt.subplots(1, 2, figsize=(12, 4))
colors = ["tab:gray", "tab:blue", "tab:red"]
axes[0].bar(range(len(summary)), summary["held-out"], yerr=2 * summary["held-out se"],
            color=colors, capsize=6)
for i, name in enumerate(summary.index):  # one dot per seed
    vals = comparison.loc[comparison["model"] == name, "held-out"].to_numpy()
    axes[0].scatter(np.full(len(vals), i), vals, color="k", s=12, zorder=3)
axes[0].set_xticks(range(len(summary)))
axes[0].set_xticklabels(summary.index, rotation=10)
lo = summary["held-out"].min()
axes[0].set_ylim(lo * 0.97, comparison["held-out"].max() * 1.02)
axes[0].set_ylabel("held-out perplexity (bar: mean, dots: seeds, ± 2 IS se)")
axes[0].set_title("held-out perplexity, lower is better")
for (name, fits), c in zip(runs.items(), colors[1:]):
    for r in fits:
        axes[1].plot(r["losses"], color=c, alpha=0.7, lw=0.8,
                     label=name if r is fits[0] else None)
axes[1].set_yscale("log")
axes[1].set_xlabel("SVI step")
axes[1].set_ylabel("-ELBO")
axes[1].set_title("SVI training loss")
axes[1].legend()
fig.tight_layout()
save(fig, "extending_perplexity")"""),
    ("md", """\
## Learned reliabilities vs the real quality of each base clustering"""),
    ("code", """\
rho = np.mean([r["rho"] for r in runs["BCE + reliability (Pyro)"]], axis=0)
fig, ax = plt.subplots(figsize=(6.5, 4.5))
sc = ax.scatter(column_accuracy, rho, c=noise_level, cmap="coolwarm", s=70, edgecolors="k")
for j in range(M):
    ax.annotate(str(j), (column_accuracy[j], rho[j]), xytext=(4, 4),
                textcoords="offset points", fontsize=8)
ax.set_xlabel("accuracy of base clustering j against the cultivars")
ax.set_ylabel("learned reliability rho_j")
ax.set_ylim(-0.05, 1.05)
ax.set_title("reliability vs quality (colour: injected noise level)")
fig.colorbar(sc, ax=ax, label="fraction of labels replaced")
save(fig, "extending_reliability")
print("Spearman correlation rho vs accuracy:",
      round(pd.Series(rho).corr(pd.Series(column_accuracy), method="spearman"), 3))
pd.DataFrame({"noise": noise_level, "accuracy": column_accuracy, "rho": rho}).round(3)"""),
    ("md", """\
**Reading the results.** The reliabilities of clean clusterings go to 1 and
fall with the injected noise; pure-noise clusterings get `rho` near 0, so
their labels no longer pull the consensus.  Whether that improves the held-out
perplexity is a separate question, answered by the table above with its
standard errors: the reliability model can only win where the sparse prior's
explanation (a sharp clean part + a background) predicts new rows better than
a free per-cluster label distribution.

Ways to go further: learn `c_beta` by type-II maximum likelihood too; handle
ragged `k_j` by padding `beta` as `consensuskit.models.bce` does (`pad_beta`,
`label_mask`); mini-batch the rows with the `"rows"` plate's `subsample_size`
(the global sites need no change)."""),
]


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


def execute(name, *, quick=True, output=None, figures=None, timeout=3600):
    """Run ``notebooks/<name>`` with nbclient in a kernel of this interpreter.

    ``QUICK`` is set after the ``parameters`` cell; figures go to ``figures``
    (``CONSENSUSKIT_FIGURES``); the executed notebook is written to ``output``
    (never over the committed, output-free file).  Returns the executed notebook.
    """
    import json
    import os
    import tempfile

    import nbclient
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    nb = nbformat.read(NOTEBOOK_DIR / name, as_version=4)
    tagged = [i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", [])]
    nb.cells.insert(tagged[0] + 1, new_code_cell(f"QUICK = {bool(quick)}"))
    root = NOTEBOOK_DIR.parent
    if figures is not None:
        os.environ["CONSENSUSKIT_FIGURES"] = str(Path(figures).resolve())
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(root)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    with tempfile.TemporaryDirectory() as kernels:
        spec = Path(kernels) / "consensuskit-notebooks"
        spec.mkdir()
        (spec / "kernel.json").write_text(json.dumps({
            "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "consensuskit", "language": "python"}))
        km = KernelManager(kernel_name="consensuskit-notebooks",
                           kernel_spec_manager=KernelSpecManager(kernel_dirs=[kernels]))
        nbclient.NotebookClient(nb, km=km, timeout=timeout,
                                resources={"metadata": {"path": str(NOTEBOOK_DIR)}}).execute()
    if output is not None:
        nbformat.write(nb, output)
    return nb


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="do not write; exit 1 if a notebook differs from its source")
    parser.add_argument("--execute", metavar="NAME",
                        help="execute notebooks/NAME (e.g. 01_quickstart.ipynb) instead")
    parser.add_argument("--full", action="store_true", help="with --execute: QUICK = False")
    parser.add_argument("--output", help="with --execute: where to write the executed notebook")
    parser.add_argument("--figures", help="with --execute: figure directory")
    args = parser.parse_args(argv)
    if args.execute:
        execute(args.execute, quick=not args.full, output=args.output, figures=args.figures)
        print("executed", args.execute, "QUICK =", not args.full)
        return 0
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
