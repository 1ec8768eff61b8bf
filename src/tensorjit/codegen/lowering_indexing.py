"""Indexing lowerings: reads and writes at positions held in index tensors.

Reads (gather, embedding, index_select, x[idx]) take the source LazyValue and the index
LazyValues and return a LazyValue whose loader reads the source at an `ir.IndirectIndex`
(the index tensor's element, checked against the dimension's size by the emitter).
Nothing is materialised: the source's producers and the result's consumers fuse with the
read, so an embedding lookup feeding a norm is part of one kernel.

Writes (scatter, scatter_add, index_put: embedding's backward) return a `ScatterValue`,
which the graph lowering turns into two kernels: the initial values, then the updates
stored through their indices into that memory (`ir.Scatter`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from . import ir
from .lowering import broadcast_load, lowering, result_info, to_dtype
from .values import LazyValue, NotLowerable, kernel_dtype

aten = torch.ops.aten
INDEX_DTYPES = ("int64", "int32")


def _source(value, positions=()) -> LazyValue:
    if not isinstance(value, LazyValue) or len(value.shape) == 0:
        raise NotLowerable("indexing a non-tensor or a 0-d tensor")
    if any(value.shape[d] == 0 for d in positions):
        raise NotLowerable("indexing an empty dimension (every index is out of range)")
    return value


def _indices(value) -> LazyValue:
    if not isinstance(value, LazyValue) or value.dtype not in INDEX_DTYPES:
        raise NotLowerable("indices that are not an integer tensor (boolean masks have data-dependent shapes)")
    return value


def _broadcast_position(indices: LazyValue, index: tuple, shape: tuple[int, ...]) -> tuple:
    """Where element `index` of the broadcast `shape` reads `indices`."""
    offset = len(shape) - len(indices.shape)
    return tuple(ir.IndexConst(0) if size == 1 else index[offset + k] for k, size in enumerate(indices.shape))


def _checked_shape(meta, shape: tuple[int, ...]) -> tuple[tuple[int, ...], str]:
    expected, dtype = result_info(meta)
    if tuple(shape) != expected:
        raise NotLowerable(f"indexing result {shape} differs from the trace's {expected}")
    return expected, dtype


def advanced_index(x: LazyValue, indices) -> tuple[tuple[int, ...], Callable]:
    """x[i0, i1, ...] with integer index tensors (None skips a dim): the indexed shape, and
    the map from an element of it to the position in x it reads. The index tensors
    broadcast together; their shape takes the place of the indexed dims when those are
    adjacent, else it comes first (numpy's rule). Negative indices count from the end."""
    if len(indices) > len(getattr(x, "shape", ())):
        raise NotLowerable("more indices than dims")
    positions = [d for d, t in enumerate(indices) if t is not None]
    x = _source(x, positions)
    tensors = [_indices(indices[d]) for d in positions]
    if not tensors:
        raise NotLowerable("no index tensor")
    broadcast = tuple(torch.broadcast_shapes(*(t.shape for t in tensors)))
    rest = [d for d in range(len(x.shape)) if d not in positions]
    adjacent = positions == list(range(positions[0], positions[-1] + 1))
    first = positions[0] if adjacent else 0
    kept = [x.shape[d] for d in rest]

    def source_position(index):
        inner = index[first:first + len(broadcast)]
        outer = index[:first] + index[first + len(broadcast):]
        source = [None] * len(x.shape)
        for d, position in zip(rest, outer):
            source[d] = position
        for d, tensor in zip(positions, tensors):
            value = tensor.load(_broadcast_position(tensor, inner, broadcast))
            source[d] = ir.IndirectIndex(value, x.shape[d], wrap=True)
        return tuple(source)
    return tuple(kept[:first]) + broadcast + tuple(kept[first:]), source_position


@lowering(aten.index.Tensor)
def lower_index(meta, x, indices):
    """x[i0, i1, ...]: see advanced_index."""
    indexed_shape, source_position = advanced_index(x, indices)
    shape, dtype = _checked_shape(meta, indexed_shape)
    return LazyValue(shape, dtype, lambda index: x.load(source_position(index)))


@lowering(aten.index_select.default)
def lower_index_select(meta, x, dim, index):
    """x with dim `dim` read at index[0], index[1], ... (a 0-d index reads one position)."""
    x = _source(x)
    dim %= len(x.shape)
    x = _source(x, (dim,))
    index = _indices(index)
    if len(index.shape) > 1:
        raise NotLowerable("index_select with a multi-dimensional index")
    count = index.shape[0] if index.shape else 1
    shape, dtype = _checked_shape(meta, x.shape[:dim] + (count,) + x.shape[dim + 1:])

    def loader(at):
        value = index.load((at[dim],) if index.shape else ())
        return x.load(at[:dim] + (ir.IndirectIndex(value, x.shape[dim]),) + at[dim + 1:])
    return LazyValue(shape, dtype, loader)


@lowering(aten.gather.default)
def lower_gather(meta, x, dim, index, *, sparse_grad=False):
    """out[i] = x[i with dim `dim` replaced by index[i]]."""
    x = _source(x)
    dim %= len(x.shape)
    x = _source(x, (dim,))
    index = _indices(index)
    if len(index.shape) != len(x.shape):
        raise NotLowerable("gather with an index of another rank")
    shape, dtype = _checked_shape(meta, index.shape)

    def loader(at):
        position = ir.IndirectIndex(index.load(at), x.shape[dim])
        return x.load(at[:dim] + (position,) + at[dim + 1:])
    return LazyValue(shape, dtype, loader)


@lowering(aten.embedding.default)
def lower_embedding(meta, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    """Rows of `weight` at `indices` (padding_idx only matters to the gradient)."""
    weight = _source(weight, (0,))
    indices = _indices(indices)
    if len(weight.shape) != 2:
        raise NotLowerable("embedding of a weight that is not 2-d")
    shape, dtype = _checked_shape(meta, indices.shape + (weight.shape[1],))

    def loader(at):
        row = ir.IndirectIndex(indices.load(at[:-1]), weight.shape[0])
        return weight.load((row, at[-1]))
    return LazyValue(shape, dtype, loader)


@dataclass
class ScatterValue:
    """`base` with `update(i)` written (or with `accumulate`, added) at position `target(i)`
    for every element i of `ranges` (graph.GraphLowering.realize_scatter)."""

    shape: tuple[int, ...]
    dtype: str
    base: LazyValue
    ranges: tuple[int, ...]
    update: Callable[[tuple], ir.Expr]
    target: Callable[[tuple], tuple]
    accumulate: bool


def _scatter_base(meta, x, accumulate: bool) -> tuple[tuple[int, ...], str, LazyValue]:
    shape, dtype = result_info(meta)
    x = _source(x)
    if x.shape != shape:
        raise NotLowerable("scatter result of another shape than its input")
    if accumulate and dtype in ir.HALF_DTYPES:
        raise NotLowerable("adding through indices in a half float (atomic adds of that width)")
    if accumulate and dtype == "bool":
        raise NotLowerable("adding bools through indices")
    base = LazyValue(shape, dtype, lambda index: to_dtype(x.load(index), dtype))
    return shape, dtype, base


def _scatter_along(meta, x, dim, index, value, accumulate: bool) -> ScatterValue:
    """x with value[i] stored at i with dim `dim` replaced by index[i] (scatter, scatter_add)."""
    shape, dtype, base = _scatter_base(meta, x, accumulate)
    dim %= len(shape)
    index = _indices(index)
    if len(index.shape) != len(shape) or shape[dim] == 0:
        raise NotLowerable("scatter with an index of another rank")
    if isinstance(value, LazyValue) and not kernel_dtype(value.dtype):
        raise NotLowerable(f"scatter of {value.dtype}")

    def target(at):
        return at[:dim] + (ir.IndirectIndex(index.load(at), shape[dim]),) + at[dim + 1:]

    def update(at):  # the source may be larger than the index: only its first elements are used
        return value.load(at) if isinstance(value, LazyValue) else broadcast_load(value, index.shape, at, dtype)
    return ScatterValue(shape, dtype, base, index.shape, lambda at: to_dtype(update(at), dtype), target, accumulate)


@lowering(aten.scatter_add.default)
def lower_scatter_add(meta, x, dim, index, source):
    return _scatter_along(meta, x, dim, index, _source(source), accumulate=True)


@lowering(aten.scatter.src, aten.scatter.value)
def lower_scatter(meta, x, dim, index, source):
    """Where indices repeat, which value lands is unspecified in eager (C++ here: the last)."""
    return _scatter_along(meta, x, dim, index, source, accumulate=False)


@lowering(aten.index_put.default)
def lower_index_put(meta, x, indices, values, accumulate=False):
    """x[i0, i1, ...] = values (or += with accumulate: embedding's backward), values
    broadcast to the indexed shape."""
    shape, dtype, base = _scatter_base(meta, x, accumulate)
    ranges, target = advanced_index(_source(x), indices)
    if isinstance(values, LazyValue) and len(values.shape) > len(ranges):
        raise NotLowerable("index_put values of a higher rank than the indexed shape")
    return ScatterValue(shape, dtype, base, ranges, lambda at: broadcast_load(values, ranges, at, dtype), target,
                        bool(accumulate))
