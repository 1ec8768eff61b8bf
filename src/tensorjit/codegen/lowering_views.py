"""View lowerings as index arithmetic (no copies).

Takes a LazyValue and view arguments; returns a LazyValue whose loader maps the
view's index to the source's index. Views of buffers already in memory are
instead run as aliasing ATen calls by the graph lowering (zero cost).
"""

from __future__ import annotations

import torch

from . import ir
from .lowering import cast_python, lowering, result_info, to_dtype
from .values import MASKED_SELECTS, LazyValue, NotLowerable, contiguous_strides

aten = torch.ops.aten


def _require(value):
    if not isinstance(value, LazyValue):
        raise NotLowerable("view of a non-tensor")
    return value


@lowering(aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.view_copy.default)
def lower_view(meta, x, size):
    x = _require(x)
    shape, dtype = result_info(meta)
    if shape == x.shape:
        return x
    new_strides = contiguous_strides(shape)
    old_strides = contiguous_strides(x.shape)

    def loader(index):
        flat = ir.strided_index(index, new_strides)
        old = tuple(ir.index_mod(ir.index_floordiv(flat, stride), size)
                    for stride, size in zip(old_strides, x.shape))
        return x.load(old)
    return LazyValue(shape, dtype, loader)


@lowering(aten.permute.default, aten.permute_copy.default)
def lower_permute(meta, x, dims):
    x = _require(x)
    dims = [d % len(x.shape) for d in dims]
    shape = tuple(x.shape[d] for d in dims)

    def loader(index):
        old = [None] * len(dims)
        for position, d in enumerate(dims):
            old[d] = index[position]
        return x.load(tuple(old))
    return LazyValue(shape, x.dtype, loader)


@lowering(aten.t.default, aten.t_copy.default)
def lower_t(meta, x):
    return lower_permute(meta, x, list(reversed(range(len(_require(x).shape)))))


@lowering(aten.transpose.int, aten.transpose_copy.int)
def lower_transpose(meta, x, dim0, dim1):
    dims = list(range(len(_require(x).shape)))
    dims[dim0], dims[dim1] = dims[dim1], dims[dim0]
    return lower_permute(meta, x, dims)


@lowering(aten.expand.default, aten.expand_copy.default)
def lower_expand(meta, x, size, **kwargs):
    x = _require(x)
    shape, _ = result_info(meta)
    offset = len(shape) - len(x.shape)

    def loader(index):
        return x.load(tuple(ir.IndexConst(0) if s == 1 else index[offset + i] for i, s in enumerate(x.shape)))
    return LazyValue(shape, x.dtype, loader)


@lowering(aten.flip.default)
def lower_flip(meta, x, dims):
    """Element i of a flipped dim reads size - 1 - i."""
    x = _require(x)
    flipped = {d % len(x.shape) for d in dims} if x.shape else set()

    def loader(index):
        return x.load(tuple(ir.index_add(ir.IndexConst(size - 1), ir.index_mul(i, ir.IndexConst(-1)))
                            if d in flipped and size > 1 else i
                            for d, (i, size) in enumerate(zip(index, x.shape))))
    return LazyValue(x.shape, x.dtype, loader)


@lowering(aten.repeat.default)
def lower_repeat(meta, x, repeats):
    """Tiles: element i of a repeated dim reads i modulo the source's size (the leading new
    dims read nothing)."""
    x = _require(x)
    shape, _ = result_info(meta)
    offset = len(shape) - len(x.shape)
    if offset < 0:
        raise NotLowerable("repeat with fewer repeats than dims")

    def loader(index):
        return x.load(tuple(ir.index_mod(index[offset + d], size) for d, size in enumerate(x.shape)))
    return LazyValue(shape, x.dtype, loader)


@lowering(aten.unsqueeze.default, aten.unsqueeze_copy.default)
def lower_unsqueeze(meta, x, dim):
    x = _require(x)
    dim = dim % (len(x.shape) + 1)
    shape = x.shape[:dim] + (1,) + x.shape[dim:]
    return LazyValue(shape, x.dtype, lambda index: x.load(index[:dim] + index[dim + 1:]))


@lowering(aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default)
def lower_squeeze(meta, x, dims=None):
    x = _require(x)
    shape, _ = result_info(meta)
    return lower_view(meta, x, shape)


@lowering(aten.slice.Tensor, aten.slice_copy.Tensor)
def lower_slice(meta, x, dim=0, start=None, end=None, step=1):
    x = _require(x)
    shape, _ = result_info(meta)
    dim = dim % len(x.shape)
    start = 0 if start is None else start
    start = start + x.shape[dim] if start < 0 else min(start, x.shape[dim])

    def loader(index):
        moved = ir.index_add(ir.IndexConst(start), ir.index_mul(index[dim], ir.IndexConst(step)))
        return x.load(index[:dim] + (moved,) + index[dim + 1:])
    return LazyValue(shape, x.dtype, loader)


SPLITS = (aten.split.Tensor, aten.split_with_sizes.default)


@lowering(*SPLITS)
def lower_split(meta, x, sizes, dim=0):
    """A tuple of slices (a fused attention projection split into query, key and value)."""
    x = _require(x)
    dim = dim % len(x.shape)
    starts = [0]
    for part in meta:
        starts.append(starts[-1] + part.shape[dim])
    return tuple(lower_slice(part, x, dim, start, end) for part, start, end in zip(meta, starts, starts[1:]))


@lowering(aten.select.int, aten.select_copy.int)
def lower_select(meta, x, dim, position):
    x = _require(x)
    dim = dim % len(x.shape)
    position = position % x.shape[dim]
    shape = x.shape[:dim] + x.shape[dim + 1:]
    return LazyValue(shape, x.dtype, lambda index: x.load(index[:dim] + (ir.IndexConst(position),) + index[dim:]))


MAX_CAT_PIECES = 16
"""Above this, a concatenation runs as ATen's cat (each element would load every piece)."""
MAX_MASKED_CAT_PIECES = 32
"""The same for an emitter that masks off the loads a positional select discards
(values.MASKED_SELECTS, Triton: triton/guards.py): each element loads only its own piece, so
the cost of a piece is a masked-off load and a select. densenet121's third block concatenates
25 pieces (its input and 24 layers' features)."""


@lowering(aten.cat.default)
def lower_cat(meta, tensors, dim=0):
    """Concatenation as a piecewise load: element i along `dim` comes from the piece whose
    range holds i. Consumers fuse it (rotary embeddings' cat(-x2, x1) * sin stays one kernel).

    Every piece is loaded for every element and the right one selected (emitters compute
    selects without branches), so each piece's index must stay inside that piece even where
    its value is discarded: the local index is taken modulo the piece's size, which equals
    i - start inside the piece and is a valid index everywhere else. The selects form a
    balanced tree (`select_piece`), so a piece is kept under log2(pieces) conditions: the
    masks of guarded loads (triton/guards.py) are that short."""
    shape, dtype = result_info(meta)
    dim %= len(shape)
    # cat skips legacy empty 1-D pieces whatever their rank, and so can we any empty piece
    pieces = [_require(t) for t in tensors if not (isinstance(t, LazyValue) and t.shape == (0,) and len(shape) > 1)]
    if any(len(p.shape) != len(shape) for p in pieces):
        raise NotLowerable("cat of pieces of another rank")
    pieces = [p for p in pieces if p.shape[dim] > 0]
    if not pieces or len(pieces) > (MAX_MASKED_CAT_PIECES if MASKED_SELECTS[0] else MAX_CAT_PIECES):
        raise NotLowerable("cat of these pieces")
    if len(pieces) == 1:
        return LazyValue(shape, dtype, lambda index: to_dtype(pieces[0].load(index), dtype))
    starts = [0]
    for piece in pieces:
        starts.append(starts[-1] + piece.shape[dim])

    def load_piece(index, k):
        piece, size = pieces[k], pieces[k].shape[dim]
        shifted = ir.index_add(index[dim], ir.IndexConst((size - starts[k] % size) % size))
        return to_dtype(piece.load(index[:dim] + (ir.index_mod(shifted, size),) + index[dim + 1:]), dtype)

    def loader(index):
        position = ir.IndexValue(index[dim], "int64")
        return select_piece(position, starts, lambda k: load_piece(index, k), 0, len(pieces), dtype)
    return LazyValue(shape, dtype, loader)


def select_piece(position: ir.Expr, starts: list[int], load, first: int, end: int, dtype: str) -> ir.Expr:
    """The value of pieces[first:end] at `position`: a select on the middle piece's start
    between the two halves' values."""
    if end - first == 1:
        return load(first)
    middle = (first + end) // 2
    before = ir.Op("lt", (position, ir.Constant(starts[middle], "int64")), "bool")
    return ir.Op("where", (before, select_piece(position, starts, load, first, middle, dtype),
                           select_piece(position, starts, load, middle, end, dtype)), dtype)


@lowering(aten.constant_pad_nd.default)
def lower_constant_pad_nd(meta, x, pad, value=0):
    """F.pad(mode="constant"): pad = (left, right) pairs from the last dim backwards; a
    negative amount crops. Element i of a padded dim reads x at i - left where that lies in
    [0, size) and is `value` elsewhere. As in `lower_cat`, the read happens everywhere (the
    select has no branch), so its index is taken modulo the size: i - left inside, a valid
    position outside."""
    x = _require(x)
    shape, dtype = result_info(meta)
    if len(pad) % 2 or len(pad) // 2 > len(x.shape):
        raise NotLowerable("padding of more dims than the tensor has")
    rank = len(x.shape)
    amounts = {rank - 1 - k: (pad[2 * k], pad[2 * k + 1]) for k in range(len(pad) // 2)}
    if any(x.shape[d] == 0 for d, (left, right) in amounts.items() if left > 0 or right > 0):
        raise NotLowerable("padding an empty dimension")
    fill = ir.Constant(cast_python(value, dtype), dtype)

    def loader(index):
        source, inside = list(index), []
        for d, (left, right) in amounts.items():
            size = x.shape[d]
            if left > 0 or right > 0:
                position = ir.IndexValue(index[d], "int64")
                if left > 0:
                    inside.append(ir.Op("ge", (position, ir.Constant(left, "int64")), "bool"))
                if right > 0:
                    inside.append(ir.Op("lt", (position, ir.Constant(left + size, "int64")), "bool"))
            shift = -left % size if left > 0 else -left  # i - left, kept non-negative
            source[d] = ir.index_add(index[d], ir.IndexConst(shift))
            if left > 0 or right > 0:
                source[d] = ir.index_mod(source[d], size)
        value_at = to_dtype(x.load(tuple(source)), dtype)
        return _where_inside(inside, value_at, fill, dtype) if inside else value_at
    return LazyValue(shape, dtype, loader)


def _where_inside(inside: list, value: ir.Expr, other: ir.Expr, dtype: str) -> ir.Expr:
    condition = inside[0]
    for term in inside[1:]:
        condition = ir.Op("logical_and", (condition, term), "bool")
    return ir.Op("where", (condition, value, other), dtype)


@lowering(aten.slice_scatter.default)
def lower_slice_scatter(meta, x, src, dim=0, start=None, end=None, step=1):
    """x with x[..., start:end:step, ...] replaced by src (the backward of a slice, and what
    functionalisation makes of `x[:, a:b] = y`): element i along `dim` reads src where i is
    one of the slice's positions, x elsewhere. src's index is kept valid everywhere (the
    select has no branch): (i + shift) // step modulo its size, shift making i - start
    non-negative, equals (i - start) / step on the slice's positions."""
    x, src = _require(x), _require(src)
    shape, dtype = result_info(meta)
    dim %= len(shape)
    count = src.shape[dim] if len(src.shape) == len(shape) else -1
    if x.shape != shape or count < 0 or step < 1:
        raise NotLowerable("slice_scatter of these shapes")
    start = 0 if start is None else (start + shape[dim] if start < 0 else start)
    start = min(max(start, 0), shape[dim])
    if count == 0:
        return LazyValue(shape, dtype, lambda index: to_dtype(x.load(index), dtype))
    period = step * count
    shift = -start % period

    def loader(index):
        moved = ir.index_add(index[dim], ir.IndexConst(shift))
        local = ir.index_mod(ir.index_floordiv(moved, step), count)
        position = ir.IndexValue(index[dim], "int64")
        inside = [ir.Op("ge", (position, ir.Constant(start, "int64")), "bool"),
                  ir.Op("lt", (position, ir.Constant(start + period - step + 1, "int64")), "bool")]
        if step > 1:
            on_step = ir.IndexValue(ir.index_mod(moved, step), "int64")
            inside.append(ir.Op("eq", (on_step, ir.Constant(0, "int64")), "bool"))
        value = to_dtype(src.load(index[:dim] + (local,) + index[dim + 1:]), dtype)
        return _where_inside(inside, value, to_dtype(x.load(index), dtype), dtype)
    return LazyValue(shape, dtype, loader)


@lowering(aten.select_scatter.default)
def lower_select_scatter(meta, x, src, dim, position):
    """x with x.select(dim, position) replaced by src (the backward of select)."""
    x, src = _require(x), _require(src)
    shape, dtype = result_info(meta)
    dim %= len(shape)
    if x.shape != shape or len(src.shape) != len(shape) - 1:
        raise NotLowerable("select_scatter of these shapes")
    position %= shape[dim]

    def loader(index):
        chosen = ir.Op("eq", (ir.IndexValue(index[dim], "int64"), ir.Constant(position, "int64")), "bool")
        value = to_dtype(src.load(index[:dim] + index[dim + 1:]), dtype)
        return _where_inside([chosen], value, to_dtype(x.load(index), dtype), dtype)
    return LazyValue(shape, dtype, loader)
