"""NBCE estimator: nonparametric Bayesian clustering ensembles (Wang et al. 2010)."""

from __future__ import annotations

import warnings

import numpy as np
from scipy.special import logsumexp
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from consensuskit.base import (
    ConsensusEstimator,
    GenerativeMixin,
    RowNormalised,
    check_positive_int,
    resolve_device,
    resolve_dtype,
    torch_generator,
)
from consensuskit.data.ensemble import Ensemble
from consensuskit.io.checkpoint import checkpoint_writer
from consensuskit.models.base import DriverFitMixin, Integer, OneOf, Real
from consensuskit.models.nbce.cvb import CVB
from consensuskit.models.nbce.gibbs import (
    RHAT_THRESHOLD,
    co_clustering,
    draw_counts,
    draw_votes,
    gibbs_nbce,
    point_consensus,
    relabel_by_size,
    split_rhat,
)
from consensuskit.models.nbce.predictive import (
    component_loglik,
    log_dirichlet,
    predictive_parameters,
)
from consensuskit.models.nbce.priors import PRIORS
from consensuskit.models.nbce.row_scores import (
    draw_component_logliks,
    draw_loo_logliks,
    draw_row_logliks,
    mixture_row_logliks,
)
from consensuskit.models.nbce.truncation import (
    DEFAULT_TRUNCATION,
    MAX_TRUNCATION_BELOW_N,
    default_fsd_truncation,
)
from consensuskit.models.nbce.vb import VB

__all__ = ["NBCE", "DEFAULT_TRUNCATION"]


class NBCE(DriverFitMixin, GenerativeMixin, ConsensusEstimator):
    """Nonparametric Bayesian clustering ensemble: a truncated Dirichlet-process mixture
    of categorical distributions over the base labels of each point.

    Model (see :mod:`consensuskit.models.nbce.spec`): ``theta*_kj ~ Dir(beta)``, mixing
    weights from truncated stick-breaking (``prior="tsb"``) or a finite symmetric
    Dirichlet ``Dir(alpha0/T)`` (``prior="fsd"``), ``z_i ~ Cat(pi)``,
    ``x_ij ~ Cat(theta*_{z_i j})`` for the observed labels.  The number of
    consensus clusters is inferred (``n_clusters_``); ``truncation`` is only an
    upper bound.

    Parameters
    ----------
    truncation : int or None, default None
        T, the number of mixture components (the paper's K).  None: TSB with Gibbs is
        the untruncated stick-breaking (Dirichlet-process) mixture -- the sampler's
        tables grow whenever a move reaches their last component, which is always
        empty, so no component count binds (see
        :class:`~consensuskit.models.nbce.gibbs.GibbsState`); FSD with Gibbs uses
        :func:`default_fsd_truncation` of the number of rows (twice the expected number
        of Dirichlet-process clusters at alpha0 = 10: 57 at N = 150, 108 at N = 2,000;
        at least 20), and the variational engines (VB, CVB), whose families update every
        component, ``DEFAULT_TRUNCATION`` (20).  An integer is used as given.  With a
        fixed T, Gibbs warns when retained draws occupy all T components
        (``truncation_filled_``).
    prior : {"tsb", "fsd"}, default "tsb"
    inference : {"gibbs", "vb", "cvb"}, default "gibbs"
        Collapsed Gibbs sampling (numba), mean-field VB (FSD only, torch) or
        first-order collapsed VB (torch).
    n_samples, burn_in, n_chains, thin : int, default 500, 200, 4, None
        Gibbs: draws kept per chain, sweeps discarded, chains (4 for split R-hat), sweeps
        per draw (None: 5 down to 1 as N x M grows to 1e5, ``gibbs.chains.default_thin``;
        the value used is ``thin_``).
    n_split_merge : int or None, default None
        Gibbs: split-merge Metropolis-Hastings proposals per sweep, then (if positive) one
        Gibbs move of every group of identical rows (None: 100 at every N, so a sweep's cost
        stays linear in N -- a split allocates the points of one cluster, a merge is
        mostly decided from the cluster counts; 0 turns the group moves off and leaves
        single-site Gibbs).
    point_estimate : {"vi", "binder", "dahl"}, default "vi"
        Gibbs: ``labels_`` is the partition minimising the posterior expected VI /
        Binder (a = 1) loss, by SALSO search over all partitions, scored on 500 evenly
        spaced draws (:meth:`consensuskit.posterior.PartitionPosterior.point_estimate`,
        16 runs, ``max_draws=500``: ``point_estimate_info_``), or ``"dahl"``: the retained
        draw closest to the posterior co-clustering in squared loss (Dahl 2006).
    n_jobs : int, -1 or None, default None
        Gibbs: threads the chains run on; None follows numba's thread setting
        (``numba.set_num_threads`` / ``NUMBA_NUM_THREADS``).  The draws do not
        depend on it.
    alpha0, beta : float, default 1.0, 0.5
        Concentration and Dirichlet parameter (fixed, or starting values).
    update_hyper : bool, default True
        Gibbs: slice-sample alpha0 and beta each sweep (Gamma(1, 1) priors).
        VB: Newton updates maximising the bound.  CVB: ignored (kept fixed).
    max_iter : int, default 500
        VB / CVB iterations (passes).
    tol : float, default 1e-6
        VB: relative bound change; CVB: largest change of a responsibility.
    random_state : None, int or RandomState
    dtype : torch dtype or name, default "float64"
        VB / CVB arithmetic.
    device : {"cpu", "cuda"}, default "cpu"
        VB / CVB device.
    verbose : bool, default False
        Progress bars.
    callback : callable or None
        Gibbs: ``callback(state)`` after every sweep; ``state`` has ``chain``,
        ``iteration`` (sweeps done in the chain), ``draws`` (retained so far in the
        chain) and the sampler's state (see
        :func:`~consensuskit.models.nbce.gibbs.gibbs_nbce`).  Returning ``False``
        stops the fit: the summaries then use the chains finished so far, or the
        draws of the first chain if none is finished (``stopped_`` is True); if no
        draw was retained yet, fit raises ValueError (resume from the checkpoint).
    checkpoint_path : str, path-like or None
        Gibbs: write the resumable sampler state there every ``checkpoint_every``
        sweeps and when the callback stops the run; continue with
        ``fit(X, resume_from=checkpoint_path)`` (:mod:`consensuskit.io.checkpoint`).
    checkpoint_every : int, default 10

    Attributes
    ----------
    labels_ : int64 (n_samples,)
        Hard consensus, 0..n_clusters_-1 by decreasing size.  Gibbs: the point estimate
        that ``point_estimate`` names (free of label switching).  VB/CVB: argmax of q(z).
    n_clusters_ : int
        Number of clusters in ``labels_``.
    membership_ : float (n_samples, n_clusters_)
        Soft consensus.  Gibbs: fraction of draws in which the point's cluster is mapped
        to each consensus cluster, every occupied cluster of a draw being mapped to the
        consensus cluster it shares most points with (label switching); the fit keeps the
        votes as integers and forms this array when it is first read (not in ``vars``
        before).  VB/CVB: q(z) on the kept clusters, renormalised.
    partition_posterior_ : :class:`~consensuskit.posterior.PartitionPosterior`
        Gibbs: the retained draws of z (all chains), made on first access.
    point_estimate_info_ : :class:`~consensuskit.posterior.SearchInfo` or None
        Gibbs with ``point_estimate`` "vi" or "binder": the search that gave ``labels_``
        (its ``expected_loss``, runs, scans).  None otherwise.
    inference_data_ : arviz InferenceData (arviz 0.x) / DataTree (1.x)
        Gibbs: the traces above in ``posterior``; every engine: ``log_likelihood``.
        Gibbs: permutation-invariant traces ``log_joint``, ``n_clusters``
        (occupied), ``alpha0``, ``beta`` with dims (chain, draw).  None for VB/CVB.
    samples_ : dict
        Gibbs: the raw draws of :func:`consensuskit.models.nbce.gibbs.gibbs_nbce`.
    alpha0_, beta_ : float
        Final (VB/CVB) or posterior-mean (Gibbs) hyper-parameters.
    truncated_ : bool
        Gibbs: whether the model was truncated (False for ``truncation=None`` with TSB).
    truncation_ : int
        Gibbs: components in the sampler's tables at the end (with no truncation, the
        largest size they grew to; their last component is empty in every draw).
    max_occupied_ : int
        Gibbs: the most clusters occupied in a retained draw.
    chains_disagree_ : bool, rhat_lp_ : float, chain_mean_lp_ : ndarray (chains,)
        Gibbs: split R-hat over chains of the log joint (relabelling-invariant), each
        chain's mean; R-hat above ``RHAT_THRESHOLD`` (1.05) means the chains sit in
        separate modes and the pooled draws mix them (a RuntimeWarning at fit time).  With
        one chain: the split R-hat of its two halves (a drift check; no chains to
        disagree, so ``chains_disagree_`` is False); NaN under 4 draws per chain.
    truncation_filled_ : float
        Gibbs: share of retained draws that occupy every component (always 0.0 with no
        truncation); a warning when it is positive.
    n_clamped_ : int
        CVB: how many leave-one-out expected counts ``E N^{-i}`` (over all passes of the
        run, entries of the (rows, clusters) and (rows, base clusterings, clusters)
        count arrays) came out negative beyond round-off, through drift of the running
        counts, and were raised to 0; a warning says so when it is not 0.  Negative
        values within the round-off of the subtraction are set to their exact value 0
        and not counted (:func:`consensuskit.models.nbce.cvb.leave_one_out`).  0 for
        Gibbs and VB.
    max_clamped_ : float
        CVB: the largest amount such a count was raised by (0.0 if none).
    lower_bound_, lower_bounds_, n_iter_, converged_
        VB: the ELBO (non-decreasing).  CVB: its first-order approximation
        (monitoring only, not guaranteed monotone).  For Gibbs only ``n_iter_``
        is set: the number of sweeps per chain, ``burn_in + n_samples * thin_``.
    """

    def __init__(
        self,
        truncation=None,
        *,
        prior="tsb",
        inference="gibbs",
        n_samples=500,
        burn_in=200,
        thin=None,
        n_chains=4,
        n_split_merge=None,
        point_estimate="vi",
        n_jobs=None,
        alpha0=1.0,
        beta=0.5,
        update_hyper=True,
        max_iter=500,
        tol=1e-6,
        random_state=None,
        dtype="float64",
        device="cpu",
        verbose=False,
        callback=None,
        checkpoint_path=None,
        checkpoint_every=10,
    ):
        self.truncation = truncation
        self.prior = prior
        self.inference = inference
        self.n_samples = n_samples
        self.burn_in = burn_in
        self.thin = thin
        self.n_chains = n_chains
        self.n_split_merge = n_split_merge
        self.point_estimate = point_estimate
        self.n_jobs = n_jobs
        self.alpha0 = alpha0
        self.beta = beta
        self.update_hyper = update_hyper
        self.max_iter = max_iter
        self.tol = tol
        self.random_state = random_state
        self.dtype = dtype
        self.device = device
        self.verbose = verbose
        self.callback = callback
        self.checkpoint_path = checkpoint_path
        self.checkpoint_every = checkpoint_every

    #: Gibbs: the draws' votes as shares, formed when first read (not during ``fit``);
    #: VB/CVB assign theirs
    membership_ = RowNormalised("_membership_votes")

    # ------------------------------------------------------------------ fit
    _driver_inference = "gibbs"
    _parameter_checks = {
        "truncation": Integer(2, optional=True),
        "prior": OneOf(*PRIORS),
        "inference": OneOf("gibbs", "vb", "cvb"),
        "n_samples": Integer(1),
        "burn_in": Integer(0),
        "thin": Integer(1, optional=True),
        "n_chains": Integer(1),
        "n_split_merge": Integer(0, optional=True),
        "point_estimate": OneOf("vi", "binder", "dahl"),
        "max_iter": Integer(1),
        "alpha0": Real(),
        "beta": Real(),
        "tol": Real(),
    }

    def _validate(self, ens):
        self._validate_parameters()
        T = None if self.truncation is None else int(self.truncation)
        if T is not None and T > max(ens.n_samples, MAX_TRUNCATION_BELOW_N):
            raise ValueError(
                f"truncation={T} exceeds the {ens.n_samples} rows (and "
                f"{MAX_TRUNCATION_BELOW_N}): at most one cluster per row can be occupied, and "
                f"every sweep and table grows with truncation (T x (N + sum k_j) values); use "
                f"truncation <= {max(ens.n_samples, MAX_TRUNCATION_BELOW_N)}")
        if self.inference == "vb" and self.prior != "fsd":
            raise ValueError(
                "inference='vb' is defined for prior='fsd' only (paper section 5.2); "
                "use inference='cvb' or 'gibbs' with prior='tsb'"
            )
        if self.n_jobs is not None and self.n_jobs != -1:
            check_positive_int(self.n_jobs, "n_jobs")
        if not isinstance(self.update_hyper, (bool, np.bool_)):
            raise TypeError(f"update_hyper must be a bool; got {self.update_hyper!r}")
        resolve_dtype(self.dtype)  # checked for every engine, used by VB / CVB
        resolve_device(self.device)
        self._check_driver_options()
        return self._resolved_truncation(ens.n_samples)

    def _resolved_truncation(self, n_rows):
        """The number of components, or None for the untruncated TSB Gibbs sampler.

        ``truncation=None``: TSB with Gibbs has no truncation; FSD with Gibbs uses
        :func:`default_fsd_truncation` of the ``n_rows`` rows (its kernels' cost follows
        the occupied components, not T); the variational engines keep
        :data:`DEFAULT_TRUNCATION`: their families need a fixed size, every iteration
        updates all T components (cost and memory N x T), and a component they do not
        need empties out instead of blocking a move.  An integer is used as given.
        """
        if self.truncation is None:
            if self.inference == "gibbs":
                return None if self.prior == "tsb" else default_fsd_truncation(n_rows)
            return DEFAULT_TRUNCATION
        return int(self.truncation)

    def _fit(self, ens: Ensemble, resume=None):
        T = self._validate(ens)
        rs = check_random_state(self.random_state)
        self.n_clamped_, self.max_clamped_ = 0, 0.0
        self.point_estimate_info_ = None
        if self.inference == "gibbs":
            self._fit_gibbs(ens, T, rs, resume)
        else:
            self._fit_variational(ens, T, rs)
        return self

    def _train_index(self, ens=None):
        """The engines' offset index of the training rows (``ensemble_`` unless ``ens``):
        the Gibbs scores (not the sampler, which reads the codes) read C-ordered int16
        (under 32,768 labels) or int32 rows, built directly; the variational engines the
        int64 index.  Built when needed, not kept: at 1e7 x 20 it is 0.4 GB (issue 27)."""
        ens = self.ensemble_ if ens is None else ens
        if self.inference != "gibbs":
            return ens.offset_index()
        small = np.int16 if ens.n_total_labels <= np.iinfo(np.int16).max else np.int32
        return ens.offset_index(small, order="C")

    def _count_index(self):
        """The training index a loop over draws passes to :meth:`_each_draw_counts` (built
        once, not per draw), or None when the draws' count tables are stored and it is not
        needed."""
        return None if "label_counts" in self.samples_ else self._train_index()

    def _fit_gibbs(self, ens, T, rs, resume=None):
        # the codes (a C-ordered copy: int8, half the int16 index) and column offsets
        out = gibbs_nbce(
            (ens.codes, ens.offsets), ens.n_labels, T, prior=self.prior, alpha0=self.alpha0,
            beta=self.beta, update_hyperparameters=bool(self.update_hyper),
            n_samples=self.n_samples, burn_in=self.burn_in, thin=self.thin,
            n_chains=self.n_chains, n_split_merge=self.n_split_merge, n_jobs=self.n_jobs,
            random_state=rs, verbose=self.verbose,
            callback=self.callback, checkpoint=checkpoint_writer(self, ens),
            checkpoint_every=self.checkpoint_every, resume=resume,
        )
        self.stopped_ = bool(out.pop("stopped"))
        T = int(out["truncation"])
        if self.stopped_:
            ran = np.flatnonzero(~np.isnan(out["log_joint_trace"][:, 0]))
            c = int(ran[-1])  # the chain the callback stopped
            s = int(out["n_draws"][c])
            if c == 0 and s == 0:
                raise ValueError(
                    "the callback stopped NBCE before its first retained draw; continue "
                    "with fit(X, resume_from=checkpoint_path)"
                )
            # the finished chains, or the draws so far of the first chain
            chains, draws = (slice(0, c), slice(None)) if c > 0 else (slice(0, 1), slice(0, s))
            for key, value in out.items():
                if isinstance(value, np.ndarray) and key != "n_labels":
                    out[key] = value[chains]
                    if value.ndim >= 2 and key not in ("log_joint_trace", "move_stats"):
                        out[key] = out[key][:, draws]
        self.samples_ = out
        self.thin_ = int(out["thin"])
        self.n_iter_ = int(self.burn_in + self.n_samples * self.thin_)  # sweeps per chain
        C, S = out["log_joint"].shape
        Z = out["z"].reshape(C * S, -1)
        self._partition_posterior = None  # partition_posterior_ makes it on first use
        labels = self._gibbs_point_estimate(Z, rs)
        self.labels_ = labels
        self.n_clusters_ = int(labels.max()) + 1
        # the votes (uint16), not their float64 shares: membership_ is formed on first read
        self._membership_votes, maps = draw_votes(Z, labels, T)
        type(self).membership_.reset(self)
        ms = out["move_stats"].sum(0)
        self.split_merge_stats_ = {
            "splits_accepted": int(ms[0]), "merges_accepted": int(ms[1]),
            "splits_proposed": int(ms[2]), "merges_proposed": int(ms[3]),
            "splits_without_empty_component": int(ms[4]),
            "group_moves_changed": int(ms[6]),
        }
        self.n_slice_kept_ = int(ms[5])
        if self.n_slice_kept_:
            warnings.warn(
                f"NBCE: {self.n_slice_kept_} slice update(s) of alpha0/beta found no new "
                "point in 200 shrinkage steps and kept the old value (n_slice_kept_)",
                RuntimeWarning, stacklevel=3,
            )
        self._draw_maps = maps
        self.n_clusters_draws_ = out["n_occupied"]
        self._check_truncation(out, T)
        self._check_chains(out["log_joint"])
        self.alpha0_ = float(out["alpha0"].mean())
        self.beta_ = float(out["beta"].mean())
        self._arviz_posterior = {
            "log_joint": out["log_joint"],
            "n_clusters": out["n_occupied"],
            "alpha0": out["alpha0"],
            "beta": out["beta"],
        }
        self._arviz_attrs = {"prior": self.prior, "truncation": T,
                             "inference": "collapsed_gibbs"}

    def _check_chains(self, lp):
        """``rhat_lp_``, ``chain_mean_lp_``, ``chains_disagree_``: the split R-hat over chains
        of the log joint ``lp`` (C, S), which does not change under relabelling; above
        ``RHAT_THRESHOLD`` (1.05) the chains sit in separate modes and ``labels_``,
        ``membership_`` and the scores pool them: a RuntimeWarning says so."""
        lp = np.asarray(lp, dtype=np.float64)
        self.chain_mean_lp_ = lp.mean(1)
        self.rhat_lp_ = split_rhat(lp)
        self.chains_disagree_ = bool(lp.shape[0] >= 2 and not (self.rhat_lp_
                                                                <= RHAT_THRESHOLD))
        if self.chains_disagree_:
            warnings.warn(
                f"NBCE: the Gibbs chains sit in separate modes (split R-hat of the log joint "
                f"{self.rhat_lp_:.3g} > {RHAT_THRESHOLD}; chain means "
                f"{np.round(self.chain_mean_lp_, 1).tolist()}): labels and scores pool them. "
                "Run longer chains (burn_in, n_samples) or compare the chains "
                "(chains_disagree_)", RuntimeWarning, stacklevel=4)

    def _check_truncation(self, out, T):
        """``truncation_``, ``max_occupied_``, ``truncation_filled_``, and a warning when
        a fixed truncation was filled (every component occupied in some draw)."""
        self.truncated_ = not bool(out.get("unbounded", False))
        self.truncation_ = T
        self.max_occupied_ = int(out["n_occupied"].max())
        self.truncation_filled_ = float(np.mean(out["n_occupied"] >= T))
        if self.truncated_ and self.truncation_filled_ > 0:
            warnings.warn(
                f"NBCE: {100 * self.truncation_filled_:.1f}% of the retained draws occupy all "
                f"{T} components of the truncation (truncation_filled_): the posterior is "
                "that of the truncated model and would put more clusters there; raise "
                "truncation" + (" or use truncation=None (no truncation)"
                                if self.prior == "tsb" else ""),
                RuntimeWarning, stacklevel=4,
            )

    def _fit_variational(self, ens, T, rs):
        dtype = resolve_dtype(self.dtype)
        device = resolve_device(self.device)
        engine_kw = dict(generator=torch_generator(rs), dtype=dtype, device=device)
        drive_kw = dict(max_iter=self.max_iter, tol=self.tol, progress=bool(self.verbose),
                        desc=f"NBCE {self.inference.upper()}")
        if self.inference == "vb":
            run = VB(self._train_index(ens), ens.n_labels, T, alpha0=self.alpha0, beta=self.beta,
                     update_hyperparameters=bool(self.update_hyper),
                     **engine_kw).run(**drive_kw).best
            out = run.params
            xi = out.xi.double().cpu().numpy()
            rho = out.rho.double().cpu().numpy()
            col_of = np.repeat(np.arange(ens.n_partitions), ens.n_labels)
            rs_sum = np.zeros((T, ens.n_partitions))
            np.add.at(rs_sum.T, col_of, rho.T)
            self._log_pi = np.log(xi / xi.sum())
            self._log_theta = np.log(rho / rs_sum[:, col_of])
            self._q_params = ("fsd", xi, rho)  # q(pi) = Dir(xi), q(theta_kj) = Dir(rho_kj)
        else:
            run = CVB(self._train_index(ens), ens.n_labels, T, prior=self.prior, alpha0=self.alpha0,
                      beta=self.beta, **engine_kw).run(**drive_kw).best
            out = run.params
            self.n_clamped_, self.max_clamped_ = int(out.n_clamped), float(out.max_clamped)
            if self.n_clamped_:
                warnings.warn(
                    f"NBCE CVB: {self.n_clamped_} leave-one-out expected count(s) came out "
                    f"negative beyond round-off (by up to {self.max_clamped_:.3g}: drift of "
                    "the running counts) and were raised to 0 (n_clamped_, max_clamped_); "
                    "dtype='float64' keeps the drift at round-off level",
                    RuntimeWarning, stacklevel=4,
                )
            Nk, Nkl = out.Nk.double().cpu().numpy(), out.Nkl.double().cpu().numpy()
            self._log_pi, self._log_theta = predictive_parameters(
                Nk, Nkl, out.Nkm.double().cpu().numpy(), out.alpha0, out.beta,
                ens.n_labels, self.prior,
            )
            # the parameters' posterior given the expected counts (conjugate)
            self._q_params = (self.prior, (float(out.alpha0), np.clip(Nk, 0.0, None)),
                              float(out.beta) + np.clip(Nkl, 0.0, None))
        gamma = out.gamma.double().cpu().numpy()
        hard = gamma.argmax(1)
        kept, first = np.unique(hard, return_index=True)
        if kept.size == 1 and ens.n_samples > 1:
            warnings.warn(
                f"NBCE {self.inference.upper()}: every row ended in one cluster "
                f"(alpha0_={float(out.alpha0):.3g}, beta_={float(out.beta):.3g}).  Unless "
                "the rows really are alike, this is the variational objective's "
                "single-cluster optimum (one label distribution: the overall label "
                "frequencies); compare with inference='gibbs', or fix the "
                "hyper-parameters (update_hyper=False)",
                RuntimeWarning, stacklevel=4,
            )
        lab = relabel_by_size(hard)
        order = np.empty(kept.size, dtype=np.int64)  # consensus label -> component
        order[lab[first]] = kept
        self._components = order
        self.labels_ = lab
        self.n_clusters_ = int(kept.size)
        m = gamma[:, order]
        self.__dict__.pop("_membership_votes", None)  # a Gibbs fit's, before this refit
        self.membership_ = m / m.sum(1, keepdims=True)
        self.alpha0_ = float(out.alpha0)
        self.beta_ = float(out.beta)
        self.lower_bounds_ = np.asarray(run.objectives)
        self.lower_bound_ = float(self.lower_bounds_[-1])
        self.n_iter_ = int(run.n_iter)
        self.converged_ = bool(run.converged)
        self._arviz_posterior = {}

    # ------------------------------------------------------------ posterior
    def _gibbs_point_estimate(self, Z, rs):
        """``labels_`` from the retained draws ``Z`` (D, N), by ``point_estimate``: the
        SALSO minimiser of the posterior expected VI or Binder loss, or Dahl's draw."""
        if self.point_estimate == "dahl":
            labels, self._best_draw = point_consensus(Z, random_state=rs)
            return labels
        labels, info = self._gibbs_partitions().point_estimate(  # partition_search_draws.py
            loss=self.point_estimate, max_draws=500, random_state=rs)
        self.point_estimate_info_ = info
        return relabel_by_size(labels)

    @property
    def partition_posterior_(self):
        """Gibbs: the posterior over partitions of the training rows, a
        :class:`~consensuskit.posterior.PartitionPosterior` over the retained draws of z
        (all chains, ``n_chains * n_samples`` draws).  Made from ``samples_["z"]`` on first
        access and kept (fit builds it only when ``point_estimate`` needs it)."""
        check_is_fitted(self, "labels_")
        if self.inference != "gibbs":
            raise AttributeError("partition_posterior_ needs inference='gibbs' (VB and CVB "
                                 "give no partition draws)")
        return self._gibbs_partitions()

    def _gibbs_partitions(self):
        pp = self.__dict__.get("_partition_posterior")
        if pp is None:
            from consensuskit.posterior import PartitionPosterior

            z = self.samples_["z"]
            pp = self._partition_posterior = PartitionPosterior(z.reshape(-1, z.shape[-1]))
        return pp

    def co_clustering(self, pairs=None):
        """Posterior probability that two points share a cluster (Gibbs only).

        ``pairs=None`` gives the dense (N, N) matrix (small N only); an int
        array (P, 2) gives the P probabilities.
        """
        check_is_fitted(self, "labels_")
        if self.inference != "gibbs":
            raise ValueError("co_clustering needs inference='gibbs'")
        Z = self.samples_["z"].reshape(-1, self.samples_["z"].shape[-1])
        return co_clustering(Z, pairs)

    def _draw_parameters(self):
        """Posterior-mean ``(log pi (D, T), log theta (D, T, L))`` of every draw (chains
        stacked), from their stored count tables or, when those were too large to keep,
        from their z."""
        o = self.samples_
        T = o["counts"].shape[-1]
        D = o["log_joint"].size
        if "label_counts" in o:
            Nkl = o["label_counts"].reshape(D, T, -1)
            Nkm = o["col_counts"].reshape(D, T, -1)
        else:
            idx = self._train_index()
            Nkl, Nkm = (np.stack(a) for a in zip(*(
                draw_counts(idx, zd, T, o["n_labels"]) for zd in o["z"].reshape(D, -1))))
        return predictive_parameters(
            o["counts"].reshape(D, T), Nkl, Nkm,
            np.asarray(o["alpha0"], dtype=np.float64).reshape(D, 1),
            np.asarray(o["beta"], dtype=np.float64).reshape(D, 1, 1),
            o["n_labels"], o["prior"])

    def _row_logliks_gibbs(self, idx):
        """(S, n) log p(x_i | draw s's posterior-mean parameters), S = chains x draws: a
        compiled pass per draw (:func:`draw_row_logliks`; the empty components, which
        share ``theta_kl = 1 / k_j``, scored once with their summed weight)."""
        o = self.samples_
        idx = np.ascontiguousarray(idx, dtype=np.int32)  # the kernels' layout, cast once
        out = np.empty((o["log_joint"].size, idx.shape[0]))
        for d, Nk, Nkl, Nkm, _ in self._each_draw_counts(self._count_index(), need_z=False):
            out[d] = draw_row_logliks(idx, Nk, Nkl, Nkm, o["alpha0"].flat[d], o["beta"].flat[d],
                                      o["n_labels"], o["prior"])
        return out

    def _each_draw_counts(self, train_idx, need_z=True):
        """``(d, N_k (T,), N_kl (T, L), N_kj (T, M), z (N,) or None)`` for every draw d
        (chains stacked), from the stored count tables or, without them, from the draw's
        z and ``train_idx`` (:meth:`_count_index`); a progress bar with ``verbose``."""
        o = self.samples_
        D, T = o["log_joint"].size, o["counts"].shape[-1]
        if "z" not in o and (need_z or "label_counts" not in o):
            what = ("the leave-one-out log-likelihood and posterior predictive need"
                    if need_z else "scores need the draws' count tables or")
            raise ValueError(f"NBCE's {what} the draws of z (gibbs_nbce(store_z=True))")
        counts = o["counts"].reshape(D, T)
        zs = o["z"].reshape(D, -1) if "z" in o else None
        stored = "label_counts" in o
        if stored:
            label_counts, col_counts = (o[k].reshape(D, T, -1) for k in ("label_counts",
                                                                          "col_counts"))
        draws = range(D)
        if self.verbose:  # a score reads every draw: minutes at large N
            from tqdm.auto import tqdm

            draws = tqdm(draws, desc="NBCE scores over draws", leave=False)
        for d in draws:
            z = None if zs is None else zs[d]
            if stored:
                Nkl, Nkm = label_counts[d], col_counts[d]
            else:
                Nkl, Nkm = draw_counts(train_idx, z, T, o["n_labels"])
            yield d, counts[d], Nkl, Nkm, z

    def _row_logliks_loo(self):
        """(S, N) ``log p(x_i | z_{-i}, x_{-i}, alpha0, beta)`` of the training rows for every
        retained draw: the row's own assignment removed from the draw's counts and ``z_i``
        summed out (the collapsed predictive of row i given the other rows).

        Why this is the pointwise log-likelihood PSIS-LOO needs: with ``u = (z_{-i},
        alpha0, beta)`` drawn from the full posterior, ``p(u | x) = p(x_i | u, x_{-i})
        p(u | x_{-i}) / p(x_i | x_{-i})``, so ``E[1 / p(x_i | u, x_{-i}) | x] = 1 / p(x_i |
        x_{-i})``: the importance ratios ``1 / p(x_i | u, x_{-i})`` turn the posterior
        into the leave-one-out posterior exactly, and the harmonic mean the importance
        sampling computes is the brute-force leave-one-out predictive.  (The in-sample
        :meth:`_row_logliks_gibbs` keeps row i in the counts: its importance ratios do not
        remove ``x_i`` and the resulting LOO is optimistic.)  Exact given each draw: pi and
        theta are conjugate (Dirichlet / stick-breaking) given the other rows' counts.
        """
        idx = np.ascontiguousarray(self._train_index(), dtype=np.int32)  # the kernels' layout
        o = self.samples_
        out = np.empty((o["log_joint"].size, idx.shape[0]))
        for d, Nk, Nkl, Nkm, z in self._each_draw_counts(idx):
            out[d] = draw_loo_logliks(idx, z, Nk, Nkl, Nkm, o["alpha0"].flat[d],
                                      o["beta"].flat[d], o["n_labels"], o["prior"])
        return out

    def _pointwise_log_likelihood(self, ensemble: Ensemble):
        """Per-row log predictive probability of the observed labels of ``ensemble``'s rows.

        Gibbs: for each row, ``log (1/S) sum_s p(x_i | E[pi, theta | z^(s), x_train])``
        — the posterior predictive of a single row averaged over the S retained
        draws (exact given each draw, since pi and theta are conditionally
        independent Dirichlet/Beta a posteriori).  Rows are scored one at a time
        (not jointly); training rows are scored with the fitted draws, i.e. they
        are in-sample.  The standard error is the Monte-Carlo (delta-method)
        error over draws, treating draws as independent.
        VB / CVB: ``log sum_k pi_k prod_j theta_{k, x_ij}`` at the variational
        posterior means (VB: xi/sum xi and rho/sum rho; CVB: the posterior means
        given the expected counts); standard error 0.
        """
        check_is_fitted(self, "labels_")
        idx = ensemble.offset_index()
        if self.inference == "gibbs":
            R = self._row_logliks_gibbs(idx)  # (S, n)
            S = R.shape[0]
            row = logsumexp(R, axis=0) - np.log(S)
            w = np.exp(R - row[None, :])  # p_s / p_bar
            var = w.var(axis=0) / S if S > 1 else np.zeros_like(row)
            return row, var
        ll = mixture_row_logliks(idx, self._log_pi, self._log_theta)
        return ll, np.zeros_like(ll)

    def _variational_parameter_draws(self, n_draws, rng):
        """``n_draws`` draws of ``(log pi (D, T), log theta (D, T, L))`` from the fitted
        approximate posterior: VB's ``q(pi) q(theta)``; CVB's conjugate posterior given its
        expected counts (``pi`` Dirichlet (FSD) or stick-breaking Betas (TSB), ``theta_kj ~
        Dir(beta + E N_kj.)``)."""
        prior, pi_par, rho = self._q_params
        T, L = rho.shape
        n_labels = np.asarray(self.ensemble_.n_labels)
        off = np.concatenate([[0], np.cumsum(n_labels)])
        if prior == "fsd" and not isinstance(pi_par, tuple):
            log_pi = log_dirichlet(rng, np.broadcast_to(pi_par, (n_draws, T)))
        elif prior == "fsd":
            a0, Nk = pi_par
            log_pi = log_dirichlet(rng, np.broadcast_to(a0 / T + Nk, (n_draws, T)))
        else:  # truncated stick-breaking: v_k ~ Beta(1 + N_k, alpha0 + N_{>k}), v_T = 1
            a0, Nk = pi_par
            gt = np.cumsum(Nk[::-1])[::-1] - Nk
            v = rng.beta(1.0 + Nk[:-1], a0 + gt[:-1], size=(n_draws, T - 1))
            v = np.concatenate([v, np.ones((n_draws, 1))], 1)
            rest = np.concatenate([np.ones((n_draws, 1)), np.cumprod(1.0 - v[:, :-1], 1)], 1)
            with np.errstate(divide="ignore"):
                log_pi = np.log(v * rest)
        log_theta = np.empty((n_draws, T, L))
        for j in range(n_labels.size):
            log_theta[:, :, off[j]:off[j + 1]] = log_dirichlet(
                rng, np.broadcast_to(rho[None, :, off[j]:off[j + 1]],
                                     (n_draws, T, n_labels[j])))
        return log_pi, log_theta

    def _seeded_variational_draws(self):
        """VB / CVB: the ``n_samples * n_chains`` parameter draws of ``inference_data_``
        (seeded by ``random_state``: the same draws at every call)."""
        rng = np.random.default_rng(check_random_state(self.random_state).randint(2**31 - 1))
        return self._variational_parameter_draws(int(self.n_samples * self.n_chains), rng)

    def _posterior_for_arviz(self):
        """Gibbs: the permutation-invariant traces.  VB / CVB: the mixing weights ``pi``
        (1, D, T) of the approximate-posterior draws the log-likelihood group is computed
        at (component order as fitted: one mode, no label switching)."""
        if self.inference == "gibbs":
            return self._arviz_posterior
        lp, _ = self._seeded_variational_draws()
        return {"pi": np.exp(lp)[None]}

    def _log_likelihood_draws(self):
        """The training rows' pointwise log-likelihood for PSIS-LOO, (chains, draws, N).

        Gibbs: :meth:`_row_logliks_loo` (each row's own assignment removed from the draw's
        counts, ``z_i`` summed out).  VB / CVB: ``log p(x_i | pi, theta)`` for
        ``n_samples * n_chains`` draws of ``(pi, theta)`` from the approximate posterior
        (:meth:`_variational_parameter_draws`, seeded by ``random_state``; one chain):
        LOO then importance-samples from the *variational* posterior, which
        ``inference_data_``'s attributes say (``log_likelihood_draws``).
        """
        check_is_fitted(self, "labels_")
        if self.inference == "gibbs":
            C, S = self.samples_["log_joint"].shape
            return self._row_logliks_loo().reshape(C, S, -1)
        lp, lt = self._seeded_variational_draws()
        idx = np.ascontiguousarray(self.ensemble_.offset_index(), dtype=np.int32)
        return np.stack([mixture_row_logliks(idx, a, b) for a, b in zip(lp, lt)])[None]

    def _posterior_predictive_draws(self, rng):
        """Gibbs: per draw, ``theta_kj ~ Dir(beta + N_kj.)`` given the draw's counts and
        ``x_ij ~ Cat(theta_{z_i j})`` with the draw's own ``z_i``: (C, S, N, M) codes."""
        if self.inference != "gibbs":
            return super()._posterior_predictive_draws(rng)
        C, S = self.samples_["log_joint"].shape
        n_labels = np.asarray(self.samples_["n_labels"])
        off = np.concatenate([[0], np.cumsum(n_labels)])
        N, M = self.ensemble_.codes.shape
        gen = np.random.default_rng(rng.randint(2**31 - 1))
        out = np.empty((C * S, N, M), dtype=np.int64)
        beta = np.asarray(self.samples_["beta"], dtype=np.float64).reshape(-1)
        for d, _, Nkl, _, z in self._each_draw_counts(self._count_index()):
            for j in range(M):
                lt = log_dirichlet(gen, beta[d] + Nkl[:, off[j]:off[j + 1]])  # (T, k_j)
                cdf = np.cumsum(np.exp(lt[z]), axis=1)  # (N, k_j)
                u = gen.random((N, 1)) * cdf[:, -1:]
                out[d, :, j] = np.minimum((u > cdf).sum(1), n_labels[j] - 1)
        return out.reshape(C, S, N, M)

    def _sample_stats_for_arviz(self):
        """Gibbs: per draw ``lp`` (the log joint of z, alpha0, beta and the data) and
        ``n_clusters`` (occupied components); the move acceptance rates are per chain
        (attributes, :meth:`_arviz_group_attrs`)."""
        if self.inference != "gibbs":
            return {}
        return {"lp": self.samples_["log_joint"], "n_clusters": self.samples_["n_occupied"]}

    def _arviz_group_attrs(self):
        if self.inference != "gibbs":
            return {}
        ms = np.asarray(self.samples_["move_stats"], dtype=np.float64)  # (C, 7)
        with np.errstate(invalid="ignore", divide="ignore"):
            return {"sample_stats": {
                "split_acceptance_rate_per_chain": (ms[:, 0] / ms[:, 2]).tolist(),
                "merge_acceptance_rate_per_chain": (ms[:, 1] / ms[:, 3]).tolist(),
                "splits_proposed_per_chain": ms[:, 2].astype(int).tolist(),
                "merges_proposed_per_chain": ms[:, 3].astype(int).tolist(),
                "group_moves_changed_per_chain": ms[:, 6].astype(int).tolist(),
                "sampler": "collapsed Gibbs with split-merge and group moves"}}

    def _log_likelihood_kind(self):
        return ("collapsed Gibbs: log p(x_i | z_-i, x_-i, alpha0, beta) per draw"
                if self.inference == "gibbs" else
                f"{self.inference.upper()}: log p(x_i | pi, theta), (pi, theta) drawn from the "
                "approximate (variational) posterior")

    # -------------------------------------------------------------- predict
    def predict_proba(self, X, unknown="error"):
        """Soft assignment of new rows to the consensus clusters, (n, n_clusters_).

        ``unknown="missing"`` treats a label that its column never showed during
        fit as missing; the default ``"error"`` raises a ValueError.

        Gibbs: the responsibilities under each draw's posterior-mean parameters,
        mapped to the consensus clusters through the draw's maps (every occupied
        component to the consensus cluster it overlaps most, as for ``membership_``),
        averaged over draws and renormalised (the mass of a draw's empty components is
        dropped).  A row whose mass is all dropped gets uniform probabilities, with
        a warning that counts such rows.
        VB/CVB: responsibilities under the variational posterior means,
        restricted to the kept clusters.
        """
        check_is_fitted(self, "labels_")
        ens = X if isinstance(X, Ensemble) else self._encode_new(X, unknown=unknown)
        idx = ens.offset_index()
        n = idx.shape[0]
        K = self.n_clusters_
        if self.inference != "gibbs":
            lj = self._log_pi[None, :] + component_loglik(idx, self._log_theta)
            lj = lj[:, self._components]
            lj -= lj.max(1, keepdims=True)
            p = np.exp(lj)
            return p / p.sum(1, keepdims=True)
        o = self.samples_
        idx = np.ascontiguousarray(idx, dtype=np.int32)  # the kernels' layout, cast once
        P = np.zeros((n, K))
        for s, Nk, Nkl, Nkm, _ in self._each_draw_counts(self._count_index(), need_z=False):
            lj, occ, total = draw_component_logliks(idx, Nk, Nkl, Nkm, o["alpha0"].flat[s],
                                                    o["beta"].flat[s], o["n_labels"], o["prior"])
            r = np.exp(lj - total[:, None])  # responsibilities of the occupied components
            mp = self._draw_maps[s][occ]
            ok = np.flatnonzero(mp >= 0)
            P += r[:, ok] @ (mp[ok, None] == np.arange(K))  # summed per consensus cluster
        tot = P.sum(1, keepdims=True)
        bad = tot[:, 0] <= 0
        if bad.any():
            # no draw put these rows in a component matched to a consensus cluster
            # (predict must not change the estimator, so the count is in the warning)
            warnings.warn(
                f"NBCE.predict_proba: {int(bad.sum())} of {n} row(s) fall only in clusters "
                "that match no consensus cluster in any draw; they get uniform "
                "probabilities", RuntimeWarning, stacklevel=2,
            )
            P[bad] = 1.0 / K
            tot[bad] = 1.0
        return P / tot

    def predict(self, X, unknown="error"):
        """Hard consensus cluster of new rows (argmax of :meth:`predict_proba`)."""
        return self.predict_proba(X, unknown=unknown).argmax(1).astype(np.int64)

    # ------------------------------------------------------------- the spec
    def to_spec(self):
        """The fitted state as values of the spec's sites (:mod:`consensuskit.models.nbce.spec`).

        Gibbs: every retained draw's posterior-mean parameters (chains stacked, D draws),
        as ``pi`` (D, T) and ``theta_j`` (D, T, k_j) with ``prior="fsd"`` (pi given
        directly).  VB / CVB: the variational posterior means as one draw, ``theta_j``
        with ``pi`` (FSD) or the sticks ``v`` (1, T-1) whose stick-breaking is pi (TSB).

        Returns
        -------
        model_kwargs : dict
            ``n_labels``, ``n_clusters`` (the truncation T) and the prior's settings.
        draws : dict
            Global site -> float64 tensor with a leading draw axis.
        """
        check_is_fitted(self, "labels_")
        n_labels = [int(k) for k in self.ensemble_.n_labels]
        off = self.ensemble_.offsets
        if self.inference == "gibbs":
            lp, lt = self._draw_parameters()  # (D, T), (D, T, L): every draw
            draws = {"pi": _as_tensor(np.exp(lp))}
            draws.update({f"theta_{j}": _as_tensor(np.exp(lt[:, :, off[j]:off[j + 1]]))
                          for j in range(len(off) - 1)})
            return dict(n_labels=n_labels, n_clusters=lp.shape[1], prior="fsd"), draws
        T = self._log_theta.shape[0]
        kw = dict(n_labels=n_labels, n_clusters=T, alpha0=float(self.alpha0),
                  beta=float(self.beta), prior=self.prior)
        pi = np.exp(self._log_pi)
        theta = np.exp(self._log_theta)
        draws = {f"theta_{j}": _as_tensor(theta[:, off[j]:off[j + 1]])[None]
                 for j in range(len(off) - 1)}
        if self.prior == "fsd":
            draws["pi"] = _as_tensor(pi)[None]
        else:  # sticks with stick_breaking(v) = pi
            rest = 1.0 - np.concatenate([[0.0], np.cumsum(pi)[:-1]])
            draws["v"] = _as_tensor(np.clip(pi[:-1] / rest[:-1], 1e-300, 1.0))[None]
        return kw, draws


def _as_tensor(a):
    import torch

    return torch.as_tensor(np.asarray(a, dtype=np.float64))
