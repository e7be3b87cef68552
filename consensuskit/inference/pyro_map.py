"""The MAP of a spec whose latent sites are all global: ``AutoDelta`` maximised by L-BFGS.

A collapsed spec (per-row latents summed out exactly, e.g.
:func:`consensuskit.models.gbce.spec.model_collapsed`,
:func:`consensuskit.models.bce.spec.model_collapsed`)
has a log joint that is a deterministic function of its global sites.  Pyro's
``AutoDelta`` holds one point per site (in the constrained space, so without a Jacobian:
the MAP); ``Trace_ELBO().differentiable_loss`` of model and ``AutoDelta`` is then exactly
``-log p(globals, data)``, with no Monte Carlo noise, which is what L-BFGS (torch's, with
the strong Wolfe line search) needs.  With weak priors and many rows the MAP is the
maximum-likelihood estimate up to a small fraction of its standard error.

:class:`MAPEngine` is one such maximisation as an engine of the fit driver (one L-BFGS
call of ``lbfgs_iter`` iterations a step; converged when the log joint changes by less
than ``tol`` relative); :func:`fit_map` runs it.
"""

from __future__ import annotations

import math

import pyro
import torch
from pyro.infer import Trace_ELBO
from pyro.infer.autoguide import AutoDelta, init_to_sample, init_to_value

from consensuskit.inference.driver import Engine
from consensuskit.models.convention import float64_default

__all__ = ["MAPEngine", "fit_map"]


class MAPEngine(Engine):
    """Maximise ``log p(globals, data)`` of ``model(*args, **kwargs)`` over its latent sites.

    ``init_values`` (site -> tensor) start the search (e.g. a mean-field fit, which also
    fixes the labelling of the clusters); sites not given start at a prior draw.  Every
    latent site of the model must be a continuous global (no per-row latents: they would
    get a point each, which is not a marginal likelihood).
    """

    def __init__(self, model, args, kwargs, *, init_values=None, lbfgs_iter=20):
        self.model, self.args, self.kwargs = model, args, kwargs
        self.init_values = {k: torch.as_tensor(v) for k, v in (init_values or {}).items()}
        self.lbfgs_iter = int(lbfgs_iter)
        self._elbo = Trace_ELBO()

    def _loss(self, guide):
        return self._elbo.differentiable_loss(self.model, guide, *self.args, **self.kwargs)

    def init(self, rng, run=0):
        pyro.set_rng_seed(int(rng.randint(2**31 - 1)))
        fallback = init_to_sample
        init = (init_to_value(values=self.init_values, fallback=fallback) if self.init_values
                else fallback)
        guide = AutoDelta(self.model, init_loc_fn=init)
        with torch.no_grad():
            loss = float(self._loss(guide))  # builds the guide's parameters
        optim = torch.optim.LBFGS(list(guide.parameters()), max_iter=self.lbfgs_iter,
                                  line_search_fn="strong_wolfe", tolerance_grad=1e-9,
                                  tolerance_change=1e-12, history_size=50)
        return {"guide": guide, "optim": optim, "loss": loss}

    def step(self, state, rng):
        guide, optim = state["guide"], state["optim"]

        def closure():
            optim.zero_grad()
            loss = self._loss(guide)
            loss.backward()
            return loss

        optim.step(closure)
        with torch.no_grad():
            loss = float(self._loss(guide))
        if not math.isfinite(loss):
            raise FloatingPointError(f"the log joint is {-loss} at the MAP search's point")
        return {**state, "loss": loss}

    def objective(self, state) -> float:
        return -state["loss"]

    def result(self, state):
        """Site name -> MAP value (detached), from the guide's point."""
        with torch.no_grad():
            return {k: v.detach() for k, v in state["guide"].median(*self.args,
                                                                    **self.kwargs).items()}


def fit_map(model, labels, *, model_kwargs, init_values=None, max_iter=50, tol=1e-10,
            lbfgs_iter=20, seed=0, progress=False):
    """MAP of ``model`` (every latent site global and continuous) on ``labels``.

    Parameters
    ----------
    model : callable following the spec convention
    labels : LongTensor (N, M)
    model_kwargs : dict
        ``n_labels``, ``n_clusters`` and the rest (e.g. GBCE's ``features``).
    init_values : dict, optional
        Starting point, site name -> value.
    max_iter : int
        Driver steps (each ``lbfgs_iter`` L-BFGS iterations) at most.
    tol : float
        Stop when the log joint changes by at most ``tol`` (relative) over one step.
    seed : int
        Seeds the prior draws of sites without a starting value.

    Runs with torch's default dtype float64 (restored afterwards): sampled sites and
    the log joint are float64.

    Returns
    -------
    values : dict site name -> Tensor
        The MAP.
    run : :class:`consensuskit.inference.driver.Run`
        Its log joint after every step (``objectives``), ``n_iter`` and ``converged``.
    """
    from sklearn.utils import check_random_state

    from consensuskit.inference.driver import fit as drive

    engine = MAPEngine(model, (labels,), dict(model_kwargs), init_values=init_values,
                       lbfgs_iter=lbfgs_iter)
    with float64_default():
        res = drive(engine, max_iter=max_iter, n_runs=1, tol=tol,
                    rng=check_random_state(seed), progress=progress, desc="MAP",
                    unit="L-BFGS call")
    return res.best.params, res.best
