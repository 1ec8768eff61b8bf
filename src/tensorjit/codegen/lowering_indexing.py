"""Indexing lowerings: reads at positions held in index tensors (gather, embedding, x[idx]).

Takes the source LazyValue and the index LazyValues; returns a LazyValue whose loader
reads the source at an `ir.IndirectIndex` (the index tensor's element, checked against
the dimension's size by the emitter). Nothing is materialised: the source's producers
and the result's consumers fuse with the read, so an embedding lookup feeding a norm, or
a rotary table gathered at positions, is part of one kernel.
"""

from __future__ import annotations

import torch

from . import ir
from .lowering import lowering, result_info
from .values import LazyValue, NotLowerable

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


@lowering(aten.index.Tensor)
def lower_index(meta, x, indices):
    """x[i0, i1, ...] with integer index tensors (None skips a dim). The index tensors
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
    shape, dtype = _checked_shape(meta, tuple(kept[:first]) + broadcast + tuple(kept[first:]))

    def loader(index):
        inner = index[first:first + len(broadcast)]
        outer = index[:first] + index[first + len(broadcast):]
        source = [None] * len(x.shape)
        for d, position in zip(rest, outer):
            source[d] = position
        for d, tensor in zip(positions, tensors):
            value = tensor.load(_broadcast_position(tensor, inner, broadcast))
            source[d] = ir.IndirectIndex(value, x.shape[d], wrap=True)
        return x.load(tuple(source))
    return LazyValue(shape, dtype, loader)


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
