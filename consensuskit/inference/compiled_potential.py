"""The potential energy of a spec and its gradient, built once and called cheaply.

NUTS spends nearly all its time in the potential ``U(u) = -log p(X, T(u)) - log|det J_T(u)|``
of the unconstrained parameters ``u`` and in its gradient.  Pyro recomputes both by running
the model under its effect handlers on every call (the enumerated sites contracted by a plan
found again each time) and back-propagates through a graph of a few thousand small tensor
operations.  This module builds ``(U, dU/du)`` once, as one function of a flat vector:

* :func:`traced_potential` (any spec, built-ins and users' variants): runs Pyro's potential
  and its backward pass once under :func:`torch.fx.experimental.proxy_tensor.make_fx`, which
  records the tensor operations only -- the model's Python, the handlers and the
  enumeration's contraction plan are fixed at trace time.  The graph is simplified exactly
  (:mod:`consensuskit.inference.graph_simplify`), run by an executor (Python, TorchScript
  or :func:`torch.compile`), and checked against Pyro's potential at random points; what
  fails falls back, counted and warned (``FlatPotential.fallbacks``).
* hand-written collapsed potentials: a built-in spec's ``model.potential`` (MM's:
  :func:`consensuskit.models.mm.potential.mm_potential`) or a user's, registered with
  :func:`register_potential`:
  the same value as Pyro's potential (checked in ``tests/test_compiled_potential.py``) in a
  few vectorised operations.

:func:`build_potential` picks the hand-written one when the spec has one and traces
otherwise.  The result, :class:`FlatPotential`, plugs into Pyro's NUTS as ``potential_fn``
of one packed vector (``vector_potential_fn``; ``constrain`` maps its draws back to the
spec's constrained sites, see :func:`consensuskit.inference.compiled_mcmc.fit_nuts_compiled`),
so samples come back as the spec's sites, exactly as with the model itself.
Everything is float64 unless the model says otherwise (NUTS' energy error needs it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property, reduce

import numpy as np
import pyro
import torch

__all__ = ["FlatPotential", "traced_potential", "register_potential", "build_potential",
           "fixed_sampled_sites", "hand_written_potential", "VECTOR_SITE"]

#: the name of the one site :meth:`FlatPotential.vector_potential_fn` reads
VECTOR_SITE = "packed_unconstrained"


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
        ``"hand-written"``, ``"traced"`` (the simplified graph run as Python),
        ``"traced+jit"`` (TorchScript), ``"traced+inductor"`` (``torch.compile``), or
        ``"pyro"`` (tracing failed or disagreed: Pyro's potential, called every time).
    init : callable(generator) -> dict site -> unconstrained Tensor
        A starting point (drawn from the prior, as Pyro's ``init_to_sample`` would).
    map_value_and_grad : callable(*tensors) -> (Tensor (), tuple of Tensors), optional
        ``-log p(X, T(u))`` without the Jacobian and its gradient: the loss of MAP by SVI
        (a point-mass guide on every latent site), as Pyro's ``TraceEnum_ELBO`` gives it.
    fallbacks : list of str
        Every step of building that failed and what was used instead (a traced potential:
        see :func:`traced_potential`); empty when the requested method is the one used.
    build : dict
        How the potential was built: CPU seconds per step, graph sizes before and after
        :func:`~consensuskit.inference.graph_simplify.simplify_graph`.
    packed_value_and_grad : callable(Tensor (D,)) -> (Tensor (), Tensor (D,)), optional
        ``U`` and its gradient on the packed vector (:meth:`pack`, sites in
        ``packed_names`` order) directly: a hand-written potential works on one vector
        anyway, a traced one has a graph of the vector (see :func:`traced_potential`);
        where it is None, :meth:`vector_potential_fn` unpacks, calls ``value_and_grad``
        and packs the gradient.
    dtypes : list of torch.dtype, optional
        Each site's dtype, in ``names`` order (a traced potential records them; else they
        are read once from a draw of ``init``): :meth:`unpack` returns each site in its own
        dtype, the packed vector has the widest (``packed_dtype``).
    """

    names: list
    unconstrained_shapes: list
    transforms: dict
    value_and_grad: Callable
    method: str
    init: Callable
    map_value_and_grad: Callable | None = None
    fallbacks: list = field(default_factory=list)
    build: dict = field(default_factory=dict)
    packed_value_and_grad: Callable | None = None
    dtypes: list | None = None

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

    # ---------------------------------------------------------- the sites as one vector
    @property
    def packed_names(self) -> list:
        """The sites in the packed vector's order: sorted by name, the order in which
        Pyro's HMC lays the sites out in its mass matrix, so that NUTS on the packed vector
        draws the same momenta for each site as NUTS with one site per model site."""
        return list(self._packing[0])

    @cached_property
    def _packing(self):
        """``(names, shapes, sizes, dtypes)`` of the packed vector's sites (computed once:
        NUTS unpacks at every leapfrog step)."""
        shapes = dict(zip(self.names, self.unconstrained_shapes))
        dtypes = self.dtypes
        if dtypes is None:
            draw = self.init(np.random.default_rng(0))
            dtypes = [draw[k].dtype for k in self.names]
        dtypes = dict(zip(self.names, dtypes))
        names = tuple(sorted(self.names))
        return (names, tuple(torch.Size(shapes[k]) for k in names),
                tuple(int(torch.Size(shapes[k]).numel()) for k in names),
                tuple(dtypes[k] for k in names))

    @property
    def packed_size(self) -> int:
        """``D``, the length of the packed vector."""
        return sum(self._packing[2])

    @property
    def packed_dtype(self) -> torch.dtype:
        """The packed vector's dtype: the widest of the sites' (as ``torch.cat`` makes it)."""
        return _widest(self._packing[3])

    def pack(self, params: dict) -> torch.Tensor:
        """The unconstrained sites ``params`` (site -> Tensor of its shape) as one vector
        (D,), in the order of ``packed_names``."""
        return torch.cat([params[k].reshape(-1) for k in self.packed_names])

    def unpack(self, u: torch.Tensor) -> dict:
        """Inverse of :meth:`pack` on the last dimension: ``u`` (..., D) -> site -> Tensor
        (..., *its unconstrained shape) in the site's own dtype, in the order of
        ``packed_names``."""
        names, shapes, sizes, dtypes = self._packing
        if u.shape[-1] != sum(sizes):
            raise ValueError(f"a packed vector has {sum(sizes)} entries; got {u.shape[-1]}")
        lead = u.shape[:-1]
        return {k: part.reshape(lead + shape).to(dtype)
                for k, part, shape, dtype in zip(names, torch.split(u, sizes, dim=-1), shapes,
                                                 dtypes)}

    def constrain(self, u: torch.Tensor) -> dict:
        """Packed unconstrained draws ``u`` (..., D) -> site -> constrained values
        (``transforms[site].inv``), as Pyro's ``MCMC.get_samples`` returns them."""
        return {k: self.transforms[k].inv(v) if k in self.transforms else v
                for k, v in self.unpack(u).items()}

    def vector_potential_fn(self, params: dict) -> torch.Tensor:
        """``U`` of the packed vector ``params[VECTOR_SITE]`` (D,), for Pyro's NUTS: one site
        instead of one per model site, as Pyro's leapfrog, kinetic energy and mass-matrix
        steps loop over sites in Python (about 30 us a site per leapfrog step)."""
        return _ValueWithGradient.apply(self._vector_value_and_grad, params[VECTOR_SITE])

    def _vector_value_and_grad(self, u):
        if self.packed_value_and_grad is not None:
            value, grad = self.packed_value_and_grad(u.detach())
            return value, (grad,)
        value, grads = self(self.unpack(u))
        return value, (torch.cat([grads[k].reshape(-1) for k in self._packing[0]]),)


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


#: executors of a traced graph, fastest first: what a failed one falls back to
EXECUTORS = ("inductor", "jit", "fx")


def traced_potential(model, model_args=(), model_kwargs=None, *, max_plate_nesting=None,
                     compile=False, batch=True, verify=3, atol=None, rtol=None,
                     progress=False) -> FlatPotential:
    """Pyro's potential of ``model`` and its gradient, traced once into one graph.

    Works for any model Pyro's NUTS accepts (enumerated discrete sites, continuous global
    and per-row sites).  Steps, each counted in ``FlatPotential.build``:

    1. record Pyro's potential and its backward pass with ``make_fx`` (the model's Python,
       the handlers and the enumeration's contraction plan are fixed at trace time);
    2. rewrite the graph exactly (:mod:`consensuskit.inference.graph_simplify`: in-place
       ops out of place, data-only work folded into constants, repeats merged), and, with
       ``batch`` (default), run the operations that repeat per site or per column as
       batches (:mod:`consensuskit.inference.graph_batching`; checked against Pyro's
       potential at the ``verify`` points, the unbatched graph kept where it disagrees or
       where batching saves no calls: ``build["batched"]``);
    3. run it with an *executor* (``compile``):

       * ``False`` or ``"fx"``: the graph's generated Python (no build cost);
       * ``"jit"``: :func:`torch.jit.trace` of it (about a second; the TorchScript
         interpreter has a smaller cost per operation);
       * ``True`` or ``"inductor"``: :func:`torch.compile` (fused C++ loops; a C++ compiler
         and about a minute of CPU for a model the size of notebook 03's variant);

    4. check it (``verify`` points: the prior draw it was traced at and ``verify - 1``
       more) against Pyro's own potential and gradient, run the ordinary way.  A model
       whose Python branches on parameter values records only the branch taken at the
       trace point: this check catches it;
    5. edit a copy of the graph into a function of the packed vector NUTS samples
       (``packed_value_and_grad``), checked against the per-site graph.

    Whatever fails -- tracing, compiling, the check -- falls back to the next executor in
    ``inductor -> jit -> fx``, and past ``fx`` to Pyro's potential called each time
    (``method="pyro"``).  Each fallback is warned and listed, with its reason, in
    ``FlatPotential.fallbacks``; nothing falls back silently.

    batch : bool
        Batch the operations repeated across sites (step 2); ``False`` keeps the graph as
        recorded (to compare, or where a model's graph is small anyway).  Either way the
        draws are the same up to rounding: the batched graph computes each member's value
        by the same operations.
    atol, rtol : float, optional
        Tolerance of the check; default from the model's dtype (float64: 1e-9, else 1e-4
        relative; absolute the same times ``1 + |U|``): the graph runs the same operations
        as Pyro in the same order except where an executor fuses them or a batch
        reduces in another order.
    progress : bool
        A tqdm bar naming the step under way (a build takes seconds to a minute: 28-41 s
        CPU for a variant at M = 40).

    The traced graph holds the data as constants: build one per data set.
    """
    from pyro.infer.mcmc.util import initialize_model
    from torch.distributions.transforms import identity_transform

    model_kwargs = dict(model_kwargs or {})
    init, pot, transforms, _ = initialize_model(
        model, model_args, model_kwargs, max_plate_nesting=max_plate_nesting,
        jit_compile=False)
    names = sorted(init)
    shapes = [init[k].shape for k in names]
    executor = _executor_name(compile)
    prior = _prior_init(model, model_args, model_kwargs, transforms, max_plate_nesting)
    example = [init[k].detach() for k in names]
    points = [example] + [[d[k] for k in names]
                          for d in (prior(_rng(i)) for i in range(max(verify - 1, 0)))]

    value_and_grad = _with_gradient(lambda leaves: pot(dict(zip(names, leaves))))

    def map_loss():
        # -log p(X, T(u)): Pyro's potential on the constrained values (identity transforms,
        # so no Jacobian term), fed T(u).  Adding the Jacobian back to U instead computed it
        # twice (about a sixth of the MAP loss's graph on notebook 03's variant).
        constrained_init = {k: transforms[k].inv(init[k]).detach() for k in names}
        _, joint, _, _ = initialize_model(
            model, model_args, model_kwargs, max_plate_nesting=max_plate_nesting,
            transforms={k: identity_transform for k in names},
            initial_params=constrained_init, jit_compile=False)

        return _with_gradient(
            lambda leaves: joint({k: transforms[k].inv(v) for k, v in zip(names, leaves)}))

    fallbacks: list = []
    build: dict = {}
    steps = _BuildProgress(progress, batch)
    fn, method, graph = _compiled(value_and_grad, example, points, executor, verify > 0,
                                  (atol, rtol), fallbacks, build, batch, steps)
    if graph is not None:
        steps.start("packing")
    dtypes = [p.dtype for p in example]
    packed = None if graph is None else _packed(*graph, shapes, dtypes, points,
                                                 (atol, rtol), fallbacks, build)
    steps.close()
    map_fn = _LazyCompiled(map_loss, example, points, executor, verify > 0,
                           (atol, rtol), fallbacks, batch)
    return FlatPotential(names, shapes, transforms, _split_output(fn), method, prior,
                         _split_output(map_fn), fallbacks=fallbacks, build=build,
                         packed_value_and_grad=packed, dtypes=dtypes)


def _with_gradient(fn):
    """``(*parts) -> (value, *gradients)`` of the scalar ``fn(leaves)`` by autograd, with grad
    mode on: recorded once by make_fx, it runs at every step only where a trace fell back to
    Pyro's potential, and NUTS then calls it inside an autograd Function's forward, where
    grad mode is off."""
    def value_and_grad(*parts):
        with torch.enable_grad():
            leaves = [p.detach().requires_grad_(True) for p in parts]
            u = fn(leaves)
            return (u.detach(), *torch.autograd.grad(u, leaves))
    return value_and_grad


def _widest(dtypes) -> torch.dtype:
    """The dtype ``torch.cat`` gives tensors of ``dtypes``: the packed vector's."""
    return reduce(torch.promote_types, dtypes)


class _BuildProgress:
    """The steps of :func:`traced_potential` on a tqdm bar (one tick a step, the step under
    way named beside it); does nothing when not ``enabled``."""

    def __init__(self, enabled, batch):
        self.bar = None
        if enabled:
            from tqdm.auto import tqdm

            # recording, batching, compiling and checking, packing
            self.bar = tqdm(total=3 + bool(batch), desc="tracing the potential", unit="step",
                            leave=False)
        self._started = False

    def start(self, step):
        """Tick the step under way off and name the next one."""
        if self.bar is None:
            return
        if self._started and self.bar.n < self.bar.total:
            self.bar.update(1)
        self._started = True
        self.bar.set_postfix_str(step)

    def close(self):
        if self.bar is not None:
            self.bar.update(self.bar.total - self.bar.n)
            self.bar.close()


def _packed(graph, executor, shapes, dtypes, points, tolerance, fallbacks, build):
    """The traced graph as a function of the packed vector (sites sorted by name, as
    :meth:`FlatPotential.pack` lays them out): ``u (D,) -> (U, dU/du (D,))``, the split of
    ``u`` and the concatenation of the gradient written into the graph
    (:func:`_packed_graph`), so that NUTS on the packed vector
    (:meth:`FlatPotential.vector_potential_fn`) runs no Python per step beyond one call.
    Checked against the per-site graph at the check points; None (warned, in
    ``fallbacks``) where building or the check fails: NUTS then unpacks in Python."""
    import time
    import warnings

    t0 = time.process_time()

    def pack(point):
        return torch.cat([p.reshape(-1) for p in point])

    def per_site(point):
        out = graph(*point)
        return out[0], pack(out[1:])
    try:
        fn = _run_with(executor, _packed_graph(graph, shapes, dtypes), [pack(points[0])])
        bad = _mismatch(lambda *point: fn(pack(point)),
                        [(point, per_site(point)) for point in points], tolerance)
    except Exception as exc:  # noqa: BLE001 - an optimisation that failed is skipped
        bad = f"{type(exc).__name__}: {str(exc)[:200]}"
    build["packed_seconds"] = time.process_time() - t0
    if bad is None:
        return fn
    reason = (f"the potential of the packed vector failed ({bad}); NUTS unpacks the vector "
              "in Python at every step")
    fallbacks.append(reason)
    warnings.warn(f"compiled potential: {reason}", RuntimeWarning, stacklevel=3)
    return None


def _packed_graph(graph, shapes, dtypes):
    """A copy of ``graph`` (inputs: one tensor per site, output ``(U, *grads)``) whose one
    input is the packed vector (split into the sites' shapes and converted back to each
    site's dtype: the vector has the widest, as ``torch.cat`` makes it) and whose output is
    ``(U, the gradients concatenated)``: a few operations per site more, no re-recording."""
    import copy
    import operator

    aten = torch.ops.aten
    gm = copy.deepcopy(graph)
    g = gm.graph
    inputs = [n for n in g.nodes if n.op == "placeholder"]
    if len(inputs) != len(shapes):
        raise ValueError(f"the graph has {len(inputs)} inputs for {len(shapes)} sites")
    with g.inserting_before(inputs[0]):
        u = g.placeholder("packed")
    first = next(n for n in g.nodes if n.op != "placeholder")
    sizes = [int(torch.Size(s).numel()) for s in shapes]
    packed_dtype = _widest(dtypes)
    with g.inserting_before(first):
        pieces = g.call_function(aten.split_with_sizes.default, (u, sizes))
        for i, (node, shape) in enumerate(zip(inputs, shapes)):
            piece = g.call_function(operator.getitem, (pieces, i))
            if dtypes[i] != packed_dtype:
                piece = g.call_function(aten._to_copy.default, (piece,), {"dtype": dtypes[i]})
            node.replace_all_uses_with(
                g.call_function(aten.reshape.default, (piece, list(shape))))
    for node in inputs:
        g.erase_node(node)
    output = next(n for n in g.nodes if n.op == "output")
    values = output.args[0]
    with g.inserting_before(output):
        flat = [g.call_function(aten.reshape.default, (v, [-1])) for v in values[1:]]
        grad = g.call_function(aten.cat.default, (flat,))
    output.args = ((values[0], grad),)
    g.lint()
    gm.recompile()
    return gm


def _executor_name(compile) -> str:
    if compile is True:
        return "inductor"
    if compile is False or compile is None:
        return "fx"
    if compile not in EXECUTORS:
        raise ValueError(f"compile must be a bool or one of {EXECUTORS}; got {compile!r}")
    return compile


def _rng(i):
    return np.random.default_rng(7919 + i)


def _split_output(fn):
    """``(U, *grads)`` of a graph -> ``(U, tuple of grads)``."""
    def value_and_grad(*parts):
        out = fn(*parts)
        return out[0], tuple(out[1:])
    return value_and_grad


def _compiled(function, example, points, executor, verify, tolerance, fallbacks, build,
              batch=True, steps=None):
    """``(callable, method, (graph, executor) or None)``: ``function`` traced, simplified
    (and batched) and run by ``executor``, or by the next one down where a step fails (each
    failure appended to ``fallbacks``); the fx graph and its executor's name are returned
    for :func:`_packed` (None when Pyro's potential is used).  ``steps``: a
    :class:`_BuildProgress` told of each step."""
    import time
    import warnings

    from torch.fx.experimental.proxy_tensor import make_fx

    from consensuskit.inference.graph_batching import batch_graph
    from consensuskit.inference.graph_simplify import functional_graph, simplify_graph

    def fall(reason):
        fallbacks.append(reason)
        warnings.warn(f"compiled potential: {reason}", RuntimeWarning, stacklevel=4)

    steps = steps or _BuildProgress(False, batch)
    t0 = time.process_time()
    steps.start("recording")
    try:
        # Distribution argument checks read tensor values (data-dependent branches): off
        # while recording, as under Pyro's own JIT.
        with pyro.validation_enabled(False), _no_arg_validation():
            graph = make_fx(function)(*example)
            graph = functional_graph(graph, example)
        graph, stats = simplify_graph(graph)
    except Exception as exc:  # noqa: BLE001 - any failure to record means: run Pyro's
        fall(f"tracing failed ({type(exc).__name__}: {str(exc)[:200]}); "
             "Pyro's potential is called at every step")
        return function, "pyro", None
    build.update(trace_seconds=time.process_time() - t0, **stats)
    reference = _References(function, points) if verify else None
    if batch:
        steps.start("batching repeated operations")
        t1 = time.process_time()
        try:
            batched, batch_stats = batch_graph(graph, example)
            batched, _ = simplify_graph(batched)
            bad = _mismatch(batched, reference, tolerance) if verify else None
        except Exception as exc:  # noqa: BLE001 - an optimisation that failed is skipped
            bad = f"{type(exc).__name__}: {str(exc)[:200]}"
        build["batch_seconds"] = time.process_time() - t1
        if bad is None:
            # kept only where it saves calls (sites of different shapes may leave nothing
            # to batch, and then the gathers cost more than they save)
            build.update(batch_stats)
            build["batched"] = batch_stats["calls_after"] < batch_stats["calls_before"]
            if build["batched"]:
                graph = batched
        elif verify and _mismatch(graph, reference, tolerance) is not None:
            pass  # the recorded graph disagrees too: the executors' checks below report it
        else:
            fall(f"batching the graph's repeated operations failed ({bad}); "
                 "the unbatched graph is used")
    start = EXECUTORS.index(executor)
    for name in EXECUTORS[start:]:
        steps.start(f"compiling ({name}) and checking")
        t1 = time.process_time()
        try:
            fn = _run_with(name, graph, example)
        except Exception as exc:  # noqa: BLE001 - a failed compiler falls back, counted
            fall(f"executor {name!r} failed ({type(exc).__name__}: {str(exc)[:200]})")
            continue
        build[f"{name}_seconds"] = time.process_time() - t1
        bad = _mismatch(fn, reference, tolerance) if verify else None
        if bad is None:
            return fn, "traced" if name == "fx" else f"traced+{name}", (graph, name)
        fall(f"executor {name!r} disagrees with Pyro's potential: {bad}")
    return function, "pyro", None


def _run_with(name, graph, example):
    if name == "fx":
        return graph
    if name == "jit":
        with warnings_ignored():
            fn = torch.jit.trace(graph, tuple(example), check_trace=False)
        fn(*example)
        return fn
    fn = torch.compile(graph, dynamic=False, fullgraph=True)
    fn(*example)
    return fn


class warnings_ignored:
    """TorchScript's tracer warns about every Python value it bakes in (all of them are
    constants of the recorded graph already)."""

    def __enter__(self):
        import warnings

        self._ctx = warnings.catch_warnings()
        self._ctx.__enter__()
        warnings.simplefilter("ignore")

    def __exit__(self, *exc):
        self._ctx.__exit__(*exc)


class _References:
    """``function``'s outputs at the check points, computed once (Pyro's potential is
    slow) and shared by every check of a build."""

    def __init__(self, function, points):
        self.function = function
        self.points = points
        self._outputs: dict = {}

    def __iter__(self):
        for i, point in enumerate(self.points):
            if i not in self._outputs:
                self._outputs[i] = self.function(*point)
            yield point, self._outputs[i]


def _mismatch(fn, reference, tolerance):
    """None if ``fn`` equals the ``reference`` outputs (value and every gradient) at every
    check point, else a sentence saying where and by how much."""
    atol, rtol = tolerance
    for i, (point, want) in enumerate(reference):
        got = fn(*point)
        dtype = want[0].dtype
        r = rtol if rtol is not None else (1e-9 if dtype == torch.float64 else 1e-4)
        scale = 1.0 + float(want[0].abs())
        a = atol if atol is not None else r * scale
        for j, (g, w) in enumerate(zip(got, want)):
            if not torch.allclose(g.to(w.dtype), w, rtol=r, atol=a, equal_nan=True):
                err = float((g.to(w.dtype) - w).abs().max())
                what = "the value" if j == 0 else f"gradient {j - 1}"
                return f"{what} differs by {err:.3g} at check point {i} (tolerance {a:.3g})"
    return None


class _LazyCompiled:
    """The MAP loss's graph, built on its first call (NUTS never needs it): ``make()``
    returns the function to trace, so the work of setting it up is deferred too."""

    def __init__(self, make, example, points, executor, verify, tolerance, fallbacks,
                 batch=True):
        self._make = make
        self._args = (example, points, executor, verify, tolerance, fallbacks)
        self._batch = batch
        self._fn = None
        self.build: dict = {}

    def __call__(self, *parts):
        if self._fn is None:
            self._fn, _, _ = _compiled(self._make(), *self._args, self.build, self._batch)
        return self._fn(*parts)


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
                    compile=False, progress=False) -> FlatPotential:
    """``model``'s potential on ``labels``: hand-written when registered, else traced.

    method : {"auto", "hand-written", "traced"}
        "auto": the hand-written potential unless ``model_kwargs`` fixes one of the sites
        it samples (its ``sampled_sites``), else the traced one.
    compile : bool or {"fx", "jit", "inductor"}
        The traced potential's executor (:func:`traced_potential`); ignored by a
        hand-written one.
    progress : bool
        A bar over the traced build's steps (:func:`traced_potential`).
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
                            compile=compile, progress=progress)
