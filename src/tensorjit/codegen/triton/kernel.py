"""Building the text of one @triton.jit kernel.

`TritonKernel(name, xnumel, rnumel, shape)` is a builder: the emitter calls
`load`, `compute`, `reduction` and `store` with index and value expressions
(Triton source text over `xindex`, and `rindex` in reductions) and gets back
variable names; `source()` returns the module text holding the kernel. Sizes
are written into the kernel as literals: a compiled graph has static shapes,
and literal sizes let Triton prove divisibility (wider vector loads), drop
masks that can never be false, and bound loops.

Kernel kinds:
  * pointwise: a 1-D grid over xnumel elements, XBLOCK per program;
  * persistent reduction: XBLOCK rows per program, the whole row (RBLOCK >=
    rnumel) in registers, reductions over axis 1 without a loop;
  * looped reduction: rows longer than fit are walked RBLOCK at a time. Each
    stretch of work over the row is one loop; a reduction's accumulator lives
    across its loop and its result, one value per row, is visible to later
    loops. Values computed inside a loop are not: the emitter calls
    `begin_loop()` and loads again.
"""

from __future__ import annotations

import dataclasses
import re

import torch

from tensorjit.codegen.triton import expressions, interpreter_math
from tensorjit.codegen.triton.expressions import compute_dtype, triton_dtype
from tensorjit.codegen.triton.heuristics import LaunchShape

VARIABLE = re.compile(r"\b(?:tmp|reduced|accumulator)\d+\b")

PRELUDE = '''import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.jit
def _maximum_propagating_nan(left, right):
    return tl.where((left > right) | (left != left), left, right)


@triton.jit
def _minimum_propagating_nan(left, right):
    return tl.where((left < right) | (left != left), left, right)


@triton.jit
def _multiply(left, right):
    return left * right
'''


@dataclasses.dataclass
class Section:
    """One straight stretch of kernel body: the whole body, or one loop over the row."""

    looped: bool
    lines: list[str] = dataclasses.field(default_factory=list)
    cache: dict[str, str] = dataclasses.field(default_factory=dict)
    """Expression text -> variable already holding it (common subexpressions)."""
    loads: list[str] = dataclasses.field(default_factory=list)
    """Loads with computed-value-free addresses, emitted before `lines`."""
    variables: set[str] = dataclasses.field(default_factory=set)
    """Variables defined inside this section's loop."""


class TritonKernel:
    """Accumulates one kernel's arguments and body; see the module docstring."""

    def __init__(self, name: str, xnumel: int, rnumel: int | None, shape: LaunchShape, index_dtype: str = "tl.int32"):
        self.name = name
        self.xnumel = xnumel
        self.rnumel = rnumel
        self.shape = shape
        self.index_dtype = index_dtype
        self.arguments: dict[str, str] = {}
        """Buffer name -> parameter name, in launch order."""
        self.prologue: list[str] = []
        """Lines before the first loop: accumulators."""
        self.sections: list[Section] = [Section(looped=self.looped)]
        self.epilogues: list[list[str]] = [[]]
        """Lines after each section's loop: reduction results."""
        self.counter = 0
        self.row_cache: dict[str, str] = {}
        """Like Section.cache, for values computed outside loops (one per row)."""
        self.available: dict[str, int] = {}
        """Row value -> index of the epilogue defining it, -1 for the prologue (looped reductions)."""

    @property
    def is_reduction(self) -> bool:
        return self.rnumel is not None

    @property
    def looped(self) -> bool:
        return self.is_reduction and not self.shape.persistent

    # -- arguments and variables ------------------------------------------------

    def argument(self, buffer: str, prefix: str) -> str:
        if buffer not in self.arguments:
            self.arguments[buffer] = f"{prefix}{len(self.arguments)}"
        return self.arguments[buffer]

    def fresh(self, prefix: str = "tmp") -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def compute(self, expression: str, hoist: bool = False) -> str:
        """Bind `expression` to a variable, reusing an identical one in scope.

        In a looped reduction the line goes where its operands exist: inside
        the current loop if it reads the row (rindex, or a value of this
        loop); else right after the loop whose reduction it reads last; else
        before all loops.
        """
        where = self._placement(expression)
        cache = self.sections[-1].cache if where == "loop" else self.row_cache
        if expression in cache:
            return cache[expression]
        name = self.fresh()
        if hoist and where == "loop":
            # A load whose address needs no computed value is issued at the
            # top of its pass, so its latency overlaps the other loads and
            # the reductions instead of following them.
            self.sections[-1].loads.append(f"{name} = {expression}")
        else:
            self._emit(where, f"{name} = {expression}")
        cache[expression] = name
        if where == "loop":
            self.sections[-1].variables.add(name)
        else:
            self.available[name] = where
        return name

    def _placement(self, expression: str) -> str | int:
        """"loop", or the index of the epilogue after which the value exists (-1: before all loops)."""
        if not self.looped:
            return "loop"
        operands = VARIABLE.findall(expression)
        if "rindex" in expression or "rmask" in expression or any(
            name in self.sections[-1].variables for name in operands
        ):
            return "loop"
        return max((self.available.get(name, -1) for name in operands), default=-1)

    def _emit(self, where: str | int, line: str) -> None:
        if where == "loop":
            self.sections[-1].lines.append(line)
        elif where == -1:
            self.prologue.append(line)
        else:
            self.epilogues[where].append(line)

    def begin_loop(self) -> None:
        """Start a new pass over the row (looped reductions only)."""
        if self.looped and (self.sections[-1].lines or self.sections[-1].loads):
            self.sections.append(Section(looped=True))
            self.epilogues.append([])

    # -- masks ------------------------------------------------------------------

    def mask(self, uses_row: bool = True) -> str | None:
        parts = []
        if self.xnumel % self.shape.xblock != 0:
            parts.append("xmask")
        if self.is_reduction and uses_row and (self.looped and self.rnumel % self.shape.rblock != 0
                                               or not self.looped and self.shape.rblock != self.rnumel):
            parts.append("rmask")
        return " & ".join(parts) or None

    # -- memory -----------------------------------------------------------------

    def load(self, buffer: str, index: str, dtype: torch.dtype, uses_row: bool = True) -> str:
        pointer = self.argument(buffer, "in_ptr")
        mask = self.mask(uses_row)
        options = f", {mask}, other=0" if mask else ""
        value = self.compute(f"tl.load({pointer} + ({index}){options})", hoist=not VARIABLE.search(index))
        if compute_dtype(dtype) != dtype:
            value = self.compute(f"{value}.to({triton_dtype(compute_dtype(dtype))})")
        return value

    def store(self, buffer: str, index: str, value: str, dtype: torch.dtype, uses_row: bool = True) -> None:
        pointer = self.argument(buffer, "out_ptr")
        mask = self.mask(uses_row)
        options = f", {mask}" if mask else ""
        # Broadcast scalars (constants) to the block so the store sees a full tile.
        target = self._block_shape(uses_row)
        text = expressions.cast(f"tl.broadcast_to({value}, {target})", dtype)
        where = self._placement(f"{index} {value}") if not uses_row else "loop"
        self._emit(where, f"tl.store({pointer} + ({index}), {text}{options})")

    def _block_shape(self, uses_row: bool) -> str:
        if not self.is_reduction:
            return "[XBLOCK]"
        return "[XBLOCK, RBLOCK]" if uses_row else "[XBLOCK, 1]"

    # -- reductions -------------------------------------------------------------

    def reduction(self, kind: str, value: str, dtype: torch.dtype) -> str:
        """Reduce `value` over the row; returns an [XBLOCK, 1] variable visible to later sections."""
        if kind == "any":  # as a max over 0/1, which every path supports
            flag = self.compute(f"({value} != 0).to(tl.float32)")
            return self.compute(f"{self.reduction('max', flag, torch.float32)} != 0")
        key = f"reduction {kind} {value}"
        if key in self.row_cache:  # the same reduction of the same value (var and mean both sum x)
            return self.row_cache[key]
        result = self._new_reduction(kind, value, dtype)
        self.row_cache[key] = result
        return result

    def _new_reduction(self, kind: str, value: str, dtype: torch.dtype) -> str:
        accumulate_dtype = compute_dtype(dtype)
        identity = expressions.reduction_identity(kind, accumulate_dtype)
        mask = self.mask(uses_row=True)
        if mask:
            value = self.compute(f"tl.where({mask}, {value}, {identity})")
        if kind in ("argmax", "argmin"):
            return self._index_reduction(kind, value)
        if not self.looped:
            result = self.fresh("reduced")
            # Broadcast first: a constant is a [1, 1] block, and summing that over axis 1 adds one element.
            full = f"tl.broadcast_to({value}, [XBLOCK, RBLOCK])"
            self._emit("loop", f"{result} = ({_reduce(kind, full)})[:, None]")
            return result
        return self._looped_reduction(kind, value, identity, accumulate_dtype)

    def _looped_reduction(self, kind: str, value: str, identity: str, dtype: torch.dtype) -> str:
        accumulator = self.fresh("accumulator")
        self.prologue.append(f"{accumulator} = tl.full([XBLOCK, RBLOCK], {identity}, {triton_dtype(dtype)})")
        combined = _combine(kind, accumulator, f"tl.broadcast_to({value}, [XBLOCK, RBLOCK])")
        self.sections[-1].lines.append(f"{accumulator} = {combined}")
        result = self.fresh("reduced")
        self.epilogues[-1].append(f"{result} = ({_reduce(kind, accumulator)})[:, None]")
        self.available[result] = len(self.epilogues) - 1
        return result

    def _index_reduction(self, kind: str, value: str) -> str:
        if self.looped:
            raise NotImplementedError("triton emitter: argmax/argmin over rows longer than one block")
        result = self.fresh("reduced")
        function = "tl.argmax" if kind == "argmax" else "tl.argmin"
        broadcast = f"tl.broadcast_to({value}, [XBLOCK, RBLOCK])"
        self.sections[-1].lines.append(f"{result} = {function}({broadcast}, 1)[:, None].to(tl.int64)")
        return result

    # -- source -----------------------------------------------------------------

    def source(self) -> str:
        parameters = [*self.arguments.values(), "XBLOCK: tl.constexpr"]
        if self.is_reduction:
            parameters.append("RBLOCK: tl.constexpr")
        body = list(self.prologue)
        for section, epilogue in zip(self.sections, self.epilogues):
            body += self._section_lines(section)
            body += epilogue
        if self.shape.programs:
            body = self._grid_stride(body)
        else:
            body = self._indices(f"tl.program_id(0).to({self.index_dtype}) * XBLOCK") + body
        lines = "\n    ".join(body)
        prelude = PRELUDE + interpreter_math.PRELUDE if expressions.interpreted() else PRELUDE
        return f"{prelude}\n\n@triton.jit\ndef {self.name}({', '.join(parameters)}):\n    {lines}\n"

    def _grid_stride(self, body: list[str]) -> list[str]:
        """A fixed number of programs each walking blocks `programs` apart.

        Persistent grids: a few programs per multiprocessor that stay
        resident, so one block's loads are in flight while the previous
        block computes, and no time goes to launching thousands of programs.
        """
        step = self.shape.programs * self.shape.xblock
        start = f"tl.program_id(0).to({self.index_dtype}) * XBLOCK"
        header = [f"for xoffset in tl.range({start}, {self.xnumel}, {step}, num_stages={self.shape.num_stages}):"]
        return header + [f"    {line}" for line in self._indices("xoffset") + body]

    def _indices(self, offset: str) -> list[str]:
        lines = [f"xnumel = {self.xnumel}"]
        if not self.is_reduction:
            lines += [f"xindex = {offset} + tl.arange(0, XBLOCK)"]
        else:
            lines += [f"rnumel = {self.rnumel}", f"xindex = {offset} + tl.arange(0, XBLOCK)[:, None]"]
            if not self.looped:
                lines += ["rindex = tl.arange(0, RBLOCK)[None, :]", "rmask = rindex < rnumel"]
        lines.append("xmask = xindex < xnumel")
        return lines

    def _section_lines(self, section: Section) -> list[str]:
        if not section.looped:
            return section.loads + section.lines
        header = [
            "for roffset in range(0, rnumel, RBLOCK):",
            "    rindex = roffset + tl.arange(0, RBLOCK)[None, :]",
            "    rmask = rindex < rnumel",
        ]
        return header + [f"    {line}" for line in section.loads + section.lines]


def _reduce(kind: str, value: str) -> str:
    if kind == "sum":
        return f"tl.sum({value}, 1)"
    if kind == "prod":
        return f"tl.reduce({value}, 1, _multiply)"
    if kind == "max":
        return f"tl.reduce({value}, 1, _maximum_propagating_nan)"
    if kind == "min":
        return f"tl.reduce({value}, 1, _minimum_propagating_nan)"
    raise NotImplementedError(f"triton emitter: no reduction {kind!r}")


def _combine(kind: str, accumulator: str, value: str) -> str:
    if kind == "sum":
        return f"{accumulator} + {value}"
    if kind == "prod":
        return f"{accumulator} * {value}"
    if kind == "max":
        return f"_maximum_propagating_nan({accumulator}, {value})"
    if kind == "min":
        return f"_minimum_propagating_nan({accumulator}, {value})"
    raise NotImplementedError(f"triton emitter: no looped reduction {kind!r}")
