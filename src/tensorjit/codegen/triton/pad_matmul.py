"""Pad matrix products whose sizes break the vendor library's alignment.

Takes an ATen graph with meta["val"] on every node and rewrites, in place,
`mm`, `addmm` and `bmm` nodes whose M, N or K is not a multiple of the
alignment (8 elements for 16-bit types, 4 for float32): the operands are
zero-padded (`constant_pad_nd`, in the operand's own memory order), the padded
product runs, and the result is sliced back and made contiguous, so every later
node sees the same shape and strides as before. A result the graph returns
directly stays a slice of the padded product (as torch.compile returns it: the
contiguous copy of a vocabulary-sized output costs more than the product's
padding saves). Zero padding of K adds zeros to each dot product, so the result
is unchanged.

Why: cuBLAS picks a slow kernel when a leading dimension is misaligned. GPT-2's
tied LM head (N = vocabulary 50257) ran an sm75 fallback kernel at 3.4 ms of a
5.8 ms step on an H100 (docs/performance.md). The two copies the padding costs
are memory-bound and small next to such a product, hence the work threshold.
"""

from __future__ import annotations

import torch
import torch.fx

aten = torch.ops.aten

ALIGNMENT = {torch.float16: 8, torch.bfloat16: 8, torch.float32: 4}
MIN_WORK = 1 << 30
"""Multiply-adds below which padding is not worth its two extra copies."""


def pad_matmuls(gm: torch.fx.GraphModule, *, devices: tuple[str, ...] = ("cuda",), min_work: int = MIN_WORK) -> int:
    """Rewrite misaligned products in `gm`; returns how many were padded."""
    padded = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in (aten.mm.default, aten.addmm.default, aten.bmm.default):
            continue
        left, right = node.args[-2], node.args[-1]
        value = node.meta.get("val")
        if not isinstance(value, torch.Tensor) or value.device.type not in devices:
            continue
        alignment = ALIGNMENT.get(value.dtype)
        if alignment is None:
            continue
        m, k = left.meta["val"].shape[-2:]
        n = right.meta["val"].shape[-1]
        batch = left.meta["val"].shape[0] if node.target is aten.bmm.default else 1
        if batch * m * n * k < min_work or all(size % alignment == 0 for size in (m, n, k)):
            continue
        _pad(gm, node, alignment, (m, n, k))
        padded += 1
    if padded:
        gm.graph.lint()
        gm.recompile()
    return padded


def _round_up(size: int, alignment: int) -> int:
    return -(-size // alignment) * alignment


def _pad(gm: torch.fx.GraphModule, node: torch.fx.Node, alignment: int, sizes: tuple[int, int, int]) -> None:
    m, n, k = sizes
    extra_m, extra_n, extra_k = (_round_up(s, alignment) - s for s in sizes)
    graph = gm.graph
    with graph.inserting_before(node):
        left = _padded(graph, node.args[-2], [0, extra_k, 0, extra_m])
        right = _padded(graph, node.args[-1], [0, extra_n, 0, extra_k])
        args = (left, right)
        if node.target is aten.addmm.default:
            args = (_padded_bias(graph, node.args[0], (m, n), (extra_m, extra_n)), left, right)
        product = graph.call_function(node.target, args, dict(node.kwargs))
        _set_meta(product)
        result = product
        if extra_m:
            result = _call(graph, aten.slice.Tensor, (result, -2, 0, m))
        if extra_n:
            result = _call(graph, aten.slice.Tensor, (result, -1, 0, n))
        returned = _returned_through_views(node)
        if not returned:
            result = _call(graph, aten.clone.default, (result,), {"memory_format": torch.contiguous_format})
    node.replace_all_uses_with(result)
    graph.erase_node(node)
    if returned:
        for view in _views_after(result):
            _set_meta(view)  # now views of the slice: eager's layout no longer holds


RESHAPES = (aten.view.default, aten._unsafe_view.default, aten.unsqueeze.default, aten.squeeze.dim)
"""Views that split or add dimensions: always expressible on a slice of the padded product."""


def _returned_through_views(node: torch.fx.Node) -> bool:
    return bool(node.users) and all(
        user.op == "output" or (user.target in RESHAPES and _returned_through_views(user)) for user in node.users)


def _views_after(node: torch.fx.Node) -> list[torch.fx.Node]:
    views = [user for user in node.users if user.op != "output"]
    return [v for view in views for v in (view, *_views_after(view))]


def _padded_bias(graph: torch.fx.Graph, bias: torch.fx.Node, sizes: tuple[int, int], extra: tuple[int, int]):
    """addmm's bias broadcasts against the (m, n) result: pad the dimensions that match it."""
    shape = tuple(bias.meta["val"].shape)
    padding: list[int] = []
    for size, full, more in reversed(list(zip(shape, sizes[-len(shape):], extra[-len(shape):]))):
        padding += [0, more if size == full and size != 1 else 0]
    return _padded(graph, bias, padding)


def _padded(graph: torch.fx.Graph, operand: torch.fx.Node, padding: list[int]) -> torch.fx.Node:
    """`operand` zero-padded; a column-major operand (a transposed weight) is padded in its
    own memory order and transposed back, so the copy reads and writes along rows."""
    if not any(padding):
        return operand
    value = operand.meta["val"]
    if value.dim() >= 2 and value.stride(-2) == 1 and value.stride(-1) > 1:
        rows = _call(graph, aten.transpose.int, (operand, -2, -1))
        padded = _call(graph, aten.constant_pad_nd.default, (rows, padding[2:4] + padding[0:2], 0.0))
        return _call(graph, aten.transpose.int, (padded, -2, -1))
    return _call(graph, aten.constant_pad_nd.default, (operand, padding, 0.0))


def _call(graph: torch.fx.Graph, target, args: tuple, kwargs: dict | None = None) -> torch.fx.Node:
    node = graph.call_function(target, args, kwargs or {})
    _set_meta(node)
    return node


def _set_meta(node: torch.fx.Node) -> None:
    """meta["val"] from running the op on the inputs' fake values (they carry their fake mode)."""
    args = torch.fx.node.map_arg(node.args, lambda n: n.meta["val"])
    kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: n.meta["val"])
    node.meta["val"] = node.target(*args, **kwargs)
