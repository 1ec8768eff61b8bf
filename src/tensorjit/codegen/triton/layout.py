"""Choosing channels-last layouts for convolutions on a GPU.

`prefer_channels_last(gm, example_inputs)` takes an ATen graph with
`meta["val"]` on every node and rewrites it in place so that every 4-D
convolution reads its input and weight in channels-last (NHWC) order, copying
them there where they are not already; returns whether it changed anything.
Graph outputs keep eager's layout: a few are copied back (`_restore_outputs`); a graph
where many would change (a training forward) is left as it was (`_undo`).
Kernels store in the strides eager gives each value and iterate in their
output's memory order (kernels.memory_order), so after the first conversion
the activations stay channels-last through batch norm, ReLU and residual
additions, and only the weights are copied on each call. The Triton emitter
runs it in `prepare_graph` (compile.TritonEmitter).

Why: cuDNN's tensor-core convolutions run NHWC natively; an NCHW convolution
pays for transposes inside. Measured on an H100 for resnet50 fp16 batch 64:
eager (NCHW) 7.7 ms, torch.compile (which makes the same choice) 3.1 ms.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx

aten = torch.ops.aten
MAX_PASSES = 3
MAX_OUTPUT_COPIES = 2
"""Graph outputs that may be copied back to eager's layout; past it channels-last is not used."""


def _is_channels_last(value: torch.Tensor) -> bool:
    return value.dim() == 4 and value.is_contiguous(memory_format=torch.channels_last)


def _candidates(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    convolutions = []
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is aten.convolution.default:
            value = node.meta.get("val")
            if isinstance(value, torch.Tensor) and value.dim() == 4 and value.is_floating_point():
                convolutions.append(node)
    return convolutions


def prefer_channels_last(gm: torch.fx.GraphModule, example_inputs: list[Any], require_cuda: bool = True) -> bool:
    """See the module docstring; `require_cuda=False` lets tests rewrite CPU graphs."""
    convolutions = _candidates(gm)
    if not convolutions or (require_cuda and not all(c.meta["val"].device.type == "cuda" for c in convolutions)):
        return False
    before = _output_strides(gm)
    copies: list[torch.fx.Node] = []
    for attempt in range(MAX_PASSES):
        inserted = 0
        for position, convolution in enumerate(convolutions):
            # First pass: weights and the first input only. Whether later
            # inputs come out channels-last is known after propagating.
            sources = convolution.args[:2] if attempt or position == 0 else convolution.args[1:2]
            for source in sources:
                value = source.meta.get("val")
                if isinstance(value, torch.Tensor) and value.dim() == 4 and not _is_channels_last(value):
                    with gm.graph.inserting_before(convolution):
                        copy = gm.graph.call_function(aten.clone.default, (source,),
                                                      {"memory_format": torch.channels_last})
                    convolution.replace_input_with(source, copy)
                    copies.append(copy)
                    inserted += 1
        if not inserted:
            break
        gm.recompile()
        propagate(gm, example_inputs)
    if not copies:
        return False
    changed = [node for node, strides in _output_strides(gm).items() if strides != before[node]]
    if len(changed) > MAX_OUTPUT_COPIES or any(not before[node][1] for node in changed):
        _undo(gm, copies, example_inputs)
        return False
    if changed:
        _restore_outputs(gm, changed, example_inputs)
    return True


def _output_strides(gm: torch.fx.GraphModule) -> dict:
    """Graph output node -> (strides, contiguous), for tensors."""
    output = next(n for n in gm.graph.nodes if n.op == "output")
    values = {node: node.meta.get("val") for node in output.all_input_nodes}
    return {node: (tuple(v.stride()), v.is_contiguous()) for node, v in values.items() if isinstance(v, torch.Tensor)}


def _restore_outputs(gm: torch.fx.GraphModule, changed: list[torch.fx.Node], example_inputs: list[Any]) -> None:
    """Outputs keep eager's layout (callers view them; a backward graph checks them): one copy
    back to contiguous per output that came out channels-last."""
    output = next(n for n in gm.graph.nodes if n.op == "output")
    for node in changed:
        with gm.graph.inserting_before(output):
            copy = gm.graph.call_function(aten.clone.default, (node,), {"memory_format": torch.contiguous_format})
        output.replace_input_with(node, copy)
    gm.recompile()
    propagate(gm, example_inputs)


def _undo(gm: torch.fx.GraphModule, copies: list[torch.fx.Node], example_inputs: list[Any]) -> None:
    """Channels-last would change the layout of many graph outputs: a training forward graph,
    whose outputs include every activation saved for its backward graph. That graph was traced
    with eager's layouts and checks them on every call (with them channels-last, densenet121's
    backward ran op by op through ATen, 5x slower than eager), and a copy back per activation
    would cost a pass over each. Such graphs stay as traced."""
    for copy in copies:
        copy.replace_all_uses_with(copy.args[0])
        gm.graph.erase_node(copy)
    gm.recompile()
    propagate(gm, example_inputs)


RESHAPING_VIEWS = (aten.view.default, aten._unsafe_view.default)


def propagate(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> None:
    """New layouts (meta["val"]) through the graph. A `view` whose input came out channels-last
    where eager's was contiguous may not exist any more (flattening a convolution's output for a
    linear layer): it becomes `reshape`, which copies where it must. The graph is functional, so
    only the aliasing changes, and nothing reads through it."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    class LayoutPropagation(FakeTensorProp):
        def run_node(self, node):
            if node.op == "call_function" and node.target in RESHAPING_VIEWS:
                source = self.env.get(node.args[0]) if isinstance(node.args[0], torch.fx.Node) else None
                if isinstance(source, torch.Tensor) and not _view_exists(source, node.args[1]):
                    node.target = aten.reshape.default
            return super().run_node(node)

    LayoutPropagation(gm, FakeTensorMode(allow_non_fake_inputs=True)).propagate(*example_inputs)
    gm.recompile()


def _view_exists(source: torch.Tensor, size) -> bool:
    try:
        torch.empty_strided(source.shape, source.stride(), dtype=source.dtype, device="meta").view(size)
    except (RuntimeError, ValueError):  # (the meta implementation raises ValueError)
        return False
    return True
