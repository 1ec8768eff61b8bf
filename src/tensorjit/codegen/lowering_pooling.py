"""2-D pooling and its gradients as loads over the window (no ATen calls).

Takes the pooling node's arguments (the input as a LazyValue over (..., H, W)) and returns
LazyValues whose loaders read each window tap: avg_pool2d and max_pool2d_with_indices read
the k x k taps of an output's window, their backwards the taps of the outputs whose windows
hold an input position (at most k per dim; with stride s, each input is in about k / s of
them). Every tap is loaded with an index kept inside the tensor (modulo its size, as
`lower_constant_pad_nd` does) and selected on its position's validity, so the values fuse
into their readers like any pointwise value: densenet121's transitions average-pool the batch
norm + ReLU + convolution output that the next block's first concatenation reads.

An input read at several taps is recomputed at each unless that costs more than a memory
round trip (`tapped`): the stem's batch norm + ReLU, one buffer read and a few operations, is
recomputed inside the max pool, but a gradient summed from seven batch-norm backwards is
computed into memory first (each of the nine taps would load its fourteen inputs).

Eager's conventions, kept exactly: avg_pool2d divides by the window clipped to the padded
input (count_include_pad) or to the input, or by divisor_override; max_pool2d takes a tap
that is greater than the current maximum or NaN (so the last NaN wins), starts from the
window's first tap inside the input, and its indices are flat positions h * W + w.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from . import ir
from .lowering import lowering, result_info, to_dtype
from .lowering_reductions import REALIZE
from .memory import expression_loads
from .values import LazyValue, NotLowerable, is_float

aten = torch.ops.aten

MAX_TAP_OPS = 24
"""Operations per element up to which a value read at several taps is recomputed at each."""


def tapped(value: LazyValue) -> LazyValue:
    """`value` as the taps of a window read it: recomputed at each tap where it reads one buffer
    element by element and costs at most MAX_TAP_OPS operations, else computed into memory."""
    if value.buffer is not None or value.alias_of is not None:
        return value
    from .graph import count_ops  # (graph imports this module's registrations)

    body = value.load(tuple(ir.IndexVar(f"i{d}") for d in range(len(value.shape))))
    every = {f"i{d}" for d, size in enumerate(value.shape) if size != 1}
    full = {load.buffer for load in expression_loads(body) if ir.variables_of(load.index) >= every}
    return value if len(full) <= 1 and count_ops(body) <= MAX_TAP_OPS else REALIZE[0](value)


@dataclass(frozen=True)
class Window:
    """One spatial dim of a pooling: input size, output size, kernel, stride, padding, dilation."""

    size: int
    out: int
    kernel: int
    stride: int
    padding: int
    dilation: int = 1

    def tap(self, position: ir.Index, k: int) -> tuple[ir.Index, ir.Expr]:
        """The input index of tap k of output `position`'s window (kept inside the input),
        and whether the tap lies inside the input."""
        offset = k * self.dilation - self.padding
        at = ir.index_add(ir.index_mul(position, ir.IndexConst(self.stride)), ir.IndexConst(offset))
        inside = within(at, 0, self.size)
        shift = self.size * math.ceil(self.padding / self.size)  # makes every tap non-negative
        return ir.index_mod(ir.index_add(at, ir.IndexConst(shift)), self.size), inside

    def covering(self, position: ir.Index, k: int) -> tuple[ir.Index, ir.Expr]:
        """The output whose window holds input `position` at tap k (kept inside the output), and
        whether there is one: position + padding - k * dilation is a multiple of the stride
        giving an output index in [0, out)."""
        lift = math.ceil(k * self.dilation / self.stride)  # outputs added to keep the numerator >= 0
        numerator = ir.index_add(position, ir.IndexConst(self.padding - k * self.dilation + lift * self.stride))
        lifted = ir.index_floordiv(numerator, self.stride)  # the output index + lift
        conditions = [within(lifted, lift, lift + self.out)]
        if self.stride > 1:
            remainder = ir.IndexValue(ir.index_mod(numerator, self.stride), "int64")
            conditions.append(ir.Op("eq", (remainder, ir.Constant(0, "int64")), "bool"))
        return ir.index_mod(ir.index_add(lifted, ir.IndexConst(-lift % self.out)), self.out), both(conditions)

    def start(self, position: ir.Index) -> ir.Expr:
        return ir.IndexValue(ir.index_add(ir.index_mul(position, ir.IndexConst(self.stride)),
                                          ir.IndexConst(-self.padding)), "int64")

    def divisor(self, position: ir.Index, include_padding: bool) -> ir.Expr:
        """How many taps of the window count toward the average: those before the padded input's
        end (count_include_pad), or those inside the input."""
        low, high = (-self.padding, self.size + self.padding) if include_padding else (0, self.size)
        start = self.start(position)
        end = ir.Op("minimum", (ir.Op("add", (start, ir.Constant(self.kernel, "int64")), "int64"),
                                ir.Constant(high, "int64")), "int64")
        return ir.Op("sub", (end, ir.Op("maximum", (start, ir.Constant(low, "int64")), "int64")), "int64")


def within(index: ir.Index, low: int, high: int) -> ir.Expr:
    value = ir.IndexValue(index, "int64")
    return both([ir.Op("ge", (value, ir.Constant(low, "int64")), "bool"),
                 ir.Op("lt", (value, ir.Constant(high, "int64")), "bool")])


def both(conditions: list[ir.Expr]) -> ir.Expr:
    result = conditions[0]
    for condition in conditions[1:]:
        result = ir.Op("logical_and", (result, condition), "bool")
    return result


def pair(value) -> tuple[int, int]:
    value = [value] if isinstance(value, int) else list(value)
    return (value[0], value[0]) if len(value) == 1 else (value[0], value[1])


def windows(x: LazyValue, out_shape, kernel, stride, padding, dilation=1) -> tuple[Window, Window]:
    """The two spatial windows of a pooling of `x` (..., H, W) to `out_shape` (..., OH, OW)."""
    if not isinstance(x, LazyValue) or not is_float(x.dtype) or len(x.shape) not in (3, 4):
        raise NotLowerable("pooling of a non-float or non-image tensor")
    kernel, padding, dilation = pair(kernel), pair(padding), pair(dilation)
    stride = pair(stride) if stride else kernel
    if 0 in x.shape[-2:] or 0 in out_shape[-2:]:
        raise NotLowerable("pooling of an empty tensor")
    return tuple(Window(x.shape[d], out_shape[d], kernel[k], stride[k], padding[k], dilation[k])
                 for k, d in enumerate((-2, -1)))


def spatial(index) -> tuple[tuple, ir.Index, ir.Index]:
    return tuple(index[:-2]), index[-2], index[-1]


# -- average pooling ------------------------------------------------------------------
@lowering(aten.avg_pool2d.default)
def lower_avg_pool2d(meta, x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
                     divisor_override=None):
    shape, dtype = result_info(meta)
    rows, columns = windows(x, shape, kernel_size, stride, padding)
    x = tapped(x)

    def loader(index):
        batch, oh, ow = spatial(index)
        total = ir.Constant(0.0, dtype)  # (eager's sum starts at zero: a lone -0.0 averages to 0.0)
        for kh in range(rows.kernel):
            h, h_inside = rows.tap(oh, kh)
            for kw in range(columns.kernel):
                w, w_inside = columns.tap(ow, kw)
                value = to_dtype(x.load(batch + (h, w)), dtype)
                term = ir.Op("where", (both([h_inside, w_inside]), value, ir.Constant(0.0, dtype)), dtype)
                total = ir.Op("add", (total, term), dtype)
        return ir.Op("truediv", (total, average_divisor(rows, columns, oh, ow, count_include_pad,
                                                          divisor_override, dtype)), dtype)
    return LazyValue(shape, dtype, loader)


def average_divisor(rows: Window, columns: Window, oh, ow, include_padding, divisor_override, dtype) -> ir.Expr:
    if divisor_override:
        return ir.Constant(float(divisor_override), dtype)
    count = ir.Op("mul", (rows.divisor(oh, include_padding), columns.divisor(ow, include_padding)), "int64")
    return to_dtype(count, dtype)


@lowering(aten.avg_pool2d_backward.default)
def lower_avg_pool2d_backward(meta, grad, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                              divisor_override):
    """Each input position sums grad / divisor over the outputs whose windows hold it."""
    shape, dtype = result_info(meta)
    if not isinstance(grad, LazyValue):
        raise NotLowerable("pooling gradient of a non-tensor")
    rows, columns = windows(x, grad.shape, kernel_size, stride, padding)
    grad = tapped(grad)

    def loader(index):
        batch, h, w = spatial(index)
        total = ir.Constant(0.0, dtype)
        for kh in reversed(range(rows.kernel)):  # outputs in ascending order, as eager sums them
            oh, oh_valid = rows.covering(h, kh)
            for kw in reversed(range(columns.kernel)):
                ow, ow_valid = columns.covering(w, kw)
                divisor = average_divisor(rows, columns, oh, ow, count_include_pad, divisor_override, dtype)
                share = ir.Op("truediv", (to_dtype(grad.load(batch + (oh, ow)), dtype), divisor), dtype)
                term = ir.Op("where", (both([oh_valid, ow_valid]), share, ir.Constant(0.0, dtype)), dtype)
                total = ir.Op("add", (total, term), dtype)
        return total
    return LazyValue(shape, dtype, loader)


# -- max pooling -----------------------------------------------------------------------
@lowering(aten.max_pool2d_with_indices.default)
def lower_max_pool2d_with_indices(meta, x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    """(maximum, flat index of the maximum) per window, scanning taps row by row as eager."""
    shape, dtype = result_info(meta[0])
    rows, columns = windows(x, shape, kernel_size, stride, padding, dilation)
    if not (every_window_has_a_tap(rows) and every_window_has_a_tap(columns)):
        raise NotLowerable("a pooling window outside the input")
    x = tapped(x)

    def scan(index):
        batch, oh, ow = spatial(index)
        best, position, seen = ir.Constant(float("-inf"), dtype), ir.Constant(0, "int64"), None
        for kh in range(rows.kernel):
            h, h_inside = rows.tap(oh, kh)
            for kw in range(columns.kernel):
                w, w_inside = columns.tap(ow, kw)
                inside = both([h_inside, w_inside])
                value = to_dtype(x.load(batch + (h, w)), dtype)
                better = ir.Op("logical_or", (ir.Op("gt", (value, best), "bool"), ir.Op("isnan", (value,), "bool")),
                               "bool")
                # the first tap inside the input is taken whatever its value (eager's starting index)
                first = None if seen is None else ir.Op("logical_not", (seen,), "bool")
                take = inside if first is None else both([inside, ir.Op("logical_or", (better, first), "bool")])
                flat = ir.IndexValue(ir.index_add(ir.index_mul(h, ir.IndexConst(columns.size)), w), "int64")
                best = ir.Op("where", (take, value, best), dtype)
                position = ir.Op("where", (take, flat, position), "int64")
                seen = inside if seen is None else ir.Op("logical_or", (seen, inside), "bool")
        return best, position

    return (LazyValue(shape, dtype, lambda index: scan(index)[0]),
            LazyValue(shape, "int64", lambda index: scan(index)[1]))


def every_window_has_a_tap(window: Window) -> bool:
    """Does every output's window hold a tap inside the input (eager's index of an empty window
    is a position we would not reproduce)?"""
    return all(any(0 <= o * window.stride - window.padding + k * window.dilation < window.size
                   for k in range(window.kernel)) for o in range(window.out))


@lowering(aten.max_pool2d_with_indices_backward.default)
def lower_max_pool2d_with_indices_backward(meta, grad, x, kernel_size, stride, padding, dilation, ceil_mode,
                                           indices):
    """Each input position sums the gradients of the outputs whose windows hold it and whose
    maximum it was (their index names it)."""
    shape, dtype = result_info(meta)
    if not isinstance(grad, LazyValue) or not isinstance(indices, LazyValue):
        raise NotLowerable("pooling gradient of a non-tensor")
    rows, columns = windows(x, grad.shape, kernel_size, stride, padding, dilation)
    grad, indices = tapped(grad), tapped(indices)

    def loader(index):
        batch, h, w = spatial(index)
        here = ir.IndexValue(ir.index_add(ir.index_mul(h, ir.IndexConst(columns.size)), w), "int64")
        total = ir.Constant(0.0, dtype)
        for kh in reversed(range(rows.kernel)):  # outputs in ascending order, as eager sums them
            oh, oh_valid = rows.covering(h, kh)
            for kw in reversed(range(columns.kernel)):
                ow, ow_valid = columns.covering(w, kw)
                chosen = ir.Op("eq", (to_dtype(indices.load(batch + (oh, ow)), "int64"), here), "bool")
                term = ir.Op("where", (both([oh_valid, ow_valid]),
                                       ir.Op("where", (chosen, to_dtype(grad.load(batch + (oh, ow)), dtype),
                                                       ir.Constant(0.0, dtype)), dtype),
                                       ir.Constant(0.0, dtype)), dtype)
                total = ir.Op("add", (total, term), dtype)
        return total
    return LazyValue(shape, dtype, loader)
