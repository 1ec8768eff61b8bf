"""Max pooling whose indices nothing reads, as a kernel: the maximum of the window's strided slices.

`values_only_max_pools(gm, example_inputs)` takes an ATen graph with `meta["val"]` on every
node and rewrites in place each 2-d `max_pool2d_with_indices` whose indices no node reads
(inference) into `maximum` over one strided slice of the input per window position, the
input padded with -inf where the pooling pads; returns whether it changed anything. The
lowering then makes one pointwise kernel of it, reading each window element where it is.

Why: ATen's GPU max pooling always writes its int64 indices. resnet50's first pooling at batch
64 (fp16) wrote 103 MB of indices nobody read, beside its 103 MB input and 26 MB output: the
workload's peak memory (torch.compile's kernel computes only the maximum).

The maximum is eager's: `maximum` propagates NaN as the pooling does, and -inf padding never
wins over a window element (every window holds one: ATen requires padding <= kernel / 2).
"""

from __future__ import annotations

import math
import operator
from typing import Any

import torch
import torch.fx

aten = torch.ops.aten


def _pairs(value, default) -> tuple[int, int]:
    if value is None or (isinstance(value, (list, tuple)) and not value):
        value = default
    if isinstance(value, int):
        return value, value
    return (value[0], value[0]) if len(value) == 1 else (value[0], value[1])


def _arguments(node: torch.fx.Node):
    names = ("input", "kernel_size", "stride", "padding", "dilation", "ceil_mode")
    values = dict(zip(names, node.args))
    values.update(node.kwargs)
    kernel = _pairs(values["kernel_size"], None)
    stride = _pairs(values.get("stride"), kernel)
    padding = _pairs(values.get("padding", 0), 0)
    dilation = _pairs(values.get("dilation", 1), 1)
    return values["input"], kernel, stride, padding, dilation


def _rewritable(node: torch.fx.Node) -> bool:
    if node.op != "call_function" or node.target is not aten.max_pool2d_with_indices.default:
        return False
    if not all(user.op == "call_function" and user.target is operator.getitem and (user.args[1] == 0 or not user.users)
               for user in node.users):
        return False  # the indices are read (a training graph's backward): ATen computes both
    source = node.args[0]
    value = source.meta.get("val") if isinstance(source, torch.fx.Node) else None
    result = node.meta.get("val")
    return isinstance(value, torch.Tensor) and value.is_floating_point() and value.dim() in (3, 4) \
        and isinstance(result, (tuple, list)) and isinstance(result[0], torch.Tensor)


def values_only_max_pools(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> bool:
    """See the module docstring."""
    from .triton.layout import propagate  # (new meta["val"] for the nodes added)

    pools = [node for node in gm.graph.nodes if _rewritable(node)]
    changed = False
    for pool in pools:
        changed |= _rewrite(gm.graph, pool)
    if changed:
        gm.graph.lint()
        gm.recompile()
        propagate(gm, example_inputs)
    return changed


def _rewrite(graph: torch.fx.Graph, pool: torch.fx.Node) -> bool:
    source, (kh, kw), (sh, sw), (ph, pw), (dh, dw) = _arguments(pool)
    height, width = source.meta["val"].shape[-2:]
    out_height, out_width = pool.meta["val"][0].shape[-2:]
    # Windows from the padded input's start; with ceil_mode a last window may start past it:
    # left to ATen (the output size says so).
    if (out_height - 1) * sh + (kh - 1) * dh >= height + 2 * ph or (out_width - 1) * sw + (kw - 1) * dw >= width + 2 * pw:
        return False
    call = graph.call_function
    rows_dim = source.meta["val"].dim() - 2
    with graph.inserting_before(pool):
        padded = call(aten.constant_pad_nd.default, (source, [pw, pw, ph, ph], -math.inf)) if ph or pw else source
        result = None
        for row in range(kh):
            for column in range(kw):
                top, left = row * dh, column * dw
                rows = call(aten.slice.Tensor, (padded, rows_dim, top, top + (out_height - 1) * sh + 1, sh))
                window = call(aten.slice.Tensor, (rows, rows_dim + 1, left, left + (out_width - 1) * sw + 1, sw))
                result = window if result is None else call(aten.maximum.default, (result, window))
    for user in list(pool.users):
        if user.args[1] == 0:
            user.replace_all_uses_with(result)
        graph.erase_node(user)
    graph.erase_node(pool)
    return True
