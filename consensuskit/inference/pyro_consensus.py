"""``PyroConsensus``: an estimator for any spec that follows the models convention."""

from __future__ import annotations

import time

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from consensuskit.base import (
    ConsensusEstimator,
    GenerativeMixin,
    check_n_clusters,
    check_positive_int,
)
from consensuskit.data.ensemble import Ensemble
from consensuskit.inference import pointwise
from consensuskit.models.convention import float64_default

__all__ = ["PyroConsensus", "default_guide"]


def _hide_enumerated(msg):
    return msg["type"] == "sample" and msg["infer"].get("enumerate") == "parallel"


def default_guide(model):
    """``AutoNormal`` over every continuous latent site (enumerated sites stay in the model).

    Initialised at a prior draw (breaks the symmetry between clusters).
    """
    from pyro import poutine
    from pyro.infer.autoguide import AutoNormal, init_to_sample

    return AutoNormal(poutine.block(model, hide_fn=_hide_enumerated), init_loc_fn=init_to_sample)


def _align(reference, m):
    """Permutation of m's K columns that best matches ``reference`` (n, K) (label switching)."""
    cost = -(reference.T @ m)
    _, perm = linear_sum_assignment(cost)
    return perm


class PyroConsensus(GenerativeMixin, ConsensusEstimator):
    """Consensus clustering with a user's Pyro model: fit, predict, score, compare.

    ``model(labels, *, n_labels, n_clusters, **model_kwargs)`` must follow the convention
    of :mod:`consensuskit.models`: labels a LongTensor (N, M) with ``-1`` missing, a
    ``"rows"`` plate at dim -1 holding the per-row sites, discrete per-row latents marked
    ``infer={"enumerate": "parallel"}``.  The membership of a row is its row-local
    continuous site with K values (e.g. ``theta``), else its enumerated site in the rows
    plate (e.g. ``z``).

    Parameters
    ----------
    model : callable
    guide : callable, optional
        For ``inference="svi"``; default :func:`default_guide` (``AutoNormal``).
    n_clusters : int
        ``K``, passed to the model as ``n_clusters``.
    inference : {"svi", "nuts"}
        SVI (full batch or minibatches) or NUTS (Pyro's MCMC), enumerated sites summed out.
    random_state : int, RandomState or None
    model_kwargs : dict, optional
        Extra keyword arguments for model and guide (hyper-parameters).
    num_steps, learning_rate, clip_norm, batch_size, jit, num_particles
        SVI settings (``ClippedAdam``; ``batch_size``: rows per step through the rows
        plate).  A non-finite loss stops the fit with a FloatingPointError.
    num_samples, warmup_steps, num_chains, max_tree_depth
        NUTS settings.
    n_posterior_draws : int
        SVI: draws of the global sites from the guide used for scoring and
        ``inference_data_`` (1 for a point-mass guide).  NUTS: draws kept for scoring
        (thinned evenly from all chains).
    n_perplexity_samples : int
        Importance samples per row and draw for the row-local continuous latents.
    max_plate_nesting : int, optional
        Default: read from a trace of the model.
    verbose : bool
        Progress bars.

    Attributes
    ----------
    membership_ : ndarray (N, K)   labels_ : ndarray (N,)
    posterior_samples_ : dict site -> ndarray (chains, draws, ...) of the global sites
    losses_ : list of float (svi): the loss before every step, then at the final parameters
    fit_seconds_ : float (CPU)
    inference_data_ : arviz.InferenceData with ``posterior`` and ``log_likelihood``
    """

    def __init__(self, model, guide=None, *, n_clusters, inference="svi", random_state=None,
                 model_kwargs=None, num_steps=1000, learning_rate=0.02, clip_norm=10.0,
                 batch_size=None,
                 jit=False, num_particles=1, num_samples=300, warmup_steps=300, num_chains=2,
                 max_tree_depth=6, n_posterior_draws=50, n_perplexity_samples=1000,
                 max_plate_nesting=None, verbose=False):
        self.model = model
        self.guide = guide
        self.n_clusters = n_clusters
        self.inference = inference
        self.random_state = random_state
        self.model_kwargs = model_kwargs
        self.num_steps = num_steps
        self.learning_rate = learning_rate
        self.clip_norm = clip_norm
        self.batch_size = batch_size
        self.jit = jit
        self.num_particles = num_particles
        self.num_samples = num_samples
        self.warmup_steps = warmup_steps
        self.num_chains = num_chains
        self.max_tree_depth = max_tree_depth
        self.n_posterior_draws = n_posterior_draws
        self.n_perplexity_samples = n_perplexity_samples
        self.max_plate_nesting = max_plate_nesting
        self.verbose = verbose

    def __persistence_restore__(self):
        """After :func:`consensuskit.io.persistence.load`: rebuild the default guide,
        stored by description (its parameters are in the saved param store state)."""
        from consensuskit.io.persistence import DefaultGuide

        if isinstance(self.__dict__.get("guide_"), DefaultGuide):
            self.guide_ = default_guide(self.model)

    # ---------------------------------------------------------------- fitting
    def _kwargs(self, ens):
        return dict(n_labels=[int(k) for k in ens.n_labels], n_clusters=self.n_clusters_,
                    **(self.model_kwargs or {}))

    def _fit(self, ens: Ensemble):
        with float64_default():
            return self._fit64(ens)

    def _fit64(self, ens: Ensemble):
        if self.inference not in ("svi", "nuts"):
            raise ValueError(f"inference must be 'svi' or 'nuts'; got {self.inference!r}")
        self.n_clusters_ = check_n_clusters(self.n_clusters, ens.n_samples)
        check_positive_int(self.n_posterior_draws, "n_posterior_draws")
        check_positive_int(self.n_perplexity_samples, "n_perplexity_samples")
        rs = check_random_state(self.random_state)
        seed = int(rs.randint(2**31 - 1))
        labels = torch.as_tensor(ens.codes)
        kw = self._kwargs(ens)
        import pyro

        with torch.random.fork_rng():
            pyro.set_rng_seed(seed)
            self.roles_ = pointwise.site_roles(self.model, labels, kw, self.n_clusters_)
        if self.max_plate_nesting is not None:
            self.roles_.max_plate_nesting = int(self.max_plate_nesting)
        P = self.roles_.max_plate_nesting
        t0 = time.process_time()
        if self.inference == "svi":
            draws = self._fit_svi(labels, kw, P, seed)
        else:
            draws = self._fit_nuts(labels, kw, P, seed)
        self.fit_seconds_ = time.process_time() - t0
        self._draws = draws  # site -> (C, D, ...)
        self.posterior_samples_ = {k: v.detach().cpu().numpy() for k, v in draws.items()}
        L, V, Mb = self._score_draws(labels, membership=True)
        self._train_loglik = (L, V)
        self.membership_ = self._combine_memberships(Mb, L, fit=True)
        self.labels_ = self.membership_.argmax(1)
        return self

    def _fit_svi(self, labels, kw, P, seed):
        import pyro

        from consensuskit.inference.pyro_svi import fit_svi

        guide = default_guide(self.model) if self.guide is None else self.guide
        self.guide_ = guide
        with torch.random.fork_rng(), pyro.get_param_store().scope() as state:
            res = fit_svi(self.model, guide, labels, model_kwargs=kw, num_steps=self.num_steps,
                          learning_rate=self.learning_rate, clip_norm=self.clip_norm,
                          batch_size=self.batch_size,
                          max_plate_nesting=P, jit=self.jit, num_particles=self.num_particles,
                          seed=seed, progress=self.verbose, desc="PyroConsensus SVI")
            pyro.get_param_store().set_state(res.param_state)
            draws = self._guide_draws(labels, kw)
            state = pyro.get_param_store().get_state()
        self.losses_ = res.losses + [res.extra["final_loss"]]
        self._param_state = state
        return draws

    def _guide_draws(self, labels, kw):
        """Draws of the global sites from the guide, (1, D, ...); D = 1 for a point guide."""
        from pyro import poutine

        out = {name: [] for name in self.roles_.globals}
        for _ in range(self.n_posterior_draws):
            tr = poutine.trace(self.guide_).get_trace(labels, **kw)
            for name in out:
                if name in tr.nodes:
                    out[name].append(tr.nodes[name]["value"].detach())
        missing = [n for n, v in out.items() if not v]
        if missing:
            raise ValueError(f"the guide has no site for the global latent(s) {missing}")
        draws = {k: torch.stack(v) for k, v in out.items()}
        if all(bool((v == v[:1]).all()) for v in draws.values()):  # a point-mass guide
            draws = {k: v[:1] for k, v in draws.items()}
        return {k: v[None] for k, v in draws.items()}

    def _fit_nuts(self, labels, kw, P, seed):
        from consensuskit.inference.pyro_mcmc import fit_nuts

        samples, info = fit_nuts(self.model, labels, model_kwargs=kw,
                                 num_samples=self.num_samples, warmup_steps=self.warmup_steps,
                                 num_chains=self.num_chains, max_plate_nesting=P,
                                 max_tree_depth=self.max_tree_depth, seed=seed,
                                 progress=self.verbose)
        self.mcmc_info_ = info
        self.all_samples_ = {k: v.detach().cpu().numpy() for k, v in samples.items()}
        return {k: v for k, v in samples.items() if k in self.roles_.globals}

    # ---------------------------------------------------------------- scoring
    def _thinned(self):
        """Global draws used for scoring, thinned evenly within each chain to about
        ``n_posterior_draws`` in all; flattened chain-major, (C * d, ...)."""
        first = next(iter(self._draws.values()))
        C, D = first.shape[:2]
        d = max(1, min(D, -(-self.n_posterior_draws // C)))
        idx = np.unique(np.linspace(0, D - 1, d).round().astype(int))
        return {k: v[:, idx].reshape(-1, *v.shape[2:]) for k, v in self._draws.items()}, C

    def _score_draws(self, labels, membership=False):
        """Per-draw per-row scores; the fitted param store is in scope (models may hold
        ``pyro.param`` sites, e.g. empirical-Bayes hyper-parameters)."""
        import pyro

        draws, _ = self._thinned()
        rs = check_random_state(self.random_state)
        state = getattr(self, "_param_state", None)
        with float64_default(), pyro.get_param_store().scope(state):
            return pointwise.score_rows_draws(
                self.model, labels, draws, model_kwargs=self._kwargs(self.ensemble_),
                roles=self.roles_, num_particles=self.n_perplexity_samples,
                membership=membership, seed=int(rs.randint(2**31 - 1)), progress=self.verbose)

    def _combine_memberships(self, Mb, L, fit=False):
        """Average per-draw memberships (D, n, K), each aligned to a reference first."""
        if Mb is None:
            raise ValueError("the model has no membership site (a row-local site with K "
                             "values, or an enumerated site in the rows plate)")
        if fit:
            ref = Mb[int(np.argmax(L.sum(1)))]  # the draw that explains the data best
            self._perms = np.stack([_align(ref, m) for m in Mb])
        P = np.mean([m[:, perm] for m, perm in zip(Mb, self._perms)], axis=0)
        return P / P.sum(1, keepdims=True)

    def _pointwise_log_likelihood(self, ens: Ensemble):
        check_is_fitted(self, "membership_")
        if ens is self.ensemble_:
            L, V = self._train_loglik
        else:
            L, V, _ = self._score_draws(torch.as_tensor(ens.codes))
        return pointwise.combine_draws(L, V)

    def predict_proba(self, X, unknown="error"):
        """Posterior membership of (new) rows given the fitted globals, shape (n, K).

        Averaged over the posterior draws of the globals (aligned to the training
        reference, so label switching between draws does not blur it).
        """
        check_is_fitted(self, "membership_")
        ens = self._encode_new(X, unknown=unknown)
        L, _, Mb = self._score_draws(torch.as_tensor(ens.codes), membership=True)
        return self._combine_memberships(Mb, L)

    def predict(self, X, unknown="error"):
        """Hard consensus of (new) rows: argmax of :meth:`predict_proba`, shape (n,)."""
        return self.predict_proba(X, unknown=unknown).argmax(1)

    def _log_likelihood_draws(self):
        """Training per-row log-likelihood for every kept draw: (chains, draws, n)."""
        L, _ = self._train_loglik
        _, C = self._thinned()
        return L.reshape(C, -1, L.shape[1])

    def _posterior_for_arviz(self):
        draws, C = self._thinned()
        return {k: v.cpu().numpy().reshape(C, -1, *v.shape[1:]) for k, v in draws.items()}


class HubBackedMixin:
    """For a built-in estimator fitted through :class:`PyroConsensus` (``inference`` "svi"
    or "nuts" on its spec): the fitted hub estimator is ``hub_`` and scoring,
    ``predict_proba`` and ``inference_data_`` come from it.  Put before
    :class:`GenerativeMixin` in the bases."""

    def _hub(self):
        return getattr(self, "hub_", None)

    def _fit_on_hub(self, ensemble, model, *, inference, guide=None, model_kwargs=None,
                    **options):
        hub = PyroConsensus(model, guide, n_clusters=self.n_clusters, inference=inference,
                            random_state=self.random_state, model_kwargs=model_kwargs,
                            verbose=bool(getattr(self, "verbose", False)), **options)
        self.hub_ = hub.fit(ensemble)
        self.membership_ = hub.membership_
        self.labels_ = hub.labels_
        return hub

    def _aligned_mean(self, site):
        """Posterior mean of a global site whose first axis is the K clusters, with every
        draw's clusters permuted to the hub's reference (label switching)."""
        draws, _ = self.hub_._thinned()
        v = draws[site].detach().cpu().double().numpy()
        return np.mean([d[perm] for d, perm in zip(v, self.hub_._perms)], axis=0)

    def _log_likelihood_draws(self):
        if self._hub() is not None:
            return self.hub_._log_likelihood_draws()
        return super()._log_likelihood_draws()

    def _posterior_for_arviz(self):
        if self._hub() is not None:
            return self.hub_._posterior_for_arviz()
        return super()._posterior_for_arviz()
