"""Choosing channels-last layouts for convolutions on a GPU.

`prefer_channels_last(gm, example_inputs)` takes an ATen graph with
`meta["val"]` on every node and rewrites it in place so that every 4-D
convolution reads its input and weight in channels-last (NHWC) order, copying
them there where they are not already; returns whether it changed anything.
Pointwise kernels keep the layout they are given (the Triton code generator
stores in eager's strides), so after the first conversion the activations stay
channels-last through batch norm, ReLU and residual additions, and only the
weights are copied on each call.

Not called by default (direct.CHANNELS_LAST is False): until kernels iterate
in memory order it made resnet50 2.5x slower, see docs/performance.md.

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
    changed = False
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
                    inserted += 1
        if not inserted:
            break
        changed = True
        gm.recompile()
        propagate(gm, example_inputs)
    return changed


def propagate(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    FakeTensorProp(gm, FakeTensorMode(allow_non_fake_inputs=True)).propagate(*example_inputs)
