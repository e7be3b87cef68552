"""Bayesian cluster ensembles (Wang, Shan & Banerjee 2011) as a scikit-learn estimator."""

from __future__ import annotations

import os
import warnings

import numpy as np
import torch
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from consensuskit.base import (
    ConsensusEstimator,
    GenerativeMixin,
    RowNormalised,
    check_n_clusters,
    resolve_device,
    resolve_dtype,
    row_argmax,
    torch_generator,
)
from consensuskit.data.ensemble import Ensemble
from consensuskit.inference.driver import Fit
from consensuskit.inference.driver import fit as drive
from consensuskit.inference.pyro_consensus import HubBackedMixin
from consensuskit.io.checkpoint import checkpoint_writer
from consensuskit.models.base import DriverFitMixin, Integer, OneOf, Real
from consensuskit.models.bce import alpha as bce_alpha
from consensuskit.models.bce import cavi, initialise

__all__ = ["BCE"]


class BCE(HubBackedMixin, DriverFitMixin, GenerativeMixin, ConsensusEstimator):
    """Bayesian cluster ensemble: a mixed-membership model of base-clustering labels.

    Generative process (paper symbols; ``k_j`` labels in base clustering ``j``)::

        theta_i ~ Dirichlet(alpha)                     alpha: (K,)
        z_ij    ~ Categorical(theta_i)                 for each observed label
        x_ij    ~ Categorical(beta_j[z_ij])            beta_j: (K, k_j)

    ``alpha`` and ``beta`` are fitted by variational EM (``inference="cavi"``, paper
    eqs. 5-8) or by Pyro SVI on row minibatches (``inference="svi"``).  The soft
    consensus of row ``i`` is the posterior mean of ``theta_i``, ``gamma_i / sum(gamma_i)``.

    Parameters
    ----------
    n_clusters : int, default 2
        ``K``, the number of consensus clusters.
    inference : {"cavi", "svi", "nuts"}
        Variational EM with closed-form updates, stochastic VI (Pyro) with the
        z-enumerated guide (:func:`consensuskit.models.bce.spec.guide_enumerated`), or NUTS on
        the full Bayesian spec :func:`consensuskit.models.bce.spec.model` (alpha ~ Gamma(1, 1),
        beta_jh ~ Dirichlet(1)) through :class:`~consensuskit.PyroConsensus` (then
        ``max_iter`` is the number of draws and of warm-up steps per chain and ``n_init``
        the number of chains; ``alpha_``/``beta_`` are posterior means after relabelling,
        the fitted hub is ``hub_``).  NUTS samples the *collapsed* spec
        (:func:`consensuskit.models.bce.spec.model_collapsed`: ``theta`` and ``z`` summed out
        exactly per row, so only ``alpha`` and ``beta`` are sampled, and memberships,
        per-row log-likelihoods and perplexities are exact per draw) when its
        ``C(M+K, K)`` count states are at most
        :data:`~consensuskit.models.bce.marginal.MAX_STATES`; otherwise, with a warning,
        the spec with ``theta`` sampled and ``z`` enumerated (``nuts_form_`` says which).
    max_iter : int, default 100
        EM iterations per restart (cavi) or epochs over the rows (svi).
    tol : float, default 1e-6
        Stop when the relative change of the bound is ``<= tol`` (cavi).
    n_init : int, default 3
        Restarts; the one with the best bound is kept, non-degenerate ones first.
    inner_iter : int, default 5
        (phi, gamma) passes per EM iteration, warm-started from the previous gamma.
    init : {"kmeans", "seeded", "random"}
        ``"kmeans"``: beta from k-means on the one-hot labels (a different seed per
        restart; on at most 20,000 random rows, 2,000 for a collapsed-Gibbs chain);
        ``"seeded"``: k-means++ seeding and two assignment steps on 2,000
        sampled rows (:func:`~consensuskit.models.bce.initialise.init_beta_seeded`; cost
        independent of N, about one E-step on those rows); ``"random"``: flat-Dirichlet
        beta, as the authors' code.  Random starts run into the degenerate optimum
        (alpha growing without bound) more often; such runs are detected
        (``sum(alpha) > 10 * max_i V_i``, ``V_i`` the number of labels of row i) and
        discarded in favour of non-degenerate restarts.
    smoothing : float, default 1e-6
        Pseudo-count added to the expected label counts in the beta update.
    alpha_estimate : {"gibbs", "meanfield", "iw"} or None, default None
        How alpha and beta are estimated.  None: ``"gibbs"`` with ``inference="cavi"``,
        ``"meanfield"`` with ``inference="svi"`` (SVI optimises the bound by design).
        ``"gibbs"``: maximum marginal likelihood by Monte Carlo EM on a collapsed Gibbs
        sampler (:mod:`consensuskit.models.bce.collapsed_gibbs`: ``theta`` and ``beta``
        integrated out as in LDA, ``alpha`` and ``beta``'s Dirichlet ``eta`` by Minka's
        fixed point on the sampled counts; ``n_init`` chains run for the first
        ``max(10, n_sweeps // 8)`` sweeps, then only the best by the log marginal
        likelihood of up to 1,000 training rows, exact where ``C(M+K, K)`` is small and
        importance-sampled otherwise, continues to ``n_sweeps``; above 10,000 rows these
        sweeps run on a random 10,000 of them, and 60 more over all rows at the estimated
        hyper-parameters give ``beta_`` and the memberships); ``gamma_`` is
        ``alpha_`` plus the chain's mean counts, so ``membership_`` is the Monte Carlo
        posterior mean of ``theta_i``.  Near the true parameters on BCE's own data where
        the bound is not (``experiments/bce_grid.py``).
        ``"meanfield"``: alpha (and beta) maximise the mean-field bound, as in the paper
        (what ``reproduce/`` uses); the bound is biased towards a large alpha when rows
        carry few labels.
        ``"iw"``: after the variational fit, alpha and beta are refined by Monte Carlo EM
        on an importance-sampling estimate of the marginal likelihood
        ``sum_i log p(x_i | alpha, beta)`` (:func:`consensuskit.models.bce.alpha.refine_iw`),
        and ``gamma_`` is folded in again at the refined parameters.
    n_sweeps : int, default 200
        ``alpha_estimate="gibbs"``: sweeps of the kept chain (the second half pooled).
    batch_size : int or None
        Row minibatch size for SVI (None: min(N, 1024)).
    learning_rate : float, default 0.05
        Adam step size for SVI.
    n_perplexity_samples : int, default 200
        Importance samples per row for the log-likelihood (see
        :meth:`_pointwise_log_likelihood`).
    log_likelihood_method : {"auto", "exact", "is"}, default "auto"
        How held-out and training rows are scored: exact where the count-vector
        recursion is small (``"auto"``), always exact, or always importance-sampled.
    random_state : int, RandomState or None
    device : str or torch.device, default "cpu"
    dtype : {"float64", "float32"} or torch dtype, default "float64"
    verbose : bool, default False
        Show a progress bar over EM iterations / SVI steps.
    callback : callable or None
        cavi: ``callback(state)`` after every EM iteration; ``state`` is the fit
        driver's snapshot (:mod:`consensuskit.inference.driver`): ``restart``,
        ``iteration``, ``lower_bound``, ``objectives`` (bounds of the running
        restart), ``state`` (its alpha, beta, gamma), ``runs`` (finished restarts) and
        ``rng`` (the random state).  Returning ``False`` stops the fit: the best
        restart so far (the current one included) is kept and ``stopped_`` is True.
    checkpoint_path : str, path-like or None
        cavi: write the resumable state there every ``checkpoint_every`` iterations
        and when the callback stops the fit; continue with
        ``fit(X, resume_from=checkpoint_path)`` (see :mod:`consensuskit.io.checkpoint`).
    checkpoint_every : int, default 10
    n_jobs : int or None
        Threads for the CPU E-step kernel and the k-means initialisation (None: torch's
        setting, ``torch.get_num_threads()``; -1: one per CPU).  The fit does not
        depend on it.

    Attributes
    ----------
    alpha_ : ndarray (K,)
    beta_ : list of ndarray, each (K, k_j)
    gamma_ : ndarray (N, K)
        Variational Dirichlet parameters of the training rows.
    membership_ : ndarray (N, K)
        ``gamma_`` normalised over clusters.  Formed on first access and then kept (the
        same array on every read): ``fit`` does not hold this (N, K) array beside
        ``gamma_`` (:class:`~consensuskit.base.RowNormalised`), so reading it costs
        ``8 K`` bytes per row then.
    labels_ : ndarray (N,)
        ``argmax_h gamma_ih``.
    lower_bound_ : float
        The mean-field bound plus ``smoothing * sum ln beta`` at the returned
        ``alpha_``, ``beta_`` and ``gamma_``, with ``phi`` = eq. 5 evaluated at
        ``gamma_`` (so a reader can recompute it, e.g. with Pyro's ELBO).  With
        ``alpha_estimate="iw"`` it is below the last entry of ``lower_bounds_``: the
        refinement leaves the bound's optimum on purpose.
    lower_bounds_ : list of float
        Objective after every EM iteration (cavi) or epoch estimate (svi) of the kept
        restart, before any ``"iw"`` refinement.
    log_marginals_ : list of float
        ``alpha_estimate="iw"``: the importance-sampling estimate of
        ``sum_i log p(x_i | alpha, beta)`` (training rows used) at the start of each
        refinement round; empty for ``"meanfield"``.
    iw_start_ : {"meanfield", "mixture"} or None
        ``"iw"``: where the refinement started (see :meth:`_refine_iw`).
    n_iter_ : int
        EM iterations (``"meanfield"``) or sweeps of the kept chain (``"gibbs"``).
    converged_ : bool
        The bound's relative change reached ``tol``; always False under ``"gibbs"``,
        which runs a fixed schedule of sweeps with no convergence test (its
        ``lower_bounds_`` are the collapsed log joint ``log p(x, z | alpha, eta)`` per
        sweep, and ``lower_bound_`` is the mean-field bound at the returned estimate).
    degenerate_ : bool
        True if every restart hit the degenerate optimum (a warning is issued).
    n_degenerate_ : int
        Number of restarts flagged degenerate (``sum(alpha) > 10 * max_i V_i``).
    n_higher_bound_skipped_ : int
        Degenerate restarts whose bound was higher than the kept (non-degenerate)
        one's; a warning says so when it is not 0.
    alpha_estimate_ : {"gibbs", "meanfield", "iw"}
        ``alpha_estimate`` resolved.
    eta_ : float or None
        ``"gibbs"``: the estimated Dirichlet concentration of every ``beta_jh``.
    log_marginal_ : float or None
        ``"gibbs"``: the selection criterion at the final estimate, ``sum_i log p(x_i |
        alpha_, beta_)`` over up to 1,000 training rows (exact or importance-sampled, see
        :func:`consensuskit.models.bce.alpha.selection_log_marginal`);
        ``chain_log_marginals_`` holds every chain's at the audition (where all but the
        best, ``kept_chain_``, stopped).
    n_alpha_clipped_ : int
        ``"gibbs"``: fixed-point alpha entries clipped to
        :data:`consensuskit.models.bce.collapsed_gibbs.ALPHA_RANGE` (warned).
    n_alpha_steps_rejected_ : int
        EM iterations of the kept restart whose Newton solve for alpha found no step
        that kept alpha positive and the bound from decreasing, so alpha stayed where it
        was; a warning says so when it is not 0.
    stopped_ : bool
        True if the callback stopped the fit.
    nuts_form_ : {"collapsed", "theta"}
        ``inference="nuts"``: the spec NUTS sampled (see ``inference``);
        ``n_count_states_`` is ``C(M+K, K)``.
    """

    def __init__(self, n_clusters=2, *, inference="cavi", max_iter=100, tol=1e-6, n_init=3,
                 inner_iter=5, init="kmeans", smoothing=1e-6, alpha_estimate=None,
                 n_sweeps=200, batch_size=None, learning_rate=0.05, n_perplexity_samples=200,
                 log_likelihood_method="auto", random_state=None,
                 device="cpu", dtype="float64", verbose=False, callback=None,
                 checkpoint_path=None, checkpoint_every=10, n_jobs=None):
        self.n_clusters = n_clusters
        self.inference = inference
        self.max_iter = max_iter
        self.tol = tol
        self.n_init = n_init
        self.inner_iter = inner_iter
        self.init = init
        self.smoothing = smoothing
        self.alpha_estimate = alpha_estimate
        self.n_sweeps = n_sweeps
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.n_perplexity_samples = n_perplexity_samples
        self.log_likelihood_method = log_likelihood_method
        self.random_state = random_state
        self.device = device
        self.dtype = dtype
        self.verbose = verbose
        self.callback = callback
        self.checkpoint_path = checkpoint_path
        self.checkpoint_every = checkpoint_every
        self.n_jobs = n_jobs

    #: ``gamma_`` normalised over clusters, formed when first read (not during ``fit``)
    membership_ = RowNormalised("gamma_")

    # ------------------------------------------------------------------ fitting
    _driver_inference = "cavi"
    _degenerate_optimum = ("sum(alpha) grew past 10 times the most (weighted) labels of a "
                           "row")
    _parameter_checks = {
        "inference": OneOf("cavi", "svi", "nuts"),
        "init": OneOf("kmeans", "seeded", "random"),
        "alpha_estimate": OneOf(None, "gibbs", "iw", "meanfield"),
        "n_sweeps": Integer(1),
        "log_likelihood_method": OneOf("auto", "exact", "is"),
        "max_iter": Integer(1),
        "n_init": Integer(1),
        "inner_iter": Integer(1),
        "n_perplexity_samples": Integer(1),
        "tol": Real(allow_zero=True),
        "smoothing": Real(),
        "learning_rate": Real(),
        "batch_size": Integer(1, optional=True),
    }

    def _validate(self, ensemble):
        K = check_n_clusters(self.n_clusters, ensemble.n_samples)
        self._validate_parameters()
        if self._alpha_estimate() == "gibbs" and self.inference != "cavi":
            raise ValueError("alpha_estimate='gibbs' replaces the variational fit and needs "
                             f"inference='cavi'; got inference={self.inference!r} (use "
                             "alpha_estimate='meanfield' or 'iw')")
        self._check_driver_options()
        return K, resolve_device(self.device), resolve_dtype(self.dtype)

    def _alpha_estimate(self):
        """``alpha_estimate`` resolved (None: "gibbs" under cavi, else "meanfield")."""
        if self.alpha_estimate is not None:
            return self.alpha_estimate
        return "gibbs" if self.inference == "cavi" else "meanfield"

    def initial_beta(self, ensemble, K, rs):
        """A starting beta (K, sum_j k_j) by this estimator's ``init`` ("kmeans": from a
        k-means of the rows' one-hot labels, on at most ``initialise.KMEANS_MAX_ROWS``
        random rows, for the mean-field restarts and the sampler's chains alike;
        "seeded"; "random"), drawn from ``rs`` (a RandomState); one call per restart, in
        the order of the restarts."""
        if self.init == "kmeans":
            return initialise.init_beta_kmeans(ensemble, K, rs, n_jobs=self._threads())
        if self.init == "seeded":
            return initialise.init_beta_seeded(ensemble, K, rs)
        return initialise.init_beta_random(ensemble, K, rs)

    def _threads(self):
        """``n_jobs`` resolved: None -> torch's thread setting, -1 -> one per CPU."""
        if self.n_jobs is None:
            return torch.get_num_threads()
        n = int(self.n_jobs)
        if n == -1:
            return os.cpu_count() or 1
        if n < 1:
            raise ValueError(f"n_jobs must be a positive int, -1 or None; got {self.n_jobs!r}")
        return n

    def _engine(self, ensemble, data, K, features=None, **kw):
        """The CAVI engine of this estimator's settings (``kw``: distributed hooks)."""
        return cavi.CAVI(data, K, lambda rng: self.initial_beta(ensemble, K, rng),
                         inner_iter=self.inner_iter, smoothing=self.smoothing,
                         features=features, n_jobs=self._threads(), **kw)

    def set_fitted_state(self, ensemble, fit, device=None, dtype=None):
        """Set the fitted attributes from the driver's :class:`~consensuskit.inference.driver.Fit`
        of the CAVI engine (its best run's ``CAVIState``), with the restart and degeneracy
        report; returns that state.  ``device``, ``dtype``: where the fit ran, when not in
        this process's settings (the distributed launcher)."""
        run = fit.best
        state = run.params
        self.stopped_ = bool(fit.stopped)
        self._report_restarts(fit, int(state.alpha.shape[-1]))
        self.n_alpha_steps_rejected_ = int(getattr(state, "n_alpha_rejected", 0))
        if self.n_alpha_steps_rejected_:
            warnings.warn(
                f"{type(self).__name__}: in {self.n_alpha_steps_rejected_} EM iteration(s) the "
                "Newton solve for alpha found no step that kept alpha positive and the bound "
                "from decreasing, and left alpha unchanged (see n_alpha_steps_rejected_)",
                RuntimeWarning, stacklevel=4)
        self._alpha_t = state.alpha.detach()
        self._beta_t = state.beta.detach()
        if device is not None:
            self._device, self._dtype = device, dtype
        self.alpha_ = self._alpha_t.cpu().numpy().astype(np.float64)
        self.beta_ = [b.cpu().numpy().astype(np.float64)
                      for b in cavi.unpack_beta(self._beta_t, ensemble.offsets)]
        # a view of the state's (K, N) gamma when it is float64 on the CPU (no copy)
        self.gamma_ = np.asarray(state.gamma.detach().T.cpu().numpy(), dtype=np.float64)
        type(self).membership_.reset(self)  # formed from gamma_ when first read
        self.labels_ = row_argmax(self.gamma_)
        self.lower_bounds_ = [float(v) for v in run.objectives]
        self.lower_bound_ = self.lower_bounds_[-1]
        self.n_iter_ = int(run.n_iter)
        self.converged_ = bool(run.converged)
        return state

    def _refine_iw(self, ensemble, data, K, state, rs):
        """``alpha_estimate="iw"``: Monte Carlo EM on the marginal likelihood (bce_alpha).

        Two starts, the better by its estimated marginal likelihood: the variational fit,
        and BCE's ``alpha -> 0`` limit, the mixture model (MM's EM started from the
        variational memberships, ``alpha = pi``).  On BCE's own data the second usually
        wins by hundreds of nats: the mean-field ``beta`` is fitted against an inflated
        ``alpha``.  ``state`` (alpha, beta, gamma) is updated in place.
        """
        from consensuskit.models.mm import em as mm_em

        g = torch_generator(rs, device="cpu")
        layout = mm_em.prepare(ensemble.codes, ensemble.n_labels, dtype=torch.float64)
        resp = state.gamma / state.gamma.sum(0, keepdim=True)
        mm = mm_em.fit_em(layout, K, n_init=1, label_prior=1.0 + self.smoothing,
                          init=lambda restart: resp.detach().double().cpu()).params
        alpha, beta = state.alpha.detach(), state.beta.detach()
        starts = [(alpha, beta), (mm.log_pi.exp().to(alpha), mm.log_theta.exp().to(beta))]
        pick, self.iw_start_log_marginals_ = bce_alpha.choose_start(starts, data, generator=g)
        self.iw_start_ = ("meanfield", "mixture")[pick]
        alpha, beta, info = bce_alpha.refine_iw(*starts[pick], data, smoothing=self.smoothing,
                                                generator=g)
        self.log_marginals_ = info["log_marginals"]
        state.alpha, state.beta = alpha, beta
        # tol=0 runs the fused numba E-step (the torch path with a tolerance test cost
        # 8-14 times the mean-field fit, issue 24); 100 fixed passes
        state.gamma = cavi.fold_in(alpha, beta, data, tol=0.0, max_iter=100)

    def _fit(self, ensemble: Ensemble, resume=None):
        K, dev, dtype = self._validate(ensemble)
        self._device, self._dtype = dev, dtype
        self.hub_ = None
        if self.inference == "nuts":
            return self._fit_nuts(ensemble)
        rs = check_random_state(self.random_state)
        self.alpha_estimate_ = self._alpha_estimate()
        # the collapsed sampler reads ensemble.codes; the variational engines read the
        # labels laid out as LabelData (16 bytes per label at float64)
        data = None if self.alpha_estimate_ == "gibbs" else ensemble.label_data(dev, dtype)
        self.eta_, self.log_marginal_, self.chain_log_marginals_ = None, None, []
        self.kept_chain_ = None
        self.n_alpha_clipped_ = 0
        if self.alpha_estimate_ == "gibbs":
            fit = self._fit_gibbs(ensemble, K, rs, resume)
        elif self.inference == "cavi":
            fit = self._drive(self._engine(ensemble, data, K), ensemble, rs, resume)
        else:
            from consensuskit.models.bce.svi import fit_svi

            run = fit_svi(ensemble, data, K, beta0=self.initial_beta(ensemble, K, rs),
                          n_epochs=self.max_iter, batch_size=self.batch_size,
                          learning_rate=self.learning_rate, smoothing=self.smoothing,
                          random_state=rs, verbose=self.verbose)
            fit = Fit(runs=[run], best=run)
        self.log_marginals_, self.iw_start_ = [], None
        if self.alpha_estimate_ == "iw":
            self._refine_iw(ensemble, data, K, fit.best.params, rs)
        state = self.set_fitted_state(ensemble, fit)
        self.lower_bound_ = cavi.bound_at(state.alpha, state.beta, state.gamma,
                                          ensemble if data is None else data,
                                          smoothing=self.smoothing)
        return self

    def _fit_gibbs(self, ensemble, K, rs, resume, features=None, score=None,
                   digest=""):
        """``alpha_estimate="gibbs"``: :class:`~consensuskit.models.bce.collapsed_gibbs.
        CollapsedGibbsEM` with ``n_init`` chains auditioned by
        :func:`~consensuskit.models.bce.alpha.selection_log_marginal` (the same training
        rows and random numbers for every chain), the best one run to ``n_sweeps``.  GBCE
        passes its ``features``
        (:class:`~consensuskit.models.bce.collapsed_gibbs.FeatureColumns`) and a
        ``score(seed)`` factory (labels and features scored together)."""
        from consensuskit.models.bce.collapsed_gibbs import ALPHA_RANGE, CollapsedGibbsEM

        seed = int(rs.randint(2**31 - 1))
        if score is None:
            def score(alpha, beta):
                return bce_alpha.selection_log_marginal(alpha, beta, ensemble, seed=seed)
        else:
            score = score(seed)

        engine = CollapsedGibbsEM(ensemble.codes, ensemble.offsets, K,
                                  lambda rng: self.initial_beta(ensemble, K, rng),
                                  n_sweeps=self.n_sweeps, n_chains=self.n_init, score=score,
                                  features=features, dtype=self._dtype, device=self._device)
        fit = drive(engine, max_iter=engine.total_sweeps, n_runs=1, tol=None, rng=rs,
                    callback=self.callback,
                    checkpoint=checkpoint_writer(self, ensemble, digest),
                    checkpoint_every=self.checkpoint_every, resume=resume,
                    progress=bool(self.verbose), desc=type(self).__name__, run_name="run",
                    unit="sweep")
        best = fit.best
        p = best.params
        p.log_marginal = score(p.alpha, p.beta, *(() if features is None
                                                   else (p.mu, p.sigma2)))
        self.eta_ = p.eta
        self.log_marginal_ = p.log_marginal
        self.chain_log_marginals_ = list(p.audition_scores)
        self.kept_chain_ = int(p.kept_chain)
        self.n_alpha_clipped_ = int(p.n_alpha_clipped)
        if self.n_alpha_clipped_:
            warnings.warn(
                f"{type(self).__name__}: Minka's fixed point put an alpha entry outside "
                f"{ALPHA_RANGE} {self.n_alpha_clipped_} time(s) (a cluster that "
                "lost every label, or one that takes all of them); it was clipped "
                "(n_alpha_clipped_)", RuntimeWarning, stacklevel=4)
        return fit

    def _fit_nuts(self, ensemble):
        from consensuskit.models.bce import spec
        from consensuskit.models.bce.marginal import MAX_STATES, n_count_states

        K, M = int(self.n_clusters), ensemble.n_partitions
        self.n_count_states_ = n_count_states(M, K)
        collapsed = self.n_count_states_ <= MAX_STATES
        self.nuts_form_ = "collapsed" if collapsed else "theta"
        if not collapsed:
            warnings.warn(
                f"BCE(inference='nuts'): the exact row marginal needs C(M+K, K) = "
                f"{self.n_count_states_} count states (> {MAX_STATES}); sampling theta per "
                "row instead (the uncollapsed spec mixes slowly: check R-hat)",
                RuntimeWarning, stacklevel=4)
        model = spec.model_collapsed if collapsed else spec.model
        hub = self._fit_on_hub(ensemble, model, inference="nuts",
                               num_samples=self.max_iter, warmup_steps=self.max_iter,
                               num_chains=self.n_init,
                               n_perplexity_samples=self.n_perplexity_samples)
        M = ensemble.n_partitions
        self.alpha_ = self._aligned_mean("alpha")
        self.beta_ = [self._aligned_mean(f"beta_{j}") for j in range(M)]
        self._alpha_t = torch.as_tensor(self.alpha_, dtype=self._dtype, device=self._device)
        self._beta_t = cavi.pack_beta(self.beta_, dtype=self._dtype, device=self._device)
        self.gamma_ = None
        self.lower_bounds_, self.lower_bound_ = [], float("nan")
        self.n_iter_, self.converged_ = self.max_iter, True
        self.degenerate_, self.n_degenerate_, self.stopped_ = False, 0, False
        self.mcmc_info_ = hub.mcmc_info_
        return self

    # ------------------------------------------------------------------ fold-in
    def _fold_in(self, ensemble: Ensemble):
        check_is_fitted(self, "alpha_")
        data = ensemble.label_data(self._device, self._dtype)
        return cavi.fold_in(self._alpha_t, self._beta_t, data), data

    def predict_proba(self, X, unknown="error"):
        """Soft consensus of new rows by fold-in: ``gamma_i / sum_h gamma_ih``, shape (n, K).

        ``gamma_i`` is the variational E-step (eqs. 5-6) run to convergence with the
        fitted alpha and beta held fixed.  ``unknown``: what to do with a label a
        column never showed in ``fit`` ("error" or "missing").
        """
        if self._hub() is not None:
            return self.hub_.predict_proba(X, unknown=unknown)
        gamma, _ = self._fold_in(self._encode_new(X, unknown=unknown))
        g = gamma.T.cpu().numpy().astype(np.float64)
        return g / g.sum(1, keepdims=True)

    def predict(self, X, unknown="error"):
        """Hard consensus of new rows (argmax of :meth:`predict_proba`), shape (n,)."""
        return self.predict_proba(X, unknown=unknown).argmax(1)

    def to_spec(self):
        """The fitted state as values of the spec's sites (:mod:`consensuskit.models.bce.spec`).

        Returns
        -------
        model_kwargs : dict
            ``n_labels`` and ``n_clusters``: the keyword arguments of ``spec.model``.
        draws : dict
            Global site -> float64 tensor of shape (1, ...): ``alpha`` (1, K) and
            ``beta_j`` (1, K, k_j), the point estimate as one draw.  (GBCE: its label
            part; the features are integrated out.)
        """
        check_is_fitted(self, "alpha_")
        kw = dict(n_labels=[int(k) for k in self.ensemble_.n_labels],
                  n_clusters=len(self.alpha_))
        draws = {"alpha": torch.as_tensor(np.asarray(self.alpha_, dtype=np.float64))[None]}
        draws.update({f"beta_{j}": torch.as_tensor(np.asarray(b, dtype=np.float64))[None]
                      for j, b in enumerate(self.beta_)})
        return kw, draws

    # ------------------------------------------------------------ likelihood
    def _pointwise_log_likelihood(self, ensemble: Ensemble):
        r"""``log p(x_i)`` per row (``theta_i`` and ``z_i`` summed out) and its variance.

        ``log_likelihood_method="auto"`` (the default): exact by the count-vector
        recursion (:func:`consensuskit.models.bce.alpha.exact_log_marginal`, variance 0)
        when ``C(M+K, K) <=`` :data:`~consensuskit.models.bce.alpha.EXACT_MAX_STATES`,
        else (and with ``"is"``) importance sampling with ``S = n_perplexity_samples``
        particles from a defensive mixture of sequential proposals
        (:func:`consensuskit.models.bce.alpha.mixture_log_weights`: the assignments
        drawn left to right from their exact conditionals, some particles seeded towards
        one cluster, which keeps the estimate and its variance honest as alpha goes to
        0).  The mean weight is unbiased for ``p(x_i)``; its log is biased low by about
        half the variance below.  Variance of each row's estimate (delta method)::

            var_i = Var_s(w_is) / (S * mean_s(w_is)^2)

        Returns
        -------
        log_lik : ndarray (n,)
        var : ndarray (n,)
        """
        check_is_fitted(self, "alpha_")
        if self._hub() is not None:
            return self.hub_._pointwise_log_likelihood(ensemble)
        data = ensemble.label_data(self._device, self._dtype)
        g = torch_generator(self.random_state, device=self._device)
        per_row, var = bce_alpha.row_log_marginals(self._alpha_t, self._beta_t, data,
                                                   self.n_perplexity_samples, g,
                                                   method=self.log_likelihood_method)
        return per_row.cpu().numpy(), var.cpu().numpy()
