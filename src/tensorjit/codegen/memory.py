"""Memory planning: when each temporary buffer dies, and which later buffer takes its memory.

Takes an ir.Program; `last_uses` returns, per step, the temporary buffer names
whose last reader is that step (the wrapper drops them right after it, so the
allocator hands their memory to later buffers). Inputs, constants and outputs
are never dropped. `reuses` pairs a kernel's output with a dead temporary of the
same shape, strides and dtype: the wrapper hands the dead tensor over instead of
allocating (one allocator call less per pair on every call of the graph).
"""

from __future__ import annotations

from torch.utils._pytree import tree_leaves

from . import ir


def expression_loads(expr: ir.Expr) -> list[ir.Load]:
    loads, stack = [], [expr]
    while stack:
        expr = stack.pop()
        if isinstance(expr, ir.Load):
            loads.append(expr)
        if isinstance(expr, (ir.Load, ir.IndexValue)):  # the loads giving indirect indices
            stack.extend(node.value for node in ir.indirect_indices(expr.index))
        elif isinstance(expr, ir.Op):
            stack.extend(expr.args)
    return loads


def names_read(step) -> set[str]:
    """Buffers in memory that `step` reads (a group's row-local scratch is not in memory)."""
    if isinstance(step, ir.Extern):
        leaves = tree_leaves((step.args, [v for _, v in step.kwargs]))
        return {leaf.name for leaf in leaves if isinstance(leaf, ir.BufferRef)}
    if isinstance(step, ir.LoopGroup):
        written = {m.output for m in step.members}
        return set().union(*(names_read(m) for m in step.members)) - written
    read = {load.buffer for load in expression_loads(step.body)}
    scatter = getattr(step, "scatter", None)
    if scatter is not None:  # its base (updated in place), and the index tensors of its store
        read.add(scatter.base)
        read |= {load.buffer for node in ir.indirect_indices(scatter.index) for load in expression_loads(node.value)}
    return read


def names_written(step) -> tuple[str, ...]:
    return step.outputs if isinstance(step, ir.LoopGroup) else (step.output,)


def returned_names(program: ir.Program) -> set[str]:
    """The buffers the program returns (never freed, never handed over)."""
    return {leaf if isinstance(leaf, str) else getattr(leaf, "name", None) for leaf in tree_leaves(program.outputs)}


def last_uses(program: ir.Program) -> list[list[str]]:
    kinds = {b.name: b.kind for b in program.buffers}
    kept = returned_names(program)
    last: dict[str, int] = {}
    for position, step in enumerate(program.steps):
        for name in names_read(step) | set(names_written(step)):
            last[name] = position
    frees: list[list[str]] = [[] for _ in program.steps]
    for name, position in last.items():
        if kinds.get(name) in ("temp", "extern") and name not in kept:
            frees[position].append(name)
    return frees


def _kernel_only_temporaries(program: ir.Program) -> set[str]:
    """Temporaries allocated by the wrapper and read only by generated kernels: no ATen call
    ever saw them, so no view of their memory can outlive them."""
    temporaries = {b.name for b in program.buffers if b.kind == "temp"}
    excluded = returned_names(program)
    for step in program.steps:
        if isinstance(step, ir.Extern):
            excluded |= names_read(step)
        scatter = getattr(step, "scatter", None)
        if scatter is not None:  # updated in place and renamed: the same tensor under two names
            excluded |= {scatter.base, step.output}
    return temporaries - excluded


def reuses(program: ir.Program) -> dict[str, str]:
    """{kernel output: dead temporary whose tensor it takes over}. A donor died at an earlier
    step (never the step that writes the receiver: a kernel may read and write at once only
    where it reads what it writes, which this cannot know), and has the receiver's exact layout."""
    layouts = {b.name: (b.shape, b.strides, b.dtype) for b in program.buffers}
    eligible = _kernel_only_temporaries(program)
    free: dict[tuple, list[str]] = {}
    plan: dict[str, str] = {}
    for step, dead in zip(program.steps, last_uses(program)):
        if not isinstance(step, ir.Extern) and getattr(step, "scatter", None) is None:
            for name in names_written(step):
                donors = free.get(layouts[name]) if name in eligible else None
                if donors:
                    plan[name] = donors.pop()
        for name in dead:
            if name in eligible:
                free.setdefault(layouts[name], []).append(name)
    return plan
