"""Loads a positional select discards are masked off: each element reads only the piece it keeps.

`lowering_views.lower_cat` (and constant padding) reads every piece at every element and
selects one with `where` on the element's position: emitters compute selects without
branches, and each piece's index is wrapped to stay in bounds. On the GPU every element then
moved the bytes of every piece (GPT-2's backward stacks the q, k and v gradients: three
loads an element, two of them thrown away). `LoadGuards` finds, for each load of a kernel
body, the positional conditions under which its value is kept; the Triton writers add them
to the load's mask. Only conditions on positions (no loads in them) guard a load: those
keep contiguous runs of elements, so masking skips whole memory transactions, where a
data-dependent select (ReLU's backward) would keep scattered lanes of every transaction.
"""

from __future__ import annotations

from .. import ir
from ..memory import expression_loads

Guard = tuple[tuple[ir.Expr, bool], ...]
"""Conditions, each with the value it must have, under which a value is used (() always)."""


def positional(condition: ir.Expr) -> bool:
    """Does `condition` (a select's) depend on the element's position only?"""
    return condition.dtype == "bool" and not expression_loads(condition) and not ir.reads_indirectly(condition)


def load_guards(bodies) -> dict[tuple[str, ir.Index], Guard]:
    """For each load in `bodies` (the expressions one kernel evaluates with one memo), by
    buffer and index, the guard under which its value is used: the positional selects on its
    every path from a root. A load also used on another path (another guard, or none) is
    always used."""
    guards: dict[tuple[str, ir.Index], Guard] = {}
    visited: set = set()

    def visit(node, guard: Guard) -> None:
        if (node, guard) in visited:
            return
        visited.add((node, guard))
        if isinstance(node, ir.Load):
            key = (node.buffer, node.index)
            guards[key] = guard if guards.get(key, guard) == guard else ()
            for atom in ir.indirect_indices(node.index):
                visit(atom.value, ())  # (an index tensor's value: read wherever the load is)
        elif isinstance(node, ir.IndexValue):
            for atom in ir.indirect_indices(node.index):
                visit(atom.value, ())
        elif isinstance(node, ir.Op):
            if node.name == "where" and positional(node.args[0]):
                condition, kept, dropped = node.args
                visit(condition, guard)
                visit(kept, guard + ((condition, True),))
                visit(dropped, guard + ((condition, False),))
            else:
                for argument in node.args:
                    visit(argument, guard)

    for body in bodies:
        visit(body, ())
    return guards


class LoadGuards:
    """The guard of each load of a kernel's bodies, as Triton text once its conditions are evaluated."""

    def __init__(self, bodies, memo: dict):
        """memo: the `ops.evaluate` memo the bodies are evaluated with (conditions' variables)."""
        self.guards = load_guards(bodies)
        self.memo = memo

    def mask(self, buffer: str, index: ir.Index, index_names: set[str]) -> str | None:
        """The text of the load's guard, or None where it has none or it cannot apply: a
        condition over variables the index does not use would widen the mask beyond the
        pointer's shape, and one not evaluated yet has no variable."""
        parts = []
        for condition, value in self.guards.get((buffer, index), ()):
            text = self.memo.get(condition)
            if text is None or not ir.variables_of(condition) or not ir.variables_of(condition) <= index_names:
                continue
            parts.append(f"({text})" if value else f"~({text})")
        return " & ".join(parts) or None
