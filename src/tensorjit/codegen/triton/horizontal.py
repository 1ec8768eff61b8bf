"""Pointwise kernels over one range that read the same input become one kernel with several
outputs (horizontal fusion), so the input is read once.

A training step's backward recomputes a forward value and computes its gradient from the
same input in two kernels: GPT-2's MLP recomputes GELU(x) for the weight gradient's matrix
product and computes GELU's backward from x and the incoming gradient, each kernel reading x
(12.6 MB a layer). The graph's order puts the product between them (it reads the recomputed
value), so the later kernel moves up to the earlier one when nothing between them writes
what it reads; they then run as one `ir.LoopGroup` over their whole range whose members are
the pointwise kernels (`kernels.is_horizontal`; one flat index, each input loaded once, one
store per member). The GPU's emitter only: its kernels load shared subexpressions once,
while the C++ emitter's group would run each member's loop on its own.
"""

from __future__ import annotations

import dataclasses
import operator

from .. import ir
from ..externs import strided_view
from ..memory import expression_loads, names_read, names_written
from ..schedule import writes_in_place
from .kernels import is_horizontal, memory_order

WINDOW = 8
"""Steps a kernel may move up past to join a partner: the moved kernel's output lives that
much longer, and a later partner is rarely related."""
PURE_CALLS = frozenset({strided_view, operator.getitem})
"""Externs without a schema that write nothing but their result."""


def fuse_horizontally(program: ir.Program) -> ir.Program:
    return join_partners(program, lambda steps, step, buffers:
                         partner_position(steps, step, buffers) if movable(step) else None)


def join_partners(program: ir.Program, find_partner) -> ir.Program:
    """Each step that `find_partner(steps so far, step, buffers)` places at an earlier kernel's
    position (or a group made here) joins it as one more member of an `ir.LoopGroup`; None
    leaves the step where it is. Shared with small_kernels.py, which finds partners its own way."""
    buffers = {b.name: b for b in program.buffers}
    steps: list = []
    for step in program.steps:
        position = find_partner(steps, step, buffers)
        if position is None:
            steps.append(step)
            continue
        partner = steps[position]
        members = partner.members if isinstance(partner, ir.LoopGroup) else (partner,)
        steps[position] = ir.LoopGroup(f"group{position}_{members[0].name}", step.ranges, step.variables,
                                       members + (step,))
    return dataclasses.replace(program, steps=tuple(steps))


def movable(step) -> bool:
    return isinstance(step, ir.Pointwise) and step.scatter is None and len(step.ranges) > 0


def partner_position(steps: list, step: ir.Pointwise, buffers: dict[str, ir.Buffer]) -> int | None:
    """The position of the latest earlier kernel `step` can join, looking back past at most
    WINDOW steps that write nothing it reads (None: none)."""
    read = names_read(step)
    shared = full_loads(step)
    for position in range(len(steps) - 1, max(len(steps) - 1 - WINDOW, -1), -1):
        earlier = steps[position]
        if joins(earlier, step, shared, buffers):
            return position
        if not passable(earlier, read):
            return None
    return None


def joins(earlier, step: ir.Pointwise, shared: set, buffers: dict[str, ir.Buffer]) -> bool:
    """Can `step` run in one kernel with `earlier` (a pointwise kernel, or a group of them
    made here): the same loops, stored in the same memory order, an input in common read at
    the same elements, and no read of what `earlier` writes?"""
    members = earlier.members if is_horizontal(earlier) else (earlier,) if movable(earlier) else ()
    if not members or any(names_written(m)[0] in names_read(step) for m in members):
        return False
    order = [v.name for v in memory_order(step, buffers[step.output])[0]]
    return all(m.ranges == step.ranges and m.variables == step.variables and
               [v.name for v in memory_order(m, buffers[m.output])[0]] == order for m in members) \
        and any(shared & full_loads(m) for m in members)


def full_loads(kernel: ir.Pointwise) -> set:
    """The loads of `kernel` that vary with each of its loops (an input read element by element)."""
    every = {v.name for v, size in zip(kernel.variables, kernel.ranges) if size != 1}
    return {(load.buffer, load.index) for load in expression_loads(kernel.body)
            if ir.variables_of(load.index) >= every}


def passable(step, read: set[str]) -> bool:
    """Can a kernel reading `read` move up past `step`: it writes none of them, and nothing
    else (an ATen call mutating its arguments, a call of unknown effects, a scatter)?"""
    if set(names_written(step)) & read:
        return False
    if isinstance(step, ir.Extern):
        schema = getattr(step.target, "_schema", None)
        return not writes_in_place(step) if schema is not None else step.target in PURE_CALLS
    members = step.members if isinstance(step, ir.LoopGroup) else (step,)
    return all(getattr(m, "scatter", None) is None for m in members)
