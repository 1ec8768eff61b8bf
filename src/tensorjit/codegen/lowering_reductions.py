"""Reduction lowerings: sum, amax/amin, mean (sum then divide), prod, any, argmax/argmin.

Takes a LazyValue and reduced dims; returns a `ReductionValue` (the graph
lowering turns it into an `ir.Reduction` kernel whose body inlines the
pointwise producers, which is how producers fuse into reductions).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import ir
from .lowering import lowering, result_info, to_dtype
from .values import LazyValue, NotLowerable

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


lowering(aten.sum.dim_IntList)(make_reduction("sum"))
lowering(aten.mean.dim)(make_reduction("sum", mean=True))
lowering(aten.amax.default)(make_reduction("max"))
lowering(aten.amin.default)(make_reduction("min"))
lowering(aten.prod.dim_int)(make_reduction("prod"))
lowering(aten.any.dim, aten.any.dims)(make_reduction("any"))


@lowering(aten.sum.default)
def lower_sum_all(meta, x, *, dtype=None):
    return make_reduction("sum")(meta, x, None, False)


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
