"""Kernels move down to just before their first reader when that makes nothing live longer,
so that a backward's recomputations hold no memory before they are needed.

The partitioner (autograd/partition.py) puts the values a backward recomputes at its start:
densenet121's training backward recomputes each batch norm + ReLU output that a convolution's
weight gradient reads (16 x 128..256 x 32 x 32 float32: 8-16 MB each) from the saved
convolution output, mean and inverse deviation, in its first 120 steps, and the convolutions'
backwards read them in their last 100 steps (of 912): 119 such kernels held 215 MB through the
whole backward (planned peak of the backward's temporaries 301 MB; moved, 86 MB, measured with
bench/memory_plan.py's plan on the CPU; the backward's saved inputs, 360 MB, come on top of
either). torch.compile's partitioner orders its backward like autograd's engine, which
recomputes each value just before its use.

A kernel (not an ATen call: those may have effects the IR does not show) moves to just
before its first reader when every buffer it reads is a graph input or constant (alive for the
whole call) or read again by a step at or after the new position, so that no buffer's life
grows, and no step it passes writes what it reads (`horizontal.passable`). Kernels are taken
from the last one up, so that a chain of recomputations follows its last link down.
"""

from __future__ import annotations

import dataclasses

from .. import ir
from ..memory import names_read, names_written, returned_names
from .horizontal import passable


def sink_to_first_use(program: ir.Program) -> ir.Program:
    kinds = {b.name: b.kind for b in program.buffers}
    returned = returned_names(program)
    steps = list(program.steps)
    reads = [names_read(step) for step in steps]
    for position in range(len(steps) - 2, -1, -1):
        target = first_use(steps, reads, position, returned)
        if target is None or not all(kinds.get(name) in ("input", "constant") or
                                     any(name in read for read in reads[target:]) for name in reads[position]):
            continue
        steps.insert(target - 1, steps.pop(position))
        reads.insert(target - 1, reads.pop(position))
    return dataclasses.replace(program, steps=tuple(steps))


def first_use(steps: list, reads: list[set[str]], position: int, returned: set[str]) -> int | None:
    """The position of the first reader of what the kernel at `position` writes, if the kernel
    may move down to just before it (and it is more than the next step); else None."""
    step = steps[position]
    members = step.members if isinstance(step, ir.LoopGroup) else (step,)
    if isinstance(step, ir.Extern) or any(getattr(m, "scatter", None) is not None for m in members):
        return None
    written = set(names_written(step))
    if written & returned:
        return None
    target = position + 1
    while target < len(steps) and not reads[target] & written and passable(steps[target], reads[position]):
        target += 1
    if target == len(steps) or target == position + 1 or reads[target] & written == set():
        return None
    return target
