"""A pointwise kernel joins a later row group that reads the same input row by row; the steps
between them that read its output move after the group.

A training step's backward recomputes each layer norm's output for the weight gradient's
matrix product, reading the norm's input and its saved mean and inverse deviation, and a
few steps later the norm's backward row group reads the same input, mean and inverse
deviation again (GPT-2 small: 25 such kernels a step, each reading 3-6 MB). The graph's
order puts the product between them, so the recomputation cannot simply move down: it joins
the row group as a member over the group's rows (`schedule.after_rows`), and the product,
with every step between that reads what the recomputation wrote, moves after the group.
In a persistent row group the member's loads of the input are the loads another member
already made (`kernels.RowWriter.load`), so the recomputation costs only its store.

A kernel whose first reader is a row group it can lead (a producer, as `schedule.fuse_loops`
joins one just before a reduction) moves down into that group however far it is
(`sink_producers`): the backward recomputes each layer's residual stream (x + attention +
MLP, three loads) at its start, where the partitioner put it, and stored it for a layer norm's
backward dozens of steps later. Joined, the row group reads it from registers, and its buffer
lives from that group on instead of from the start of the backward.

The GPU's emitter only, like `horizontal.py`: C++ groups run each member's loop on its own.
"""

from __future__ import annotations

import dataclasses
import math

from .. import ir
from ..memory import expression_loads, names_read, names_written
from ..schedule import after_rows, before_rows, fits, join_refusal
from .horizontal import movable, passable
from .kernels import is_column_reduction, is_horizontal, lanes, row_length

WINDOW = 12
"""Steps a kernel may move down past to join a row group (GPT-2's layer norm: the weight
gradient's product, the previous linear layer's bias gradient in two kernels, and views)."""


def join_row_groups(program: ir.Program) -> ir.Program:
    buffers = {b.name: b for b in program.buffers}
    steps = list(program.steps)
    position = 0
    while position < len(steps):
        joined = join_later_group(steps, position, buffers) if movable(steps[position]) else None
        if joined is not None:
            steps[position:position + 1 + len(joined)] = joined  # (the kernel and the steps it passed)
        else:
            position += 1
    return dataclasses.replace(program, steps=tuple(sink_producers(steps, buffers)))


def sink_producers(steps: list, buffers: dict[str, ir.Buffer]) -> list:
    """`steps` with each pointwise kernel whose first reader is a row group it can lead moved
    into that group as a first member (see the module docstring). Taken from the last kernel
    up, so that a chain of them (each layer's residual stream read by the next one's
    recomputation) follows its last link into the group: its reader is by then a member."""
    readers: dict[str, list[int]] = {}
    for position, step in enumerate(steps):
        for name in names_read(step):
            readers.setdefault(name, []).append(position)
    leading: dict[int, list] = {}  # group position -> producers joining it, in program order
    destination: dict[int, int] = {}  # moved kernel's position -> its group's position
    for position in range(len(steps) - 1, -1, -1):
        step = steps[position]
        places = [destination.get(reader, reader) for reader in readers.get(getattr(step, "output", None), ())]
        if not movable(step) or not places:
            continue
        target = min(places)  # (every other reader runs in that group or after it)
        group = steps[target]
        if isinstance(group, ir.LoopGroup):
            group = dataclasses.replace(group, members=tuple(leading.get(target, ())) + group.members)
        member = leading_member(step, group, buffers)
        if member is not None and all(passable(steps[between], names_read(step))
                                      for between in range(position + 1, target)):
            leading.setdefault(target, []).insert(0, member)
            destination[position] = target
    result = []
    for position, step in enumerate(steps):
        if position in leading:
            step = dataclasses.replace(step, members=tuple(leading[position]) + step.members)
        if position not in destination:
            result.append(step)
    return result


def leading_member(kernel: ir.Pointwise, group, buffers: dict[str, ir.Buffer]):
    """`kernel` looped over `group`'s rows as its first member, when it extends the rows with a
    row no longer than the group's (the launch shape stays), reads nothing the group writes,
    and every member reads its output within the row; None otherwise. Row groups only (a
    reduction among the members), not column reductions."""
    if not isinstance(group, ir.LoopGroup) or is_horizontal(group) or is_column_reduction(group) or \
            names_read(kernel) & {m.output for m in group.members}:
        return None
    reduction = next((m for m in group.members if isinstance(m, ir.Reduction)), None)
    if reduction is None:
        return None
    candidate = before_rows(kernel, reduction, buffers)
    outer = len(group.ranges)
    if not isinstance(candidate, ir.Pointwise) or not fits(candidate, group.ranges) or \
            len(candidate.ranges) <= outer or math.prod(candidate.ranges[outer:]) > row_length(group):
        return None
    members = [candidate]
    for member in group.members:
        if join_refusal(member, members, group.ranges) is not None:
            return None
        members.append(member)
    return candidate


def join_later_group(steps: list, position: int, buffers: dict[str, ir.Buffer]) -> list | None:
    """The steps from `position` on rewritten with the pointwise kernel there joined to a row
    group at most WINDOW steps later (the steps up to that group, then the group, then the
    steps that had to wait for the group), or None when no group can take it."""
    kernel = steps[position]
    waiting: list = []  # steps between that read the kernel's output (directly or not)
    staying: list = []
    held = {kernel.output}  # outputs not available before the group
    for later in steps[position + 1:position + 1 + WINDOW]:
        read = names_read(later)
        if not read & held:
            member = joined_member(kernel, later, buffers)
            if member is not None and can_wait(waiting, staying + [later], names_read(kernel)):
                group = dataclasses.replace(later, members=later.members + (member,))
                return staying + [group] + waiting
        if read & held:
            waiting.append(later)
            held |= set(names_written(later))
        else:
            staying.append(later)
    return None


def can_wait(waiting: list, passed: list, kernel_reads: set[str]) -> bool:
    """May the `waiting` steps (and the kernel, which reads `kernel_reads`) run after the
    `passed` steps: none of them writes anything but its own output (no in-place update, no
    call of unknown effects), and no passed step writes what they read?"""
    read = set(kernel_reads).union(*(names_read(step) for step in waiting))
    return all(passable(step, set()) for step in waiting) and all(passable(step, read) for step in passed)


def joined_member(kernel: ir.Pointwise, group, buffers: dict[str, ir.Buffer]):
    """`kernel` as a member of `group` looped over its rows, when it extends the rows, reads
    nothing the group writes, keeps the group's launch shape (no longer
    row, not a column reduction), and reads an input a member of the group reads at the same
    elements (otherwise it is unrelated work, left to its own kernel). None otherwise."""
    if not isinstance(group, ir.LoopGroup) or not names_read(kernel) & names_read(group) or \
            is_horizontal(group) or is_column_reduction(group):
        return None  # (no input in common: checked first, it is cheap)
    if names_read(kernel) & {m.output for m in group.members}:
        return None  # (the group's row-local values are laid out for its own members' reads)
    candidate = after_rows(kernel, list(group.members), group.ranges, buffers)
    outer = len(group.ranges)
    if not isinstance(candidate, ir.Pointwise) or len(candidate.ranges) <= outer or \
            math.prod(candidate.ranges[outer:]) > row_length(group) or \
            join_refusal(candidate, list(group.members), group.ranges) is not None:
        return None
    if not row_loads(candidate, outer) & set().union(*(row_loads(m, outer) for m in group.members)):
        return None
    return candidate


def row_loads(member, outer: int) -> set:
    """The (buffer, index) pairs `member` loads element by element along its rows, its lanes
    named as a pointwise member's are (i<outer>, i<outer + 1>, ...), so that equal reads
    compare equal across members."""
    variables, sizes = lanes(member, outer)
    renamed = {v.name: ir.IndexVar(f"i{outer + d}") for d, v in enumerate(variables)}
    every = {v.name for v, size in zip(variables, sizes) if size != 1}
    return {(load.buffer, rename(load.index, renamed)) for load in expression_loads(member.body)
            if every and ir.variables_of(load.index) >= every}


def rename(index: ir.Index, renamed: dict[str, ir.IndexVar]) -> ir.Index:
    if isinstance(index, ir.IndexVar):
        return renamed.get(index.name, index)
    if isinstance(index, ir.IndexOp):
        return ir.IndexOp(index.op, rename(index.left, renamed), rename(index.right, renamed))
    return index
