"""``PyroConsensus``: an estimator for any spec that follows the models convention."""

from __future__ import annotations

import time
import warnings
import weakref

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
from consensuskit.models.convention import as_labels, float64_default

__all__ = ["PyroConsensus", "default_guide"]


def _hide_enumerated(msg):
    return msg["type"] == "sample" and msg["infer"].get("enumerate") == "parallel"


#: the default guide is a full-covariance Gaussian up to this many unconstrained dims
MAX_MVN_DIMS = 500


def default_guide(model, init_values=None, family="normal"):
    """A Gaussian in the unconstrained space over every continuous latent site (enumerated
    sites stay in the model): ``AutoNormal`` (mean field, ``family="normal"``) or
    ``AutoMultivariateNormal`` (full covariance, ``family="mvn"``, initial scale 0.05).

    Its locations start at ``init_values`` (site -> constrained value; PyroConsensus passes
    the posterior mode, :mod:`consensuskit.inference.posterior_mode`), sites not given at
    a prior draw (which breaks the symmetry between clusters).
    """
    from pyro import poutine
    from pyro.infer.autoguide import (
        AutoMultivariateNormal,
        AutoNormal,
        init_to_sample,
        init_to_value,
    )

    init = (init_to_value(values=dict(init_values), fallback=init_to_sample) if init_values
            else init_to_sample)
    blocked = poutine.block(model, hide_fn=_hide_enumerated)
    if family == "mvn":
        return AutoMultivariateNormal(blocked, init_loc_fn=init, init_scale=0.05)
    if family != "normal":
        raise ValueError(f"family must be 'normal' or 'mvn'; got {family!r}")
    return AutoNormal(blocked, init_loc_fn=init)


def cluster_axes(model, labels, model_kwargs, n_clusters, roles, explicit=None):
    """Which axis of each latent site's value (one draw) indexes the K clusters.

    ``explicit`` (site -> axis or None) wins.  Otherwise, for every latent site outside
    the enumerated ones: the dim of a plate of size K other than ``"rows"`` (BCE's
    ``beta_{j}``, MM's ``theta_{j}`` in the ``components`` plate), else the last event dim
    when the event shape ends in K (``pi``, ``alpha``, BCE's ``theta_i``).  A site of some
    other kind whose event size happens to equal K is taken for a cluster-indexed one by
    the second rule: name it in ``explicit`` with None (PyroConsensus' ``cluster_axes``).
    Returns site -> axis (sites without one are left out).
    """
    from pyro import poutine

    explicit = dict(explicit or {})
    K = int(n_clusters)
    tr = poutine.trace(model).get_trace(labels, **model_kwargs)
    out = {}
    for name in list(roles.globals) + list(roles.locals):
        if name in explicit:
            if explicit[name] is not None:
                out[name] = int(explicit[name])
            continue
        site = tr.nodes[name]
        value = site["value"]
        event_dim = site["fn"].event_dim
        for f in site["cond_indep_stack"]:
            if f.vectorized and f.size == K and f.name != pointwise.ROWS and f.dim is not None:
                out[name] = value.dim() - event_dim + f.dim
                break
        else:
            if event_dim >= 1 and value.shape[-1] == K:
                out[name] = value.dim() - 1
    return out


def _permute(values, perms, axis):
    """``values`` (D, ...) with draw d's ``axis`` (of the per-draw value) permuted by
    ``perms[d]`` (D, K)."""
    v = np.moveaxis(np.asarray(values), axis + 1, 1)
    v = np.take_along_axis(v, perms.reshape(perms.shape + (1,) * (v.ndim - 2)), axis=1)
    return np.moveaxis(v, 1, axis + 1)


#: estimator -> (labels_, {"L": (C, S, n), "perms": (C * S, K)}): the scores of every
#: retained draw, computed once for ``inference_data_`` (kept outside the estimator state)
_EVERY_DRAW = weakref.WeakKeyDictionary()


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
        For ``inference="svi"``; default :func:`default_guide` (a Gaussian in the
        unconstrained space, see ``init``, ``row_latents`` and ``guide_family``).
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
    cluster_axes : dict site -> int or None, optional
        Which axis of a latent site's value indexes the K clusters, for relabelling the
        draws in ``inference_data_`` (label switching); None excludes a site.  Sites not
        named follow :func:`cluster_axes`' rule (a plate of size K, else an event shape
        ending in K); ``inference_data_.posterior.attrs["relabelled_sites"]`` lists what
        was relabelled.
    rhat_threshold : float
        NUTS: chains whose split R-hat of the log density (``lp``, invariant to label
        switching) exceeds this are reported as sitting in separate modes (a warning,
        ``chains_disagree_``).
    init : {"mode", "prior"}
        SVI with the default guide: where its locations start.  "mode" (default): the mode
        of the posterior density in the unconstrained space (the function NUTS samples),
        searched by L-BFGS from ``n_init`` prior draws of ``init_steps`` iterations each,
        the lowest continued to convergence (:func:`~consensuskit.inference.posterior_mode.
        posterior_mode`; deterministic, so the starts are compared exactly; ``mode_`` holds
        the result).  "prior": one prior draw, or with ``n_init > 1`` the best of
        ``n_init`` short SVI runs of ``init_steps`` steps by their mean loss over the last
        10 steps (the first session's rule: on MM's spec that noisy loss picked a start with
        a collapsed cluster).  A guide of your own starts where it starts ("prior" rules).
    n_init, init_steps : int
        Starts of the search ``init`` names; default 8 and (mode) 20 L-BFGS iterations or
        (prior) ``num_steps // 10`` SVI steps, at least 20.
    lr_decay : "auto", float or None
        SVI: the learning rate is multiplied by this every step of the main run ("auto":
        down to a tenth over ``num_steps``); default None (constant: a decaying rate left
        AutoNormal's scales unconverged in the same check).
    svi_tol : float
        SVI: the ELBO counts as converged when the mean loss of the last 10% of the steps
        differs from that of the 10% before by less than ``svi_tol`` times its magnitude
        plus twice the standard error of that difference; otherwise a warning and
        ``converged_ = False``.
    polish_steps : int
        SVI: after the main run, this many more steps (at most ``num_steps``) with the
        learning rate falling
        geometrically to a hundredth, so the fit ends at a settled point instead of a
        constant-rate iterate jittering around it (0: none).
    row_latents : {"integrate", "guide"}
        SVI with the default guide, for a spec with row-local continuous sites (BCE's
        ``theta_i``): "integrate" (default) fits the globals on the spec with those sites
        integrated out by likelihood weighting with ``fit_particles`` fixed prior draws per
        row (:func:`~consensuskit.inference.integrated_locals.integrate_locals`), the guide
        covering the globals only; "guide" puts them in the ``AutoNormal`` guide (a
        mean-field fit whose ELBO gap biases the globals: BCE's spec on wine scored 1.29
        held out against its exact posterior's 1.17).  ``row_latents_`` says which ran.
    fit_particles : int
        ``S`` for ``row_latents="integrate"`` (which runs without ``jit``: a RuntimeWarning
        says so when ``jit=True``; ``jit_used_``).
    guide_family : {"auto", "normal", "mvn"}
        The default guide's Gaussian (:func:`default_guide`): "auto" is the full-covariance
        one when the guide starts at the posterior mode and has at most ``MAX_MVN_DIMS``
        (500) unconstrained dimensions, else mean field (``guide_family_`` says which).  On
        MM's spec (wine) the mean-field guide at the mode scored held-out perplexity 1.1698,
        the full-covariance one 1.1661, the exact posterior (NUTS) 1.1665.
    nuts_potential : {"auto", "traced", "pyro"}
        NUTS: what computes the potential and its gradient at each leapfrog step.  "auto":
        the spec's hand-written one when it has one and the call fixes none of the sites it
        samples (the built-in MM spec), else "traced".  "traced": Pyro's potential recorded
        once as a graph of tensor operations, simplified, its per-site repeats batched and
        run by TorchScript (:func:`~consensuskit.inference.compiled_potential.traced_potential`:
        checked against Pyro's at three prior draws; a failed trace or check falls back,
        warned, to Pyro's); 2.2-2.7x less CPU per leapfrog step than "pyro" on two users'
        variants and BCE's collapsed spec, 1.6-2.3x per whole fit with the build of a few
        seconds included (``experiments/nuts_potential_cost.py``,
        ``results/issue27/nuts_potential_cost_s18.txt``).  "pyro": Pyro's potential with
        its JIT, run under its handlers at every step.  ``potential_`` says which ran.
    min_steps : int or None
        SVI: the run stops at the first multiple of 50 steps from ``min_steps`` on where the
        test of ``svi_tol`` passes (an ELBO plateau), at ``num_steps`` at most; None runs all
        ``num_steps``.
    verbose : bool
        Progress bars.

    Attributes
    ----------
    membership_ : ndarray (N, K)   labels_ : ndarray (N,)
    posterior_samples_ : dict site -> ndarray (chains, draws, ...) of the global sites
    losses_ : list of float (svi): the loss before every step, then at the final parameters
    n_steps_ : int (svi): SVI steps taken, the polish included (the main run stops before
        ``num_steps`` on a plateau)
    mode_ : PosteriorMode or None (svi, ``init="mode"``): the posterior mode the guide
        started from, its potential and every start's potential (``start_potentials``)
    converged_ : bool
        SVI: the ELBO test of ``svi_tol`` passed.  NUTS: ``rhat_lp_`` (below) is finite
        and at most ``rhat_threshold``.
    chains_disagree_ : bool, rhat_lp_ : float, chain_mean_lp_ : ndarray (chains,)
        NUTS: split R-hat of the log density over chains and each chain's mean; R-hat
        above ``rhat_threshold`` means the chains explore separate modes and the pooled
        draws (labels, scores) mix them: a RuntimeWarning says so at fit time.  With one
        chain, ``rhat_lp_`` is that of its two halves (a drift check), and
        ``chains_disagree_`` is False.
    fit_seconds_ : float (CPU)
    scaled_sites_ : list of str
        Observed row sites with a scale other than 1 (``poutine.scale``): scored times it
        (a RuntimeWarning at fit; ``compare`` marks the row unreliable).
    potential_ : str (nuts)
        What computed the potential: "hand-written", "traced+jit" (or the executor a
        traced potential fell back to), or "pyro" (see ``nuts_potential``).
    mcmc_info_ : dict (nuts)
        :func:`~consensuskit.inference.compiled_mcmc.fit_nuts_compiled`'s ``info`` (or
        :func:`~consensuskit.inference.pyro_mcmc.fit_nuts`'s): CPU seconds, the potential's
        build seconds, divergences and acceptance per chain, ``sample_stats`` and
        ``warmup_stats``.
    inference_data_ : arviz.InferenceData
        Built at first access and cached: ``posterior`` (every retained draw of every
        chain, NUTS; the guide draws, SVI), relabelled to the fit's reference clusters;
        ``log_likelihood`` (``log p(x_i | draw's globals)`` with the row's local latents
        summed / integrated out, every draw); ``sample_stats`` (NUTS: ``diverging``,
        ``tree_depth``, ``n_steps``, ``step_size``, ``energy``, ``acceptance_rate``,
        ``lp``); ``observed_data``.  SVI draws come from the guide, not the posterior:
        the ``posterior`` group's attribute ``draws`` says which.
    """

    def __init__(self, model, guide=None, *, n_clusters, inference="svi", random_state=None,
                 model_kwargs=None, num_steps=2000, learning_rate=0.02, clip_norm=10.0,
                 batch_size=None,
                 jit=False, num_particles=1, num_samples=300, warmup_steps=300, num_chains=2,
                 max_tree_depth=6, n_posterior_draws=50, n_perplexity_samples=1000,
                 max_plate_nesting=None, cluster_axes=None, rhat_threshold=1.05,
                 svi_tol=1e-3, init="mode", n_init=8, init_steps=None, lr_decay=None,
                 min_steps=300, polish_steps=200, row_latents="integrate", fit_particles=200,
                 guide_family="auto", nuts_potential="auto", verbose=False):
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
        self.cluster_axes = cluster_axes
        self.rhat_threshold = rhat_threshold
        self.svi_tol = svi_tol
        self.init = init
        self.n_init = n_init
        self.init_steps = init_steps
        self.lr_decay = lr_decay
        self.min_steps = min_steps
        self.polish_steps = polish_steps
        self.row_latents = row_latents
        self.fit_particles = fit_particles
        self.guide_family = guide_family
        self.nuts_potential = nuts_potential
        self.verbose = verbose

    def __persistence_restore__(self):
        """After :func:`consensuskit.io.persistence.load`: rebuild the default guide,
        stored by description (its parameters are in the saved param store state)."""
        from consensuskit.io.persistence import DefaultGuide

        if isinstance(self.__dict__.get("guide_"), DefaultGuide):
            model = self.model
            if self.__dict__.get("row_latents_") == "integrate":
                from consensuskit.inference.integrated_locals import integrate_locals

                model = integrate_locals(self.model, self.roles_,
                                         num_particles=self.fit_particles,
                                         seed=self._integrate_seed)
            self.guide_ = default_guide(model, family=self.__dict__.get("guide_family_",
                                                                        "normal"))

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
        check_positive_int(self.n_init, "n_init")
        if self.row_latents not in ("integrate", "guide"):
            raise ValueError(f"row_latents must be 'integrate' or 'guide'; got "
                             f"{self.row_latents!r}")
        check_positive_int(self.fit_particles, "fit_particles")
        if self.guide_family not in ("auto", "normal", "mvn"):
            raise ValueError(f"guide_family must be 'auto', 'normal' or 'mvn'; got "
                             f"{self.guide_family!r}")
        if self.init not in ("mode", "prior"):
            raise ValueError(f"init must be 'mode' or 'prior'; got {self.init!r}")
        if self.nuts_potential not in ("auto", "traced", "pyro"):
            raise ValueError(f"nuts_potential must be 'auto', 'traced' or 'pyro'; got "
                             f"{self.nuts_potential!r}")
        if self.min_steps is not None:
            check_positive_int(self.min_steps, "min_steps")
        if not (isinstance(self.polish_steps, (int, np.integer)) and self.polish_steps >= 0):
            raise ValueError(f"polish_steps must be an int >= 0; got {self.polish_steps!r}")
        if self.init_steps is not None:
            check_positive_int(self.init_steps, "init_steps")
        if not (self.lr_decay is None or self.lr_decay == "auto"
                or (isinstance(self.lr_decay, float) and 0.0 < self.lr_decay <= 1.0)):
            raise ValueError(f"lr_decay must be 'auto', None or a float in (0, 1]; "
                             f"got {self.lr_decay!r}")
        rs = check_random_state(self.random_state)
        seed = int(rs.randint(2**31 - 1))
        labels = as_labels(ens)
        kw = self._kwargs(ens)
        import pyro

        with torch.random.fork_rng():
            pyro.set_rng_seed(seed)
            self.roles_ = pointwise.site_roles(self.model, labels, kw, self.n_clusters_)
        if self.max_plate_nesting is not None:
            self.roles_.max_plate_nesting = int(self.max_plate_nesting)
        self.scaled_sites_ = list(self.roles_.scaled)
        if self.scaled_sites_:
            warnings.warn(
                f"PyroConsensus: the observed site(s) {self.scaled_sites_} carry a scale "
                "other than 1 (poutine.scale): perplexity, score_samples and the "
                "log_likelihood group count their log-density times that scale, so a "
                "tempered likelihood scores better than it predicts; compare this model "
                "only with models scaled alike (scaled_sites_)", RuntimeWarning, stacklevel=4)
        P = self.roles_.max_plate_nesting
        t0 = time.process_time()
        if self.inference == "svi":
            draws = self._fit_svi(labels, kw, P, seed)
        else:
            draws = self._fit_nuts(labels, kw, P, seed)
        self.fit_seconds_ = time.process_time() - t0
        self._draws = draws  # site -> (C, D, ...)
        self.posterior_samples_ = {k: v.detach().cpu().numpy() for k, v in draws.items()}
        self.cluster_axes_ = cluster_axes(self.model, labels, kw, self.n_clusters_,
                                          self.roles_, self.cluster_axes)
        L, V, Mb = self._score_draws(labels, membership=True)
        self._train_loglik = (L, V)
        self.membership_ = self._combine_memberships(Mb, L, fit=True)
        self.labels_ = self.membership_.argmax(1)
        return self

    def _fit_svi(self, labels, kw, P, seed):
        import pyro

        from consensuskit.inference.pyro_svi import fit_svi

        self.mode_ = None
        fit_model = self._fit_model(seed)
        if self.guide is None and self.init == "mode":
            from consensuskit.inference.posterior_mode import posterior_mode

            self.mode_ = posterior_mode(fit_model, labels, model_kwargs=kw,
                                        max_plate_nesting=P, n_init=self.n_init,
                                        init_iter=self.init_steps or 20, seed=seed)
            dims = sum(int(v.numel()) for v in self.mode_.unconstrained.values())
            self.guide_family_ = ("mvn" if self.guide_family == "mvn" or (
                self.guide_family == "auto" and dims <= MAX_MVN_DIMS) else "normal")
            guide = default_guide(fit_model, self.mode_.values, family=self.guide_family_)
        elif self.guide is None:
            self.guide_family_ = "mvn" if self.guide_family == "mvn" else "normal"
            guide = default_guide(fit_model, family=self.guide_family_)
        else:
            guide = self.guide
        self.guide_ = guide
        self.jit_used_ = bool(self.jit) and self.row_latents_ != "integrate"
        if self.jit and not self.jit_used_:
            warnings.warn("PyroConsensus SVI: jit=True is not used with row_latents="
                          "'integrate' (its factor cannot be traced); pass row_latents="
                          "'guide' to JIT the mean-field fit (jit_used_)", RuntimeWarning,
                          stacklevel=5)
        opts = dict(model_kwargs=kw, learning_rate=self.learning_rate, clip_norm=self.clip_norm,
                    batch_size=self.batch_size, max_plate_nesting=P, jit=self.jit_used_,
                    num_particles=self.num_particles, progress=self.verbose)
        decay = (None if self.lr_decay is None
                 else 0.1 ** (1.0 / max(1, self.num_steps)) if self.lr_decay == "auto"
                 else float(self.lr_decay))
        stop = None
        if self.min_steps is not None:
            def stop(losses):
                n = len(losses)
                return (n >= self.min_steps and n % 50 == 0
                        and self._elbo_converged(np.asarray(losses))[0])
        with torch.random.fork_rng(), pyro.get_param_store().scope() as state:
            start = self._svi_restarts(fit_model, guide, labels, opts, seed)
            res = fit_svi(fit_model, guide, labels, num_steps=self.num_steps, seed=seed,
                          desc="PyroConsensus SVI", lr_decay=decay, init_state=start,
                          stop_when=stop, **opts)
            end, polish = res, None
            n_polish = min(self.polish_steps, self.num_steps)
            if n_polish:
                polish = fit_svi(fit_model, guide, labels, num_steps=n_polish,
                                 seed=seed + 1, desc="PyroConsensus SVI (polish)",
                                 lr_decay=0.01 ** (1.0 / n_polish),
                                 init_state=res.param_state, **opts)
                end = polish
            pyro.get_param_store().set_state(end.param_state)
            draws = self._guide_draws(labels, kw)
            state = pyro.get_param_store().get_state()
        self.losses_ = res.losses + (polish.losses if polish else []) + [end.extra["final_loss"]]
        self.n_steps_ = int(res.n_steps) + (int(polish.n_steps) if polish else 0)
        self._param_state = state
        self.converged_, self.elbo_change_ = self._elbo_converged(np.asarray(res.losses))
        if not self.converged_:
            warnings.warn(
                f"PyroConsensus SVI: the ELBO has not converged in {self.n_steps_} steps (mean "
                f"loss of the last 10% of the steps differs from the 10% before by "
                f"{self.elbo_change_:.4g}); raise num_steps or learning_rate (converged_)",
                RuntimeWarning, stacklevel=5)
        return draws

    def _fit_model(self, seed):
        """The model SVI fits: the spec itself, or (default guide, ``row_latents=
        "integrate"`` and row-local continuous sites) the spec with those sites integrated
        out by likelihood weighting (:mod:`consensuskit.inference.integrated_locals`)."""
        self.row_latents_ = "guide"
        if self.guide is not None or not self.roles_.locals or self.row_latents == "guide":
            return self.model
        from consensuskit.inference.integrated_locals import integrate_locals

        if self.batch_size is not None:
            raise ValueError("row_latents='integrate' fits on all rows: set "
                             "row_latents='guide' to use batch_size")
        self.row_latents_ = "integrate"
        self._integrate_seed = int(seed)
        return integrate_locals(self.model, self.roles_, num_particles=self.fit_particles,
                                seed=seed)

    def _svi_restarts(self, fit_model, guide, labels, opts, seed):
        """``n_init`` short runs (``init_steps`` each) from different random starts; the
        param-store state of the one with the lowest mean loss over its last 10 steps
        (None with ``n_init=1``: the main run starts from the guide's own init).  A single
        start often lands a cluster on a poor local optimum (two clusters sharing a mode),
        which more steps do not leave."""
        from consensuskit.inference.pyro_svi import fit_svi

        self.restart_losses_ = []
        if self.n_init <= 1 or self.init != "prior":
            return None
        steps = self.init_steps or max(20, self.num_steps // 10)
        rs = np.random.RandomState(seed)
        best, best_loss = None, np.inf
        for r in range(self.n_init):
            res = fit_svi(fit_model, guide, labels, num_steps=steps,
                          seed=int(rs.randint(2**31 - 1)), desc=f"SVI start {r + 1}", **opts)
            loss = float(np.mean(res.losses[-10:]))
            self.restart_losses_.append(loss)
            if loss < best_loss:
                best, best_loss = res.param_state, loss
        return best

    def _elbo_converged(self, losses):
        """(converged, change): the mean loss over the last 10% of the steps against the
        10% before, within ``svi_tol`` relative plus twice the noise of that difference."""
        w = max(5, losses.size // 10)
        if losses.size < 2 * w:
            return False, float("nan")
        a, b = losses[-2 * w:-w], losses[-w:]
        change = float(a.mean() - b.mean())
        noise = float(np.sqrt(a.var(ddof=1) / w + b.var(ddof=1) / w))
        return bool(abs(change) <= self.svi_tol * abs(b.mean()) + 2 * noise), change

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
        """NUTS on the spec (``nuts_potential``): on its hand-written potential and gradient
        where the spec has one and the call fixes none of the sites it samples (the
        built-in MM spec), else on its traced potential, or on Pyro's
        (:mod:`consensuskit.inference.compiled_potential`; same sampler, same output;
        ``potential_`` says which)."""
        from consensuskit.inference.compiled_mcmc import fit_nuts_compiled
        from consensuskit.inference.compiled_potential import (
            fixed_sampled_sites,
            hand_written_potential,
        )
        from consensuskit.inference.pyro_mcmc import fit_nuts

        builder = hand_written_potential(self.model)
        fixed = fixed_sampled_sites(builder, kw)
        run = dict(model_kwargs=kw, num_samples=self.num_samples,
                   warmup_steps=self.warmup_steps, num_chains=self.num_chains,
                   max_plate_nesting=P, max_tree_depth=self.max_tree_depth, seed=seed,
                   progress=self.verbose)
        if self.nuts_potential == "pyro":
            samples, info = fit_nuts(self.model, labels, **run)
        elif self.nuts_potential == "auto" and builder is not None and not fixed:
            samples, info = fit_nuts_compiled(self.model, labels, method="hand-written", **run)
        else:
            samples, info = fit_nuts_compiled(self.model, labels, method="traced",
                                              compile="jit", init="uniform", **run)
        self.potential_ = info.get("potential", "pyro")
        self.mcmc_info_ = info
        self.all_samples_ = {k: v.detach().cpu().numpy() for k, v in samples.items()}
        self._check_chains(info["sample_stats"]["lp"])
        return {k: v for k, v in samples.items() if k in self.roles_.globals}

    def _check_chains(self, lp):
        """Chains in separate modes: split R-hat of the log density ``lp`` (C, S).

        One chain has nothing to disagree with (``chains_disagree_`` False); ArviZ's R-hat
        needs two, so the chain's two halves stand in for them (a drift check: above
        ``rhat_threshold`` the chain has not settled).  Too few draws for any R-hat: a
        warning that convergence is unchecked, ``converged_`` False."""
        from consensuskit.inference.arviz_adapter import import_arviz

        az = import_arviz()
        lp = np.asarray(lp, dtype=np.float64)
        C, S = lp.shape
        self.chain_mean_lp_ = lp.mean(1)
        if C == 1:
            h = S // 2
            self.rhat_lp_ = (float(az.rhat(lp[:, :2 * h].reshape(2, h))) if h >= 2
                             else float("nan"))
        else:
            self.rhat_lp_ = float(az.rhat(lp))
        ok = bool(np.isfinite(self.rhat_lp_) and self.rhat_lp_ <= self.rhat_threshold)
        self.chains_disagree_ = C >= 2 and not ok
        self.converged_ = ok
        if ok:
            return
        if not np.isfinite(self.rhat_lp_):
            msg = (f"split R-hat of the log density cannot be computed from {C} chain(s) of "
                   f"{S} draws: convergence is unchecked. Run more draws")
        elif C == 1:
            msg = (f"the one chain drifts (R-hat of its two halves' log density "
                   f"{self.rhat_lp_:.3g} > {self.rhat_threshold}): its draws have not "
                   "settled. Run a longer chain, more warm-up, or more chains")
        else:
            msg = (f"the chains sit in separate modes (split R-hat of the log density "
                   f"{self.rhat_lp_:.3g} > {self.rhat_threshold}; chain means "
                   f"{np.round(self.chain_mean_lp_, 1).tolist()}): labels and scores pool "
                   "them. Run longer chains, more warm-up, or compare the chains "
                   "(chains_disagree_)")
        warnings.warn(f"PyroConsensus NUTS: {msg}", RuntimeWarning, stacklevel=5)

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
            self._reference = ref
            self._perms = np.stack([_align(ref, m) for m in Mb])
        P = np.mean([m[:, perm] for m, perm in zip(Mb, self._perms)], axis=0)
        return P / P.sum(1, keepdims=True)

    def _pointwise_log_likelihood(self, ens: Ensemble):
        check_is_fitted(self, "membership_")
        if ens is self.ensemble_:
            L, V = self._train_loglik
        else:
            L, V, _ = self._score_draws(as_labels(ens))
        return pointwise.combine_draws(L, V)

    def predict_proba(self, X, unknown="error"):
        """Posterior membership of (new) rows given the fitted globals, shape (n, K).

        Averaged over the posterior draws of the globals (aligned to the training
        reference, so label switching between draws does not blur it).
        """
        check_is_fitted(self, "membership_")
        ens = self._encode_new(X, unknown=unknown)
        L, _, Mb = self._score_draws(as_labels(ens), membership=True)
        return self._combine_memberships(Mb, L)

    def predict(self, X, unknown="error"):
        """Hard consensus of (new) rows: argmax of :meth:`predict_proba`, shape (n,)."""
        return self.predict_proba(X, unknown=unknown).argmax(1)

    # ------------------------------------------------------------ ArviZ output
    def _every_draw(self):
        """Scores of every retained draw (not only the thinned ones), computed once:
        ``{"L": (C, S, n) log p(x_i | draw), "perms": (C * S, K)}``; each draw's clusters
        matched to the fit's reference membership (label switching)."""
        check_is_fitted(self, "membership_")
        cache = _EVERY_DRAW.get(self)
        if cache is not None and cache[0] is self.labels_:
            return cache[1]
        import pyro

        C, S = next(iter(self._draws.values())).shape[:2]
        draws = {k: v.reshape(C * S, *v.shape[2:]) for k, v in self._draws.items()}
        rs = check_random_state(self.random_state)
        with float64_default(), pyro.get_param_store().scope(getattr(self, "_param_state",
                                                                     None)):
            L, _, Mb = pointwise.score_rows_draws(
                self.model, as_labels(self.ensemble_), draws,
                model_kwargs=self._kwargs(self.ensemble_), roles=self.roles_,
                num_particles=self.n_perplexity_samples, membership=True,
                seed=int(rs.randint(2**31 - 1)), progress=self.verbose)
        perms = np.stack([_align(self._reference, m) for m in Mb])
        out = {"L": L.reshape(C, S, -1), "perms": perms}
        _EVERY_DRAW[self] = (self.labels_, out)
        return out

    def _log_likelihood_draws(self):
        """Training per-row ``log p(x_i | draw's globals)`` for every retained draw of
        every chain (NUTS) or every guide draw (SVI): (chains, draws, n)."""
        return self._every_draw()["L"]

    def _log_likelihood_kind(self):
        how = ("exact (enumeration)" if not self.roles_.locals else
               f"local latents integrated by likelihood weighting, "
               f"{self.n_perplexity_samples} particles")
        src = "posterior draws (NUTS)" if self.inference == "nuts" else "guide draws (SVI)"
        return f"log p(x_i | globals), {how}, at {src}"

    def _posterior_for_arviz(self):
        """Every retained draw of every latent site (NUTS: globals and row-local sites;
        SVI: the globals' guide draws), relabelled along :attr:`cluster_axes_`."""
        perms = self._every_draw()["perms"]
        src = (self.all_samples_ if self.inference == "nuts"
               else {k: v.detach().cpu().numpy() for k, v in self._draws.items()})
        out = {}
        for k, v in src.items():
            v = np.asarray(v)
            C, S = v.shape[:2]
            if k in self.cluster_axes_:
                flat = _permute(v.reshape(C * S, *v.shape[2:]), perms, self.cluster_axes_[k])
                v = flat.reshape(v.shape)
            out[k] = v
        return out

    def _sample_stats_for_arviz(self):
        if self.inference != "nuts":
            return {}
        return dict(self.mcmc_info_["sample_stats"])

    def _posterior_predictive_draws(self, rng):
        """The spec simulated at every retained draw of the globals (every latent site not
        given is drawn from its conditional prior: the rows' local latents afresh)."""
        import pyro
        from pyro import poutine

        C, S = next(iter(self._draws.values())).shape[:2]
        N, M = self.ensemble_.codes.shape
        kw = self._kwargs(self.ensemble_)
        out = np.empty((C, S, N, M), dtype=np.int64)
        seeds = rng.randint(2**31 - 1, size=(C, S))
        state = getattr(self, "_param_state", None)
        with pyro.get_param_store().scope(state), torch.random.fork_rng(), \
                float64_default(), torch.no_grad():
            for c in range(C):
                for d in range(S):
                    torch.manual_seed(int(seeds[c, d]))
                    params = {k: v[c, d].detach() for k, v in self._draws.items()}
                    # the convention: labels=None simulates n_rows rows and returns them
                    x = poutine.condition(self.model, data=params)(None, n_rows=N, **kw)
                    out[c, d] = np.asarray(x.cpu(), dtype=np.int64)
        return out

    def _arviz_dims(self):
        """Dimension names of the posterior sites: ``cluster`` on the relabelled axis,
        ``row`` on a row-local site's rows axis."""
        src = (self.all_samples_ if self.inference == "nuts" else self._draws)
        dims = {}
        for k, v in src.items():
            names = [f"{k}_dim_{i}" for i in range(len(v.shape) - 2)]
            if k in self.roles_.locals and names:
                names[0] = "row"
            if k in self.cluster_axes_:
                names[self.cluster_axes_[k]] = "cluster"
            dims[k] = names
        return dims

    @property
    def _arviz_attrs(self):
        return {"inference": self.inference,
                "draws": "posterior (NUTS)" if self.inference == "nuts"
                else "variational guide (SVI): not posterior draws",
                "relabelled_sites": [f"{k}:{a}" for k, a in sorted(self.cluster_axes_.items())]}

    def _arviz_group_attrs(self):
        if self.inference != "nuts":
            return {}
        return {"sample_stats": {"target_accept_prob": self.mcmc_info_.get("target_accept_prob"),
                                 "divergences_per_chain": list(self.mcmc_info_["divergences"])}}

    @property
    def partition_posterior_(self):
        """The posterior over partitions of the training rows, a
        :class:`~consensuskit.posterior.PartitionPosterior` with one partition draw per draw
        of the globals (NUTS: every draw of every chain, chain-major; SVI: the
        ``n_posterior_draws`` guide draws, so only as good as the guide), each drawn exactly
        from the rows' conditional given that draw (:mod:`consensuskit.inference.partition_draws`
        says what a row's cluster is for each kind of membership site).  Made on first access
        (one scoring pass over the draws unless NUTS sampled the membership) and kept."""
        check_is_fitted(self, "membership_")
        pp = self.__dict__.get("_partition_posterior")
        if pp is None:
            pp = self._partition_posterior = _partition_posterior_of(self)
        return pp


def _partition_posterior_of(est):
    """:class:`~consensuskit.posterior.PartitionPosterior` of a fitted :class:`PyroConsensus`."""
    import pyro

    from consensuskit.inference.partition_draws import sample_partitions
    from consensuskit.posterior import PartitionPosterior

    flat = {k: v.reshape(-1, *v.shape[2:]) for k, v in est._draws.items()}  # (C * D, ...)
    local = None
    if est.inference == "nuts" and est.roles_.membership in est.roles_.locals:
        v = est.all_samples_[est.roles_.membership]
        local = {est.roles_.membership: v.reshape(-1, *v.shape[2:])}
    seed = int(check_random_state(est.random_state).randint(2**31 - 1))
    with float64_default(), pyro.get_param_store().scope(getattr(est, "_param_state", None)):
        Z = sample_partitions(est.model, as_labels(est.ensemble_), flat,
                              model_kwargs=est._kwargs(est.ensemble_), roles=est.roles_,
                              local_draws=local, num_particles=est.n_perplexity_samples,
                              seed=seed, progress=est.verbose)
    return PartitionPosterior(Z)


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

    @property
    def partition_posterior_(self):
        """``inference="nuts"``: the hub's :attr:`PyroConsensus.partition_posterior_`
        (partition draws given each draw of the globals); the other engines, point estimates
        (EM, CAVI, and SVI: MM's MAP guide, BCE's minibatch bound), give no partition draws
        (AttributeError)."""
        if self._hub() is None:
            check_is_fitted(self, "labels_")
            raise AttributeError(
                f"{type(self).__name__}.partition_posterior_ needs inference='nuts': "
                f"inference={getattr(self, 'inference', None)!r} gives a point estimate, no "
                "draws (or fit the spec with PyroConsensus, whose SVI draws from its guide)")
        return self.hub_.partition_posterior_

    def _log_likelihood_draws(self):
        if self._hub() is not None:
            return self.hub_._log_likelihood_draws()
        return super()._log_likelihood_draws()

    def _posterior_for_arviz(self):
        if self._hub() is not None:
            return self.hub_._posterior_for_arviz()
        return super()._posterior_for_arviz()

    def _sample_stats_for_arviz(self):
        if self._hub() is not None:
            return self.hub_._sample_stats_for_arviz()
        return super()._sample_stats_for_arviz()

    def _log_likelihood_kind(self):
        if self._hub() is not None:
            return self.hub_._log_likelihood_kind()
        return super()._log_likelihood_kind()

    def _posterior_predictive_draws(self, rng):
        if self._hub() is not None:
            return self.hub_._posterior_predictive_draws(rng)
        return super()._posterior_predictive_draws(rng)

    def _arviz_dims(self):
        if self._hub() is not None:
            return self.hub_._arviz_dims()
        return super()._arviz_dims()

    def _arviz_group_attrs(self):
        if self._hub() is not None:
            return self.hub_._arviz_group_attrs()
        return super()._arviz_group_attrs()

    @property
    def _arviz_attrs(self):
        return self.hub_._arviz_attrs if self._hub() is not None else {}
