"""Mixture-model consensus (MM; Topchy, Jain & Punch, 2004) as a scikit-learn estimator."""

from __future__ import annotations

import numpy as np
import torch
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from consensuskit.base import (
    ConsensusEstimator,
    GenerativeMixin,
    check_n_clusters,
    check_positive_float,
    check_positive_int,
    resolve_device,
    resolve_dtype,
    row_argmax,
    torch_generator,
)
from consensuskit.data.ensemble import Ensemble
from consensuskit.inference.pyro_consensus import HubBackedMixin
from consensuskit.models.mm import em as mm_em

__all__ = ["MM"]


class MM(HubBackedMixin, GenerativeMixin, ConsensusEstimator):
    """Finite mixture of per-column categorical distributions fitted by MAP-EM.

    Each consensus cluster ``k`` is a component with weight ``pi_k`` and, for
    every base clustering ``j``, a label distribution ``theta_jk`` over its
    ``k_j`` labels; labels of a point are independent given its component
    (the paper's eq. 2-6).  Missing labels are left out of the products.
    The Pyro version of the model is :func:`consensuskit.models.mm.spec.model`.

    Parameters
    ----------
    n_clusters : int, default 2
        Number of consensus clusters ``K`` (mixture components).
    inference : {"em", "svi", "nuts"}, default "em"
        MAP-EM (below); SVI on the spec :func:`consensuskit.models.mm.spec.model` with its MAP
        guide (``max_iter`` Adam steps, one run); or NUTS on the spec (``max_iter`` draws
        and warm-up steps per chain, ``n_init`` chains; ``weights_``/``theta_`` are
        posterior means after relabelling and scoring averages over the draws; the
        fitted :class:`~consensuskit.PyroConsensus` is ``hub_``).
    n_init : int, default 5
        EM restarts; the run with the highest penalised log-likelihood is kept.
    max_iter : int, default 200
        Maximum EM iterations per restart.
    tol : float, default 1e-6
        Stop when the objective changes by at most ``tol`` times its magnitude.
    label_prior : float >= 1, default 1.01
        Concentration ``a`` of the symmetric Dirichlet prior on every
        ``theta_jk``; the M-step adds ``a - 1`` pseudo-counts to each label.
        ``a = 1`` is the paper's maximum likelihood, under which a label a
        component never saw has probability 0 and held-out perplexity can be
        infinite.  The default's 0.01 pseudo-counts keep every probability
        positive while barely moving the fit; on iris k-means ensembles they
        gave lower held-out perplexity than 0.1, 0.5 or 1 (see ``docs/mm.md``).
    weight_prior : float >= 1, default 1.0
        Concentration ``b`` of the symmetric Dirichlet prior on ``pi``
        (``1``: flat, maximum likelihood weights).
    init : {"random", "kmeans"}, default "random"
        ``"random"``: uniform ``pi`` and ``theta_jk ~ Dirichlet(1)``.
        ``"kmeans"``: k-means (one start) on the one-hot labels gives hard
        responsibilities, then an M-step.
    random_state : int, RandomState or None
        Seeds the restarts.
    device : str or torch.device, default "cpu"
    dtype : {"float64", "float32"} or torch dtype, default "float64"
    verbose : bool, default False
        Show a tqdm progress bar over EM iterations.

    Attributes
    ----------
    weights_ : ndarray of shape (K,)
        Mixing weights ``pi`` (the paper's ``alpha``).
    theta_ : list of M ndarrays of shape (K, k_j)
        Label distributions; row ``k`` of ``theta_[j]`` is ``theta_jk`` over
        the codes ``0..k_j-1`` of column ``j`` (original labels:
        ``ensemble_.categories[j]``).
    membership_ : ndarray of shape (N, K)
        Posterior responsibilities ``E[z_ik]`` of the training rows.
    labels_ : ndarray of shape (N,)
        ``argmax_k membership_[i]``.
    lower_bound_ : float
        Penalised log-likelihood ``F`` (log joint of the Pyro model with ``z``
        summed out) at the fitted parameters; the plain log-likelihood is
        ``log_likelihood_``.  (For EM it is the objective itself, not a bound.)
    lower_bounds_ : ndarray of shape (n_iter_ + 1,)
        ``F`` at the start and after each iteration of the kept restart;
        never decreasing.
    log_likelihood_ : float
        ``sum_i log sum_k pi_k prod_j theta_jk(x_ij)`` on the training rows.
    n_iter_ : int
    converged_ : bool
    ensemble_ : Ensemble
    """

    def __init__(
        self,
        n_clusters=2,
        *,
        inference="em",
        n_init=5,
        max_iter=200,
        tol=1e-6,
        label_prior=1.01,
        weight_prior=1.0,
        init="random",
        random_state=None,
        device="cpu",
        dtype="float64",
        verbose=False,
    ):
        self.n_clusters = n_clusters
        self.inference = inference
        self.n_init = n_init
        self.max_iter = max_iter
        self.tol = tol
        self.label_prior = label_prior
        self.weight_prior = weight_prior
        self.init = init
        self.random_state = random_state
        self.device = device
        self.dtype = dtype
        self.verbose = verbose

    # -- fitting ------------------------------------------------------------
    def _check_params(self, n_samples):
        K = check_n_clusters(self.n_clusters, n_samples)
        check_positive_int(self.n_init, "n_init")
        check_positive_int(self.max_iter, "max_iter")
        check_positive_float(self.tol, "tol", allow_zero=True)
        for name in ("label_prior", "weight_prior"):
            v = check_positive_float(getattr(self, name), name)
            if v < 1.0:
                raise ValueError(
                    f"{name} must be >= 1 (a Dirichlet concentration below 1 has no "
                    f"interior MAP point); got {v}"
                )
        if self.inference not in ("em", "svi", "nuts"):
            raise ValueError(f"inference must be 'em', 'svi' or 'nuts'; got {self.inference!r}")
        if not isinstance(self.init, str) or self.init not in ("random", "kmeans"):
            raise ValueError(f"init must be 'random' or 'kmeans'; got {self.init!r}")
        if not isinstance(self.verbose, (bool, np.bool_)):
            raise TypeError(f"verbose must be a bool; got {self.verbose!r}")
        return K, resolve_device(self.device), resolve_dtype(self.dtype)

    def _kmeans_init(self, ens: Ensemble, K: int, rs):
        from sklearn.cluster import KMeans

        onehot = ens.onehot(dtype=np.float64)

        def init(restart):
            seed = int(rs.randint(0, 2**31 - 1))
            lab = KMeans(n_clusters=K, n_init=1, random_state=seed).fit_predict(onehot)
            resp = torch.zeros(K, ens.n_samples, dtype=torch.float64)
            resp[torch.from_numpy(lab).long(), torch.arange(ens.n_samples)] = 1.0
            return resp

        return init

    def _fit(self, ensemble: Ensemble):
        K, device, dtype = self._check_params(ensemble.n_samples)
        self.hub_ = None
        if self.inference != "em":
            self._device, self._dtype = device, dtype
            return self._fit_pyro(ensemble)
        rs = check_random_state(self.random_state)
        layout = mm_em.prepare(ensemble.codes, ensemble.n_labels, device=device, dtype=dtype)
        init = self._kmeans_init(ensemble, K, rs) if self.init == "kmeans" else "random"
        run = mm_em.fit_em(
            layout,
            K,
            n_init=self.n_init,
            max_iter=self.max_iter,
            tol=float(self.tol),
            label_prior=float(self.label_prior),
            weight_prior=float(self.weight_prior),
            init=init,
            generator=torch_generator(rs),
            verbose=bool(self.verbose),
            keep_resp=False,  # recomputed below: no (K, N) array kept across restarts
        )
        res = run.params
        res.resp, _ = mm_em.e_step(layout, res.log_pi, res.log_theta)
        self._log_pi = res.log_pi.detach()
        self._log_theta = res.log_theta.detach()
        self._device, self._dtype = device, dtype
        self.weights_ = res.log_pi.exp().cpu().double().numpy()
        theta = res.log_theta.exp().cpu().double().numpy()
        off = layout.offsets
        self.theta_ = [theta[:, off[j] : off[j + 1]].copy() for j in range(layout.n_partitions)]
        self.membership_ = res.resp.T.cpu().double().numpy()
        res.resp = None
        self.labels_ = row_argmax(self.membership_)
        self.lower_bound_ = float(res.objective)
        self.lower_bounds_ = np.asarray(run.objectives, dtype=np.float64)
        self.log_likelihood_ = float(res.loglik)
        self.n_iter_ = int(run.n_iter)
        self.converged_ = bool(run.converged)
        return self

    def _fit_pyro(self, ensemble: Ensemble):
        """SVI (MAP guide: the penalised likelihood EM maximises) or NUTS on the spec."""
        from consensuskit.models.mm import spec

        kw = dict(label_prior=float(self.label_prior), weight_prior=float(self.weight_prior))
        if self.inference == "svi":
            hub = self._fit_on_hub(ensemble, spec.model, inference="svi",
                                   guide=spec.map_guide, model_kwargs=kw,
                                   num_steps=self.max_iter)
            self.lower_bounds_ = -np.asarray(hub.losses_, dtype=np.float64)
        else:
            hub = self._fit_on_hub(ensemble, spec.model, inference="nuts", model_kwargs=kw,
                                   num_samples=self.max_iter, warmup_steps=self.max_iter,
                                   num_chains=self.n_init)
            self.lower_bounds_ = np.zeros(0)
            self.mcmc_info_ = hub.mcmc_info_
        M = ensemble.n_partitions
        self.weights_ = self._aligned_mean("pi")
        self.theta_ = [self._aligned_mean(f"theta_{j}") for j in range(M)]
        opts = dict(dtype=self._dtype, device=self._device)
        self._log_pi = torch.log(torch.as_tensor(self.weights_, **opts))
        self._log_theta = torch.log(torch.as_tensor(np.concatenate(self.theta_, axis=1), **opts))
        if self.inference == "svi":
            self.hub_ = None  # a point estimate: score and predict with the EM formulas
        self.lower_bound_ = float(self.lower_bounds_[-1]) if len(self.lower_bounds_) else np.nan
        self.log_likelihood_ = float(np.sum(self._pointwise_log_likelihood(ensemble)[0]))
        self.n_iter_ = int(self.max_iter)
        self.converged_ = False
        return self

    # -- fold-in --------------------------------------------------------------
    def _posterior(self, ensemble: Ensemble):
        layout = mm_em.prepare(ensemble.label_data(self._device, self._dtype))
        return mm_em.e_step(layout, self._log_pi, self._log_theta)

    def predict_proba(self, X, unknown="error"):
        """Posterior responsibilities of (new) rows under the fitted parameters.

        Parameters
        ----------
        X : array-like of shape (n_rows, n_partitions) or Ensemble
            Labels in the same label space as in ``fit``; ``-1`` missing.
        unknown : {"error", "missing"}
            A label a column never showed in ``fit``: raise, or treat as missing.

        Returns
        -------
        ndarray of shape (n_rows, n_clusters)
        """
        check_is_fitted(self, "weights_")
        if self._hub() is not None:
            return self.hub_.predict_proba(X, unknown=unknown)
        resp, _ = self._posterior(self._encode_new(X, unknown=unknown))
        return resp.T.cpu().double().numpy()

    def predict(self, X, unknown="error"):
        """Most probable consensus cluster of each (new) row, shape (n_rows,)."""
        return np.argmax(self.predict_proba(X, unknown=unknown), axis=1).astype(np.int64)

    def to_spec(self):
        """The fitted state as values of the spec's sites (:mod:`consensuskit.models.mm.spec`).

        Returns
        -------
        model_kwargs : dict
            ``n_labels``, ``n_clusters``, ``label_prior``, ``weight_prior``: the keyword
            arguments of ``spec.model`` for this fit.
        draws : dict
            Global site -> tensor of shape (1, ...): ``pi`` (1, K) and ``theta_j`` (1, K,
            k_j), the point estimate as one draw.
        """
        check_is_fitted(self, "weights_")
        kw = dict(n_labels=[int(k) for k in self.ensemble_.n_labels],
                  n_clusters=len(self.weights_), label_prior=float(self.label_prior),
                  weight_prior=float(self.weight_prior))
        draws = {"pi": _as_draw(self.weights_)}
        draws.update({f"theta_{j}": _as_draw(t) for j, t in enumerate(self.theta_)})
        return kw, draws

    def _pointwise_log_likelihood(self, ensemble: Ensemble):
        """Exact ``log sum_k pi_k prod_{j observed} theta_jk(x_ij)`` per row; variance 0."""
        check_is_fitted(self, "weights_")
        if self._hub() is not None:
            return self.hub_._pointwise_log_likelihood(ensemble)
        layout = mm_em.prepare(
            ensemble.codes, ensemble.n_labels, device=self._device, dtype=self._dtype
        )
        L = mm_em.log_likelihood_matrix(layout, self._log_pi, self._log_theta)  # (K, n)
        ll = torch.logsumexp(L, dim=0).double().cpu().numpy()
        return ll, np.zeros_like(ll)


def _as_draw(a):
    """``a`` as a float64 tensor with a leading draw axis of size 1."""
    return torch.as_tensor(np.asarray(a, dtype=np.float64))[None]
