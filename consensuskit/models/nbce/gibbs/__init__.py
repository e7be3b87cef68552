"""Collapsed Gibbs sampling for NBCE (paper section 5.1, eq. 5), compiled with numba.

The sampler works on the collapsed space: mixing weights ``pi`` and cluster
parameters ``theta*`` are integrated out (see
:func:`consensuskit.models.nbce.spec.collapsed_log_joint`) and only the indicators
``z`` are sampled.  The conditional of ``z_i`` given the rest is

    p(z_i = k | z_-i, x) ∝ p(z_i = k | z_-i) * prod_{j observed in row i}
                            (beta + N^{-i}_{k, x_ij}) / (k_j beta + N^{-i}_{k j})

where ``N_{kj}`` counts the points of cluster k that column j labels (with no
missing labels it is the cluster size; the paper's eq. 5 writes a product over
all ``j_m``, but only the observed label's factor depends on ``k`` — this is the
correct Dirichlet-multinomial ratio) and

    TSB:  p(z_i=k | z_-i) = (1 + N_k)/(1 + a0 + N_{>=k}) prod_{h<k} (a0 + N_{>h})/(1 + a0 + N_{>=h})
          (for the last component k = T only the product: its stick is 1)
    FSD:  p(z_i=k | z_-i) ∝ a0/T + N_k.

Numerical safety and speed
--------------------------
The weights are computed in *rescaled linear space*: each factor
``(beta + N_{k,x_ij}) / (k_j beta + N_{kj})`` and each prior factor is at most 1,
so nothing overflows, and every 16 columns the running weights are divided by
their maximum when it falls below 1e-100, so M can be in the thousands without
underflow (tested at M = 1000 against the log-space collapsed joint).  The
sampler keeps ``num[l, k] = beta + N_{kl}`` (global label l, contiguous over k)
and ``invden[j, k] = 1/(k_j beta + N_{kj})``; moving one point changes ``2M``
entries of each.  During a sweep these tables are held in *slot* order
(:func:`_pack_slots`): the occupied components fill the first slots, so the
likelihood of a point is ``M`` contiguous, vectorised multiply passes over the
occupied components plus one empty representative (all empty components share
the likelihood factor ``prod_j 1/k_j``), whatever the truncation.  A component
that empties or fills swaps slots (:func:`_slot_vacate`, :func:`_slot_occupy`).
FSD's empty components then share one summed weight (a new cluster picks one
uniformly), and TSB's empty components after the last occupied one have
geometric prior weights, sampled
exactly as a truncated geometric.  No logarithm and no exponential per point.
Missing labels simply skip their column.

No truncation
-------------
With ``unbounded=True`` (the estimator's ``truncation=None`` under TSB) the target is
the untruncated stick-breaking posterior.  The tables are a window onto labels
``0..T-1`` whose last component is always empty, where the truncated formulas equal the
untruncated ones; each kernel computes its transition from z alone (the sweep's tail is
the whole geometric series, a split's new label is uniform among the empty labels
``0..last+1``, group moves weigh the geometric tail, label swaps run over every pair),
and whatever would reach the last label stops the kernel, grows the tables
(:meth:`GibbsState.grow`) and continues with the draw already made.  So the chain is
the untruncated sampler exactly (``tests/test_nbce_unbounded.py``: exact draws of the
untruncated posterior stay exact after each move; the truncated kernels fail it).

Group moves
-----------
With ``beta`` sampled, ``beta`` drifts to about 0.01 on ensembles of k-means
partitions; every ``z_i`` is then nearly determined by its cluster, and single-site
moves cannot change the number of clusters (chains sat at 6-9 clusters, 30 nats
apart).  Each iteration therefore adds moves of whole groups, both exact for the
truncated priors over *labelled* components and for the untruncated prior:

* sequentially-allocated split-merge Metropolis-Hastings (Dahl 2003,
  :mod:`~consensuskit.models.nbce.gibbs.split_merge`): a split puts a new group on an
  empty component chosen uniformly, a merge keeps the second point's component; the
  acceptance ratio has the prior ratio (:func:`_log_prior_nb`), the two groups'
  Dirichlet-multinomial likelihoods, the allocation probability and the number of
  labels a split may use; half of the pairs are drawn near each other (a distribution
  that depends on the data only, so it cancels), and restricted Gibbs scans after the
  sequential launch (Jain & Neal 2004) are available (``split_merge_scans``, off);
* Gibbs moves of groups of identical rows (:func:`_block_moves`): a group that sits
  in one component is moved as a whole, from its exact conditional.

Both are checked by exact enumeration (``tests/test_nbce_moves.py``) and by SBC
(``tests/test_sbc_nbce.py``); ``experiments/nbce_mixing.py`` measures the mixing.

Hyper-parameters
----------------
``alpha0`` and ``beta`` are either fixed or updated once per sweep by
univariate slice sampling (Neal 2003: stepping out by at most 50 intervals, on the
log scale; compiled, :func:`_slice_log_nb`) from their conditional given ``z``:
``p(alpha0 | z) ∝ p(z | alpha0) Gamma(alpha0; a, b)`` and ``p(beta | x, z) ∝
p(x | z, beta) Gamma(beta; a, b)``, with Gamma(shape=1, rate=1) priors by default
(``hyper_prior``).  An update whose shrinkage finds no point in 200 steps keeps the
old value and is counted (``move_stats``; the estimator warns).

Chains
------
Each chain has its own generator, seeded once from ``random_state``, so the chains
run on threads (``n_jobs``; the compiled moves release the GIL) and give the same
draws for any number of threads.
"""

from __future__ import annotations

from consensuskit.models.nbce.gibbs.chains import Chain, GibbsChains, gibbs_nbce
from consensuskit.models.nbce.gibbs.state import (
    GibbsState,
    conditional_probs,
    gibbs_step,
    sample_conditional,
)
from consensuskit.models.nbce.gibbs.summaries import (
    RHAT_THRESHOLD,
    co_clustering,
    draw_counts,
    draw_memberships,
    draw_votes,
    point_consensus,
    relabel_by_size,
    split_rhat,
)

__all__ = [
    "GibbsState",
    "Chain",
    "GibbsChains",
    "gibbs_step",
    "gibbs_nbce",
    "conditional_probs",
    "sample_conditional",
    "co_clustering",
    "point_consensus",
    "draw_counts",
    "draw_memberships",
    "draw_votes",
    "relabel_by_size",
    "split_rhat",
    "RHAT_THRESHOLD",
]
