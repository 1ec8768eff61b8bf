"""Tracing a captured graph into ATen graphs: the joint forward/backward graph, or forward only.

`trace_joint` runs the captured graph under `make_fx` on fake tensors, functionalized,
and asks autograd for the gradients of the outputs that need them with respect to the
inputs that need them: the result is one ATen graph taking (primals..., tangents...) and
returning (outputs..., mutated input values..., gradients...). In-place updates of inputs
(BatchNorm's running statistics, `param.add_`) leave the graph as extra outputs, and the
runtime copies them back into the inputs, as eager code would have written them.

`torch.func.functionalize` does not see inside every op: a CompositeImplicitAutograd op
reaching its layer whole (`F.pad(mode="circular")`, `instance_norm`, the CPU `gru_cell`)
runs below it, and the in-place ops of its implementation (`copy_` into slices of a new
tensor, `native_batch_norm` updating statistics) are recorded as they are, as are the
in-place steps of their backward formulas. A graph with such mutations is functionalized
once more, now op by op (`_functionalize_mutations`): later passes assume a functional
graph (the partitioner keeps only what outputs depend on, and would drop them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx
from torch._dispatch.python import enable_python_dispatcher
from torch.fx.experimental.proxy_tensor import make_fx
from torch.func import functionalize


@dataclass
class TracedGraph:
    graph_module: torch.fx.GraphModule
    num_primals: int
    num_outputs: int                       # user-visible outputs of the captured graph
    mutated_inputs: list[int]              # primal indices written in place, in output order after outputs
    differentiable_outputs: list[int]      # outputs that receive a tangent
    grad_inputs: list[int]                 # primal indices that get a gradient
    num_tangents: int = 0
    output_is_tuple: bool = True
    meta: dict = field(default_factory=dict)


def _is_differentiable(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.requires_grad and \
        (value.is_floating_point() or value.is_complex())


def _functional(gm: torch.fx.GraphModule):
    def run(*args):
        out = gm(*args)
        return tuple(out) if isinstance(out, (tuple, list)) else (out,)
    return functionalize(run, remove="mutations")


def _probe_outputs(gm, example_inputs) -> tuple[list[bool], int]:
    """Which outputs need a gradient, found by running the graph on fake copies."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    fakes = [mode.from_tensor(x, static_shapes=True) if isinstance(x, torch.Tensor) else x for x in example_inputs]
    with mode:
        outs = _functional(gm)(*fakes)
    return [_is_differentiable(o) for o in outs], len(outs)


RECURRENT = {"lstm", "gru", "rnn_tanh", "rnn_relu"}


def untraceable(gm: torch.fx.GraphModule) -> str | None:
    """Why the joint graph of `gm` cannot be trusted, or None. Recurrent layers: tracing their
    fused kernels' derivatives gave wrong weight gradients (GRU) and undefined workspaces
    (LSTM) (tests/conformance/test_with_inductor.py); they run eagerly, under autograd."""
    for node in gm.graph.nodes:
        if node.op == "call_function" and getattr(node.target, "__name__", None) in RECURRENT:
            return f"recurrent layer ({node.target.__name__}) in a training graph"
    return None


def trace_joint(gm: torch.fx.GraphModule, example_inputs: list, decompositions: dict | None) -> TracedGraph:
    grad_inputs = [i for i, x in enumerate(example_inputs) if isinstance(x, torch.Tensor) and x.requires_grad]
    needs_grad, num_outputs = _probe_outputs(gm, example_inputs)
    differentiable = [i for i, needs in enumerate(needs_grad) if needs]
    forward = _functional(gm)
    num_primals = len(example_inputs)

    def joint(*args):
        primals, tangents = args[:num_primals], args[num_primals:]
        outs = forward(*primals)
        wanted = [outs[i] for i in differentiable]
        sources = [primals[i] for i in grad_inputs]
        grads = torch.autograd.grad(wanted, sources, tangents, allow_unused=True) if wanted and sources else ()
        return (*outs, *grads)

    tangents = [torch.ones_like(x) for x in _example_outputs(gm, example_inputs, differentiable)]
    traced = make_fx(joint, decomposition_table=decompositions or {}, tracing_mode="fake",
                     _allow_non_fake_inputs=True)(*example_inputs, *tangents)
    traced = _functionalize_mutations(traced, [*example_inputs, *tangents], decompositions)
    mutated = _lift_input_mutations(traced, num_primals, num_outputs)
    return TracedGraph(traced, num_primals, num_outputs, mutated, differentiable, grad_inputs,
                       num_tangents=len(tangents))


def trace_forward(gm: torch.fx.GraphModule, example_inputs: list, decompositions: dict | None) -> TracedGraph:
    """The inference graph: functionalized ATen forward, no autograd."""
    with torch.no_grad():
        traced = make_fx(_functional(gm), decomposition_table=decompositions or {}, tracing_mode="fake",
                         _allow_non_fake_inputs=True)(*example_inputs)
        traced = _functionalize_mutations(traced, example_inputs, decompositions)
    outputs = next(n for n in traced.graph.nodes if n.op == "output").args[0]
    mutated = _lift_input_mutations(traced, len(example_inputs), len(outputs))
    return TracedGraph(traced, len(example_inputs), len(outputs), mutated, [], [])


def _mutations(traced: torch.fx.GraphModule) -> list[torch.fx.Node]:
    """In-place ops other than functionalization's own write-back, `copy_(input, value)`."""
    found = []
    for node in traced.graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        if not node.target._schema.is_mutable:
            continue
        if node.target is torch.ops.aten.copy_.default and node.args[0].op == "placeholder":
            continue
        found.append(node)
    return found


def _functionalize_mutations(traced: torch.fx.GraphModule, inputs: list, decompositions: dict | None):
    """`traced`, functionalized op by op if in-place ops remain in it (see the module docstring).
    The graph runs its ops in program order, so tracing it again under functionalization gives
    the same values, with every mutation turned into a functional op and inputs' written back."""
    if not _mutations(traced):
        return traced
    table = decompositions or {}
    # First outside functionalization, where torch's Python kernels replace ops whose schema hides
    # a mutation (`native_batch_norm` updates its running statistics) by ones that declare it.
    with torch.no_grad(), enable_python_dispatcher():
        declared = make_fx(traced, decomposition_table=table, tracing_mode="fake",
                           _allow_non_fake_inputs=True)(*inputs)
        return make_fx(functionalize(declared, remove="mutations"), decomposition_table=table,
                       tracing_mode="fake", _allow_non_fake_inputs=True)(*inputs)


def _example_outputs(gm, example_inputs, indices: list[int]) -> list[torch.Tensor]:
    from torch._subclasses.fake_tensor import FakeTensorMode
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    fakes = [mode.from_tensor(x, static_shapes=True) if isinstance(x, torch.Tensor) else x for x in example_inputs]
    with mode:
        outs = _functional(gm)(*fakes)
    # Real zeros with the outputs' metadata: make_fx turns them into fake tangents.
    return [torch.zeros(outs[i].shape, dtype=outs[i].dtype, device=outs[i].device) for i in indices]


def _lift_input_mutations(traced: torch.fx.GraphModule, num_primals: int, num_outputs: int) -> list[int]:
    """Turn `copy_(primal, new)` at the end of a functionalized graph into extra outputs."""
    graph = traced.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"][:num_primals]
    index_of = {node: i for i, node in enumerate(placeholders)}
    mutated: list[int] = []
    new_values: list[torch.fx.Node] = []
    for node in list(graph.nodes):
        if node.op == "call_function" and node.target is torch.ops.aten.copy_.default \
                and node.args[0] in index_of:
            mutated.append(index_of[node.args[0]])
            new_values.append(node.args[1])
            node.replace_all_uses_with(node.args[1])
            graph.erase_node(node)
    output = next(n for n in graph.nodes if n.op == "output")
    values = list(output.args[0])
    output.args = (tuple(values[:num_outputs] + new_values + values[num_outputs:]),)
    graph.lint()
    traced.recompile()
    return mutated
