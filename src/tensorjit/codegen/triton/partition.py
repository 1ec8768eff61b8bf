"""Which ATen nodes share a kernel: classification and greedy fusion into Groups.

`partition(gm)` takes an ATen graph with `meta["val"]` on every node and returns
its nodes in order, with runs of fusable nodes replaced by `Group`s: pointwise
ops, reductions over the last dimension, and views that keep element order,
consecutive while their sizes fit one iteration space (N elements, or N rows
of length L). Cheap pure nodes between members (views of other tensors,
constants) run before the group instead of ending it. `resolve_view` says which
buffer a chain of views reads; `remove_dead_pure_nodes` drops unread pure nodes
first so they do not split groups.
"""

from __future__ import annotations

import dataclasses
import math
import operator
import re
from typing import Any

import torch
import torch.fx

from tensorjit.codegen.triton.expressions import interpreted
from tensorjit.codegen.triton.pointwise_ops import POINTWISE

aten = torch.ops.aten
prims = torch.ops.prims

REDUCTIONS: dict[Any, str] = {
    aten.sum.dim_IntList: "sum", prims.sum.default: "sum", aten.amax.default: "max", aten.amin.default: "min",
    aten.mean.dim: "mean", prims.var.default: "var", aten.prod.dim_int: "prod",
}
VIEWS = {
    aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.unsqueeze.default,
    aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, prims.broadcast_in_dim.default, aten.expand.default,
}


def value_of(node: Any) -> Any:
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def numel_of(node: torch.fx.Node) -> int:
    return math.prod(value_of(node).shape)


@dataclasses.dataclass
class Group:
    """Nodes fused into one kernel: over `rows` elements, or rows x `row_length` with a reduction.

    A `columns` group reduces over every dimension but the last (a bias gradient):
    its rows are the last dimension's positions and each row runs down a column."""

    rows: int
    row_length: int | None
    members: list[torch.fx.Node]
    columns: bool = False

    def level(self, node: torch.fx.Node) -> str | None:
        """"full" (one value per element), "row" (one per row), or None (does not fit)."""
        shape = value_of(node).shape
        numel = math.prod(shape)
        if self.row_length is None:
            return "full" if numel == self.rows else None
        last = self.rows if self.columns else self.row_length
        if numel == self.rows * self.row_length and len(shape) and shape[-1] == last:
            return "full"
        return "row" if numel == self.rows else None


def reduced_last_dimension(node: torch.fx.Node) -> int | None:
    """The length of the reduced last dimension, when `node` reduces exactly that one."""
    source = node.args[0]
    shape = value_of(source).shape if isinstance(source, torch.fx.Node) else None
    if not shape or len(node.args) < 2:
        return None
    dims = node.args[1]
    dims = [dims] if isinstance(dims, int) else list(dims or [])
    if [d % len(shape) for d in dims] != [len(shape) - 1] or shape[-1] <= 1:
        return None
    return shape[-1]


def reduced_leading_dimensions(node: torch.fx.Node) -> int | None:
    """The number of reduced elements per column, when `node` reduces every dimension but
    the last (sum over the batch: bias and norm-weight gradients)."""
    if node.target not in COLUMN_REDUCTIONS or len(node.args) < 2:
        return None
    source = value_of(node.args[0])
    shape = source.shape if isinstance(source, torch.Tensor) else None
    if not shape or len(shape) < 2:
        return None
    dims = node.args[1]
    dims = [dims] if isinstance(dims, int) else list(dims or [])
    if sorted(d % len(shape) for d in dims) != list(range(len(shape) - 1)) or shape[-1] <= 1:
        return None
    return math.prod(shape[:-1])


COLUMN_REDUCTIONS = {aten.sum.dim_IntList: "sum", aten.amax.default: "max", aten.amin.default: "min",
                     aten.mean.dim: "mean"}


def classify(node: torch.fx.Node) -> str:
    if node.op != "call_function":
        return node.op
    result = value_of(node)
    if not isinstance(result, torch.Tensor) or not _kernel_device(result.device) or result.is_complex():
        return "extern"
    inputs = [a for a in node.all_input_nodes if isinstance(value_of(a), torch.Tensor)]
    if any(value_of(a).device != result.device for a in inputs):
        return "extern"
    if node.target in REDUCTIONS and reduced_last_dimension(node) and not node.kwargs.get("dtype"):
        return "reduction"
    if reduced_leading_dimensions(node) and not node.kwargs.get("dtype"):
        return "column_reduction"
    if node.target in POINTWISE and all(value_of(a).numel() in (1, result.numel()) or _broadcastable(a, node)
                                        for a in inputs):
        return "pointwise"
    if node.target in VIEWS:
        return "view"
    return "extern"


def _kernel_device(device: torch.device) -> bool:
    # CPU tensors only under Triton's interpreter, which is how tests run kernels without a GPU.
    return device.type == "cuda" or (device.type == "cpu" and interpreted())


def _broadcastable(source: torch.fx.Node, node: torch.fx.Node) -> bool:
    small, large = value_of(source).shape, value_of(node).shape
    if len(small) > len(large):
        return False
    return all(s in (1, l) for s, l in zip(reversed(small), reversed(large)))


def try_join(group: Group | None, node: torch.fx.Node, kind: str) -> bool:
    if group is None:
        return False
    members = set(group.members)
    if kind == "view":
        source = node.args[0]
        if source not in members or group.level(source) is None:
            return False
        level = group.level(node)
        # A view keeps the element order; a broadcast may only widen a row value across the row.
        if level == "full" and group.level(source) == "row" and node.target not in (prims.broadcast_in_dim.default,
                                                                                     aten.expand.default):
            return False
        return level is not None
    if kind == "column_reduction":
        length = reduced_leading_dimensions(node)
        source = node.args[0]
        width = value_of(source).shape[-1]
        if group.row_length is None:
            if numel_of(source) != group.rows or any(
                    group.level(m) is None or value_of(m).shape[-1:] != (width,) for m in group.members):
                return False
            group.rows, group.row_length, group.columns = width, length, True
            return True
        return group.columns and length == group.row_length and group.level(source) == "full"
    if kind == "reduction":
        length = reduced_last_dimension(node)
        source = node.args[0]
        if group.columns:
            return False
        if group.row_length is None:
            if numel_of(source) != group.rows or any(value_of(m).shape[-1:] != (length,) for m in group.members):
                return False
            group.rows, group.row_length = group.rows // length, length
            return True
        return length == group.row_length and group.level(source) == "full"
    return group.level(node) is not None and all(
        group.level(a) is not None or a not in members for a in node.all_input_nodes
    )


def new_group(node: torch.fx.Node, kind: str) -> Group:
    if kind == "column_reduction":
        return Group(rows=value_of(node.args[0]).shape[-1], row_length=reduced_leading_dimensions(node),
                     members=[node], columns=True)
    if kind == "reduction":
        length = reduced_last_dimension(node)
        return Group(rows=numel_of(node.args[0]) // length, row_length=length, members=[node])
    return Group(rows=numel_of(node), row_length=None, members=[node])


FOLDABLE_VIEWS = (VIEWS - {aten.reshape.default}) | {
    aten.permute.default, aten.t.default, aten.transpose.int, aten.slice.Tensor, aten.select.int,
    aten.alias.default, aten.as_strided.default,
}
"""Views a kernel reads through by index arithmetic on the base buffer (their
strides and offset are in meta["val"]), so the wrapper need not make them.
reshape is not one: it may copy."""
CONSTANTS = {aten.full.default, aten.scalar_tensor.default}
VARIABLE_INDEX = re.compile(r"[xr]index")


def resolve_view(node: torch.fx.Node) -> tuple[torch.fx.Node, int]:
    """The buffer a chain of foldable views reads, and the view's element offset into it.

    The offset is summed from the views' own arguments (slice starts, select
    indices), not read from `meta["val"].storage_offset()`: make_fx in its
    default ("real") mode records every value as a fresh `empty_strided`, whose
    storage offset is always 0. An as_strided with an explicit storage offset
    (absolute in a storage whose start the kernel cannot see) is not folded.
    """
    base, offset = node, 0
    while base.op == "call_function" and base.target in FOLDABLE_VIEWS and isinstance(base.args[0], torch.fx.Node):
        step = _view_offset(base)
        if step is None:
            break
        offset += step
        base = base.args[0]
    if base is node or base.target in CONSTANTS:
        return base, 0
    return base, offset


def _view_offset(view: torch.fx.Node) -> int | None:
    """Elements between the start of `view` and the start of its input; None when not known."""
    if view.target is aten.as_strided.default:
        storage_offset = view.args[3] if len(view.args) > 3 else view.kwargs.get("storage_offset")
        return 0 if storage_offset is None else None
    if view.target not in (aten.slice.Tensor, aten.select.int):
        return 0
    source = value_of(view.args[0])
    dim = (view.args[1] if len(view.args) > 1 else view.kwargs.get("dim", 0)) % max(source.dim(), 1)
    size, stride = source.shape[dim], source.stride()[dim]
    if view.target is aten.select.int:
        index = view.args[2]
        return (index + size if index < 0 else index) * stride
    start = view.args[2] if len(view.args) > 2 else view.kwargs.get("start")
    start = 0 if start is None else start + size if start < 0 else start
    return min(max(start, 0), size) * stride


def constant_value(node: torch.fx.Node) -> Any:
    return node.args[1] if node.target is aten.full.default else node.args[0]


HOISTABLE = VIEWS | {
    aten.permute.default, aten.t.default, aten.transpose.int, aten.slice.Tensor, aten.select.int,
    aten.full.default, aten.scalar_tensor.default, aten.arange.start_step, aten.arange.default,
    aten.empty.memory_format, aten.zeros.default, aten.ones.default, aten.alias.default, operator.getitem,
}
"""Cheap, pure externs that may run before an open group instead of ending it: the
views and constants decompositions scatter between pointwise ops."""


def hoistable(node: torch.fx.Node) -> bool:
    """May `node` run before the open group instead of ending it? Views and constants, and
    any extern that neither mutates nor draws random numbers: in a functional graph its
    result depends only on its inputs, so running it earlier changes nothing but peak
    memory. (Backward graphs interleave matrix products with pointwise work; without
    this every product would split the pointwise work around it into two kernels.)"""
    if node.op != "call_function":
        return False
    if node.target in HOISTABLE:
        return True
    schema = getattr(node.target, "_schema", None)
    if schema is None or schema.is_mutable or torch.Tag.nondeterministic_seeded in getattr(node.target, "tags", ()):
        return False
    return isinstance(value_of(node), torch.Tensor)


def partition(gm: torch.fx.GraphModule) -> list[Group | torch.fx.Node]:
    """Graph nodes in order, with fusable runs replaced by Groups.

    While a group is open, a pure extern (see `hoistable`) does not end it: one
    that reads nothing of the group runs before it, one that reads the group's
    results is deferred until after it. A backward graph computes a gradient,
    feeds it to a matrix product, then sums it for the bias; deferring the
    product lets the sum join the kernel that computed the gradient."""
    steps: list[Group | torch.fx.Node] = []
    current: Group | None = None
    deferred: list[torch.fx.Node] = []
    for node in gm.graph.nodes:
        kind = classify(node)
        after_deferred = bool(set(node.all_input_nodes) & set(deferred))
        fusable = kind in ("pointwise", "reduction", "column_reduction", "view")
        if fusable and not after_deferred and try_join(current, node, kind):
            current.members.append(node)
            continue
        if current is not None and (kind == "view" or not fusable) and hoistable(node):
            if after_deferred or set(node.all_input_nodes) & set(current.members):
                deferred.append(node)
            else:
                steps.insert(steps.index(current), node)  # run it before the group; the group stays open
            continue
        steps.extend(deferred)
        deferred, current = [], None
        if fusable and kind != "view":
            current = new_group(node, kind)
            steps.append(current)
        else:
            steps.append(node)
    steps.extend(deferred)
    return steps


def remove_dead_pure_nodes(gm: torch.fx.GraphModule) -> None:
    """Drop unread nodes that have no effect (a decomposition's unused statistics), so they
    do not sit between fusable nodes. Random and mutating ops are kept whatever reads them."""
    for node in reversed(list(gm.graph.nodes)):
        if node.op == "call_function" and not node.users and _pure(node):
            gm.graph.erase_node(node)
    gm.recompile()


def _pure(node: torch.fx.Node) -> bool:
    return (node.target in POINTWISE or node.target in REDUCTIONS or node.target in COLUMN_REDUCTIONS
            or node.target in FOLDABLE_VIEWS
            or node.target in CONSTANTS or node.target in HOISTABLE or node.target is operator.getitem)
