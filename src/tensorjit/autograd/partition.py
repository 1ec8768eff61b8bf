"""Split a joint forward+backward ATen graph into a forward and a backward graph.

`partition(joint_gm, signature, strategy, mutated_inputs)` returns a `Partition`:
the forward graph takes the primals and returns (*forward outputs, *saved);
the backward graph takes (*saved, *tangents) and returns the gradients.

Strategies:
  "save_all": every forward value the backward reads is saved (the reference).
  "min_cut":  a minimum cut over the joint graph (node-split, capacities = bytes)
              chooses the cheapest set to save; cheap values between the saved
              set and the backward are recomputed there. Matmuls, convolutions,
              random ops and large reductions are never recomputed.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

import torch
import torch.fx as fx

from .errors import AutogradUnsupported
from .joint import JointSignature
from .maxflow import INFINITE, FlowNetwork

aten = torch.ops.aten

_VIEW_OPS = {
    aten.view, aten._unsafe_view, aten.reshape, aten.t, aten.transpose, aten.permute,
    aten.expand, aten.slice, aten.select, aten.unsqueeze, aten.squeeze, aten.alias,
    aten.as_strided, aten.split, aten.split_with_sizes, aten.unbind, aten.clone,
    aten._to_copy, aten.detach, aten.view_as, aten.contiguous, aten.repeat,
    aten.full, aten.zeros, aten.ones, aten.empty, aten.scalar_tensor, aten.arange,
    aten.full_like, aten.zeros_like, aten.ones_like, aten.empty_like,
}

# A reduction over at most this many input elements is cheap enough to redo in
# the backward; larger ones cost real time and are saved instead.
SMALL_REDUCTION_ELEMENTS = 1 << 16


@dataclass(frozen=True)
class Partition:
    forward: fx.GraphModule
    backward: fx.GraphModule
    saved_names: tuple[str, ...]
    saved_bytes: int


def _tensor_bytes(node: fx.Node) -> float:
    value = node.meta.get("val")
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    return INFINITE


def is_recomputable(node: fx.Node) -> bool:
    """May `node` be computed again in the backward instead of being saved?"""
    if node.op != "call_function":
        return False
    if node.target is operator.getitem:
        return True
    if not isinstance(node.target, torch._ops.OpOverload):
        return False
    tags = node.target.tags
    if torch.Tag.nondeterministic_seeded in tags:
        return False
    if torch.Tag.pointwise in tags or node.target.overloadpacket in _VIEW_OPS:
        return True
    if torch.Tag.reduction in tags:
        source = node.args[0].meta.get("val") if isinstance(node.args[0], fx.Node) else None
        return isinstance(source, torch.Tensor) and source.numel() <= SMALL_REDUCTION_ELEMENTS
    return False


def _tangent_dependent(graph: fx.Graph, tangents: list[fx.Node]) -> set[fx.Node]:
    dependent = set(tangents)
    for node in graph.nodes:
        if node.op != "output" and any(arg in dependent for arg in node.all_input_nodes):
            dependent.add(node)
    return dependent


def _ancestors(outputs: list[fx.Node], stop: set[fx.Node]) -> set[fx.Node]:
    seen: set[fx.Node] = set()
    stack = [n for n in outputs if isinstance(n, fx.Node)]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if node not in stop:
            stack.extend(node.all_input_nodes)
    return seen


def _save_all(forward_side: set[fx.Node], backward_users: dict) -> list[fx.Node]:
    return [n for n in backward_users if n in forward_side]


def _min_cut(graph: fx.Graph, candidates: set[fx.Node], backward_users: dict) -> list[fx.Node]:
    network = FlowNetwork()
    network.vertex("source")
    network.vertex("sink")
    for node in graph.nodes:
        if node not in candidates:
            continue
        weight = 2 * _tensor_bytes(node)
        if node.op == "placeholder":
            # Inputs stay alive anyway: prefer saving them over an equal-sized intermediate.
            network.add_edge("source", (node, "in"), INFINITE)
            weight -= 1
        elif not is_recomputable(node):
            network.add_edge("source", (node, "in"), INFINITE)
        network.add_edge((node, "in"), (node, "out"), weight)
        for user in node.users:
            if user in candidates:
                network.add_edge((node, "out"), (user, "in"), INFINITE)
        if node in backward_users:
            network.add_edge((node, "out"), "sink", INFINITE)
    source_side = network.min_cut("source", "sink")
    return [n for n in graph.nodes
            if n in candidates and (n, "in") in source_side and (n, "out") not in source_side]


def extract(joint: fx.GraphModule, inputs: list[fx.Node], outputs: list) -> fx.GraphModule:
    """A new graph computing `outputs` from `inputs`, copying the joint nodes between."""
    needed = _ancestors(outputs, set(inputs))
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    for node in inputs:
        env[node] = graph.placeholder(node.name)
        env[node].meta.update(node.meta)
    for node in joint.graph.nodes:
        if node not in needed or node in env:
            continue
        if node.op == "placeholder":
            raise AutogradUnsupported("partition", f"{node.name} is needed but not an input")
        env[node] = graph.node_copy(node, lambda n: env[n])
    graph.output(tuple(env[n] if isinstance(n, fx.Node) else n for n in outputs))
    return fx.GraphModule(joint, graph)


def _clone_node(graph: fx.Graph, node: fx.Node) -> fx.Node:
    with graph.inserting_after(node):
        clone = graph.call_function(aten.clone.default, (node,))
    clone.meta.update(node.meta)
    return clone


def partition(joint: fx.GraphModule, signature: JointSignature, strategy: str,
              mutated_inputs: tuple[int, ...] = ()) -> Partition:
    graph = joint.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    primals, tangents = placeholders[:signature.primal_count], placeholders[signature.primal_count:]
    output_node = next(n for n in graph.nodes if n.op == "output")
    returned = list(output_node.args[0])
    forward_outputs = returned[:signature.forward_output_count]
    grads = returned[signature.forward_output_count:]

    backward_side = _tangent_dependent(graph, tangents)
    backward_side |= {n for n in grads if isinstance(n, fx.Node)} & backward_side
    backward_users: dict[fx.Node, None] = {}
    for node in graph.nodes:
        if node in backward_side:
            for arg in node.all_input_nodes:
                if arg not in backward_side:
                    backward_users[arg] = None
    for node in grads:
        if isinstance(node, fx.Node) and node not in backward_side:
            backward_users[node] = None
    forward_side = set(graph.nodes) - backward_side - {output_node}

    if strategy == "save_all":
        saved = _save_all(forward_side, backward_users)
    elif strategy == "min_cut":
        candidates = _ancestors(list(backward_users), set()) & forward_side
        saved = _min_cut(graph, candidates, backward_users)
    else:
        raise ValueError(f"unknown partitioner {strategy!r}; use 'min_cut' or 'save_all'")

    # A saved input that the forward also mutates must be saved before the
    # runtime copies the new value into it.
    mutated = {primals[i] for i in mutated_inputs}
    returned_saved = [_clone_node(graph, n) if n in mutated else n for n in saved]
    forward = extract(joint, primals, forward_outputs + returned_saved)
    backward = extract(joint, saved + tangents, grads)
    saved_bytes = sum(int(_tensor_bytes(n)) for n in saved)
    return Partition(forward, backward, tuple(n.name for n in saved), saved_bytes)
