"""Cutting nodes of the graph being captured out into a subgraph of their own.

Two users: nested_compile_region (regions.py) outlines a call's nodes into a submodule called
from each call site, and a hook on a tensor made in the function (values/hooks.py) outlines
the hook's nodes into the submodule its tensor's backward calls. Both inline the Python code
first, then move what it made; what may move is decided here: no Python-visible side effect
(`visible_effects` unchanged), and only nodes that are pure (`pure`).
"""

from __future__ import annotations

import operator

import torch
import torch.fx

from .aliasing import storage_key


def visible_effects(output) -> tuple[int, frozenset, int]:
    """What a caller could observe of code run so far: Python-visible writes replayed after the
    graph (attributes, globals, cells, containers from outside), writes to the storage of the
    graph's inputs, and writes to lists, dicts and sets."""
    inputs = {storage_key(gi.node.meta["example_value"]) for gi in output.inputs
              if isinstance(gi.node.meta.get("example_value"), torch.Tensor)}
    return len(output.side_effects), frozenset(output.writes.written & inputs), output.container_writes


def pure(node: torch.fx.Node) -> bool:
    """No in-place write (an unused call of a subgraph that writes would be dropped as dead code), no
    submodule of its own, no grad-mode switch: safe to move into a subgraph."""
    if node.op in ("get_attr", "call_module"):
        return False
    target = node.target
    if isinstance(target, torch._ops.OpOverload) and target._schema.is_mutable:
        return False
    name = target if isinstance(target, str) else getattr(target, "__name__", "")
    if name.endswith("_") and not name.startswith("__") or "out" in node.kwargs or target is operator.setitem:
        return False
    return node.op in ("call_function", "call_method") and not (
        node.op == "call_function" and getattr(target, "__module__", "") == "torch._C" and "grad" in name)


def external_inputs(made: list[torch.fx.Node]) -> list[torch.fx.Node]:
    """The nodes that `made` reads and did not make, in the order first read."""
    inside = set(made)
    external: list[torch.fx.Node] = []
    for node in made:
        for argument in node.all_input_nodes:
            if argument not in inside and argument not in external:
                external.append(argument)
    return external


def subgraph_module(made: list[torch.fx.Node], external: list[torch.fx.Node], returned: list[torch.fx.Node],
                    class_name: str) -> torch.fx.GraphModule:
    """A graph module taking `external` as placeholders, computing `made`, returning `returned` as a tuple."""
    sub = torch.fx.Graph()
    env = {}
    for index, node in enumerate(external):
        env[node] = sub.placeholder(f"input_{index}")
        env[node].meta = dict(node.meta)
    for node in made:
        env[node] = sub.node_copy(node, lambda n: env[n])
    sub.output(tuple(env[n] for n in returned))
    return torch.fx.GraphModule(torch.nn.Module(), sub, class_name=class_name)
