"""Closure cells: those made while capturing (`CellValue`) and those that exist at run time
(`RealCellValue`, of the compiled function or a function it reached).

A function value hands its cells to the frame that inlines it (`closure_cells`), so they sit
below values/functions.py.
"""

from __future__ import annotations

import types

from ..breaks import GraphBreak
from ..sources import AttrSource, CellSource, ClosureSource
from .base import Value
from .lazy import LazyValue


class CellValue(Value):
    """A closure cell created while capturing (a cell variable of an inlined frame)."""

    def __init__(self, contents: Value | None = None) -> None:
        self.contents = contents

    def load(self, tx) -> Value:
        if self.contents is None:
            raise GraphBreak("unbound-cell", "free variable referenced before assignment")
        if type(self.contents) is LazyValue:
            self.contents = self.contents.realize(tx)
        return self.contents

    def store(self, tx, value: Value) -> None:
        self.contents = value

    def reconstruct_cell(self, cg) -> str:
        return f"{cg.helper('CellType')}({cg.value(self.contents) if self.contents else ''})"


class RealCellValue(Value):
    """A closure cell that exists at run time: of the compiled function or a function it reached."""

    def __init__(self, cell: types.CellType, function_source, index: int, name: str = "",
                 cell_source=None) -> None:
        self.cell = cell
        self.function_source = function_source
        self.index = index
        self.name = name
        self.cell_source = cell_source  # where the cell object itself is read (a resume function's argument)

    def contents_source(self):
        if self.cell_source is not None:
            return AttrSource(self.cell_source, "cell_contents")
        if self.function_source is None:
            return None
        if self.function_source == "root":
            return ClosureSource(self.index, self.name)
        return CellSource(self.function_source, self.index)

    def load(self, tx) -> Value:
        written = tx.output.attribute_overlay.get((id(self.cell), "cell_contents"))
        if written is not None:
            return written
        try:
            contents = self.cell.cell_contents
        except ValueError:
            raise GraphBreak("unbound-cell", "free variable referenced before assignment")
        return tx.wrap(contents, self.contents_source())

    def store(self, tx, value: Value) -> None:
        if self.contents_source() is None:
            raise GraphBreak("cell-write", "write to a closure cell with no source")
        tx.output.record_attribute_write(self.cell, "cell_contents", value, target_source=self.contents_source())

    def reconstruct_cell(self, cg) -> str:
        return cg.source(self.cell_source) if self.cell_source is not None else cg.constant(self.cell)
