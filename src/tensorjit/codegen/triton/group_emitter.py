"""One fused Group written as one Triton kernel.

`GroupEmitter(group, stored, names, shape).emit()` takes a Group from
partition.py, the members read outside it (to store), the buffer name of every
node and a LaunchShape, and returns the filled `TritonKernel`. Members are
evaluated by replaying them per pass over the row (so looped reductions reload
what they need); reductions are computed once. Loads read other buffers
through their strides, with view chains and constants folded into the index;
stores write in eager's strides (`meta["val"]`).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.fx

from tensorjit.codegen.triton import heuristics
from tensorjit.codegen.triton.emitter import TritonOps
from tensorjit.codegen.triton.indexing import split_index
from tensorjit.codegen.triton.kernel import TritonKernel
from tensorjit.codegen.triton.partition import (
    COLUMN_REDUCTIONS, CONSTANTS, REDUCTIONS, VARIABLE_INDEX, VIEWS, Group, classify, constant_value, resolve_view, value_of,
)
from tensorjit.codegen.triton.pointwise_ops import POINTWISE

class GroupEmitter:
    """Writes one Group as one kernel; `stored` are the members read outside the group."""

    def __init__(self, group: Group, stored: list[torch.fx.Node], names: dict[torch.fx.Node, str],
                 shape: heuristics.LaunchShape):
        self.group = group
        self.members = set(group.members)
        self.stored = stored
        self.names = names
        self.shape = shape
        extent = group.rows * (group.row_length or 1)
        name = "reduction_kernel" if group.row_length else "pointwise_kernel"
        self.kernel = TritonKernel(name, group.rows, group.row_length, self.shape,
                                   heuristics.index_dtype(extent, *self._outside_extents()))
        self.ops = TritonOps(self.kernel)
        self.memo: dict[tuple[torch.fx.Node, int], str] = {}
        self.loaded: set[torch.fx.Node] = set()
        """Buffers the kernel reads (views of them are folded into the index)."""
        self.reduced: dict[torch.fx.Node, str] = {}
        self.order = self._memory_order()

    def _outside_extents(self) -> list[int]:
        extents = []
        for member in self.group.members:
            for source in member.all_input_nodes:
                value = value_of(source)
                if source not in self.members and isinstance(value, torch.Tensor) and value.numel():
                    extents.append(sum((s - 1) * st for s, st in zip(value.shape, value.stride())) + 1)
        return extents

    def emit(self) -> TritonKernel:
        for member in self.group.members:
            if classify(member) in ("reduction", "column_reduction"):
                self.kernel.begin_loop()
                self.reduced[member] = self._reduce(member)
        rows_last = [m for m in self.stored if self.group.level(m) == "row"]
        full = [m for m in self.stored if self.group.level(m) == "full"]
        for member in rows_last:
            self.ops.store(self.names[member], self._store_index(member), self.evaluate(member, None),
                           value_of(member).dtype, uses_row=self.group.row_length is None)
        if full:
            self.kernel.begin_loop()
            for member in full:
                self.ops.store(self.names[member], self._store_index(member), self.evaluate(member, None),
                               value_of(member).dtype)
        return self.kernel

    def _dense_in_iteration_order(self, value: torch.Tensor) -> bool:
        """Is `value` laid out exactly in the group's memory-order iteration (its flat offset is
        xindex)? Then loads and stores skip the per-dimension div/mod arithmetic."""
        if self.order is None or tuple(value.shape) != self.order[0]:
            return False
        expected, running = {}, 1
        for dimension in reversed(self.order[1]):
            expected[dimension] = running
            running *= value.shape[dimension]
        return all(size == 1 or value.stride()[d] == expected[d] for d, size in enumerate(value.shape))

    def _store_index(self, node: torch.fx.Node) -> str:
        """Where each element goes in a buffer laid out like eager's (`meta["val"]` strides)."""
        value = value_of(node)
        if self._dense_in_iteration_order(value):
            return "xindex"
        coordinates = self._coordinates(tuple(value.shape))
        terms = [
            coordinate if stride == 1 else f"{coordinate} * {stride}"
            for coordinate, size, stride in zip(coordinates, value.shape, value.stride())
            if size != 1 and coordinate != "0"
        ]
        return " + ".join(terms) or "xindex * 0"

    def _reduce(self, node: torch.fx.Node) -> str:
        kind = REDUCTIONS.get(node.target) if not self.group.columns else COLUMN_REDUCTIONS[node.target]
        dtype = value_of(node).dtype
        source = self.evaluate(node.args[0], value_of(node.args[0]).shape)
        length = float(self.group.row_length)
        if kind in ("sum", "max", "min", "prod"):
            return self.ops.reduction(kind, source, dtype)
        total = self.ops.reduction("sum", source, dtype)
        mean = self.ops.binary("truediv", total, self.ops.constant(length, torch.float32))
        if kind == "mean":
            return mean
        # var: two passes over the row (exact, unlike one-pass sum of squares)
        correction = node.args[2] if len(node.args) > 2 else node.kwargs.get("correction", 1.0)
        self.kernel.begin_loop()
        centered = self.ops.binary("sub", self.evaluate(node.args[0], value_of(node.args[0]).shape), mean)
        squares = self.ops.reduction("sum", self.ops.binary("mul", centered, centered), dtype)
        divisor = self.ops.constant(max(length - float(correction or 0.0), 0.0), torch.float32)
        return self.ops.binary("truediv", squares, divisor)

    def evaluate(self, node: Any, consumer_shape) -> Any:
        """The emitter value of `node` at the current element (of the consumer, for loads)."""
        if not isinstance(node, torch.fx.Node):
            return node
        if node in self.reduced:
            return self.reduced[node]
        if node not in self.members:
            return self._load(node, consumer_shape)
        key = (node, len(self.kernel.sections))
        if key not in self.memo:
            self.memo[key] = self._compute(node)
        return self.memo[key]

    def _compute(self, node: torch.fx.Node) -> str:
        shape = value_of(node).shape
        if node.target in VIEWS:
            return self.evaluate(node.args[0], shape)
        arguments = [self.evaluate(a, shape) for a in node.args]
        keywords = {k: self.evaluate(v, shape) for k, v in node.kwargs.items()}
        return POINTWISE[node.target](self.ops, *arguments, **keywords)

    def _load(self, node: torch.fx.Node, consumer_shape) -> str:
        value = value_of(node)
        base, offset_elements = resolve_view(node)
        if base.target in CONSTANTS:
            return self.ops.constant(constant_value(base), value.dtype)
        consumer_shape = tuple(consumer_shape if consumer_shape is not None else value.shape)
        if tuple(value.shape) == consumer_shape and self._dense_in_iteration_order(value):
            self.loaded.add(base)
            index = f"xindex + {offset_elements}" if offset_elements else "xindex"
            return self.ops.load(self.names[base], index, value.dtype, uses_row=True)
        coordinates = self._coordinates(consumer_shape)
        offset = len(consumer_shape) - value.dim()
        terms = [
            f"{coordinates[offset + i]} * {stride}" if stride != 1 else coordinates[offset + i]
            for i, (size, stride) in enumerate(zip(value.shape, value.stride()))
            if size != 1 and coordinates[offset + i] != "0"
        ]
        if offset_elements:
            terms.append(str(offset_elements))
        index = " + ".join(terms) or "0"
        uses_row = "rindex" in index
        if not VARIABLE_INDEX.search(index):
            index = f"xindex * 0 + {index}"  # one element, broadcast to the block
        self.loaded.add(base)
        return self.ops.load(self.names[base], index, value.dtype, uses_row=uses_row or self.group.row_length is None)

    def _memory_order(self) -> tuple[tuple[int, ...], list[int]] | None:
        """For a pointwise group whose members all have one shape: that shape and its
        dimensions from outermost to innermost in the memory of what the group stores, when
        that is not row-major (channels-last activations). Iterating in this order makes
        consecutive threads touch consecutive addresses instead of striding by C."""
        if self.group.row_length is not None or not self.stored:
            return None
        shapes = {tuple(value_of(m).shape) for m in self.group.members}
        if len(shapes) != 1:
            return None
        shape = shapes.pop()
        strides = value_of(self.stored[0]).stride()
        order = sorted(range(len(shape)), key=lambda d: (-strides[d], d))
        return (shape, order) if order != list(range(len(shape))) else None

    def _coordinates(self, shape: tuple[int, ...]) -> list[str]:
        numel = math.prod(shape)
        if self.group.row_length is None:
            if self.order is not None and tuple(shape) == self.order[0]:
                order = self.order[1]
                permuted = split_index("xindex", [shape[d] for d in order])
                coordinates = [""] * len(shape)
                for position, dimension in enumerate(order):
                    coordinates[dimension] = permuted[position]
                return coordinates
            return split_index("xindex", shape)
        if numel == self.group.rows * self.group.row_length:
            if self.group.columns:  # rows are the last dimension; the reduction runs down the others
                return split_index("rindex", shape[:-1]) + ["xindex"]
            return split_index("xindex", shape[:-1]) + ["rindex"]
        return split_index("xindex", shape)
