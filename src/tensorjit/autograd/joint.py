"""Trace a captured torch-level graph into functional ATen graphs.

`trace_functional_forward(gm, inputs, metadata)` returns an ATen graph free of
in-place ops: input mutations become extra outputs (the new values, to be
copied back by the runtime) and outputs that alias inputs or earlier outputs
are dropped (the runtime regenerates them as views).

`trace_joint(forward_gm, inputs)` differentiates that graph and returns one
joint forward+backward ATen graph with a `JointSignature` describing it.

Both trace with fake tensors, so no real data is computed or mutated.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from torch._decomp import get_decompositions
from torch.fx.experimental.proxy_tensor import make_fx

from .errors import AutogradUnsupported
from .metadata import GraphMetadata

aten = torch.ops.aten

# Always decomposed while tracing the forward:
#  - ops that mutate inputs inside one kernel (BatchNorm's running statistics)
#    without a separate in-place op; decomposed, functionalization sees the
#    mutation and turns it into a returned new value;
#  - recurrent layers, whose CPU kernels (mkldnn) keep a workspace that fake
#    tensors cannot represent; decomposed they are plain matmuls and pointwise ops
#    (their decomposition picks the mkldnn kernel unless mkldnn is off while tracing,
#    which changes no other recorded op).
_FORWARD_DECOMPOSITIONS = get_decompositions([
    aten.native_batch_norm, aten._native_batch_norm_legit,
    aten._native_batch_norm_legit_no_training,
    aten.lstm, aten.gru, aten.rnn_tanh, aten.rnn_relu,
])


@dataclass(frozen=True, slots=True)
class ForwardSignature:
    """Outputs of the functional forward: kept user outputs, then mutated inputs' new values."""

    kept_outputs: tuple[int, ...]
    """Indices (into the captured graph's outputs) computed by the graph."""
    mutated_inputs: tuple[int, ...]
    """Input index for each trailing new-value output, in order."""


@dataclass(frozen=True, slots=True)
class JointSignature:
    """The joint graph takes (*primals, *tangents) and returns (*forward outputs, *grads)."""

    primal_count: int
    forward_output_count: int
    differentiable_outputs: tuple[int, ...]
    """Forward outputs that receive a tangent, in tangent order."""
    grad_inputs: tuple[int, ...]
    """Primal indices the backward returns a gradient for, in order."""


@contextlib.contextmanager
def _mkldnn_disabled():
    """mkldnn off while tracing (see _FORWARD_DECOMPOSITIONS); flags() would also touch TF32."""
    previous = torch._C._get_mkldnn_enabled()
    torch._C._set_mkldnn_enabled(False)
    try:
        yield
    finally:
        torch._C._set_mkldnn_enabled(previous)


def _flat_outputs(result) -> list:
    return list(result) if isinstance(result, (tuple, list)) else [result]


def _detached(inputs: list) -> list:
    return [x.detach() if isinstance(x, torch.Tensor) else x for x in inputs]


def _move_copies_to_outputs(graph_module: torch.fx.GraphModule) -> dict[int, torch.fx.Node]:
    """Replace functionalize's trailing `copy_(input, value)` with a returned `value`."""
    graph = graph_module.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    new_values: dict[int, torch.fx.Node] = {}
    for node in list(graph.nodes):
        if node.op == "call_function" and node.target is aten.copy_.default:
            target, value = node.args
            if target.op != "placeholder":
                raise AutogradUnsupported("mutation", f"in-place copy into {target} survived functionalization")
            new_values[placeholders.index(target)] = value
            node.replace_all_uses_with(target)
            graph.erase_node(node)
    return new_values


# CPU recurrent kernels whose saved workspace fake tracing loses: their
# backward would fail at run time, so such graphs run eagerly instead.
_UNSUPPORTED_OPS = {aten.mkldnn_rnn_layer.default}


def _refuse_unsupported(graph_module: torch.fx.GraphModule) -> None:
    for node in graph_module.graph.nodes:
        if node.op == "call_function" and node.target in _UNSUPPORTED_OPS:
            raise AutogradUnsupported("operator", f"{node.target} cannot be traced with fake tensors",
                                      "capture torch.lstm rather than its mkldnn kernel")


def trace_functional_forward(gm, example_inputs, metadata: GraphMetadata):
    """Return (functional ATen forward GraphModule, ForwardSignature)."""
    kept = tuple(i for i, alias in enumerate(metadata.output_aliases) if alias is None)

    def run(*args):
        outputs = _flat_outputs(gm(*args))
        return tuple(outputs[i] for i in kept)

    functional = torch.func.functionalize(run, remove="mutations")
    with torch.no_grad(), _mkldnn_disabled():
        traced = make_fx(functional, tracing_mode="fake",
                         decomposition_table=_FORWARD_DECOMPOSITIONS)(*_detached(example_inputs))
    new_values = _move_copies_to_outputs(traced)
    # Functionalization is the authority on mutation: some kernels (BatchNorm)
    # update an input without bumping its version counter.
    mutated = tuple(sorted(new_values))
    _refuse_unsupported(traced)
    output_node = next(n for n in traced.graph.nodes if n.op == "output")
    returned = _flat_outputs(output_node.args[0])
    output_node.args = (tuple(returned) + tuple(new_values[i] for i in mutated),)
    traced.graph.eliminate_dead_code()
    traced.recompile()
    return traced, ForwardSignature(kept, mutated)


def _tangent_example(value) -> torch.Tensor:
    return torch.zeros(value.shape, dtype=value.dtype, device=value.device)


def output_values(graph_module) -> list:
    output_node = next(n for n in graph_module.graph.nodes if n.op == "output")
    return [n.meta.get("val") if isinstance(n, torch.fx.Node) else None
            for n in _flat_outputs(output_node.args[0])]


def _differentiable(value) -> bool:
    return isinstance(value, torch.Tensor) and (value.is_floating_point() or value.is_complex())


def trace_joint(forward_gm, example_inputs, grad_inputs, differentiable_outputs, decompositions):
    """Return (joint ATen GraphModule, JointSignature).

    `grad_inputs`: primal indices that require grad; `differentiable_outputs`:
    forward output indices whose tangents flow into the backward.
    """
    values = output_values(forward_gm)
    differentiable = tuple(i for i in differentiable_outputs if _differentiable(values[i]))
    primal_count = len(example_inputs)

    def joint(*flat):
        primals, tangents = flat[:primal_count], flat[primal_count:]
        outputs = _flat_outputs(forward_gm(*primals))
        targets = [outputs[i] for i in differentiable]
        wanted = [primals[i] for i in grad_inputs]
        pairs = [(o, t) for o, t in zip(targets, tangents) if o.requires_grad]
        grads = torch.autograd.grad([o for o, _ in pairs], wanted, [t for _, t in pairs],
                                    allow_unused=True) if pairs else [None] * len(wanted)
        return (*outputs, *grads)

    primals = [x.detach().requires_grad_(i in grad_inputs) if isinstance(x, torch.Tensor) else x
               for i, x in enumerate(example_inputs)]
    tangents = [_tangent_example(values[i]) for i in differentiable]
    with torch.enable_grad(), _mkldnn_disabled():
        traced = make_fx(joint, tracing_mode="fake", decomposition_table=decompositions or {})(
            *primals, *tangents)
    signature = JointSignature(primal_count, len(values), differentiable, tuple(grad_inputs))
    return traced, signature


def retrace(graph_module, example_inputs, decompositions):
    """Trace a functional ATen graph again through `decompositions` (inference graphs)."""
    if not decompositions:
        return graph_module
    with torch.no_grad(), _mkldnn_disabled():
        return make_fx(graph_module, tracing_mode="fake", decomposition_table=decompositions)(
            *_detached(example_inputs))
