"""Stochastic variational inference for BCE with Pyro, on row minibatches.

The model is :func:`consensuskit.models.bce.spec.model`; the guide is
:func:`consensuskit.models.bce.spec.guide_enumerated` (``q(theta_i) = Dirichlet(gamma_i)``,
``z`` summed out exactly by ``TraceEnum_ELBO``).  Each step draws ``batch_size``
rows through the ``"rows"`` plate's ``subsample_size``; the ELBO is scaled by
``N / batch_size`` so that the global parameters ``alpha`` and ``beta`` get
unbiased gradients, and only the ``gamma`` rows of the batch are touched.
The same model/guide accept a streamed chunk (``codes`` of the chunk plus its
global ``subsample`` indices and ``size=N``) for data that do not fit in memory.

Parameters live in a private Pyro parameter-store scope, so fitting does not
disturb (or read) the user's global param store.
"""

from __future__ import annotations

import math

import pyro
import torch
from pyro.infer import SVI, TraceEnum_ELBO
from pyro.optim import Adam

from consensuskit.inference.driver import Run
from consensuskit.models.bce import cavi
from consensuskit.models.bce import spec as bce_model

__all__ = ["fit_svi", "empirical_bayes_model"]


def empirical_bayes_model(labels=None, **kwargs):
    """BCE's spec with ``alpha`` and ``beta`` as ``pyro.param`` sites (the paper's EB fit)."""
    alpha, beta = bce_model.point_parameters(kwargs["n_labels"], kwargs["n_clusters"],
                                             device=None if labels is None else labels.device)
    return bce_model.model(labels, alpha=alpha, beta=beta, **kwargs)


def fit_svi(ensemble, data, n_clusters, beta0, *, n_epochs=100, batch_size=None,
            learning_rate=0.05, smoothing=1e-6, random_state=None, verbose=False):
    """Fit alpha, beta and gamma by SVI.

    Parameters
    ----------
    ensemble : Ensemble
    data : LabelData
        ``ensemble.label_data(device, dtype)`` (gives device/dtype).
    n_clusters : int
    beta0 : array (K, L)
        Initial label distributions (e.g. :func:`bce_initialise.init_beta_kmeans`).
        ``gamma`` starts from a fold-in E-step with ``alpha = 1`` and ``beta0``.
    n_epochs : int
        Passes over the rows; ``ceil(N / batch_size)`` SVI steps each.
    batch_size : int or None
        Rows per step (None: ``min(N, 1024)``).
    learning_rate : float
        Adam step size.
    smoothing : float
        Floor for the initial beta only (``beta0 + smoothing``); the softmax keeps beta > 0.
    random_state : int, RandomState or None
        Seeds Pyro's minibatch draws and Dirichlet samples.

    Returns
    -------
    Run
        The fit driver's typed result: ``params`` a :class:`~consensuskit.inference.
        bce_cavi.CAVIState` (``alpha`` (K,), ``beta`` (K, L), ``gamma`` (K, N)),
        ``objectives`` (mean ELBO per epoch, full-data scale), ``n_iter`` (epochs),
        ``converged`` False (a fixed budget).
    """
    from sklearn.utils import check_random_state

    rs = check_random_state(random_state)
    dev = data.idx.device
    dtype = data.n_observed_rows.dtype
    K = n_clusters
    N = ensemble.n_samples
    bs = min(N, 1024) if batch_size is None else min(int(batch_size), N)
    steps_per_epoch = math.ceil(N / bs)
    labels = torch.as_tensor(ensemble.codes, device=dev)
    n_labels = ensemble.n_labels
    beta0 = torch.as_tensor(beta0, dtype=dtype, device=dev) + smoothing
    beta0 = cavi.update_beta(beta0, ensemble.offsets, 0.0)
    alpha0 = torch.ones(K, dtype=dtype, device=dev)
    gamma0 = cavi.fold_in(alpha0, beta0, data, max_iter=50, tol=1e-6).T.contiguous()
    padded = bce_model.pad_beta(cavi.unpack_beta(beta0, ensemble.offsets), dtype=dtype,
                                device=dev)
    logits0 = torch.log(padded.clamp_min(torch.finfo(dtype).tiny))
    valid = bce_model.label_mask(n_labels, device=dev)
    logits0 = torch.where(valid[:, None, :], logits0, torch.zeros_like(logits0))

    seed = int(rs.randint(2**31 - 1))
    bounds = []
    with pyro.get_param_store().scope():
        pyro.set_rng_seed(seed)
        from pyro.distributions import constraints

        pyro.param("alpha", alpha0.clone(), constraint=constraints.positive)
        pyro.param("beta_logits", logits0.clone())
        pyro.param("gamma", gamma0.clone(), constraint=constraints.positive)
        elbo = TraceEnum_ELBO(max_plate_nesting=2)
        svi = SVI(empirical_bayes_model, bce_model.guide_enumerated,
                  Adam({"lr": learning_rate}), loss=elbo)
        it = range(n_epochs)
        if verbose:
            from tqdm.auto import tqdm

            it = tqdm(it, desc="BCE SVI epochs")
        for _ in it:
            tot = 0.0
            for _ in range(steps_per_epoch):
                tot += svi.step(labels, n_labels=n_labels, n_clusters=K, subsample_size=bs)
            bounds.append(-tot / steps_per_epoch)
        alpha, betas = bce_model.read_point_parameters(n_labels)
        alpha = alpha.clone()
        gamma = pyro.param("gamma").detach().T.contiguous()
    beta = cavi.pack_beta(betas, dtype=dtype, device=dev)
    return Run(cavi.CAVIState(alpha, beta, gamma), bounds, n_epochs)
