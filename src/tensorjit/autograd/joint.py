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

import operator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx
from torch._dispatch.python import enable_python_dispatcher
from torch.fx._lazy_graph_module import _LazyGraphModule, _use_lazy_graph_module
from torch.fx.experimental.proxy_tensor import make_fx
from torch.func import functionalize

from .custom_ops import functionalize_custom_ops
from .joint_segments import plan_for, trace_joint_by_segments
from .segments import trace_by_segments


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
    gm = functionalize_custom_ops(gm)

    call = node_meta_preserving(gm)

    def run(*args):
        out = call(*args)
        return tuple(out) if isinstance(out, (tuple, list)) else (out,)
    if calls_autograd_functions(gm):
        # functorch's functionalize sends a custom autograd.Function through custom_function_call,
        # which it cannot functionalize (and which wants setup_context). Plain autograd runs the
        # user's forward and, under autograd.grad, the user's backward; make_fx records their ATen
        # ops, and _functionalize_mutations functionalizes that graph op by op afterwards.
        return run
    return functionalize(run, remove="mutations")


RECOMPUTE = "recompute"
"""The node meta key that marks a value to recompute in the backward instead of saving it (a
torch.utils.checkpoint region's ops, tagged by capture; torch names it so too), copied by make_fx
onto every ATen node traced from the tagged node."""


def node_meta_preserving(gm: torch.fx.GraphModule):
    """`gm.forward`, or, when some node carries a recompute tag, an interpreter over `gm` under which
    make_fx copies each node's tag onto the ATen nodes traced from it."""
    if not any(RECOMPUTE in node.meta for node in gm.graph.nodes):
        return gm.forward  # not gm(): fx prints a traceback for every error, even handled ones
    import torch.fx.traceback as fx_traceback

    def run(*args):
        with fx_traceback.preserve_node_meta():
            return torch.fx.Interpreter(gm).run(*args)
    return run


def calls_autograd_functions(gm: torch.fx.GraphModule) -> bool:
    """Whether the graph applies a custom autograd.Function: tensorjit's capture marks its node's
    target; Dynamo's graphs (tensorjit as a torch.compile backend) hold autograd_function_apply."""
    return any(node.op == "call_function" and (getattr(node.target, "autograd_function", None) is not None
                                               or getattr(node.target, "__name__", "") == "autograd_function_apply")
               for node in gm.graph.nodes)


def _fake_mode():
    """A fake mode as make_fx's own: static shapes (each real input faked with its sizes), and a
    shape environment, which operators whose outputs may have sizes only known at run time
    (while_loop) want even with every input size static."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    return FakeTensorMode(allow_non_fake_inputs=True, shape_env=ShapeEnv(), static_shapes=True)


def fake_outputs(gm, example_inputs, plan=None) -> tuple:
    """The graph's outputs on fake copies of the inputs, under the caller's grad mode: their
    `requires_grad` is eager's, whatever grad-mode regions (`enable_grad`, `no_grad`,
    `set_grad_enabled`, `inference_mode`, `detach`) the graph holds. The grad mode is
    restored even if the graph stops half-way through a region. With a `joint_segments` plan, the
    reduced graph runs (one of the repeated blocks): its outputs are the whole graph's."""
    if plan is not None:
        try:
            return _fake_run(functionalize(plan.forward(), remove="mutations"), example_inputs)
        except Exception:  # noqa: BLE001 - the whole graph runs, and names its error if it has one
            pass
    return _fake_run(_functional(gm), example_inputs)


def _fake_run(forward, example_inputs) -> tuple:
    mode = _fake_mode()
    fakes = [mode.from_tensor(x, static_shapes=True) if isinstance(x, torch.Tensor) else x for x in example_inputs]
    with mode, torch.set_grad_enabled(torch.is_grad_enabled()):
        return forward(*fakes)


def segment_plan(gm: torch.fx.GraphModule):
    """`joint_segments.plan_for(gm)` where the joint trace could use it (no autograd Function, no
    custom op functionalized apart), else None."""
    if calls_autograd_functions(gm) or functionalize_custom_ops(gm) is not gm:
        return None
    return plan_for(gm)


def differentiable_outputs(outputs) -> list[int]:
    """Indices of the outputs that require grad, as eager's would."""
    return [i for i, out in enumerate(outputs) if _is_differentiable(out)]


RECURRENT = {"lstm", "gru", "rnn_tanh", "rnn_relu"}


def untraceable(gm: torch.fx.GraphModule, example_inputs: list) -> str | None:
    """Why the joint graph of `gm` cannot be trusted, or None.

    - Recurrent layers: tracing their fused kernels' derivatives gave wrong weight gradients
      (GRU) and undefined workspaces (LSTM) on CUDA (tests/conformance/test_with_inductor.py);
      they run eagerly, under autograd.
    - No input requires grad, yet an output does: the graph makes its own leaf
      (`requires_grad_()`), whose gradient only eager autograd can deliver."""
    for node in gm.graph.nodes:
        if node.op == "call_function" and getattr(node.target, "__name__", None) in RECURRENT:
            return f"recurrent layer ({node.target.__name__}) in a training graph"
    if not any(isinstance(x, torch.Tensor) and x.requires_grad for x in example_inputs):
        return "an output requires grad though no input does (requires_grad_() inside the graph)"
    return None


def trace_joint(gm: torch.fx.GraphModule, example_inputs: list, decompositions: dict | None,
                outputs: tuple | None = None, reuse_repeated_blocks: bool = False, plan=None) -> TracedGraph:
    """`outputs`: the graph's fake outputs (`fake_outputs`), when the caller has them already.
    `reuse_repeated_blocks`: where `joint_segments.trace_joint_by_segments` can, one repeated block's
    forward and backward are traced and the others stamped (the same graph; `REUSE` meta); `plan`:
    `segment_plan(gm)`, when the caller has it already."""
    grad_inputs = [i for i, x in enumerate(example_inputs) if isinstance(x, torch.Tensor) and x.requires_grad]
    outputs = fake_outputs(gm, example_inputs) if outputs is None else outputs
    example_inputs = [_own_leaf(x) for x in example_inputs]
    differentiable = differentiable_outputs(outputs)
    num_primals = len(example_inputs)

    def make_joint(forward, after_forward=None):
        def joint(*args):
            primals, tangents = args[:num_primals], args[num_primals:]
            outs = forward(*primals)
            if after_forward is not None:
                after_forward()
            wanted = [outs[i] for i in differentiable]
            sources = [primals[i] for i in grad_inputs]
            grads = torch.autograd.grad(wanted, sources, tangents, allow_unused=True) if wanted and sources else ()
            return (*outs, *grads)
        return joint

    tangents = _fake_tangents([outputs[i] for i in differentiable])

    def trace(joint):
        # The joint graph is only read (partitioned), never run: its Python code is generated if
        # something calls or prints it (a lazy graph module), not at once (a tenth of a second per
        # thousand nodes).
        with torch.set_grad_enabled(torch.is_grad_enabled()), _use_lazy_graph_module(True):
            return make_fx(joint, decomposition_table=decompositions or {}, tracing_mode="fake",
                           _allow_non_fake_inputs=True)(*example_inputs, *tangents)

    segmented = None
    if reuse_repeated_blocks and plan is None:
        plan = segment_plan(gm)
    if reuse_repeated_blocks and plan is not None and differentiable and grad_inputs:
        grad_index = {primal: len(outputs) + k for k, primal in enumerate(grad_inputs)}
        with _use_lazy_graph_module(True):
            segmented = trace_joint_by_segments(plan, grad_index, make_joint, trace)
    if segmented is not None:
        traced, count = segmented
        traced.meta[REUSE] = count
    else:
        traced = trace(make_joint(_functional(gm)))
    traced = _functionalize_mutations(traced, [*example_inputs, *tangents], decompositions)
    _backward_reads_updated_values(traced, num_primals)
    mutated = _lift_input_mutations(traced, num_primals, len(outputs))
    return TracedGraph(traced, num_primals, len(outputs), mutated, differentiable, grad_inputs,
                       num_tangents=len(tangents))


def _fake_tangents(outputs: list) -> list:
    """Zeros with the outputs' metadata, fake: make_fx traces in their fake mode (it takes the mode
    of fake inputs) and fakes the real inputs in it. Real zeros allocated the outputs' size on
    the device at every compile, and the caching allocator kept it (GPT-2 training's logits:
    196 MB reserved for good)."""
    with _fake_mode():
        return [torch.zeros(out.shape, dtype=out.dtype, device=out.device) for out in outputs]


def _own_leaf(example):
    """A view that requires grad, cut from its base. The runtime's autograd.Function gets each input
    as one of its own, and autograd adds the gradient it returns for a view to its base's through
    the view's own history: traced as a view of another input, the base's gradient would count the
    view's uses a second time."""
    if isinstance(example, torch.Tensor) and example.requires_grad and example._is_view():
        return example.detach().requires_grad_(True)
    return example


def trace_forward(gm: torch.fx.GraphModule, example_inputs: list, decompositions: dict | None,
                  outputs: list | None = None, reuse_repeated_blocks: bool = False) -> TracedGraph:
    """The inference graph: functionalized ATen forward, no autograd. `outputs`, when given, receives
    the graph's fake outputs as traced (under the caller's grad mode when that is off already:
    their `requires_grad` is then eager's, as `fake_outputs` gives it). `reuse_repeated_blocks`:
    where `segments.trace_by_segments` can, one repeated block is traced and the others stamped from
    it (the same graph; its `REUSE` meta counts what was traced and stamped)."""
    if reuse_repeated_blocks and not calls_autograd_functions(gm):
        segmented = trace_by_segments(gm, example_inputs, decompositions)
        if segmented is not None:
            return _segmented(*segmented, outputs)
    function = _functional(gm)
    if outputs is not None:
        def function(*args, _traced=function):
            values = _traced(*args)
            outputs[:] = values
            return values
    with torch.no_grad():
        traced = make_fx(function, decomposition_table=decompositions or {}, tracing_mode="fake",
                         _allow_non_fake_inputs=True)(*example_inputs)
        traced = _functionalize_mutations(traced, example_inputs, decompositions)
    outputs = next(n for n in traced.graph.nodes if n.op == "output").args[0]
    mutated = _lift_input_mutations(traced, len(example_inputs), len(outputs))
    return TracedGraph(traced, len(example_inputs), len(outputs), mutated, [], [])


REUSE = "repeated_blocks"
"""The traced graph module's meta key for a segmented trace's `segments.ReuseCount`."""


def _segmented(traced: torch.fx.GraphModule, count, outputs: list | None) -> TracedGraph:
    """A segmented trace as `trace_forward` returns one (it holds no mutation: segments refuses them)."""
    values = next(n for n in traced.graph.nodes if n.op == "output").args[0]
    if outputs is not None:
        outputs[:] = [v.meta["val"] for v in values]
    traced.meta[REUSE] = count
    return TracedGraph(traced, sum(1 for n in traced.graph.nodes if n.op == "placeholder"), len(values), [], [], [])


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
    _LazyGraphModule.force_recompile(traced)  # traced again below: its code first
    table = decompositions or {}
    # First outside functionalization, where torch's Python kernels replace ops whose schema hides
    # a mutation (`native_batch_norm` updates its running statistics) by ones that declare it.
    with torch.no_grad(), enable_python_dispatcher():
        declared = make_fx(_retraceable(traced), decomposition_table=table, tracing_mode="fake",
                           _allow_non_fake_inputs=True)(*inputs)
        return make_fx(functionalize(_retraceable(declared), remove="mutations"), decomposition_table=table,
                       tracing_mode="fake", _allow_non_fake_inputs=True)(*inputs)


def _retraceable(traced: torch.fx.GraphModule):
    """What make_fx traces again: the graph module itself, or with its recompute tags kept."""
    if not any(RECOMPUTE in node.meta for node in traced.graph.nodes):
        return traced
    return node_meta_preserving(traced)


def _backward_reads_updated_values(traced: torch.fx.GraphModule, num_primals: int) -> None:
    """Backward nodes read what a functional variant of an in-place op (`rrelu_with_noise_functional`)
    returns for an argument it updates, not the argument's old value.

    In eager, `rrelu_with_noise(x, noise)` fills `noise` in place and its autograd node saves
    `noise`: the backward reads the filled values. Functionalized below autograd, the op becomes
    `rrelu_with_noise_functional(x, noise) -> (out, new_noise)` and the derivative formula of the
    functional variant names its `noise` input, the unfilled buffer: a wrong gradient. A value an
    op updated is, to eager's saved tensor, the updated one."""
    graph = traced.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    backward = set(placeholders[num_primals:])
    for node in graph.nodes:
        if node.op == "call_function" and any(a in backward for a in node.all_input_nodes):
            backward.add(node)
    changed = False
    for node in list(graph.nodes):
        for argument, index in _updated_arguments(node):
            readers = [user for user in argument.users if user in backward]
            if readers:
                updated = _result(graph, node, index)
                for user in readers:
                    user.replace_input_with(argument, updated)
                changed = True
    if changed:  # regenerating a large graph's Python code is a fifth of its tracing time: only when edited
        graph.lint()
        traced.recompile()


def _updated_arguments(node: torch.fx.Node) -> list[tuple[torch.fx.Node, int]]:
    """(argument node, index of its new value among the results) for a functional variant."""
    target = node.target
    if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload) \
            or not target._schema.name.endswith("_functional"):
        return []
    base_name = target._schema.name.split("::")[-1][:-len("_functional")]
    packet = getattr(torch.ops.aten, base_name, None)
    base = getattr(packet, target._overloadname, None) if packet is not None else None
    if base is None:
        return []
    written = [i for i, a in enumerate(base._schema.arguments) if a.alias_info is not None and a.alias_info.is_write]
    result = []
    for k, position in enumerate(written):
        name = base._schema.arguments[position].name
        argument = node.args[position] if position < len(node.args) else node.kwargs.get(name)
        if isinstance(argument, torch.fx.Node):
            result.append((argument, len(base._schema.returns) + k))
    return result


def _result(graph: torch.fx.Graph, node: torch.fx.Node, index: int) -> torch.fx.Node:
    for user in node.users:
        if user.target is operator.getitem and user.args[1] == index:
            return user
    with graph.inserting_after(node):
        item = graph.call_function(operator.getitem, (node, index))
    item.meta["val"] = node.meta["val"][index]
    return item


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
    if not mutated:  # the graph is as traced: no new code to generate
        return mutated
    output = next(n for n in graph.nodes if n.op == "output")
    values = list(output.args[0])
    output.args = (tuple(values[:num_outputs] + new_values + values[num_outputs:]),)
    graph.lint()
    traced.recompile()
    return mutated
