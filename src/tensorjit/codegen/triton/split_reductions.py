"""Reductions with few outputs split in two kernels, so that the GPU has work for all its
multiprocessors.

A bias gradient sums a [4096, 768] tensor over its rows: 768 outputs, 64 to a program
(kernels.COLUMN_TILE), is 12 programs for 132 multiprocessors, each walking 4096 rows: GPT-2's
training step spent 3.3 ms in such kernels where torch.compile spends 0.6. Split, the first
kernel reduces blocks of rows into partial results (S partials per output: S times the
programs), and the second reduces the S partials:

    out[o] = sum(r < R: f(o, r))
      ->  partial[s, o] = sum(r' < R/S: f(o, s * R/S + r'))      (S x outputs, in parallel)
          out[o]        = sum(s < S: partial[s, o])

Row reductions with few rows are split alike (batch-norm statistics over N, H, W for each of
64 channels; a sum of a whole tensor), with one output per program instead of 64.
The split is taken along the reduction's own dimensions, outermost first, so every index stays
linear (a dimension is either wholly outer, or divided as s * size + r'). Partials of a
16-bit reduction are kept in float32. Only groups whose members are all splittable reductions
(sum, max, min, prod, any) over the same rows, none reading another's result, are split;
argmax/argmin keep one kernel.
"""

from __future__ import annotations

import dataclasses
import math

from .. import ir
from ..memory import expression_loads
from ..squeeze import substitute
from ..values import contiguous_strides
from .kernels import COLUMN_TILE, is_column_reduction, is_row_epilogue

SPLITTABLE = {"sum", "max", "min", "prod", "any"}
TARGET_PROGRAMS = 512
"""Programs the first kernel should have (about four per multiprocessor of an H100)."""
MIN_WORK = 1 << 20
"""Elements reduced (outputs x reduction length) below which one kernel is fast enough."""
MIN_REDUCTION = 1024
MIN_PARTIAL = {True: 32, False: 512}
"""Elements each partial reduces: rows of a column tile (64 outputs a program), or a row."""


def split_column_reductions(program: ir.Program) -> ir.Program:
    buffers = list(program.buffers)
    steps = []
    for step in program.steps:
        split = split_group(step, buffers) if isinstance(step, (ir.Reduction, ir.LoopGroup)) else None
        steps.extend(split or [step])
    return dataclasses.replace(program, buffers=tuple(buffers), steps=tuple(steps))


def split_group(step, buffers: list[ir.Buffer]) -> list | None:
    """[partials step, final step] for a reduction or a group of them (new partial buffers
    appended to `buffers`), or None where one kernel is kept (see the module docstring)."""
    group = step if isinstance(step, ir.LoopGroup) else ir.LoopGroup(step.name, step.ranges, step.variables, (step,))
    # Epilogues with one element per row (a running-statistics update) run after the final
    # reduction, in the second kernel.
    members = [m for m in group.members if not is_row_epilogue(m, group)]
    epilogues = [m for m in group.members if is_row_epilogue(m, group)]
    if not members or not all(isinstance(m, ir.Reduction) and m.reduction_type in SPLITTABLE for m in members):
        return None
    if len({m.reduction_ranges for m in members}) != 1 or any(m.ranges != group.ranges for m in members):
        return None
    written = {m.output for m in group.members}  # (a reduction reading an epilogue: no split either)
    if any(load.buffer in written for m in members for load in expression_loads(m.body)):
        return None  # a member reads another's result: its partials would need the final value
    outputs = math.prod(group.ranges)
    reduction = members[0].reduction_ranges
    column = is_column_reduction(group)
    wanted = TARGET_PROGRAMS * (COLUMN_TILE[0] if column else 1) // max(outputs, 1)  # a program's outputs
    if math.prod(reduction) < MIN_REDUCTION or outputs * math.prod(reduction) < MIN_WORK or wanted < 2:
        return None
    outer, inner = _split_dimensions(reduction, wanted, MIN_PARTIAL[column])
    if math.prod(outer) < 2 or math.prod(inner) < MIN_PARTIAL[column]:
        return None
    first, second = [], []
    for member in members:
        partial = _partial_buffer(member, outer, buffers)
        first.append(_first_stage(member, outer, inner, partial))
        second.append(_second_stage(member, outer, partial))
    return [_as_step(first, group.name + "_partials"), _as_step(second + epilogues, group.name, group.local)]


def _split_dimensions(reduction: tuple[int, ...], wanted: int, least: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(outer sizes, inner sizes): leading reduction dims become outer while their product
    stays within `wanted` and each partial keeps `least` elements; the first dim
    that does not fit whole is divided into outer x inner."""
    outer: list[int] = []
    for position, size in enumerate(reduction):
        have, rest = math.prod(outer), math.prod(reduction[position + 1:])
        factor = max((f for f in range(1, size + 1) if size % f == 0 and have * f <= wanted
                      and size // f * rest >= least), default=1)
        outer.append(factor)
        if factor != size:
            return tuple(outer), (size // factor,) + tuple(reduction[position + 1:])
    return tuple(outer), (1,)


def _partial_buffer(member: ir.Reduction, outer: tuple[int, ...], buffers: list[ir.Buffer]) -> ir.Buffer:
    dtype = "float32" if member.dtype in ("float16", "bfloat16") else member.dtype
    shape = outer + member.ranges
    buffer = ir.Buffer(f"{member.output}_partials", dtype, shape, contiguous_strides(shape))
    buffers.append(buffer)
    return buffer


def _first_stage(member: ir.Reduction, outer: tuple[int, ...], inner: tuple[int, ...], partial: ir.Buffer):
    """partial[s..., o...] = reduce over the rows of block s: the member's body with each old
    reduction variable written as a linear form of the block variables s and the new ones."""
    mapping, variables, lanes = block_mapping(member.variables, member.reduction_variables, outer, inner)
    return ir.Reduction(f"{member.name}_partials", partial.name, outer + member.ranges, inner,
                        member.reduction_type, substitute(member.body, mapping), variables, lanes,
                        partial.dtype)


def block_mapping(rows: tuple[ir.IndexVar, ...], reduced: tuple[ir.IndexVar, ...], outer: tuple[int, ...],
                  inner: tuple[int, ...]) -> tuple[dict[str, ir.Index], tuple[ir.IndexVar, ...], tuple[ir.IndexVar, ...]]:
    """(old variable name -> its index over the new variables, the new kept variables (blocks
    s, then rows), the new reduced ones) for a loop nest over `rows` x `reduced` divided by
    `_split_dimensions` into `outer` blocks of `inner` elements (split_row_groups.py moves a
    pointwise kernel over the same loops into the first kernel with it)."""
    kept = len(outer)
    blocks = tuple(ir.IndexVar(f"i{d}") for d in range(kept))
    new_rows = tuple(ir.IndexVar(f"i{kept + d}") for d in range(len(rows)))
    lanes = tuple(ir.IndexVar(f"r{d}") for d in range(len(inner)))
    mapping = {old.name: new for old, new in zip(rows, new_rows)}
    for d in range(kept - 1):  # wholly outer dims
        mapping[reduced[d].name] = blocks[d]
    divided = kept - 1  # the dim split as block * inner size + lane (inner[0] == 1 when none was)
    mapping[reduced[divided].name] = ir.index_add(ir.index_mul(blocks[-1], ir.IndexConst(inner[0])), lanes[0])
    for d, lane in enumerate(lanes[1:], start=divided + 1):
        mapping[reduced[d].name] = lane
    return mapping, blocks + new_rows, lanes


def _second_stage(member: ir.Reduction, outer: tuple[int, ...], partial: ir.Buffer) -> ir.Reduction:
    rows = tuple(ir.IndexVar(f"i{d}") for d in range(len(member.ranges)))
    blocks = tuple(ir.IndexVar(f"r{d}") for d in range(len(outer)))
    body = ir.Load(partial.name, ir.strided_index(blocks + rows, partial.strides), partial.dtype)
    return ir.Reduction(member.name, member.output, member.ranges, outer, member.reduction_type, body, rows,
                        blocks, member.dtype, member.divisor)


def _as_step(members: list, name: str, local: tuple[str, ...] = ()):
    if len(members) == 1 and not local:
        return members[0]
    first = members[0]
    return ir.LoopGroup(name, first.ranges, first.variables, tuple(members), local)

