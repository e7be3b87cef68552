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
# # Extending a model: BCE with a learned reliability per base clustering
#
# BCE (Bayesian cluster ensembles) treats every base clustering alike.  Here we
# write a variant in Pyro in which base clustering `j` is *reliable* with
# probability `rho_j`: an observed label `x_ij` either comes from the row's
# consensus (through `z_ij ~ theta_i` and the label distribution `beta_j[z_ij]`,
# as in BCE) or, with probability `1 - rho_j`, from a background distribution
# `b_j` of base clustering `j` that ignores the row:
#
# ```
# theta_i ~ Dirichlet(alpha)                    alpha : (K,)   learned (type-II ML)
# beta_jh ~ Dirichlet(c_beta 1)                 (M, K, k)      c_beta < 1: sparse
# b_j     ~ Dirichlet(c_back 1)                 (M, k)
# z_ij    ~ Categorical(theta_i)
# x_ij    ~ rho_j Categorical(beta_j[z_ij]) + (1 - rho_j) Categorical(b_j)
#                                               rho : (M,)     learned (type-II ML)
# ```
#
# **Identifiability.** For a single label the mixture is again a categorical
# distribution, `beta'_j[h] = rho_j beta_j[h] + (1 - rho_j) b_j`, so with `beta`
# and `b` as free point estimates this model is only a re-parametrisation of BCE
# and `rho_j` would mean nothing.  What identifies `rho_j` is the prior: the
# label distributions of the consensus clusters get a *sparse* Dirichlet prior
# (`c_beta < 1`: each consensus cluster maps to few labels), so a base clustering
# whose labels are spread evenly over all consensus clusters is explained more
# cheaply as "unreliable" (small `rho_j`, labels from `b_j`).  We therefore keep
# `beta` and `b` Bayesian (Dirichlet variational posteriors) and fit `rho` and
# `alpha` by maximising the ELBO (evidence), with SVI.
#
# We test it on the wine data with an ensemble in which half of the base
# clusterings are deliberately corrupted: a fraction of their labels is replaced by
# uniformly random labels.

# %% tags=["parameters"]
import os

# small sizes (what the tests and `make notebooks` run); CONSENSUSKIT_QUICK=0 for a fuller run
QUICK = os.environ.get("CONSENSUSKIT_QUICK", "1") != "0"

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pyro
import pyro.distributions as dist
import pyro.poutine as poutine
import torch
from pyro.distributions import constraints
from pyro.infer import SVI, TraceEnum_ELBO
from pyro.ops.indexing import Vindex

from consensuskit import BCE, Ensemble, datasets, generate, metrics
from consensuskit.inference import bce_cavi
from consensuskit.figures import save_figure  # PNG into $CONSENSUSKIT_FIGURES
from consensuskit.models import bce

torch.set_num_threads(1)
torch.set_default_dtype(torch.float64)
if QUICK:
    N_STEPS, N_SEEDS, IS_SAMPLES = 300, 1, 500
else:
    N_STEPS, N_SEEDS, IS_SAMPLES = 3000, 3, 5000
K = 3
NOISE = [0.2, 0.4, 0.6, 0.8, 1.0, 1.0]  # corruption level of the corrupted clusterings

# %% [markdown]
# ## An ensemble with corrupted base clusterings
#
# Six clean base clusterings (k-means with `k = 3` on random halves of the
# standardised features) and six corrupted ones (k-means on all features, then a
# fraction `eta` of the labels replaced by uniform random labels; `eta = 1` is
# pure noise).  Each column's accuracy against the wine cultivars measures how
# good it really is.  A quarter of the rows is held out for the perplexity.

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
test_rows, train_rows = np.sort(perm[:n_test]), np.sort(perm[n_test:])
ens_train = Ensemble.from_labels(X[train_rows])
ens_test = ens_train.encode(X[test_rows], unknown="missing")
codes = torch.as_tensor(ens_train.codes.T.copy())  # (M, N) as the Pyro models expect
n_labels = ens_train.n_labels
M = codes.shape[0]
assert (n_labels == K).all(), "this notebook's variant assumes k_j = K labels everywhere"
pd.DataFrame({"noise": noise_level, "accuracy": column_accuracy}).T.round(2)


# %% [markdown]
# ## The Pyro model and guide
#
# The rows part is BCE's: the same `"rows"` (dim -1) and `"clusterings"` (dim -2)
# plates, `z` enumerated in parallel and summed out exactly by `TraceEnum_ELBO`,
# missing labels masked.  So we can reuse BCE's guide for the rows,
# `consensuskit.models.bce.guide_enumerated` (`q(theta_i) = Dirichlet(gamma_i)`),
# and add Dirichlet factors for `beta` and `b`.  All `k_j` are equal here, which
# avoids BCE's padding of `beta` (`bce.pad_beta`) for ragged label counts.

# %%
def reliability_model(codes, n_labels, n_clusters, *, learn_rho=True, c_beta=0.2, c_back=1.0):
    """BCE with reliability rho_j per base clustering; codes (M, N), -1 = missing.

    learn_rho=False fixes rho = 1: plain BCE with Dirichlet priors on beta
    (the same code path, so the comparison isolates the reliability).
    """
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
    """q(beta_jh) = Dir(lambda_jh), q(b_j) = Dir(mu_j), q(theta_i) = Dir(gamma_i) (BCE's)."""
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
            "rho": rho.numpy(), "losses": np.array(losses)}


# %% [markdown]
# ## Held-out perplexity: one estimator for every model
#
# Both models are scored with the same importance-sampling estimator as the `BCE`
# estimator (`docs/bce.md`): for each held-out row, `gamma_i` is folded in with
# alpha and the label distributions fixed (`bce_cavi.fold_in`), then with `S`
# draws `theta_s ~ Dirichlet(gamma_i)`
#
# ```
# log w_is   = log Dir(theta_s | alpha) - log Dir(theta_s | gamma_i)
#              + sum_j log sum_h theta_sh beta'_j(h, x_ij)
# log p(x_i) ~ log mean_s w_is
# ```
#
# with `beta'` the posterior mean of the mixture's label distributions for the
# Pyro models (a plug-in, like the point estimates of BCE itself).  The mean of
# the weights is unbiased for `p(x_i)`; its log is biased low, so perplexities
# are slightly conservative.  Below, the function is first checked against
# `BCE.perplexity` on the same fitted BCE.

# %%
def perplexity_is(alpha, betas, ens, n_samples=IS_SAMPLES, seed=0):
    """exp(-log p / #observed labels) by importance sampling; returns (perplexity, se)."""
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
    bce_cavi_model.alpha_, bce_cavi_model.beta_, ens_test), 4))

# %% [markdown]
# ## Fit: plain BCE vs BCE with reliabilities
#
# `learn_rho=False` is the same Pyro program with `rho = 1`, i.e. BCE with
# Dirichlet priors on its label distributions, so the difference isolates the
# reliability weights.  We also list the `BCE` estimator (variational EM, point
# estimates of beta).

# %%
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
comparison.round(4)

# %%
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
save_figure(fig, "extending_perplexity")

# %% [markdown]
# ## Learned reliabilities vs the real quality of each base clustering

# %%
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
save_figure(fig, "extending_reliability")
print("Spearman correlation rho vs accuracy:",
      round(pd.Series(rho).corr(pd.Series(column_accuracy), method="spearman"), 3))
pd.DataFrame({"noise": noise_level, "accuracy": column_accuracy, "rho": rho}).round(3)

# %% [markdown]
# **Reading the results.** The reliabilities of clean clusterings go to 1 and
# fall with the injected noise; pure-noise clusterings get `rho` near 0, so
# their labels no longer pull the consensus.  Whether that improves the held-out
# perplexity is a separate question, answered by the table above with its
# standard errors: the reliability model can only win where the sparse prior's
# explanation (a sharp clean part + a background) predicts new rows better than
# a free per-cluster label distribution.
#
# Ways to go further: learn `c_beta` by type-II maximum likelihood too; handle
# ragged `k_j` by padding `beta` as `consensuskit.models.bce` does (`pad_beta`,
# `label_mask`); mini-batch the rows with the `"rows"` plate's `subsample_size`
# (the global sites need no change).
