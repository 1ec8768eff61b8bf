"""Pointwise kernels too small to pay for their launch run together, one kernel with an output
each, whether or not they read an input in common.

A batch-norm layer in training counts its batches (`num_batches_tracked += 1`): a kernel of
one element, launched once per layer (densenet121: 121 launches of about 1.5 us each, for
121 integers). A later small kernel over the same range moves up to an earlier one past steps
that write nothing it reads, as in `horizontal.py`, and they become one `ir.LoopGroup` whose
members are the pointwise kernels (`kernels.is_horizontal`). The GPU's emitter only: a C++
kernel call costs no launch.
"""

from __future__ import annotations

import math

from .. import ir
from ..memory import names_read, names_written
from .horizontal import join_partners, passable
from .kernels import is_horizontal, memory_order

SMALL = 1024
"""Elements up to which a pointwise kernel counts as small: one program of a pointwise launch
covers it, so a kernel with more members does more stores per program, not more programs."""
MAX_BUFFERS = 256
"""Buffers one kernel reads and writes: each is a pointer parameter, and CUDA limits a launch's
parameters to 4 KB (256 pointers: 2 KB)."""
LOOKBACK = 256
"""Steps a small kernel looks back past for a partner: bounds the search in a graph of many
small kernels that join nothing (each would scan the whole program)."""


def gather_small_kernels(program: ir.Program) -> ir.Program:
    return join_partners(program, lambda steps, step, buffers:
                         partner_position(steps, step, buffers) if small(step) else None)


def small(step) -> bool:
    return isinstance(step, ir.Pointwise) and step.scatter is None and math.prod(step.ranges) <= SMALL


def partner_position(steps: list, step: ir.Pointwise, buffers: dict[str, ir.Buffer]) -> int | None:
    """The position of the latest earlier small kernel (or group of them) `step` can join,
    looking back past at most LOOKBACK steps that write nothing it reads (None: none). Moving
    a small kernel's store earlier keeps a few elements alive longer, nothing more."""
    read = names_read(step)
    for position in range(len(steps) - 1, max(len(steps) - 1 - LOOKBACK, -1), -1):
        earlier = steps[position]
        if joins(earlier, step, read, buffers):
            return position
        if not passable(earlier, read):
            return None
    return None


def joins(earlier, step: ir.Pointwise, read: set[str], buffers: dict[str, ir.Buffer]) -> bool:
    """Is `earlier` a small kernel, or a group of them, over `step`'s loops in the same memory
    order, with room for `step`'s buffers, writing nothing `step` reads?"""
    members = earlier.members if is_horizontal(earlier) else (earlier,) if small(earlier) else ()
    if not members or any(names_written(m)[0] in read for m in members):
        return False
    if len(set().union(*(names_read(m) | {m.output} for m in members), read, {step.output})) > MAX_BUFFERS:
        return False
    order = [v.name for v in memory_order(step, buffers[step.output])[0]]
    return all(m.ranges == step.ranges and m.variables == step.variables and
               [v.name for v in memory_order(m, buffers[m.output])[0]] == order for m in members)
