"""Loops over size-1 dimensions removed from kernels, so that fusion sees equal shapes.

Takes an `ir.Program`; returns one whose Pointwise and Reduction kernels loop only over
dimensions of size > 1. A batch of one makes this matter: a reduction over a [1, 32, 64]
tensor has ranges (1, 32), while the pointwise kernel reading its result through a
view to [32, 64] has ranges (32, 64); without squeezing their rows do not line up and
`schedule.fuse_loops` keeps them apart (RMS norm, softmax and layer norm then take
several passes over memory instead of one).

A squeezed Pointwise stores through `ir.store_index`, which skips the output buffer's
size-1 dimensions when the kernel has fewer loop variables than the buffer has dims.
"""

from __future__ import annotations

from . import ir


def squeeze_unit_loops(program: ir.Program) -> ir.Program:
    steps = tuple(_squeezed(step) if isinstance(step, (ir.Pointwise, ir.Reduction)) else step
                  for step in program.steps)
    return ir.Program(program.buffers, steps, program.inputs, program.outputs)


def _squeezed(kernel):
    ranges = kernel.ranges
    reductions = getattr(kernel, "reduction_ranges", ())
    if 1 not in ranges and 1 not in reductions:
        return kernel
    mapping: dict[str, ir.Index] = {}
    variables = _renamed(kernel.variables, ranges, "i", mapping)
    kept = tuple(size for size in ranges if size != 1)
    if isinstance(kernel, ir.Pointwise):
        if not kept:
            return kernel  # a scalar kernel: nothing to line up
        scatter = kernel.scatter
        if scatter is not None:
            scatter = ir.Scatter(scatter.base, substitute(scatter.index, mapping), scatter.accumulate)
        store = None if kernel.store is None else substitute(kernel.store, mapping)
        return ir.Pointwise(kernel.name, kernel.output, kept, substitute(kernel.body, mapping), variables, scatter,
                            store)
    reduction_variables = _renamed(kernel.reduction_variables, reductions, "r", mapping)
    kept_reductions = tuple(size for size in reductions if size != 1)
    if not kept_reductions:
        return kernel  # reducing over one element: leave as it is
    return ir.Reduction(kernel.name, kernel.output, kept, kept_reductions, kernel.reduction_type,
                        substitute(kernel.body, mapping), variables, reduction_variables,
                        kernel.dtype, kernel.divisor)


def _renamed(variables, ranges, prefix: str, mapping: dict) -> tuple[ir.IndexVar, ...]:
    """New variables for the dims of size > 1 (numbered from 0); size-1 dims map to 0."""
    kept = []
    for variable, size in zip(variables, ranges):
        if size == 1:
            mapping[variable.name] = ir.IndexConst(0)
        else:
            new = ir.IndexVar(f"{prefix}{len(kept)}")
            mapping[variable.name] = new
            kept.append(new)
    return tuple(kept)


def substitute(expr, mapping: dict[str, ir.Index], memo: dict | None = None):
    """`expr` (a scalar expression or an index) with index variables replaced per `mapping`."""
    memo = {} if memo is None else memo
    if expr in memo:
        return memo[expr]
    if isinstance(expr, ir.IndexVar):
        result = mapping.get(expr.name, expr)
    elif isinstance(expr, ir.IndexConst) or isinstance(expr, ir.Constant):
        result = expr
    elif isinstance(expr, ir.IndexOp):
        left, right = substitute(expr.left, mapping, memo), substitute(expr.right, mapping, memo)
        result = {"add": ir.index_add, "mul": ir.index_mul}.get(expr.op, lambda a, b: ir.IndexOp(expr.op, a, b))(left, right)
    elif isinstance(expr, ir.IndirectIndex):
        result = ir.IndirectIndex(substitute(expr.value, mapping, memo), expr.size, expr.wrap)
    elif isinstance(expr, ir.Load):
        result = ir.Load(expr.buffer, substitute(expr.index, mapping, memo), expr.dtype)
    elif isinstance(expr, ir.IndexValue):
        result = ir.IndexValue(substitute(expr.index, mapping, memo), expr.dtype)
    else:
        result = ir.Op(expr.name, tuple(substitute(a, mapping, memo) for a in expr.args), expr.dtype, expr.extra)
    memo[expr] = result
    return result
