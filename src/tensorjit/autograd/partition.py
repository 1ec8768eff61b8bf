"""Splitting a joint graph into a forward graph and a backward graph.

The forward graph computes the outputs (and the new values of mutated inputs) plus the
values the backward needs; the backward graph takes those saved values and the tangents
and returns the gradients. Which values to save is the decision:

- `save_all`: every forward value the backward reads is saved (the reference);
- `min_cut` (default): a minimum cut over the forward values, weighted by their size in
  bytes, decides what to save; cheap values (pointwise ops, views) behind the cut are
  recomputed in the backward from what was saved. Matrix products, convolutions, random
  ops and reductions are never recomputed: they are either saved or not needed, except
  inside a torch.utils.checkpoint region (nodes tagged `recompute`), whose values are never
  saved but its outputs (`_must_recompute`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.fx

from .joint import RECOMPUTE, TracedGraph
from .maxflow import INFINITY, FlowGraph

aten = torch.ops.aten


@dataclass
class Partition:
    forward: torch.fx.GraphModule   # primals -> (outputs..., mutated values..., saved...)
    backward: torch.fx.GraphModule  # (saved..., tangents...) -> gradients of grad_inputs
    num_saved: int
    saved_names: list[str]


def _backward_nodes(graph: torch.fx.Graph, tangents: set[torch.fx.Node]) -> set[torch.fx.Node]:
    """Nodes that depend on a tangent."""
    result = set(tangents)
    for node in graph.nodes:
        if node.op == "call_function" and any(a in result for a in node.all_input_nodes):
            result.add(node)
    return result


def _recomputable(node: torch.fx.Node) -> bool:
    if node.op == "get_attr":
        return True  # a constant of the graph: both halves read it, nothing to save
    if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
        return node.op == "call_function"  # getitem and Python operators on sizes
    tags = node.target.tags
    if torch.Tag.nondeterministic_seeded in tags:
        return False  # random: recomputing would draw new numbers
    if torch.Tag.pointwise in tags or torch.Tag.view_copy in tags:
        return True
    return node.target.is_view or node.target in _CHEAP


_CHEAP = {aten.view.default, aten.expand.default, aten.t.default, aten.permute.default, aten.slice.Tensor,
          aten.select.int, aten.unsqueeze.default, aten.squeeze.dim, aten.clone.default,
          aten._to_copy.default, aten.full.default, aten.zeros.default, aten.ones.default,
          aten.scalar_tensor.default, aten.arange.start, aten.arange.default, aten.detach.default}


def _weight(node: torch.fx.Node) -> float:
    value = node.meta.get("val")
    if isinstance(value, torch.Tensor):
        numel = value.numel()
        if not isinstance(numel, int):
            # A size known only at run time (nonzero, masked_select): no guard may be added; count it large.
            numel = numel.node.hint if numel.node.has_hint() else 1 << 20
        return float(numel * value.element_size()) + 1.0  # +1: prefer fewer values at equal size
    return 1.0


def choose_saved(traced: TracedGraph, mode: str) -> list[torch.fx.Node]:
    graph = traced.graph_module.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    primals, tangents = placeholders[:traced.num_primals], set(placeholders[traced.num_primals:])
    backward = _backward_nodes(graph, tangents)
    forward = [n for n in graph.nodes if n.op != "output" and n not in backward]
    # A gradient that does not depend on a tangent (zeros: `angle` of a real input, `det` of a
    # singular matrix) is a forward value the backward graph returns: it reads it like any other.
    outputs = next(n for n in graph.nodes if n.op == "output").args[0]
    gradients = {g for g in outputs[traced.num_outputs + len(traced.mutated_inputs):] if isinstance(g, torch.fx.Node)}
    needed = [n for n in forward if n in gradients or any(u in backward for u in n.users)]
    if mode == "save_all":
        return needed
    if mode != "min_cut":
        raise ValueError(f"tensorjit: unknown partitioner {mode!r}; valid partitioners are: min_cut, save_all")
    results = {o for o in outputs[:traced.num_outputs + len(traced.mutated_inputs)] if isinstance(o, torch.fx.Node)}
    return _min_cut(forward, backward, primals, gradients, _ancestors(results))


def _ancestors(nodes: set[torch.fx.Node]) -> set[torch.fx.Node]:
    """`nodes` and every node they are computed from."""
    found, stack = set(), list(nodes)
    while stack:
        node = stack.pop()
        if node not in found:
            found.add(node)
            stack.extend(node.all_input_nodes)
    return found


def _min_cut(forward: list[torch.fx.Node], backward: set[torch.fx.Node], primals: list[torch.fx.Node],
             gradients: set[torch.fx.Node], computing_results: set[torch.fx.Node]) -> list[torch.fx.Node]:
    flow = FlowGraph()
    source, sink = "source", "sink"
    forward_set = set(forward)
    forced = _must_recompute(forward_set, gradients, computing_results)
    for node in forward:
        flow.add_edge((node, "in"), (node, "out"), INFINITY if node in forced else _weight(node))
        if node in gradients:
            flow.add_edge((node, "out"), sink, INFINITY)
        if node in forced:
            pass  # computable in the backward from what it reads, whatever its cost
        elif node in primals or not _recomputable(node) or _policy_saves(node):
            flow.add_edge(source, (node, "in"), INFINITY)  # available in the forward only
        for user in node.users:
            if user in forward_set:
                flow.add_edge((node, "out"), (user, "in"), INFINITY)
            elif user in backward:
                flow.add_edge((node, "out"), sink, INFINITY)
    source_side = flow.min_cut(source, sink)
    return [n for n in forward if (n, "in") in source_side and (n, "out") not in source_side]


def _must_recompute(forward: set[torch.fx.Node], gradients: set[torch.fx.Node],
                    computing_results: set[torch.fx.Node]) -> set[torch.fx.Node]:
    """Forward values of a checkpointed region (tagged `recompute`, joint.RECOMPUTE) that the backward
    recomputes and never reads saved, as eager's torch.utils.checkpoint. Not forced: the region's
    outputs that later ops of the forward computation read (`computing_results`: saved at the
    boundary, as eager's later ops save their inputs; untagged nodes that only prepare backward
    values do not count) and random ops (recomputing would draw new numbers)."""
    forced = set()
    for node in forward:
        if not node.meta.get(RECOMPUTE) or node in gradients or _policy_saves(node):
            continue
        if any(user in computing_results and not user.meta.get(RECOMPUTE) for user in node.users):
            continue
        if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload) and \
                torch.Tag.nondeterministic_seeded in node.target.tags:
            continue
        forced.add(node)
    return forced


def _policy_saves(node: torch.fx.Node) -> bool:
    """Whether a selective-checkpoint policy tagged on `node` says to save its output (then it is
    not recomputed, as any matrix product outside a region)."""
    policy = node.meta.get(RECOMPUTE)
    if not hasattr(policy, "saves") or node.op != "call_function" or \
            not isinstance(node.target, torch._ops.OpOverload):
        return False
    value = lambda a: a.meta.get("val") if isinstance(a, torch.fx.Node) else a
    args = torch.fx.node.map_arg(node.args, value)
    kwargs = torch.fx.node.map_arg(node.kwargs, value)
    return policy.saves(node.target, args, kwargs)


def partition(traced: TracedGraph, mode: str = "min_cut") -> Partition:
    saved = choose_saved(traced, mode)
    graph = traced.graph_module.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    primals, tangents = placeholders[:traced.num_primals], placeholders[traced.num_primals:]
    outputs = list(next(n for n in graph.nodes if n.op == "output").args[0])
    num_forward_outputs = traced.num_outputs + len(traced.mutated_inputs)
    forward_outputs, gradients = outputs[:num_forward_outputs], outputs[num_forward_outputs:]
    root = traced.graph_module  # holds the constants tracing created (`_tensor_constant0`) for get_attr nodes
    forward = _extract(root, primals, forward_outputs + saved)
    backward = _extract(root, saved + tangents, gradients)
    return Partition(forward, backward, len(saved), [n.name for n in saved])


def _extract(root: torch.fx.GraphModule, inputs: list[torch.fx.Node], outputs: list) -> torch.fx.GraphModule:
    """A new graph computing `outputs` from `inputs`, copying the nodes in between; the
    attributes its get_attr nodes read are copied from `root`."""
    graph = root.graph
    new = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    for node in inputs:
        env[node] = new.placeholder(node.name)
        env[node].meta = dict(node.meta)
    needed: set[torch.fx.Node] = set()
    stack = [o for o in outputs if isinstance(o, torch.fx.Node)]
    while stack:
        node = stack.pop()
        if node in needed or node in env:
            continue
        needed.add(node)
        if node.op == "placeholder":
            raise AssertionError(f"partition: {node.name} is needed but not an input of this graph")
        stack.extend(node.all_input_nodes)
    for node in graph.nodes:
        if node in needed:
            env[node] = new.node_copy(node, lambda n: env[n])
    new.output(tuple(env[o] if isinstance(o, torch.fx.Node) else o for o in outputs))
    # Lazy: a code generator reads the graph, not its Python code, which is generated only if
    # something calls or prints the module (a fallback), as for the joint graph.
    return torch.fx.GraphModule(root, new)
