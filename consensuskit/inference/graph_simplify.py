"""Exact rewrites of a recorded tensor graph, so that each call runs fewer operations.

A potential traced with :func:`torch.fx.experimental.proxy_tensor.make_fx` (see
:mod:`consensuskit.inference.compiled_potential`) holds thousands of small ATen operations;
on CPU each costs its dispatch (about a microsecond) whatever its size, so their number,
not their arithmetic, sets the time of a call.  Many are avoidable:

* work on the data alone (masks of missing labels, index tensors, padding of constants,
  ``x == 0`` tests on the labels): it gives the same tensors at every call, so it is
  evaluated once here and stored in the graph as a constant (*folding*);
* the same operation on the same arguments recorded twice (Pyro's handlers and the
  backward pass often recompute a value): kept once (*common subexpressions*);
* ``detach``/``alias``/``lift_fresh_copy``: identities once no autograd runs on the graph;
* views that change nothing (``permute`` by the identity, ``view``/``reshape``/``expand``/
  ``squeeze`` to the shape, strides and dtype they were given, as recorded in the node's
  ``meta["val"]``): Pyro's broadcasting records many on 0-d and already-aligned tensors
  (124 of the 1,185 call nodes of notebook 03's batched gradient graph) (*shape identities*);
* in-place operations are first rewritten out of place (:func:`functional_graph`), so that
  folding and merging never share a buffer that a later operation would overwrite.

Every rewrite keeps each output bit-for-bit (the same operations on the same values, in the
same order); ``tests/test_compiled_potential.py`` checks the outputs at random points.
"""

from __future__ import annotations

import operator

import torch
from torch.fx import GraphModule, Node
from torch.fx.node import map_arg

__all__ = ["functional_graph", "simplify_graph"]

_aten = torch.ops.aten
#: ops that return their (single) argument's values: identities outside autograd
_IDENTITIES = {_aten.detach.default, _aten.lift_fresh_copy.default, _aten.alias.default}
#: views that return their argument unchanged when shape, strides and dtype stay the same
_VIEWS = {_aten.permute.default, _aten.view.default, _aten.reshape.default,
          _aten._unsafe_view.default, _aten.expand.default, _aten.squeeze.default,
          _aten.squeeze.dim, _aten.squeeze.dims}
_RANDOM_WORDS = ("rand", "bernoulli", "normal", "uniform", "multinomial", "poisson",
                 "exponential", "geometric", "cauchy", "dropout")


def functional_graph(gm: GraphModule, example_inputs) -> GraphModule:
    """``gm`` re-recorded with its in-place operations written out of place.

    example_inputs : sequence of Tensors, the graph's inputs (values do not matter beyond
        shapes and dtypes: the graph has no value-dependent branches left).
    """
    from torch.fx.experimental.proxy_tensor import make_fx

    return make_fx(torch.func.functionalize(gm, remove="mutations"))(*example_inputs)


def _pure(node: Node) -> bool:
    """A call whose result depends on its arguments only (no mutation, no randomness)."""
    if node.op != "call_function":
        return False
    target = node.target
    schema = getattr(target, "_schema", None)
    if schema is not None and schema.is_mutable:
        return False
    name = str(target)
    return not any(w in name for w in _RANDOM_WORDS)


def _shape_identity(node: Node) -> bool:
    """A view whose recorded result has its argument's shape, strides and dtype (so the
    same values in the same layout), not itself an output of the graph."""
    if node.op != "call_function" or node.target not in _VIEWS or not node.args:
        return False
    source = node.args[0]
    if not isinstance(source, Node) or any(u.op == "output" for u in node.users):
        return False
    out, arg = node.meta.get("val"), source.meta.get("val")
    if not (isinstance(out, torch.Tensor) and isinstance(arg, torch.Tensor)):
        return False
    return (out.shape == arg.shape and out.stride() == arg.stride()
            and out.dtype == arg.dtype)


def simplify_graph(gm: GraphModule) -> tuple[GraphModule, dict]:
    """Fold data-only work, merge repeats and drop identities in ``gm`` (in place).

    ``gm`` must be functional (:func:`functional_graph`).  Returns ``gm`` and counts:
    ``{"nodes_before", "nodes_after", "folded", "merged", "identities",
    "shape_identities"}``.
    """
    graph = gm.graph
    stats = {"nodes_before": len(graph.nodes)}
    n_id = n_view = 0
    for node in list(graph.nodes):
        if (node.op == "call_function" and node.target in _IDENTITIES and len(node.args) == 1
                and not node.kwargs):
            node.replace_all_uses_with(node.args[0])
            graph.erase_node(node)
            n_id += 1
        elif _shape_identity(node):
            node.replace_all_uses_with(node.args[0])
            graph.erase_node(node)
            n_view += 1
    stats["identities"] = n_id
    stats["shape_identities"] = n_view

    # folding: a pure call whose inputs are all constants is a constant
    const: dict = {}
    for node in graph.nodes:
        if node.op == "get_attr":
            const[node] = operator.attrgetter(node.target)(gm)
        elif _pure(node) and all(d in const for d in node.all_input_nodes):
            args = map_arg(node.args, const.__getitem__)
            kwargs = map_arg(node.kwargs, const.__getitem__)
            const[node] = node.target(*args, **kwargs)
    n_fold = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node not in const:
            continue
        if not isinstance(const[node], torch.Tensor):
            continue
        if all(u in const for u in node.users):
            continue  # only feeds other constants: dropped below
        name = f"_folded_{n_fold}"
        n_fold += 1
        gm.register_buffer(name, const[node].detach())  # strides kept (views stay valid)
        with graph.inserting_before(node):
            new = graph.get_attr(name)
        node.replace_all_uses_with(new, delete_user_cb=lambda u: u not in const)
    graph.eliminate_dead_code()
    stats["folded"] = n_fold

    # common subexpressions: same pure op on the same argument nodes and literals
    seen: dict = {}
    n_merge = 0
    for node in list(graph.nodes):
        if not _pure(node):
            continue
        key = (node.target, repr(node.args), repr(node.kwargs))
        if key in seen:
            node.replace_all_uses_with(seen[key])
            graph.erase_node(node)
            n_merge += 1
        else:
            seen[key] = node
    graph.eliminate_dead_code()
    stats["merged"] = n_merge
    graph.lint()
    gm.recompile()
    stats["nodes_after"] = len(graph.nodes)
    return gm, stats
