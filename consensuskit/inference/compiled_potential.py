"""The potential energy of a spec and its gradient, built once and called cheaply.

NUTS spends nearly all its time in the potential ``U(u) = -log p(X, T(u)) - log|det J_T(u)|``
of the unconstrained parameters ``u`` and in its gradient.  Pyro recomputes both by running
the model under its effect handlers on every call (the enumerated sites contracted by a plan
found again each time) and back-propagates through a graph of a few thousand small tensor
operations.  This module builds ``(U, dU/du)`` once, as one function of a flat vector:

* :func:`traced_potential` (any spec, built-ins and users' variants): runs Pyro's potential
  and its backward pass once under :func:`torch.fx.experimental.proxy_tensor.make_fx`, which
  records the tensor operations only -- the model's Python, the handlers and the
  enumeration's contraction plan are fixed at trace time.  ``compile=True`` hands that graph
  to :func:`torch.compile` (fused C++ kernels; tens of seconds to compile, paid once).
* hand-written collapsed potentials: a built-in spec's ``model.potential`` (MM's:
  :func:`consensuskit.models.mm.potential.mm_potential`) or a user's, registered with
  :func:`register_potential`:
  the same value as Pyro's potential (checked in ``tests/test_compiled_potential.py``) in a
  few vectorised operations.

:func:`build_potential` picks the hand-written one when the spec has one and traces
otherwise.  The result, :class:`FlatPotential`, plugs into Pyro's NUTS as ``potential_fn``
with ``transforms`` (see :func:`consensuskit.inference.pyro_mcmc.fit_nuts_compiled`), so
samples come back as the spec's constrained sites, exactly as with the model itself.
Everything is float64 unless the model says otherwise (NUTS' energy error needs it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pyro
import torch

__all__ = ["FlatPotential", "traced_potential", "register_potential", "build_potential",
           "fixed_sampled_sites", "hand_written_potential"]


class _ValueWithGradient(torch.autograd.Function):
    """``U`` whose backward returns the gradient computed alongside it (no second pass)."""

    @staticmethod
    def forward(ctx, fn, *parts):
        value, grads = fn(*parts)
        ctx.save_for_backward(*grads)
        return value

    @staticmethod
    def backward(ctx, grad_out):
        return (None, *(grad_out * g for g in ctx.saved_tensors))


@dataclass
class FlatPotential:
    """``U`` and ``dU/du`` of a model's unconstrained parameters, as one compiled function.

    Attributes
    ----------
    names : list of str
        Latent sites, in the order of ``value_and_grad``'s arguments.
    unconstrained_shapes : list of torch.Size
        Shape of each site's unconstrained value.
    transforms : dict site -> Transform
        Constrained -> unconstrained (``biject_to(site support).inv``), Pyro's convention
        (``initialize_model``, ``MCMC(transforms=...)``).
    value_and_grad : callable(*tensors) -> (Tensor (), tuple of Tensors)
        ``U`` and its gradient per site; arguments are the unconstrained values (detached).
    method : str
        ``"hand-written"``, ``"traced"`` or ``"traced+compiled"``.
    init : callable(generator) -> dict site -> unconstrained Tensor
        A starting point (drawn from the prior, as Pyro's ``init_to_sample`` would).
    map_value_and_grad : callable(*tensors) -> (Tensor (), tuple of Tensors), optional
        ``-log p(X, T(u))`` without the Jacobian and its gradient: the loss of MAP by SVI
        (a point-mass guide on every latent site), as Pyro's ``TraceEnum_ELBO`` gives it.
    """

    names: list
    unconstrained_shapes: list
    transforms: dict
    value_and_grad: Callable
    method: str
    init: Callable
    map_value_and_grad: Callable | None = None

    def potential_fn(self, params: dict) -> torch.Tensor:
        """``U(params)`` for Pyro's HMC/NUTS (``params``: site -> unconstrained value).

        Differentiable in ``params``: the gradient is the one computed with the value.
        """
        parts = [params[k] for k in self.names]
        return _ValueWithGradient.apply(self._detached, *parts)

    def _detached(self, *parts):
        return self.value_and_grad(*(p.detach() for p in parts))

    def __call__(self, params: dict):
        """``(U, {site: dU/du_site})`` at ``params`` (plain tensors, no autograd)."""
        value, grads = self._detached(*(params[k] for k in self.names))
        return value, dict(zip(self.names, grads))


# ------------------------------------------------------------------ generic: traced
def _prior_init(model, model_args, model_kwargs, transforms, max_plate_nesting):
    def init(generator=None):
        state = torch.get_rng_state()
        if generator is not None:
            torch.manual_seed(int(generator.integers(2**31 - 1)))
        try:
            with pyro.poutine.block():
                tr = pyro.poutine.trace(pyro.poutine.block(model, hide_types=["param"])
                                        ).get_trace(*model_args, **model_kwargs)
        finally:
            torch.set_rng_state(state)
        return {k: t(tr.nodes[k]["value"]).detach() for k, t in transforms.items()}
    return init


def traced_potential(model, model_args=(), model_kwargs=None, *, max_plate_nesting=None,
                     compile=False) -> FlatPotential:
    """Pyro's potential of ``model`` and its gradient, traced once into one graph.

    Works for any model Pyro's NUTS accepts (enumerated discrete sites, continuous global
    and per-row sites).  ``compile=True`` compiles the graph with :func:`torch.compile`
    (inductor; needs a C++ compiler; its cost is paid once per shape of the data).

    The traced graph holds the data as constants: build one per data set.
    """
    from pyro.infer.mcmc.util import initialize_model
    from torch.fx.experimental.proxy_tensor import make_fx

    model_kwargs = dict(model_kwargs or {})
    init, pot, transforms, _ = initialize_model(
        model, model_args, model_kwargs, max_plate_nesting=max_plate_nesting,
        jit_compile=False)
    names = sorted(init)
    shapes = [init[k].shape for k in names]

    def value_and_grad(*parts):
        leaves = [p.detach().requires_grad_(True) for p in parts]
        u = pot(dict(zip(names, leaves)))
        grads = torch.autograd.grad(u, leaves)
        return u.detach(), tuple(grads)

    def map_value_and_grad(*parts):
        # -log p(X, T(u)) = U(u) + log|det J_T(u)|: Pyro's potential less its Jacobian.
        leaves = [p.detach().requires_grad_(True) for p in parts]
        u = pot(dict(zip(names, leaves)))
        for k, v in zip(names, leaves):
            to_constrained = transforms[k].inv
            u = u + to_constrained.log_abs_det_jacobian(v, to_constrained(v)).sum()
        grads = torch.autograd.grad(u, leaves)
        return u.detach(), tuple(grads)

    example = [init[k].detach() for k in names]
    # Distribution argument checks read tensor values (data-dependent branches): off while
    # recording, as under Pyro's own JIT.
    with pyro.validation_enabled(False), _no_arg_validation():
        graph = make_fx(value_and_grad)(*example)
        map_graph = make_fx(map_value_and_grad)(*example)
    fn, method = graph, "traced"
    if compile:
        fn, method = torch.compile(graph, dynamic=False, fullgraph=True), "traced+compiled"
        map_graph = torch.compile(map_graph, dynamic=False, fullgraph=True)
    return FlatPotential(names, shapes, transforms, fn, method,
                         _prior_init(model, model_args, model_kwargs, transforms,
                                     max_plate_nesting), map_graph)


class _no_arg_validation:
    def __enter__(self):
        self._old = torch.distributions.Distribution._validate_args
        torch.distributions.Distribution.set_default_validate_args(False)

    def __exit__(self, *exc):
        torch.distributions.Distribution.set_default_validate_args(self._old)


# ----------------------------------------------------------------------- registry
_HAND_WRITTEN: dict = {}


def register_potential(model, builder: Callable) -> None:
    """Use ``builder(labels, **model_kwargs) -> FlatPotential`` for ``model``'s potential.

    A user who writes a collapsed potential for a variant registers it here (or sets it as
    the model function's ``potential`` attribute, as the built-in specs do: MM's is
    :func:`consensuskit.models.mm.potential.mm_potential`); it must equal Pyro's potential
    of ``model`` up to a constant (check it against :func:`traced_potential`).
    """
    _HAND_WRITTEN[model] = builder


def hand_written_potential(model):
    """The builder of ``model``'s hand-written potential, or None: registered with
    :func:`register_potential`, else the model function's ``potential`` attribute."""
    return _HAND_WRITTEN.get(model) or getattr(model, "potential", None)


def fixed_sampled_sites(builder, model_kwargs) -> list:
    """The sites the hand-written potential ``builder`` samples that ``model_kwargs`` fixes
    or computes (its ``sampled_sites`` given a value): non-empty, the call is another model
    and must be traced."""
    return [k for k in getattr(builder, "sampled_sites", ()) if model_kwargs.get(k) is not None]


def build_potential(model, labels, model_kwargs, *, max_plate_nesting=None, method="auto",
                    compile=False) -> FlatPotential:
    """``model``'s potential on ``labels``: hand-written when registered, else traced.

    method : {"auto", "hand-written", "traced"}
        "auto": the hand-written potential unless ``model_kwargs`` fixes one of the sites
        it samples (its ``sampled_sites``), else the traced one.
    compile : bool
        Compile the function with :func:`torch.compile` (pays off on long runs).
    """
    builder = hand_written_potential(model)
    kw = dict(model_kwargs)
    if method not in ("auto", "hand-written", "traced"):
        raise ValueError(f"method must be 'auto', 'hand-written' or 'traced'; got {method!r}")
    if method == "hand-written" and builder is None:
        raise KeyError("no hand-written potential registered for this model")
    # a spec called with some of the sites the hand-written potential samples fixed or
    # computed (a user's variant) is another model: trace it
    fixed = fixed_sampled_sites(builder, kw)
    if method == "hand-written" and fixed:
        raise ValueError(f"the hand-written potential samples {fixed}, which are given")
    if method != "traced" and builder is not None and not fixed:
        return builder(labels, **kw)
    return traced_potential(model, (labels,), kw, max_plate_nesting=max_plate_nesting,
                            compile=compile)
