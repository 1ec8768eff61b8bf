"""Reduction lowerings: sum, amax/amin, mean (sum then divide), prod, any, argmax/argmin.

Takes a LazyValue and reduced dims; returns a `ReductionValue` (the graph
lowering turns it into an `ir.Reduction` kernel whose body inlines the
pointwise producers, which is how producers fuse into reductions).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

import torch

from . import ir
from .lowering import lowering, result_info, to_dtype
from .values import LazyValue, NotLowerable, is_float

aten = torch.ops.aten


@dataclass
class ReductionValue:
    shape: tuple[int, ...]          # result shape (keepdim applied)
    dtype: str
    reduction_type: str
    source: LazyValue
    reduced_dims: tuple[int, ...]
    keepdim: bool
    compute_dtype: str
    divisor: int = 1                # mean: divide the sum afterwards


def normalize_dims(x: LazyValue, dims) -> tuple[int, ...]:
    rank = len(x.shape)
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return tuple(range(rank))
    if isinstance(dims, int):
        dims = [dims]
    return tuple(sorted({d % max(rank, 1) for d in dims}))


def make_reduction(reduction_type: str, mean: bool = False):
    def lower(meta, x, dims=None, keepdim=False, *, dtype=None):
        if isinstance(x, LazyValue) and len(x.shape) == 0 and reduction_type in ("sum", "max", "min", "prod", "any"):
            return _scalar_reduction(meta, x)
        if not isinstance(x, LazyValue) or len(x.shape) == 0:
            raise NotLowerable("reduction of a scalar or non-tensor")
        shape, out_dtype = result_info(meta)
        reduced = normalize_dims(x, dims)
        if any(x.shape[d] == 0 for d in reduced) and reduction_type not in ("sum", "prod", "any"):
            raise NotLowerable("empty max/min reduction")
        compute = out_dtype
        if reduction_type == "any":
            compute = "bool"
        divisor = 1
        if mean:
            divisor = 1
            for d in reduced:
                divisor *= x.shape[d]
        return ReductionValue(shape, out_dtype, reduction_type, x, reduced, keepdim, compute, divisor)
    return lower


def _scalar_reduction(meta, x: LazyValue) -> LazyValue:
    """Reducing a 0-d tensor leaves its one element (in the result's dtype)."""
    shape, dtype = result_info(meta)
    if shape != ():
        raise NotLowerable("reduction of a 0-d tensor to another shape")
    return LazyValue((), dtype, lambda index: to_dtype(x.load(()), dtype))


lowering(aten.sum.dim_IntList)(make_reduction("sum"))
lowering(aten.mean.dim)(make_reduction("sum", mean=True))
lowering(aten.amax.default)(make_reduction("max"))
lowering(aten.amin.default)(make_reduction("min"))
lowering(aten.prod.dim_int)(make_reduction("prod"))
lowering(aten.any.dim, aten.any.dims)(make_reduction("any"))


@lowering(aten.sum.default)
def lower_sum_all(meta, x, *, dtype=None):
    return make_reduction("sum")(meta, x, None, False)


@lowering(aten.any.default)
def lower_any_all(meta, x):
    return make_reduction("any")(meta, x, None, False)


@lowering(aten.mean.default)
def lower_mean_all(meta, x, *, dtype=None):
    return make_reduction("sum", mean=True)(meta, x, None, False)


def make_arg_reduction(kind: str):
    def lower(meta, x, dim=None, keepdim=False):
        if dim is None or not isinstance(x, LazyValue):
            raise NotLowerable(f"{kind} over all elements")
        value = make_reduction(kind)(meta, x, dim, keepdim)
        value.compute_dtype = x.dtype
        return value
    return lower


lowering(aten.argmax.default)(make_arg_reduction("argmax"))
lowering(aten.argmin.default)(make_arg_reduction("argmin"))


# The graph lowering installs its `realize` here: variance needs the mean in memory.
REALIZE: list = [None]


def _variance(meta_shape, out_dtype, x: LazyValue, dims, correction, keepdim):
    reduced = normalize_dims(x, dims)
    count = 1
    for d in reduced:
        count *= x.shape[d]
    kept_shape = tuple(1 if d in reduced else s for d, s in enumerate(x.shape))
    mean = REALIZE[0](ReductionValue(kept_shape, out_dtype, "sum", x, reduced, True, out_dtype, count))

    def centered(index):
        mean_index = tuple(ir.IndexConst(0) if d in reduced else i for d, i in enumerate(index))
        difference = ir.Op("sub", (to_dtype(x.load(index), out_dtype), mean.load(mean_index)), out_dtype)
        return ir.Op("mul", (difference, difference), out_dtype)
    squares = LazyValue(x.shape, out_dtype, centered)
    variance = ReductionValue(meta_shape, out_dtype, "sum", squares, reduced, keepdim, out_dtype,
                              max(count - correction, 0) or 0)
    return variance, mean, reduced


def _correction(correction, unbiased=True):
    if correction is None:
        return 1 if unbiased else 0
    return int(correction)


@lowering(aten.var.correction)
def lower_var(meta, x, dims=None, *, correction=None, keepdim=False):
    if not isinstance(x, LazyValue) or not is_float(x.dtype) or len(x.shape) == 0:
        raise NotLowerable("var of a non-float tensor")
    shape, dtype = result_info(meta)
    variance, _, _ = _variance(shape, dtype, x, dims, _correction(correction), keepdim)
    if variance.divisor == 0:
        raise NotLowerable("var with no degrees of freedom")
    return variance


@lowering(aten.var_mean.correction)
def lower_var_mean(meta, x, dims=None, *, correction=None, keepdim=False):
    if not isinstance(x, LazyValue) or not is_float(x.dtype) or len(x.shape) == 0:
        raise NotLowerable("var_mean of a non-float tensor")
    shape, dtype = result_info(meta[0])
    variance, mean, reduced = _variance(shape, dtype, x, dims, _correction(correction), keepdim)
    if variance.divisor == 0:
        raise NotLowerable("var with no degrees of freedom")
    if keepdim:
        return variance, mean
    squeezed = LazyValue(shape, dtype, lambda index: mean.load(_unsqueeze_index(index, reduced, len(x.shape))))
    return variance, squeezed


def _unsqueeze_index(index, reduced, rank):
    iterator = iter(index)
    return tuple(ir.IndexConst(0) if d in reduced else next(iterator) for d in range(rank))


@lowering(operator.getitem)
def lower_getitem(meta, sequence, position):
    if not isinstance(sequence, tuple):
        raise NotLowerable("getitem of an extern result")
    return sequence[position]
