"""The joint graph of a captured graph with repeated blocks: one block's forward and backward traced,
the other blocks stamped from them.

    plan_for(gm) -> plan | None
    trace_joint_by_segments(plan, grad_index, make_joint, trace) -> (GraphModule, ReuseCount) | None

A whole joint trace (`joint.trace_joint`) records the forward in program order, then the backward
in the order autograd's engine runs it: prefix, blocks 1..k, suffix forward; suffix, blocks k..1,
prefix backward. This module traces a *reduced* captured graph instead, the prefix, block 1 and the
suffix (which reads block 1's output where it read block k's), with the same joint function, fake
mode and decompositions, and records where each region of the trace begins: the forward's block
boundaries as the captured nodes run, and the backward's as autograd reaches the block's output
and its input (tensor hooks on them, which record and change nothing). The joint graph is then
built in the whole trace's order: block 1's forward region copied for blocks 2..k with their own
inputs (weights, the previous block's output), its backward region copied for blocks k..2 with their
own saved values, weights and incoming gradient (the suffix's for block k, block j+1's outgoing one
for block j), each node named as make_fx names it and given a fake value of its own (the recipes of
`segments.py`, checked against block 1's metadata).

Why the backward regions stamp: autograd's engine (one thread on fake tensors) runs the ready node
of highest sequence number first; a block's nodes have higher numbers than every node before it,
and while a block has nodes left to run, one of them is ready (each depends only on its own block's
and later nodes). So block j's backward runs whole between the moment its output's gradient is
complete and the moment its input's is, as block 1's runs in the reduced trace, with the same ops
on the same metadata. That holds where nothing but the carried value links a block to the rest of
the graph with gradients; what could break it is refused, and the caller traces the whole graph:
- exactly one value is carried from a block to the next (from the prefix into block 1, from block k
  into the suffix), it requires grad, and nothing else reads it;
- a block's other inputs are its own placeholders (its weights, read by no other node) or values
  shared by every block that require no grad (an attention mask, rotary tables);
- no output of the graph reads a block's value; no custom op, constant tensor or in-place op inside a
  block's trace; the trace's regions read only what the argument above allows (checked node by node).
"""

from __future__ import annotations

import collections
import collections.abc
from typing import Callable

import torch
import torch.fx
from torch.fx._lazy_graph_module import _make_graph_module
from torch.fx.experimental import proxy_tensor
from torch.func import functionalize

from .. import logs
from .repeats import metadata
from .segments import (ReuseCount, _Refused, _outside, _recipes, _sharing, _stamped_meta, log_traced_whole,
                       segmentable_repeats)


def plan_for(gm: torch.fx.GraphModule) -> "_Plan | None":
    """The blocks of `gm` and what each reads, where the argument above can hold; else None (logged).
    `plan.forward()` runs the reduced captured graph: its outputs are the whole graph's (the same ops
    on inputs of the same metadata), which `joint.fake_outputs` reads instead of running every block."""
    repeats = segmentable_repeats(gm)
    if repeats is None:
        return None
    try:
        return _Plan(gm, [list(b) for b in repeats.blocks])
    except Exception as error:  # noqa: BLE001 - _Refused, or a gap of this path: the whole trace decides
        log_traced_whole(len(repeats.blocks), ", joint", error)
        return None


def trace_joint_by_segments(plan: "_Plan", grad_index: dict, make_joint: Callable, trace: Callable):
    """`make_joint(forward, after_forward)` builds the joint function of `joint.trace_joint` around
    a functionalized forward; `trace(joint)` traces it as trace_joint does. `grad_index`:
    primal index -> index of its gradient among the joint's outputs. The joint graph module and what
    was traced and stamped, or None (the caller traces the whole graph)."""
    try:
        traced, count = plan.trace(grad_index, make_joint, trace)
    except Exception as error:  # noqa: BLE001 - _Refused, or a gap of this path: the whole trace decides
        log_traced_whole(len(plan.blocks), ", joint", error)
        return None
    logs.emit("compile_time", f"autograd: joint graph of {count.blocks} repeated blocks, {count.stamped_blocks} "
                              f"stamped: {count.traced_nodes} ATen nodes traced, {count.stamped_nodes} stamped")
    return traced, count


# -- the captured graph: what each block reads ---------------------------------------------------


class _Plan:
    def __init__(self, gm: torch.fx.GraphModule, blocks: list):
        self.gm, self.blocks = gm, blocks
        self.placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        body = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
        first, last = body.index(blocks[0][0]), body.index(blocks[-1][-1])
        self.prefix, self.suffix = body[:first], body[last + 1:]
        self.output = next(n for n in gm.graph.nodes if n.op == "output")
        self.outside = [_outside(b) for b in blocks]
        self._classify()
        self._check_users()

    def _classify(self) -> None:
        """Each outside value (by first use) of block 1, as every block reads it: "carried" (block j-1's
        node at one position), "shared" (the same node for every block), "own" (a placeholder of each
        block's own)."""
        widths = {len(o) for o in self.outside}
        if len(widths) != 1:
            raise _Refused("blocks read different numbers of outside values")
        index = [{n: p for p, n in enumerate(b)} for b in self.blocks]
        self.kinds = []
        for i, first in enumerate(self.outside[0]):
            values = [o[i] for o in self.outside]
            later = values[1:]
            if all(v is first for v in values):
                if metadata(_example(first))[-1]:
                    raise _Refused("a value shared by every block requires grad")
                self.kinds.append(("shared",))
            elif all(v in index[j] for j, v in enumerate(later)) and len({index[j][v] for j, v in enumerate(later)}) == 1:
                self.kinds.append(("carried", index[0][later[0]]))
            elif all(v.op == "placeholder" for v in values) and len(set(values)) == len(values):
                self.kinds.append(("own",))
            else:
                raise _Refused("a block's input is neither carried, shared nor its own")
        carried = [k for k in self.kinds if k[0] == "carried"]
        if len(carried) != 1:
            raise _Refused(f"{len(carried)} values carried from block to block")
        self.carried_index = self.kinds.index(carried[0])
        self.carried_position = carried[0][1]
        if not all(metadata(_example(o[self.carried_index]))[-1] for o in self.outside):
            raise _Refused("the carried value does not require grad")
        # A traced op depends on its arguments' metadata and constants: every block's inputs must have
        # block 1's (sizes, strides, offset, dtype, device, requires_grad) and share storage as its do.
        first = [_example(o) for o in self.outside[0]]
        for values in ([_example(o) for o in outside] for outside in self.outside[1:]):
            if [metadata(v) for v in values] != [metadata(v) for v in first] or _sharing(values) != _sharing(first):
                raise _Refused("a block's inputs differ from block 1's in metadata")
        last = _example(self.blocks[-1][self.carried_position])
        if metadata(last) != metadata(_example(self.blocks[0][self.carried_position])):
            raise _Refused("the suffix's input differs from block 1's output in metadata")

    def _check_users(self) -> None:
        own = {o[i] for o in self.outside for i, k in enumerate(self.kinds) if k[0] == "own"}
        for j, block in enumerate(self.blocks):
            inside = set(block)
            for i, kind in enumerate(self.kinds):
                if kind[0] == "own" and not set(self.outside[j][i].users) <= inside:
                    raise _Refused("a block's placeholder is read outside the block")
            after = set(self.blocks[j + 1]) if j + 1 < len(self.blocks) else set(self.suffix)
            carried = block[self.carried_position]
            for node in block:
                for user in node.users:
                    if user in inside:
                        continue
                    if node is not carried or user not in after:
                        raise _Refused("a block's value is read beyond the next block")
        entering = self.outside[0][self.carried_index]
        if not set(entering.users) <= set(self.blocks[0]):
            raise _Refused("the value entering block 1 is read elsewhere")
        if own & set(self.output.all_input_nodes):
            raise _Refused("a block's placeholder is an output")

    # -- the reduced trace ----------------------------------------------------------------------

    def forward(self, marks: "_Marks | None" = None) -> Callable:
        """The reduced captured graph as a function: prefix, block 1, suffix (reading block 1's output
        where it read block k's). With `marks`, run under the joint trace, it records the regions."""
        last, first = self.blocks[-1], self.blocks[0]
        rename = {last[p]: first[p] for p in range(len(first))}

        def forward(*primals):
            env = dict(zip(self.placeholders, primals))
            _run(self.prefix, env)
            if marks is not None:
                marks.inputs = [_node_of(env[o]) for o in self.outside[0]]
                _hook(env[self.outside[0][self.carried_index]], marks, "entering")
                marks.block_start = _length()
            _run(first, env)
            carried = env[first[self.carried_position]]
            if marks is not None:
                marks.block_end = _length()
                marks.carried = _node_of(carried)
                _hook(carried, marks, "leaving")
            for node in self.suffix:
                env[node] = _call(node, env, rename)
            values = torch.fx.node.map_arg(self.output.args[0], lambda n: env[rename.get(n, n)])
            return tuple(values) if isinstance(values, (tuple, list)) else (values,)
        return forward

    def trace(self, grad_index: dict, make_joint: Callable, trace: Callable):
        self.grad_index = grad_index
        marks = _Marks()

        def after_forward():
            marks.forward_end = _length()

        traced = trace(make_joint(functionalize(self.forward(marks), remove="mutations"), after_forward))
        return _Stitcher(self, traced, marks).run()


def _example(node: torch.fx.Node):
    return node.meta.get("example_value", node.meta.get("val"))


def _run(nodes, env) -> None:
    for node in nodes:
        env[node] = _call(node, env, {})


def _call(node: torch.fx.Node, env: dict, rename: dict):
    args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), lambda n: env[rename.get(n, n)])
    if node.op == "call_function":
        return node.target(*args, **kwargs)
    if node.op == "call_method":
        return getattr(args[0], node.target)(*args[1:], **kwargs)
    raise _Refused(f"a {node.op} node")


class _Marks:
    """Where the reduced trace's regions begin (graph lengths) and its boundary values' ATen nodes."""
    inputs: list
    carried: torch.fx.Node
    block_start = block_end = forward_end = None

    def __init__(self):
        self.hooks: dict[str, tuple[int, torch.fx.Node]] = {}


def _tracer():
    mode = proxy_tensor.get_proxy_mode()
    if mode is None:
        raise _Refused("no make_fx trace")
    return mode.tracer


def _length() -> int:
    return len(_tracer().graph.nodes)


def _inner(value: torch.Tensor) -> torch.Tensor:
    """The tensor under functionalization's wrapper: the one make_fx and autograd see."""
    if torch._C._functorch.is_functionaltensor(value):
        return torch._from_functional_tensor(value)
    return value


def _node_of(value) -> torch.fx.Node:
    if not isinstance(value, torch.Tensor):
        raise _Refused("a boundary value that is not a tensor")
    slot = proxy_tensor.get_proxy_slot(_inner(value), _tracer(), None)
    if slot is None:
        raise _Refused("a boundary value without a traced node")
    return slot.proxy.node


def _hook(value: torch.Tensor, marks: _Marks, name: str) -> None:
    """Records, when autograd reaches `value`, the graph's length and the gradient's node; returns
    nothing, so the gradient is the one the whole trace passes on."""
    inner = _inner(value)
    if not inner.requires_grad or inner.grad_fn is None:
        raise _Refused("a carried value without autograd history")

    def record(grad):
        if name in marks.hooks:
            raise _Refused(f"autograd reached the {name} value twice")
        marks.hooks[name] = (_length(), _node_of(grad))
    inner.register_hook(record)


# -- the joint graph, in the whole trace's order ------------------------------------------------------


class _Values(collections.abc.Mapping):
    """A copy's view of values: a reduced-trace node's value is that of the node it is copied to."""

    def __init__(self, lookup):
        self.lookup = lookup

    def __getitem__(self, node):
        return self.lookup[node].meta["val"]

    def __setitem__(self, node, value):  # _stamped_meta records here; the copy's meta holds it
        pass

    def __iter__(self):
        return iter(self.lookup)

    def __len__(self):
        return len(self.lookup)


class _Stitcher:
    def __init__(self, plan: _Plan, traced: torch.fx.GraphModule, marks: _Marks):
        self.plan, self.traced, self.marks = plan, traced, marks
        self.nodes = list(traced.graph.nodes)
        self.count = ReuseCount(blocks=len(plan.blocks))
        self._regions()
        self._check()

    def _regions(self) -> None:
        m = self.marks
        if set(m.hooks) != {"entering", "leaving"}:
            raise _Refused("autograd did not reach the carried values")
        (leaving, self.grad_in), (entering, self.grad_out) = m.hooks["leaving"], m.hooks["entering"]
        cuts = [m.block_start, m.block_end, m.forward_end, leaving, entering, len(self.nodes) - 1]
        if cuts != sorted(cuts) or self.nodes[-1].op != "output":
            raise _Refused("the trace's regions are not in the expected order")
        n = self.nodes
        self.head = n[:cuts[0]]                       # placeholders and the prefix's forward
        self.block_fw, self.suffix_fw = n[cuts[0]:cuts[1]], n[cuts[1]:cuts[2]]
        self.suffix_bw, self.block_bw = n[cuts[2]:cuts[3]], n[cuts[3]:cuts[4]]
        self.prefix_bw = n[cuts[4]:-1]
        self.output = n[-1]

    def _check(self) -> None:
        """Each region reads only what the module docstring's argument allows."""
        m = self.marks
        fw, bw = set(self.block_fw), set(self.block_bw)
        inputs = set(m.inputs)
        if len(inputs) != len(m.inputs):
            raise _Refused("two inputs of block 1 are one traced value")
        for node in self.block_fw + self.block_bw:
            if node.op != "call_function":
                raise _Refused(f"a {node.op} node in block 1's trace")
            if isinstance(node.target, torch._ops.OpOverload) and node.target._schema.is_mutable:
                raise _Refused(f"in-place op {node.target} in block 1's trace")
        for node in self.block_fw:
            if not set(node.all_input_nodes) <= fw | inputs:
                raise _Refused("block 1's forward reads a value it was not given")
        for node in self.block_bw:
            if not set(node.all_input_nodes) <= fw | bw | inputs | {self.grad_in}:
                raise _Refused("block 1's backward reads a value it was not given")
        if m.carried not in fw or self.grad_out not in bw or self.grad_in in fw | bw:
            raise _Refused("the carried values' nodes are not where expected")
        later = set(self.suffix_fw) | set(self.suffix_bw)
        for node in self.block_fw:
            outside = {u for u in node.users if u not in fw and u not in bw}
            if outside and (node is not m.carried or not outside <= later):
                raise _Refused("a value of block 1's forward is read beyond it")
        self.grad_outputs = {}  # position in block 1's backward -> output index
        grads = list(self.output.args[0])
        for node in self.block_bw:
            for user in node.users:
                if user in bw:
                    continue
                if user is self.output:
                    continue
                if node is not self.grad_out or user not in set(self.prefix_bw):
                    raise _Refused("a value of block 1's backward is read beyond it")
        self.bw_position = {node: p for p, node in enumerate(self.block_bw)}
        for index, value in enumerate(grads):
            if value in bw:
                self.grad_outputs.setdefault(index, self.bw_position[value])
        if self.grad_out in set(grads):
            raise _Refused("the gradient leaving block 1 is an output")

    def run(self):
        plan, m = self.plan, self.marks
        self.graph = torch.fx.Graph()
        self.main: dict = {}
        self.recipes = _portable(_recipes(self.traced), self.nodes)
        k = len(plan.blocks)
        for node in self.head:
            self._copy(node, self.main, stamped=False)
        placeholders = [n for n in self.head if n.op == "placeholder"]
        block_inputs, carried = [], None
        fw_copies = []
        for j in range(k):
            inputs = self._inputs(j, placeholders, carried)
            block_inputs.append(inputs)
            lookup = collections.ChainMap({}, dict(zip(m.inputs, inputs)), self.main) if j else self.main
            for node in self.block_fw:
                self._copy(node, lookup, stamped=j > 0)
            fw_copies.append(lookup)
            carried = lookup[m.carried]
        suffix = collections.ChainMap({}, {m.carried: carried}, self.main)
        for node in self.suffix_fw + self.suffix_bw:
            self._copy(node, suffix, stamped=False)
        grad = suffix[self.grad_in]
        grad_copies = [None] * k
        for j in reversed(range(k)):
            lookup = collections.ChainMap({}, {self.grad_in: grad}, fw_copies[j]) if j else \
                collections.ChainMap(self.main, {self.grad_in: grad})
            for node in self.block_bw:
                self._copy(node, lookup, stamped=j > 0)
            grad_copies[j] = lookup
            grad = lookup[self.grad_out]
        prefix = collections.ChainMap({}, {self.grad_out: grad}, suffix)
        for node in self.prefix_bw:
            self._copy(node, prefix, stamped=False)
        self._finish(prefix, placeholders, grad_copies)
        self.count.stamped_blocks = k - 1
        return _make_graph_module(self.traced, self.graph), self.count  # lazy: its code only if asked

    def _inputs(self, j: int, placeholders: list, carried) -> list:
        """Block j's inputs in the stitched graph, in block 1's order."""
        plan, m = self.plan, self.marks
        if j == 0:
            return [self.main[n] for n in m.inputs]
        by_captured = dict(zip(plan.placeholders, (self.main[p] for p in placeholders)))
        inputs = []
        for i, kind in enumerate(plan.kinds):
            if kind[0] == "shared":
                inputs.append(self.main[m.inputs[i]])
            elif kind[0] == "carried":
                inputs.append(carried)
            else:
                inputs.append(by_captured[plan.outside[j][i]])
        return inputs

    def _copy(self, node: torch.fx.Node, lookup, stamped: bool) -> None:
        if node.op == "placeholder":
            new = self.graph.placeholder(node.name)
            new.meta = dict(node.meta)
        elif node.op == "get_attr":
            new = self.graph.get_attr(node.target)
            new.meta = dict(node.meta)
        else:
            args = torch.fx.node.map_arg(node.args, lookup.__getitem__)
            kwargs = torch.fx.node.map_arg(node.kwargs, lookup.__getitem__)
            name = None
            if isinstance(node.target, torch._ops.OpOverload):
                name = self.graph._target_to_str(node.target.overloadpacket.__name__)
            new = self.graph.create_node(node.op, node.target, args, kwargs, name=name)
            meta = _stamped_meta(node, args, kwargs, self.recipes[node], _Values(lookup), [])
            new.meta = {**{k: v for k, v in node.meta.items() if k not in meta}, **meta}
        lookup[node] = new
        if stamped:
            self.count.stamped_nodes += 1
        elif node.op != "placeholder":
            self.count.traced_nodes += 1

    def _finish(self, lookup, placeholders: list, grad_copies: list) -> None:
        """The output: block 1's weight gradients' positions give every block's (`grad_index`)."""
        plan = self.plan
        traced_values = list(self.output.args[0])
        values = list(torch.fx.node.map_arg(tuple(traced_values), lookup.__getitem__))
        for i, kind in enumerate(plan.kinds):
            if kind[0] != "own":
                continue
            template = plan.grad_index.get(plan.placeholders.index(plan.outside[0][i]))
            position = self.grad_outputs.get(template) if template is not None else None
            for j in range(1, len(plan.blocks)):
                index = plan.grad_index.get(plan.placeholders.index(plan.outside[j][i]))
                if (index is None) != (template is None):
                    raise _Refused("blocks' weights differ in requiring grad")
                if index is None:
                    continue
                if traced_values[index] is not None:
                    raise _Refused("a later block's weight has a gradient in the reduced trace")
                if position is None:
                    if traced_values[template] is not None:
                        raise _Refused("block 1's weight gradient is not its backward's")
                    continue
                values[index] = grad_copies[j][self.block_bw[position]]
        self.graph.output(tuple(values))
        self.graph.output_node().meta = dict(self.output.meta)


def _portable(recipes: dict, nodes: list) -> dict:
    """`segments._recipes` with storages owned by an input named by its placeholder node rather than
    by position, so that a stamped block's copy of a weight's view shares its own weight's storage."""
    placeholders = [n for n in nodes if n.op == "placeholder"]

    def port(recipe):
        if recipe[0] == "alias" and recipe[1][0] == "input":
            return ("alias", (placeholders[recipe[1][1]], None))
        if recipe[0] == "items":
            return ("items", recipe[1], tuple(port(r) for r in recipe[2]))
        return recipe
    return {node: port(r) for node, r in recipes.items()}
