"""Memory planning: when each temporary buffer dies.

Takes an ir.Program; `last_uses` returns, per step, the temporary buffer names
whose last reader is that step (the wrapper drops them right after it, so the
allocator hands their memory to later buffers). Inputs, constants and outputs
are never dropped.
"""

from __future__ import annotations

from torch.utils._pytree import tree_leaves

from . import ir


def names_read(step) -> set[str]:
    if isinstance(step, ir.Extern):
        leaves = tree_leaves((step.args, [v for _, v in step.kwargs]))
        return {leaf.name for leaf in leaves if isinstance(leaf, ir.BufferRef)}
    names: set[str] = set()
    stack = [step.body]
    while stack:
        expr = stack.pop()
        if isinstance(expr, ir.Load):
            names.add(expr.buffer)
        elif isinstance(expr, ir.Op):
            stack.extend(expr.args)
    return names


def last_uses(program: ir.Program) -> list[list[str]]:
    kinds = {b.name: b.kind for b in program.buffers}
    kept = {leaf if isinstance(leaf, str) else getattr(leaf, "name", None) for leaf in tree_leaves(program.outputs)}
    last: dict[str, int] = {}
    for position, step in enumerate(program.steps):
        for name in names_read(step) | {step.output}:
            last[name] = position
    frees: list[list[str]] = [[] for _ in program.steps]
    for name, position in last.items():
        if kinds.get(name) in ("temp", "extern") and name not in kept:
            frees[position].append(name)
    return frees
