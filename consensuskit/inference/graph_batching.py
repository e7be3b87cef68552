"""Run the repeated small operations of a recorded graph as one batched operation each.

A spec's potential repeats the same work once per site: ``for j in range(M)`` in the model
gives M ``Dirichlet`` sites, each with its own stick-breaking transform, Jacobian, log
density and backward pass -- the same ATen operations on tensors of the same shapes,
recorded M times.  On CPU each operation costs about a microsecond whatever its size, so
notebook 03's variant (12 columns, 25 simplex sites) spends most of a gradient in some
3,400 operations on tensors of 2 to 9 numbers.  :func:`batch_graph` rewrites such a graph
so that operations of the same kind run together:

1. *classes*: two operations may run as one when they apply the same ATen function to
   arguments of the same shapes and dtypes with the same literal arguments.  To keep the
   batches' inputs lined up, a class is the set of operations with the same *structure*:
   the same expression tree down to the graph's inputs (forward), or, where that tree is
   unique, the same tree of uses up to the outputs (reverse: the backward pass of site j
   starts from a gradient whose expression differs per site, but flows to the same kind of
   output);
2. *schedule*: operations run in waves, each wave all the ready members of a class
   (members that depend on other members of the class wait for a later wave);
3. *batching*: each wave runs as one call under :func:`torch.vmap` (its members' inputs
   stacked, or taken straight from the wave that made them), and the whole program is
   recorded again with ``make_fx``, so the result is a plain graph of ATen operations.

The arithmetic of each member is unchanged (vmap applies the same operation to each slice);
a reduction over a batched tensor may round differently in the last bit, which is why
:func:`consensuskit.inference.compiled_potential.traced_potential` checks the batched graph
against Pyro's potential before using it.  A wave that vmap cannot run (an operation
without a batching rule, a view of a non-contiguous batch) runs its members one by one,
counted in the returned statistics.
"""

from __future__ import annotations

import collections
import operator

import torch
from torch.fx import GraphModule, Node
from torch.fx.interpreter import Interpreter
from torch.utils import _pytree as pytree

__all__ = ["batch_graph"]

_aten = torch.ops.aten
#: ``a op b == b op a`` exactly in floating point: arguments put in a canonical order
_COMMUTATIVE = {_aten.add.Tensor, _aten.mul.Tensor}
#: operations whose every tensor input is given a batch dimension (vmap's rule for
#: ``log_sigmoid_backward`` with an unbatched gradient resizes its output, which ATen warns
#: about at every call)
_ALL_INPUTS_BATCHED = {_aten.log_sigmoid_backward.default}


def _meta(value):
    """Shape and dtype of a tensor (nested for tuples), the repr of anything else."""
    if isinstance(value, torch.Tensor):
        return ("T", tuple(value.shape), str(value.dtype))
    if isinstance(value, (tuple, list)):
        return tuple(_meta(v) for v in value)
    return ("v", repr(value))


def _values(gm: GraphModule, example) -> dict:
    """Every node's value at ``example`` (for shapes and dtypes)."""
    env: dict = {}

    class _Recorder(Interpreter):
        def run_node(self, node):
            env[node] = super().run_node(node)
            return env[node]

    _Recorder(gm).run(*example)
    return env


def _encode(arg, code):
    """``arg`` with every node replaced by ``code(node)``, hashable."""
    if isinstance(arg, Node):
        return ("n", code(arg))
    if isinstance(arg, (list, tuple)):
        return (type(arg).__name__, tuple(_encode(a, code) for a in arg))
    if isinstance(arg, dict):
        return ("d", tuple((k, _encode(v, code)) for k, v in sorted(arg.items())))
    return ("v", repr(arg))


class _Plan:
    """The classes, the schedule and each batched node's place in its wave."""

    def __init__(self, gm: GraphModule, example):
        self.gm = gm
        self.nodes = list(gm.graph.nodes)
        self.topo = {n: i for i, n in enumerate(self.nodes)}
        env = _values(gm, example)
        self.args = self._canonical_args(env)
        self.key = self._classes(env)
        self.schedule = self._schedule()
        self.where = self._align()

    def _canonical_args(self, env) -> dict:
        args = {}
        for n in self.nodes:
            if n.op != "call_function":
                continue
            a = tuple(n.args)
            if (n.target in _COMMUTATIVE and len(a) == 2 and not n.kwargs
                    and all(isinstance(x, Node) for x in a)
                    and _meta(env[a[1]]) < _meta(env[a[0]])):
                a = (a[1], a[0])
            args[n] = a
        return args

    def _local_key(self, n, env, code):
        """What a batch's members must share: the function, literal arguments and the
        argument shapes (``code``) -- ``select``'s index may differ (it becomes an index)."""
        a = list(self.args[n])
        if n.target is _aten.select.int and len(a) == 3:
            a[2] = "any index"
        return (str(n.target), _encode(tuple(a), code), _encode(dict(n.kwargs), code))

    def _classes(self, env) -> dict:
        """node -> class key (only calls; a class of one is not batched)."""
        intern: dict = {}
        calls = [n for n in self.nodes if n.op == "call_function"]
        shape_key = {n: self._local_key(n, env, lambda a: _meta(env[a])) for n in calls}
        forward: dict = {}
        for n in self.nodes:
            if n.op in ("placeholder", "get_attr"):
                forward[n] = intern.setdefault(("leaf", _meta(env[n])), len(intern))
            elif n.op == "call_function":
                k = (shape_key[n], self._local_key(n, env, forward.__getitem__))
                forward[n] = intern.setdefault(k, len(intern))
        reverse: dict = {}
        for n in reversed(self.nodes):
            if n.op == "output":
                reverse[n] = intern.setdefault(("output",), len(intern))
                continue
            uses = []
            for u in n.users:
                if u.op == "output":
                    uses.append((reverse[u], 0))  # any output: the gradients of the sites
                    continue
                flat = pytree.tree_flatten((self.args[u], u.kwargs))[0]
                uses += [(reverse[u], p) for p, a in enumerate(flat) if a is n]
            own = shape_key.get(n, ("leaf", _meta(env[n])))
            reverse[n] = intern.setdefault((own, tuple(sorted(uses))), len(intern))
        n_forward = collections.Counter(forward.values())
        n_reverse = collections.Counter(reverse.values())
        key = {}
        for n in calls:
            if n_forward[forward[n]] > 1:
                key[n] = ("forward", forward[n])
            elif n_reverse[reverse[n]] > 1:
                key[n] = ("reverse", reverse[n])
            else:
                key[n] = ("alone", self.topo[n])
        return key

    def _schedule(self) -> list:
        """Waves: ``("node", n)`` or ``("batch", [members])``, in an order that respects
        every dependency.  A class runs once none of its members is still waiting on
        something other than another member (else the largest ready set runs)."""
        ancestors = {}
        for n in self.nodes:
            bits = 0
            for p in n.all_input_nodes:
                bits |= ancestors[p] | (1 << self.topo[p])
            ancestors[n] = bits
        members = collections.defaultdict(list)
        for n, k in self.key.items():
            members[k].append(n)
        waiting_inputs = {n: len(n.all_input_nodes) for n in self.nodes}
        ready = {n for n in self.nodes if waiting_inputs[n] == 0}
        done: set = set()
        schedule = []

        def run(wave):
            schedule.append(("batch", wave) if len(wave) > 1 else ("node", wave[0]))
            for n in wave:
                done.add(n)
                ready.discard(n)
                for u in n.users:
                    waiting_inputs[u] -= 1
                    if waiting_inputs[u] == 0:
                        ready.add(u)

        while ready:
            alone = sorted((n for n in ready
                            if n.op != "call_function" or len(members[self.key[n]]) == 1),
                           key=self.topo.get)
            if alone:
                for n in alone:
                    run([n])
                continue
            by_class = collections.defaultdict(list)
            for n in sorted(ready, key=self.topo.get):
                by_class[self.key[n]].append(n)
            fired = False
            for k, wave in by_class.items():
                bits = 0
                for n in wave:
                    bits |= 1 << self.topo[n]
                if not any(m not in done and m not in ready and not ancestors[m] & bits
                           for m in members[k]):
                    run(wave)
                    fired = True
            if not fired:
                run(max(by_class.values(), key=len))
        if len(done) != len(self.nodes):
            raise RuntimeError("graph batching: the schedule missed nodes (a cycle?)")
        return schedule

    def _align(self) -> dict:
        """node -> (wave, position); members ordered like the waves their inputs come
        from, so that a wave's input is usually another wave's output as it stands."""
        where = {}
        for w, (kind, wave) in enumerate(self.schedule):
            if kind != "batch":
                continue

            def order(n):
                inputs = [where.get(a, (len(self.schedule), self.topo[a]))
                          for a in pytree.tree_flatten(self.args[n])[0] if isinstance(a, Node)]
                return (tuple(inputs), self.topo[n])
            wave.sort(key=order)
            for i, n in enumerate(wave):
                where[n] = (w, i)
        return where


def _stacked(values):
    """Per-member values stacked on a new first dimension (tuples element by element)."""
    if isinstance(values[0], tuple):
        return tuple(torch.stack(v) for v in zip(*values))
    return torch.stack(values)


class _Program:
    """The batched program as a Python function of the graph's inputs (what ``make_fx``
    records)."""

    def __init__(self, plan: _Plan):
        self.plan = plan
        self.unbatched_waves = 0

    def __call__(self, *inputs):
        plan = self.plan
        self.value: dict = {}
        self.batch: dict = {}
        self.slices: dict = {}
        feed = iter(inputs)
        for w, (kind, item) in enumerate(plan.schedule):
            if kind == "batch":
                self.batch[w] = self._wave(item)
                continue
            n = item
            if n.op == "placeholder":
                self.value[n] = next(feed)
            elif n.op == "get_attr":
                self.value[n] = operator.attrgetter(n.target)(plan.gm)
            elif n.op == "call_function":
                self.value[n] = self._call(n)
            elif n.op == "output":
                return self._map(n.args[0])
        raise RuntimeError("graph batching: the graph has no output")

    def _get(self, n):
        if n in self.value:
            return self.value[n]
        w, i = self.plan.where[n]
        if w not in self.slices:
            b = self.batch[w]
            if isinstance(b, tuple):
                parts = [t.unbind(0) for t in b]
                self.slices[w] = [tuple(p[j] for p in parts) for j in range(len(parts[0]))]
            else:
                self.slices[w] = b.unbind(0)
        return self.slices[w][i]

    def _map(self, arg):
        return pytree.tree_map_only(Node, self._get, arg)

    def _call(self, n):
        stacked = self._stack_of_a_wave(n)
        if stacked is not None:
            return stacked
        return n.target(*self._map(self.plan.args[n]), **self._map(dict(n.kwargs)))

    def _stack_of_a_wave(self, n):
        """``torch.stack`` of the members of one wave (a spec stacking its per-column
        blocks, as BCE's ``pad_beta``): that wave's batch, reordered, with no unbinding."""
        if n.target is not _aten.stack.default or n.kwargs or not n.args:
            return None
        parts = n.args[0]
        dim = n.args[1] if len(n.args) > 1 else 0
        if not parts or not all(isinstance(p, Node) and p in self.plan.where for p in parts):
            return None
        waves = {self.plan.where[p][0] for p in parts}
        if len(waves) != 1:
            return None
        w = waves.pop()
        if isinstance(self.batch[w], tuple):
            return None
        return self._members(w, parts).movedim(0, dim)

    def _column(self, column):
        """The batched value of one argument position: ``(value, batched?)``."""
        plan = self.plan
        if all(c is column[0] for c in column):
            return self._get(column[0]), False
        sources = {plan.where[c][0] if c in plan.where else None for c in column}
        if len(sources) == 1 and None not in sources:
            return self._members(sources.pop(), column), True
        return _stacked([self._get(c) for c in column]), True

    def _members(self, w, nodes):
        """Wave ``w``'s batch at the positions of ``nodes`` (its members), in their order:
        the batch itself where that is its order, else one ``index_select``."""
        b = self.batch[w]
        index = [self.plan.where[n][1] for n in nodes]
        if index == list(range(len(self.plan.schedule[w][1]))):
            return b
        ix = torch.tensor(index)
        return pytree.tree_map(lambda t: t.index_select(0, ix), b)

    def _wave(self, wave):
        plan = self.plan
        first = wave[0]
        flats = [pytree.tree_flatten((plan.args[m], dict(m.kwargs))) for m in wave]
        spec = flats[0][1]
        columns = list(zip(*(flat for flat, _ in flats)))
        values, batched = [], []
        for column in columns:
            if isinstance(column[0], Node):
                v, b = self._column(column)
            elif all(c == column[0] for c in column):
                v, b = column[0], False
            else:
                v, b = list(column), None  # a literal that differs: select's index
            values.append(v)
            batched.append(b)
        if first.target in _ALL_INPUTS_BATCHED:
            for p, (v, b) in enumerate(zip(values, batched)):
                if b is False and isinstance(v, torch.Tensor):
                    values[p] = v.expand(len(wave), *v.shape)
                    batched[p] = True
        try:
            return self._vmapped(first.target, values, batched, spec)
        except Exception:  # noqa: BLE001 - no batching rule or a bad view: one by one
            self.unbatched_waves += 1
            return _stacked([self._call(m) for m in wave])

    @staticmethod
    def _vmapped(target, values, batched, spec):
        if None in batched:
            if target is not _aten.select.int or batched[0]:
                raise ValueError("only select's index may differ between members")
            x, dim, index = values
            return x.index_select(dim, torch.tensor(index)).movedim(dim, 0)
        positions = [p for p, b in enumerate(batched) if b]
        if not positions:
            raise ValueError("members with no batched input")

        def one(*parts):
            vals = list(values)
            for p, t in zip(positions, parts):
                vals[p] = t
            args, kwargs = pytree.tree_unflatten(vals, spec)
            return target(*args, **kwargs)
        return torch.vmap(one)(*(values[p] for p in positions))


def batch_graph(gm: GraphModule, example_inputs) -> tuple[GraphModule, dict]:
    """``gm`` re-recorded with its repeated same-shape operations run in batches.

    gm : a functional graph of ATen operations (``make_fx`` output, see
        :func:`consensuskit.inference.graph_simplify.functional_graph`).
    example_inputs : sequence of Tensors, its inputs (shapes and dtypes are what matter).

    Returns the new graph and counts: ``{"batches", "batched_nodes", "unbatched_waves",
    "calls_before", "calls_after"}`` (``unbatched_waves``: waves vmap could not run,
    computed one member at a time instead).
    """
    from torch.fx.experimental.proxy_tensor import make_fx

    plan = _Plan(gm, example_inputs)
    program = _Program(plan)
    new = make_fx(program)(*example_inputs)
    waves = [w for kind, w in plan.schedule if kind == "batch"]

    def calls(g):
        return sum(1 for n in g.graph.nodes
                   if n.op == "call_function" and n.target is not operator.getitem)
    return new, {"batches": len(waves), "batched_nodes": sum(map(len, waves)),
                 "unbatched_waves": program.unbatched_waves,
                 "calls_before": calls(gm), "calls_after": calls(new)}
