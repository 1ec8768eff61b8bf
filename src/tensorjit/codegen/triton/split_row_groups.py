"""Row groups with few, long rows divided into kernels that each fill the GPU: the reductions
split in two (split_reductions.py), the per-element members as pointwise kernels over all
their elements.

A row group runs one program per row. Batch norm over densenet121's stem ([16, 64, 64, 64]
float32, training) is one group of 64 rows (channels) of 65,536 elements: 64 programs for the
132 multiprocessors of an H100, each walking its 256 KB row alone (the forward's group 0.049
ms, the backward's 0.130 ms, of a 6.6 ms step). torch.compile runs such work as split
reductions and a pointwise kernel of many programs. Here the members become (`phases`):

  * phases of reductions, with their row epilogues (one element per row: running statistics),
    each split by `split_reductions.split_group` (partials over blocks of the row, ~512
    programs, then one program per row reducing them). A phase ends before a reduction
    reading one of its results: batch norm's variance reads its mean, so the mean is one phase
    and the variance the next;
  * per-element members (a normalisation, batch norm backward's input gradient) pointwise
    kernels over their whole range (1024 elements a program), reading the reductions' results
    from their buffers where inside the group they read them from registers; those over the
    same loops one kernel (`joins`). A light one that a phase sums at its own element (batch
    norm's backward through ReLU) runs in the phase's first kernel instead (`lead`).

Nothing matches an operation: the division is a property of the group (rows, row length,
members' kinds and reads). Only groups of fewer rows than `split_reductions.TARGET_PROGRAMS`
/ 2 are divided, and only when every phase splits (a reduction that split_group refuses,
argmax, or one too small to split, keeps the group whole).

Bytes: only looped rows (longer than `heuristics.PERSISTENT_LIMIT`) are divided. A looped group
reads its row from memory in each member's loop, and hands a per-element value from one member
to another through memory (`kernels.prepare_groups`), as the divided kernels do; the division
adds the partials (a few floats a row) and drops nothing. A persistent group reads its row
into registers once; divided, each phase and each per-element kernel would read it again
(batch norm's forward: 3 reads instead of 1), so it keeps one kernel.

The stem (64 channels x 65,536 elements, 16.8 MB a float32 tensor), counted on the lowering
(docs/performance.md; each loop reading a buffer reads all of it):
  forward: 1 kernel of 64 programs, four loops over the convolution's output (mean, variance,
  and the two members computing batch norm + ReLU + the max pooling after it: 67 MB read,
  12.6 MB written) -> 5 kernels: the mean's partials (512 programs) and final, the variance's
  partials and final (with the running statistics), and the pooling (1024 programs, both
  members, their loads shared): 50 MB read, 12.6 MB written (and 2 x 2 KB of partials); 4
  launches more.
  backward: 1 kernel of 64 programs, four loops (the gradient through the pooling and ReLU,
  each sum, the input gradient: 113 MB read, 33.6 MB written) -> 4 kernels: the gradient
  through the pooling and ReLU (4096 programs), both sums' partials (512 programs, their
  loads shared), their final, the input gradient (4096 programs): 96.5 MB read, 33.6 MB
  written; 3 launches more. (Led by that gradient, the partials' kernel would read 62.9 MB
  in 3 kernels, but it is too heavy to lead: `LEAD_MAX_OPS`.)
"""

from __future__ import annotations

import dataclasses
import math

from .. import ir
from ..graph import count_ops
from ..memory import expression_loads
from ..squeeze import substitute
from .kernels import is_column_reduction, is_horizontal, is_persistent, is_row_epilogue, memory_order, same_lane
from .split_reductions import TARGET_PROGRAMS, block_mapping, split_group


LEAD_MAX_OPS = 32
"""Operations and loads (`graph.count_ops`) above which a per-element member keeps its own
kernel rather than lead a phase's partials: those hold a block of 8192 elements in 16 warps,
16 elements of every live value a thread, where a pointwise kernel holds 4. Batch norm's
backward through ReLU (about 12) leads; the gradient through densenet121's stem's max pooling
(9 taps with int64 index arithmetic: about 110 statements, 18 loads) would spill registers.
Not measured on a GPU: the bound keeps the lead to kernels that surely fit."""


def split_row_groups(program: ir.Program) -> ir.Program:
    buffers = list(program.buffers)
    steps = []
    for step in program.steps:
        divided = divide(step, buffers) if isinstance(step, ir.LoopGroup) and worth_dividing(step) else None
        steps.extend(divided or [step])
    return dataclasses.replace(program, buffers=tuple(buffers), steps=tuple(steps))


def worth_dividing(group: ir.LoopGroup) -> bool:
    """Few rows (at least two programs of the split's first kernel per row), each too long to
    keep in registers; reductions over rows, not columns (split_reductions handles those)."""
    rows = math.prod(group.ranges)
    return any(isinstance(m, ir.Reduction) for m in group.members) and not is_persistent(group) and \
        not is_column_reduction(group) and TARGET_PROGRAMS // max(rows, 1) >= 2 and \
        all(getattr(m, "scatter", None) is None for m in group.members)


def divide(group: ir.LoopGroup, buffers: list[ir.Buffer]) -> list | None:
    """The group's steps once divided (new partial buffers appended to `buffers`), or None
    where it stays one kernel."""
    pieces = phases(group)
    if len(pieces) < 2:
        return None  # reductions alone: split_reductions splits them
    read_by = readers(pieces)
    added: list[ir.Buffer] = []
    steps = []
    by_name = {b.name: b for b in buffers}
    for piece in pieces:
        if isinstance(piece, ir.Pointwise):
            if steps and joins(steps[-1], piece, by_name):
                steps[-1] = joined(steps[-1], piece)
            else:
                steps.append(piece)
            continue
        local = tuple(name for name in group.local
                      if name in {m.output for m in piece} and read_by.get(name, set()) <= {id(piece)})
        phase = ir.LoopGroup(piece[0].name, group.ranges, group.variables, tuple(piece), local)
        split = split_group(phase, added)
        if split is None:
            return None
        led = lead(split[0], steps[-1], phase, by_name) if steps else None
        if led is not None:
            steps[-1:] = [led]
            split = split[1:]
        steps += split
    buffers += added
    return steps


def lead(partials, producer, phase: ir.LoopGroup, buffers: dict[str, ir.Buffer]) -> ir.LoopGroup | None:
    """`partials` (a phase's first kernel) with `producer` (the pointwise kernel, or kernels,
    just before it) moved in as its first members, or None. Each producer's loops are the
    phase's rows and reduced loops, divided as the reductions' are (`block_mapping`), and the
    reductions read its value at their own lane: a persistent kernel keeps it in registers
    and stores it once for later readers, where the producer's kernel stored it and the
    partials read it back (batch norm's backward through ReLU: 16.8 MB read, a launch)."""
    producers = producer.members if is_horizontal(producer) else (producer,) if isinstance(producer, ir.Pointwise) \
        else ()
    reductions = partials.members if isinstance(partials, ir.LoopGroup) else (partials,)
    rows = len(phase.ranges)
    outer, inner = partials.ranges[:len(partials.ranges) - rows], reductions[0].reduction_ranges
    reduced = phase.members[0].reduction_ranges
    moved = []
    for member in producers:
        if member.ranges != phase.ranges + reduced or \
                count_ops(member.body) + len(expression_loads(member.body)) > LEAD_MAX_OPS:
            return None
        mapping, variables, lanes = block_mapping(member.variables[:rows], member.variables[rows:], outer, inner)
        store = substitute(ir.store_index(member, buffers[member.output]), mapping)
        moved.append(ir.Pointwise(member.name, member.output, partials.ranges + inner,
                                  substitute(member.body, mapping), variables + lanes, store=store))
    if not moved or any(load.buffer in {m.output for m in moved} for m in moved for load in expression_loads(m.body)):
        return None  # (none reads another: `joins` keeps such members apart)
    led = ir.LoopGroup(partials.name, partials.ranges, moved[0].variables[:len(partials.ranges)],
                       tuple(moved) + reductions)
    by_output = {m.output: m for m in moved}
    read = [(load, reduction) for reduction in reductions for load in expression_loads(reduction.body)
            if load.buffer in by_output]
    if not read or not is_persistent(led) or \
            not all(same_lane(load.index, reduction, by_output[load.buffer], led) for load, reduction in read):
        return None
    return led


def joins(earlier, piece: ir.Pointwise, buffers: dict[str, ir.Buffer]) -> bool:
    """Does `piece` run in one pointwise kernel with the one made just before it: the same
    loops, stored in the same memory order (`kernels.is_horizontal`), and no read of what the
    other members write (in the group, the row's program wrote it)? Then the values they share
    are loaded once, as in the group, and the kernel stays one (split, `row_joins` could sink
    one of them into a later row group of one program per row: the max pooling after
    densenet121's stem, into the next batch norm's 64 programs)."""
    members = earlier.members if is_horizontal(earlier) else (earlier,) if isinstance(earlier, ir.Pointwise) else ()
    if {load.buffer for load in expression_loads(piece.body)} & {m.output for m in members}:
        return False  # (another program may compute the element it reads)
    order = [v.name for v in memory_order(piece, buffers[piece.output])[0]]
    return bool(members) and all(
        m.ranges == piece.ranges and m.variables == piece.variables and m.scatter is None and
        [v.name for v in memory_order(m, buffers[m.output])[0]] == order for m in members)


def joined(earlier, piece: ir.Pointwise) -> ir.LoopGroup:
    members = (earlier.members if isinstance(earlier, ir.LoopGroup) else (earlier,)) + (piece,)
    return ir.LoopGroup(f"group0_{members[0].name}", piece.ranges, piece.variables, members)


def phases(group: ir.LoopGroup) -> list:
    """The members as pieces, every read still after its write: a list of reductions and row
    epilogues (one phase), or a per-element Pointwise member alone. A phase ends before a
    reduction reading its results (batch norm's variance reads its mean). A per-element member
    waits until a member reads it, or the end, so that it cuts no phase and those over the same
    loops come together (`joins`). A row epilogue with no reduction before it in its phase is a
    piece alone (a pointwise kernel of one element a row)."""
    pieces: list = []
    phase: list = []
    waiting: list = []
    for member in group.members:
        if isinstance(member, ir.Pointwise) and not is_row_epilogue(member, group):
            waiting.append(member)
            continue
        read = {load.buffer for load in expression_loads(member.body)}
        if read & {m.output for m in waiting}:
            pieces += ([phase] if phase else []) + waiting
            phase, waiting = [], []
        elif isinstance(member, ir.Reduction) and read & {m.output for m in phase}:
            pieces.append(phase)
            phase = []
        if isinstance(member, ir.Reduction) or phase:
            phase.append(member)
        else:
            pieces.append(member)
    return pieces + ([phase] if phase else []) + waiting


def readers(pieces: list) -> dict[str, set[int]]:
    """Buffer name -> the pieces (by id) that read it."""
    read_by: dict[str, set[int]] = {}
    for piece in pieces:
        for member in piece if isinstance(piece, list) else [piece]:
            for load in expression_loads(member.body):
                read_by.setdefault(load.buffer, set()).add(id(piece))
    return read_by
