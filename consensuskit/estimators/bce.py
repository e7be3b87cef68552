"""Bayesian cluster ensembles (Wang, Shan & Banerjee 2011) as a scikit-learn estimator."""

from __future__ import annotations

import warnings

import numpy as np
import torch
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from ..base import (
    ConsensusEstimator,
    GenerativeMixin,
    check_n_clusters,
    check_positive_float,
    check_positive_int,
    degenerate_advice,
    resolve_device,
    resolve_dtype,
    torch_generator,
)
from ..checkpoint import check_checkpoint_params, checkpoint_writer, read_checkpoint
from ..ensemble import Ensemble, as_ensemble
from ..inference import bce_cavi as cavi
from ..inference.driver import Fit
from ..inference.driver import fit as drive
from .pyro import HubBackedMixin

__all__ = ["BCE"]


class BCE(HubBackedMixin, GenerativeMixin, ConsensusEstimator):
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
        z-enumerated guide (:func:`consensuskit.models.bce.guide_enumerated`), or NUTS on
        the full Bayesian spec :func:`consensuskit.models.bce.model` (alpha ~ Gamma(1, 1),
        beta_jh ~ Dirichlet(1), z enumerated) through :class:`~consensuskit.PyroConsensus`
        (then ``max_iter`` is the number of draws and of warm-up steps per chain and
        ``n_init`` the number of chains; ``alpha_``/``beta_`` are posterior means after
        relabelling, the fitted hub is ``hub_``).
    max_iter : int, default 100
        EM iterations per restart (cavi) or epochs over the rows (svi).
    tol : float, default 1e-6
        Stop when the relative change of the bound is ``<= tol`` (cavi).
    n_init : int, default 3
        Restarts; the one with the best bound is kept, non-degenerate ones first.
    inner_iter : int, default 5
        (phi, gamma) passes per EM iteration, warm-started from the previous gamma.
    init : {"kmeans", "random"}
        ``"kmeans"``: beta from k-means on the one-hot labels (a different seed per
        restart); ``"random"``: flat-Dirichlet beta, as the authors' code.  Random
        starts run into the degenerate optimum (alpha growing without bound) more
        often; such runs are detected (``sum(alpha) > 10 * max_i V_i``, ``V_i`` the
        number of labels of row i) and discarded in favour of non-degenerate restarts.
    smoothing : float, default 1e-6
        Pseudo-count added to the expected label counts in the beta update.
    batch_size : int or None
        Row minibatch size for SVI (None: min(N, 1024)).
    learning_rate : float, default 0.05
        Adam step size for SVI.
    n_perplexity_samples : int, default 200
        Importance samples per row for the log-likelihood (see :meth:`_log_likelihood`).
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
        ``fit(X, resume_from=checkpoint_path)`` (see :mod:`consensuskit.checkpoint`).
    checkpoint_every : int, default 10

    Attributes
    ----------
    alpha_ : ndarray (K,)
    beta_ : list of ndarray, each (K, k_j)
    gamma_ : ndarray (N, K)
        Variational Dirichlet parameters of the training rows.
    membership_ : ndarray (N, K)
        ``gamma_`` normalised over clusters.
    labels_ : ndarray (N,)
        ``argmax_h gamma_ih``.
    lower_bound_ : float
        Final value of the objective of the kept restart (cavi: ELBO plus
        ``smoothing * sum ln beta``; svi: the final full-data ELBO estimate).
    lower_bounds_ : list of float
        Objective after every EM iteration of the kept restart.
    n_iter_ : int
    converged_ : bool
    degenerate_ : bool
        True if every restart hit the degenerate optimum (a warning is issued).
    n_degenerate_ : int
        Number of restarts flagged degenerate (``sum(alpha) > 10 * max_i V_i``).
    stopped_ : bool
        True if the callback stopped the fit.
    """

    def __init__(self, n_clusters=2, *, inference="cavi", max_iter=100, tol=1e-6, n_init=3,
                 inner_iter=5, init="kmeans", smoothing=1e-6, batch_size=None,
                 learning_rate=0.05, n_perplexity_samples=200, random_state=None,
                 device="cpu", dtype="float64", verbose=False, callback=None,
                 checkpoint_path=None, checkpoint_every=10):
        self.n_clusters = n_clusters
        self.inference = inference
        self.max_iter = max_iter
        self.tol = tol
        self.n_init = n_init
        self.inner_iter = inner_iter
        self.init = init
        self.smoothing = smoothing
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.n_perplexity_samples = n_perplexity_samples
        self.random_state = random_state
        self.device = device
        self.dtype = dtype
        self.verbose = verbose
        self.callback = callback
        self.checkpoint_path = checkpoint_path
        self.checkpoint_every = checkpoint_every

    # ------------------------------------------------------------------ fitting
    def _validate(self, ensemble):
        K = check_n_clusters(self.n_clusters, ensemble.n_samples)
        if self.inference not in ("cavi", "svi", "nuts"):
            raise ValueError(
                f"inference must be 'cavi', 'svi' or 'nuts'; got {self.inference!r}")
        if self.init not in ("kmeans", "random"):
            raise ValueError(f"init must be 'kmeans' or 'random'; got {self.init!r}")
        check_positive_int(self.max_iter, "max_iter")
        check_positive_int(self.n_init, "n_init")
        check_positive_int(self.inner_iter, "inner_iter")
        check_positive_int(self.n_perplexity_samples, "n_perplexity_samples")
        check_positive_float(self.tol, "tol", allow_zero=True)
        check_positive_float(self.smoothing, "smoothing")
        check_positive_float(self.learning_rate, "learning_rate")
        if self.batch_size is not None:
            check_positive_int(self.batch_size, "batch_size")
        check_checkpoint_params(self)
        if self.inference != "cavi" and (
            self.callback is not None or self.checkpoint_path is not None
        ):
            raise ValueError("callback and checkpoint_path need inference='cavi'")
        return K, resolve_device(self.device), resolve_dtype(self.dtype)

    def fit(self, X, y=None, resume_from=None):
        """Fit on base clusterings ``X`` (N, M); ``resume_from``: a checkpoint file.

        ``resume_from`` continues the run saved there by ``checkpoint_path`` (same
        data and hyper-parameters, else ValueError) and ends exactly where the
        uninterrupted run ends.
        """
        ens = as_ensemble(X)
        self.ensemble_ = ens
        self.n_features_in_ = ens.n_partitions
        self._fit(ens, resume=self._read_resume(resume_from, ens))
        return self

    def _read_resume(self, resume_from, ens, extra_digest=""):
        if resume_from is None:
            return None
        if self.inference != "cavi":
            raise ValueError("resume_from needs inference='cavi'")
        return read_checkpoint(resume_from, self, ens, extra_digest)

    def _init_beta(self, ensemble, K, rs):
        if self.init == "kmeans":
            return cavi.init_beta_kmeans(ensemble, K, rs)
        return cavi.init_beta_random(ensemble, K, rs)

    def _engine(self, ensemble, data, K, features=None, **kw):
        """The CAVI engine of this estimator's settings (``kw``: distributed hooks)."""
        return cavi.CAVI(data, K, lambda rng: self._init_beta(ensemble, K, rng),
                         inner_iter=self.inner_iter, smoothing=self.smoothing,
                         features=features, **kw)

    def _drive(self, engine, ensemble, rs, resume=None, digest=""):
        """``n_init`` restarts of ``engine`` under the fit driver (callback, checkpoints)."""
        return drive(engine, max_iter=self.max_iter, n_runs=self.n_init, tol=self.tol, rng=rs,
                     callback=self.callback,
                     checkpoint=checkpoint_writer(self, ensemble, digest),
                     checkpoint_every=self.checkpoint_every, resume=resume,
                     progress=bool(self.verbose), desc=type(self).__name__,
                     run_name="restart")

    def _set_fitted(self, ensemble, fit, device=None, dtype=None):
        """Fitted attributes from the driver's :class:`~consensuskit.inference.driver.Fit`."""
        run = fit.best
        state = run.params
        self.stopped_ = bool(fit.stopped)
        self.n_degenerate_ = int(fit.n_degenerate)
        self.degenerate_ = bool(fit.all_degenerate)
        if self.degenerate_:
            warnings.warn(
                f"every {type(self).__name__} restart ran into the degenerate optimum "
                "(sum(alpha) grew past 10 times the most (weighted) labels of a row); "
                "returning the best bound. "
                + degenerate_advice(self.init, self.n_init, int(state.alpha.shape[-1])),
                RuntimeWarning, stacklevel=4)
        self._alpha_t = state.alpha.detach()
        self._beta_t = state.beta.detach()
        if device is not None:
            self._device, self._dtype = device, dtype
        self.alpha_ = self._alpha_t.cpu().numpy().astype(np.float64)
        self.beta_ = [b.cpu().numpy().astype(np.float64)
                      for b in cavi.unpack_beta(self._beta_t, ensemble.offsets)]
        self.gamma_ = state.gamma.T.cpu().numpy().astype(np.float64)
        self.membership_ = self.gamma_ / self.gamma_.sum(1, keepdims=True)
        self.labels_ = self.gamma_.argmax(1)
        self.lower_bounds_ = [float(v) for v in run.objectives]
        self.lower_bound_ = self.lower_bounds_[-1]
        self.n_iter_ = int(run.n_iter)
        self.converged_ = bool(run.converged)
        return state

    def _fit(self, ensemble: Ensemble, resume=None):
        K, dev, dtype = self._validate(ensemble)
        self._device, self._dtype = dev, dtype
        self.hub_ = None
        if self.inference == "nuts":
            return self._fit_nuts(ensemble)
        rs = check_random_state(self.random_state)
        data = ensemble.label_data(dev, dtype)
        if self.inference == "cavi":
            fit = self._drive(self._engine(ensemble, data, K), ensemble, rs, resume)
            self._set_fitted(ensemble, fit)
            return self
        from ..inference.bce_svi import fit_svi

        run = fit_svi(ensemble, data, K, beta0=self._init_beta(ensemble, K, rs),
                      n_epochs=self.max_iter, batch_size=self.batch_size,
                      learning_rate=self.learning_rate, smoothing=self.smoothing,
                      random_state=rs, verbose=self.verbose)
        self._set_fitted(ensemble, Fit(runs=[run], best=run))
        return self

    def _fit_nuts(self, ensemble):
        from ..models import bce as spec

        hub = self._fit_on_hub(ensemble, spec.model, inference="nuts",
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

    # ------------------------------------------------------------ likelihood
    def _pointwise_log_likelihood(self, ensemble: Ensemble, chunk_size: int = 4096):
        r"""Importance-sampling estimate of ``log p(x)`` and its standard error.

        For each row ``i`` the proposal is the folded-in ``q(theta_i) = Dirichlet(gamma_i)``;
        with ``S = n_perplexity_samples`` draws ``theta_s ~ q``::

            log w_is = log Dir(theta_s | alpha) - log Dir(theta_s | gamma_i)
                       + sum_{j observed} log sum_h theta_sh beta_j(h, x_ij)
            log p(x_i) ~= log( (1/S) sum_s w_is )                 (logmeanexp)

        ``(1/S) sum_s w_is`` is unbiased for ``p(x_i)``; its log is biased low
        (Jensen), so the perplexity is slightly conservative (too high).  Variance of
        each row's estimate (delta method)::

            var_i = Var_s(w_is) / (S * mean_s(w_is)^2)

        Returns
        -------
        log_lik : ndarray (n,)
        var : ndarray (n,)
        """
        if self._hub() is not None:
            return self.hub_._pointwise_log_likelihood(ensemble)
        gamma, data = self._fold_in(ensemble)
        alpha = self._alpha_t.to(gamma.dtype)
        beta_ext = cavi._extend(self._beta_t.to(gamma.dtype))
        S = self.n_perplexity_samples
        g = torch_generator(self.random_state, device=gamma.device)
        N = gamma.shape[1]
        rows_ll, rows_var = [], []
        lnB_alpha = torch.lgamma(alpha).sum() - torch.lgamma(alpha.sum())
        tiny = torch.finfo(gamma.dtype).tiny
        for start in range(0, N, chunk_size):
            rows = slice(start, min(N, start + chunk_size))
            gm = gamma[:, rows]  # (K, n)
            # Dirichlet draws via normalised Gammas (generator-seeded)
            shape = gm.T.unsqueeze(0).expand(S, -1, -1)  # (S, n, K)
            gam = torch._standard_gamma(shape.contiguous(), generator=g)
            theta = gam / gam.sum(-1, keepdim=True)
            theta = theta.clamp_min(tiny)
            logt = torch.log(theta)
            lnB_gamma = torch.lgamma(gm).sum(0) - torch.lgamma(gm.sum(0))  # (n,)
            logw = ((alpha - 1.0) * logt).sum(-1) - lnB_alpha
            logw = logw - (((gm.T - 1.0) * logt).sum(-1) - lnB_gamma)
            theta_k = theta.permute(0, 2, 1)  # (S, K, n)
            for j in range(data.n_partitions):
                idx_j, mask_j = data.column(j, rows)
                lik = (theta_k * beta_ext[:, idx_j]).sum(1)  # (S, n)
                ll = torch.log(lik)
                logw = logw + (ll if mask_j is None else ll * mask_j)
            lw = logw.to(torch.float64)
            mx = lw.max(0).values
            w = torch.exp(lw - mx)
            mean = w.mean(0)
            rows_ll.append((torch.log(mean) + mx).cpu().numpy())
            rows_var.append((w.var(0) / (S * mean**2)).cpu().numpy() if S > 1
                            else np.zeros(mean.shape[0]))
        return np.concatenate(rows_ll), np.concatenate(rows_var)
