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

The GPU's emitter only, like `horizontal.py`: C++ groups run each member's loop on its own.
"""

from __future__ import annotations

import dataclasses
import math

from .. import ir
from ..memory import expression_loads, names_read, names_written
from ..schedule import after_rows, join_refusal
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
    return dataclasses.replace(program, steps=tuple(steps))


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
