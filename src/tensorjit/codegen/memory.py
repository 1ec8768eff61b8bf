"""Memory planning: when each temporary buffer dies.

Takes an ir.Program; `last_uses` returns, per step, the temporary buffer names
whose last reader is that step (the wrapper drops them right after it, so the
allocator hands their memory to later buffers). Inputs, constants and outputs
are never dropped.
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


def last_uses(program: ir.Program) -> list[list[str]]:
    kinds = {b.name: b.kind for b in program.buffers}
    kept = {leaf if isinstance(leaf, str) else getattr(leaf, "name", None) for leaf in tree_leaves(program.outputs)}
    last: dict[str, int] = {}
    for position, step in enumerate(program.steps):
        for name in names_read(step) | set(names_written(step)):
            last[name] = position
    frees: list[list[str]] = [[] for _ in program.steps]
    for name, position in last.items():
        if kinds.get(name) in ("temp", "extern") and name not in kept:
            frees[position].append(name)
    return frees
