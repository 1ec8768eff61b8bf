"""The ops protocol (codegen/ops.py) for Triton: IR scalar expressions -> Triton statements.

Takes `ir.Expr` trees through `ops.evaluate`; each method appends one line
`tmpN = <expression>` to `lines` and returns `tmpN`. Loads are delegated to the
kernel writer (`load`: it knows masks, pointer arguments and values kept in
registers). The text of each operation comes from `expressions.py`, shared with
the Triton path's own lowering, so both agree on NaN propagation, integer
rounding and the interpreter's stand-ins for libdevice.

Half floats (float16, bfloat16) live in registers as float32: the kernel
writer upcasts them on load, `to_dtype` into a half type rounds (float32 ->
half -> float32), and the store rounds once more into the buffer's type.
"""

from __future__ import annotations

import itertools
from typing import Callable

from .. import ir
from ..values import IR_TO_TORCH
from . import expressions

REGISTER_DTYPES = {"float16": "float32", "bfloat16": "float32"}
"""IR dtypes held in registers as another."""


def register_dtype(dtype: str) -> str:
    return REGISTER_DTYPES.get(dtype, dtype)


def triton_type(dtype: str) -> str:
    """The Triton type of a value of IR dtype `dtype` in registers."""
    return expressions.triton_dtype(IR_TO_TORCH[register_dtype(dtype)])


def format_index(index: ir.Index, indirect: dict | None = None) -> str:
    """Triton text of `index`; `indirect` names the variable holding each checked IndirectIndex."""
    if isinstance(index, ir.IndexVar):
        return index.name
    if isinstance(index, ir.IndexConst):
        return str(index.value)
    if isinstance(index, ir.IndirectIndex):
        return indirect[index]
    symbol = {"add": "+", "mul": "*", "floordiv": "//", "mod": "%"}[index.op]
    return f"({format_index(index.left, indirect)} {symbol} {format_index(index.right, indirect)})"


def round_to(value: str, dtype: str) -> str:
    """`value` (registers) rounded to `dtype` as stored in memory."""
    return expressions.cast(value, IR_TO_TORCH[dtype])


class TritonOps:
    """One kernel body's statements; see the module docstring."""

    def __init__(self, load: Callable[[str, ir.Index], str], counter: itertools.count, constant_shape: str = "[1]",
                 mask_of: Callable[[ir.IndirectIndex], str | None] = lambda index: None):
        """mask_of(index): the mask of the lanes whose value of `index` is real (the kernel writer knows)."""
        self.lines: list[str] = []
        self._load = load
        self._counter = counter
        self._mask_of = mask_of
        self.constant_shape = constant_shape
        self.indirect_names: dict[ir.IndirectIndex, str] = {}

    def assign(self, text: str) -> str:
        name = f"tmp{next(self._counter)}"
        self.lines.append(f"{name} = {text}")
        return name

    def load(self, buffer: str, index: ir.Index) -> str:
        return self._load(buffer, index)

    def indirect(self, index: ir.IndirectIndex, value: str) -> str:
        """The position `value` names, asserted on the device to lie in [0, size) (eager's CUDA
        kernels assert too; the kernel is compiled with debug=True, see kernels.py), and read
        as 0 outside it, so that nothing is read out of bounds even where asserts are off (the
        interpreter)."""
        position = self.assign(f"({value}).to(tl.int64)")
        if index.wrap:
            position = self.assign(f"tl.where({position} < 0, {position} + {index.size}, {position})")
        inside = self.assign(f"({position} >= 0) & ({position} < {index.size})")
        mask = self._mask_of(index)
        self.lines.append(f'tl.device_assert({inside}, "index out of bounds: 0 <= index < {index.size}"'
                          + (f", {mask})" if mask else ")"))
        name = self.assign(f"tl.where({inside}, {position}, 0)")
        self.indirect_names[index] = name
        return name

    def constant(self, value, dtype: str) -> str:
        if dtype == "bool":  # a block, not a Python bool: the interpreter cannot `&` those with blocks
            return f"tl.full({self.constant_shape}, {int(bool(value))}, tl.int1)"
        return expressions.constant(value, IR_TO_TORCH[dtype], self.constant_shape)

    def index_expr(self, index: ir.Index, dtype: str) -> str:
        if isinstance(index, ir.IndexConst):
            return self.constant(index.value, dtype)
        return self.assign(f"({format_index(index, self.indirect_names)}).to({triton_type(dtype)})")

    def to_dtype(self, value: str, dtype: str, source_dtype: str) -> str:
        if dtype == "bool":
            return self.assign(f"({value}) != 0")
        if dtype in REGISTER_DTYPES:
            if source_dtype == dtype:
                return value
            return self.assign(f"({round_to(value, dtype)}).to({triton_type(dtype)})")
        if register_dtype(source_dtype) == dtype:
            return value  # a half float is already float32 in registers
        return self.assign(f"({value}).to({triton_type(dtype)})")

    def op(self, name: str, args: tuple, dtype: str, arg_dtypes: tuple) -> str:
        if name == "where":
            return self.assign(expressions.where(*args))
        if name in ("logical_and", "logical_or"):
            args = tuple(a if d == "bool" else f"(({a}) != 0)" for a, d in zip(args, arg_dtypes))
        if arg_dtypes and arg_dtypes[0] == "bool" and name == "bitwise_not":
            return self.assign(f"({args[0]}) == 0")
        if arg_dtypes and arg_dtypes[0].startswith("int") and name == "fmod":
            return self.assign(f"({args[0]}) % ({args[1]})")  # integer % truncates in Triton, as fmod
        if name == "truncdiv":
            return self.assign(f"({args[0]}) // ({args[1]})")  # integer // truncates in Triton, as C
        if len(args) == 1:
            return self.assign(expressions.unary(name, *args))
        return self.assign(expressions.binary(name, *args))
