"""A column reduction runs inside the kernel that produces what it reduces.

A linear layer's bias gradient sums its output gradient over the rows. When that gradient is
computed by a pointwise kernel (GPT-2's MLP: GELU's backward, 12.6 MB a layer), the sum read
it back in a kernel of its own (split in two, `split_reductions.py`). Here the reduction (its
first stage, when split) takes the producer in: the group loops over the reduction's outputs
(`XBLOCK` columns a program) and its lanes (blocks of rows), and each producer member
computes and stores its element of the tile in the reduction's loop, where the reduction adds
it from registers (`kernels.RowWriter.shared_loop`). Each program writes its partial sums; the
second stage, unchanged, adds them.

The producer's loops are re-expressed over the reduction's: the reduction reads the
producer's output at a flat offset L(outputs, lanes) that enumerates every element once (its
terms are a mixed radix), so the producer's variable k, stored with stride s_k over size n_k,
is (L // s_k) % n_k, which `simplify` turns back into linear forms.

The GPU's emitter only, after horizontal fusion (GELU's recomputation and backward are one
producer by then).
"""

from __future__ import annotations

import dataclasses
import math

from .. import ir
from ..memory import expression_loads, names_read, names_written
from ..schedule import linear_form
from ..simplify import simplify, simplify_expr
from ..squeeze import substitute
from .horizontal import passable
from .kernels import COLUMN_TILE, is_column_reduction, is_horizontal, lane_members

WINDOW = 8
"""Steps a reduction may move up past to join its producer (GPT-2: the products reading the
gradient, and the other linear layer's bias gradient)."""
MIN_PROGRAMS = 128
"""Programs the fused kernel needs (outputs / XBLOCK) for a large producer: fewer would spread
the producer's elements over too few multiprocessors to save more than the launch."""
SMALL_PRODUCER = 1 << 16
"""Elements below which a producer is launch-bound: it joins however few programs it gets."""
FUSABLE = frozenset({"sum", "max", "min", "prod"})


def fuse_column_sums(program: ir.Program) -> ir.Program:
    buffers = {b.name: b for b in program.buffers}
    steps = list(program.steps)
    position = 0
    while position < len(steps):
        fused = producer_group(steps, position, buffers)
        if fused is not None:
            producer_position, group = fused
            steps[producer_position] = group
            del steps[position]
        else:
            position += 1
    return dataclasses.replace(program, steps=tuple(steps))


def producer_group(steps: list, position: int, buffers: dict[str, ir.Buffer]):
    """(the producer's position, the group replacing it) when the column reduction at
    `position` (a reduction, or a group of reductions and their row epilogues) can run inside
    the pointwise kernel that writes what it reduces; else None."""
    step = steps[position]
    column = ir.LoopGroup(step.name, step.ranges, step.variables, (step,)) if isinstance(step, ir.Reduction) \
        else step if isinstance(step, ir.LoopGroup) else None
    if column is None or lane_members(column) or not is_column_reduction(column):
        return None
    reductions = [m for m in column.members if isinstance(m, ir.Reduction)]
    if any(r.reduction_type not in FUSABLE or r.reduction_ranges != reductions[0].reduction_ranges
           for r in reductions):
        return None
    read = names_read(column)
    for earlier in range(position - 1, max(position - 1 - WINDOW, -1), -1):
        producer = steps[earlier]
        if set(names_written(producer)) & read:
            group = joined(producer, column, buffers)
            return None if group is None else (earlier, group)
        if not passable(producer, read):
            return None
    return None


def joined(producer, column: ir.LoopGroup, buffers: dict[str, ir.Buffer]) -> ir.LoopGroup | None:
    """The group running `producer`'s members in the loops of `column`'s reductions, then
    `column`'s members; None when the producer is not pointwise, or the reductions read what
    it writes other than one output, each element once."""
    members = producer.members if is_horizontal(producer) else (producer,) if \
        isinstance(producer, ir.Pointwise) and producer.scatter is None else ()
    if not members:
        return None
    outer = len(column.ranges)
    reductions = [m for m in column.members if isinstance(m, ir.Reduction)]
    lanes = tuple(ir.IndexVar(f"i{outer + d}") for d in range(len(reductions[0].reduction_ranges)))
    written = set(names_written(producer))
    if any(load.buffer in written for m in column.members if not isinstance(m, ir.Reduction)
           for load in expression_loads(m.body)):
        return None
    reads = {(load.buffer, substitute(load.index, {r.name: lane for r, lane in zip(m.reduction_variables, lanes)}))
             for m in reductions for load in expression_loads(m.body) if load.buffer in written}
    if len(reads) != 1:
        return None
    [(buffer, offset)] = reads
    source = next(m for m in members if m.output == buffer)
    elements = math.prod(source.ranges)
    programs = math.ceil(math.prod(column.ranges) / COLUMN_TILE[0])
    if elements > SMALL_PRODUCER and programs < MIN_PROGRAMS:
        return None
    ranges = column.ranges + reductions[0].reduction_ranges
    variables = column.variables + lanes
    sizes = {v.name: size for v, size in zip(variables, ranges)}
    if math.prod(ranges) != elements or not enumerates_once(offset, sizes):
        return None
    mapping = producer_variables(source, buffers[source.output], offset, sizes)
    if mapping is None:
        return None
    moved = tuple(moved_member(m, buffers[m.output], mapping, ranges, variables, sizes) for m in members)
    # (named as fuse_loops names groups: `kernels.shareable` renumbers such names)
    return ir.LoopGroup(f"group{len(moved)}_{reductions[0].name}", column.ranges, column.variables, moved + column.members,
                        column.local)


def enumerates_once(index: ir.Index, sizes: dict[str, int]) -> bool:
    """Does `index` take each value of [0, product of the sizes) exactly once over the loops:
    a linear form whose coefficients, sorted, are a mixed radix (1, n1, n1 n2, ...)?"""
    form = linear_form(index)
    if form is None or form[1] != 0:
        return False
    terms = sorted((c, sizes[name]) for name, c in form[0].items() if sizes.get(name, 1) != 1)
    if len(terms) != sum(1 for size in sizes.values() if size != 1):
        return False
    expected = 1
    for coefficient, size in terms:
        if coefficient != expected:
            return False
        expected *= size
    return True


def producer_variables(source: ir.Pointwise, output: ir.Buffer, offset: ir.Index,
                       sizes: dict[str, int]) -> dict[str, ir.Index] | None:
    """Each of `source`'s loop variables as an index over the reduction's loops: the element
    the reduction reads at `offset` is the one `source` stores there."""
    store = linear_form(ir.store_index(source, output))
    if store is None or store[1] != 0:
        return None
    mapping = {}
    for variable, size in zip(source.variables, source.ranges):
        stride = store[0].get(variable.name, 0)
        if size != 1 and stride == 0:
            return None  # (a broadcast store: not one element per offset)
        position = ir.index_mod(ir.index_floordiv(offset, stride), size) if size != 1 else ir.IndexConst(0)
        mapping[variable.name] = simplify(position, sizes)
    stored = simplify(substitute(ir.store_index(source, output), mapping), sizes)
    return mapping if stored == simplify(offset, sizes) else None


def moved_member(member: ir.Pointwise, output: ir.Buffer, mapping: dict[str, ir.Index], ranges, variables,
                 sizes: dict[str, int]) -> ir.Pointwise:
    """`member` looped over the reduction's outputs and lanes, storing where it did."""
    body = simplify_expr(substitute(member.body, mapping), sizes)
    store = simplify(substitute(ir.store_index(member, output), mapping), sizes)
    return ir.Pointwise(member.name, member.output, ranges, body, variables, None, store)
