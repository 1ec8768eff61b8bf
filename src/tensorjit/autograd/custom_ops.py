"""Custom ops that mutate their arguments (torch.library.custom_op with mutates_args), made functional.

Takes a captured graph; returns a copy in which each call of a custom (non-ATen) op whose
schema writes to arguments is `torch.ops.higher_order.auto_functionalized(op, **kwargs)` —
which runs the op on clones of the written arguments and returns the op's results and the
clones — followed by `copy_` of each clone into the argument the op wrote. Functionalization
cannot see inside a custom op and refuses one with alias annotations; after this pass it sees
a functional call and ordinary in-place copies, which it turns into new values (and
write-backs of the graph's inputs, as for any in-place op on an input).

A custom op that does not mutate needs nothing: it stays a call, its fake implementation
(register_fake) gives shapes to capture and to make_fx, its register_autograd formula (or
its ATen decomposition) gives the backward, and the code generators call it as an extern.
"""

from __future__ import annotations

import operator

import torch
import torch.fx
from torch._higher_order_ops.auto_functionalize import auto_functionalized, can_auto_functionalize, get_mutable_args

_BUILT_IN_NAMESPACES = {"aten", "prims", "higher_order"}


def mutating_custom_op(target) -> torch._ops.OpOverload | None:
    """The overload a node calls, when it is a custom op that writes to an argument."""
    if isinstance(target, torch._ops.OpOverloadPacket) and target.overloads() == ["default"]:
        target = target.default
    if not isinstance(target, torch._ops.OpOverload) or target.namespace in _BUILT_IN_NAMESPACES:
        return None
    if not target._schema.is_mutable or not can_auto_functionalize(target):
        return None
    return target


def functionalize_custom_ops(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """`gm` itself when it calls no mutating custom op, else a rewritten copy."""
    if not any(node.op == "call_function" and mutating_custom_op(node.target) for node in gm.graph.nodes):
        return gm
    graph = torch.fx.Graph()
    copied = graph.graph_copy(gm.graph, {}, return_output_node=True)
    graph.output(copied[0] if isinstance(copied, tuple) else copied)
    for node in list(graph.nodes):
        op = mutating_custom_op(node.target) if node.op == "call_function" else None
        if op is not None:
            _rewrite(graph, node, op)
    graph.lint()
    return torch.fx.GraphModule(gm, graph)


def _rewrite(graph: torch.fx.Graph, node: torch.fx.Node, op: torch._ops.OpOverload) -> None:
    arguments = _keyword_arguments(op, node.args, node.kwargs)
    mutated, _ = get_mutable_args(op)
    returns = len(op._schema.returns)
    slots = returns if returns > 1 else 1  # auto_functionalized: (*results or result, *new values)
    with graph.inserting_before(node):
        call = graph.call_function(auto_functionalized, (op,), arguments)
        results = [graph.call_function(operator.getitem, (call, i)) for i in range(slots)]
        for index, name in enumerate(mutated):
            if arguments.get(name) is not None:
                new = graph.call_function(operator.getitem, (call, slots + index))
                graph.call_function(torch.ops.aten.copy_.default, (arguments[name], new))
    if returns > 1:
        for user in list(node.users):  # capture reads a tuple result item by item
            if user.target is operator.getitem:
                user.replace_all_uses_with(results[user.args[1]])
                graph.erase_node(user)
    node.replace_all_uses_with(results[0])
    graph.erase_node(node)


def _keyword_arguments(op: torch._ops.OpOverload, args: tuple, kwargs: dict) -> dict:
    """Every schema argument by name (auto_functionalized takes keywords only), defaults filled in."""
    named = dict(kwargs)
    for argument, value in zip(op._schema.arguments, args):
        named[argument.name] = value
    for argument in op._schema.arguments:
        if argument.name not in named and argument.has_default_value():
            named[argument.name] = argument.default_value
    return named
