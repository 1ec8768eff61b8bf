"""Lazy tensor values used during lowering.

A `LazyValue` is a shape, a dtype and a loader: a function from a tuple of index
expressions to a scalar expression. Pointwise lowerings compose loaders, which
is how chains of pointwise ops fuse into one kernel; `realize` turns a value
into a buffer when it must exist in memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from . import ir

TORCH_TO_IR = {torch.float32: "float32", torch.float64: "float64", torch.int64: "int64",
               torch.int32: "int32", torch.bool: "bool"}
HALF_TO_IR = {torch.float16: "float16", torch.bfloat16: "bfloat16"}
IR_TO_TORCH = {v: k for k, v in {**TORCH_TO_IR, **HALF_TO_IR}.items()}
HALF_FLOATS = [False]
"""Whether kernels of the graph being lowered take float16/bfloat16 (set by GraphLowering for
emitters that compute them, Triton: loaded as float32, computed in float32, rounded on store).
The C++ emitter has no half types, so there they stay ATen externs."""
MASKED_SELECTS = [False]
"""Whether the emitter of the graph being lowered masks off the loads a positional select
discards (set by GraphLowering; Triton: triton/guards.py). Concatenations of more pieces are
then worth lowering (lowering_views.MAX_MASKED_CAT_PIECES)."""


class NotLowerable(Exception):
    """Raised by a lowering that cannot handle its arguments; the node becomes an Extern."""


@dataclass
class LazyValue:
    shape: tuple[int, ...]
    dtype: str
    loader: Callable[[tuple[ir.Index, ...]], ir.Expr]
    buffer: ir.Buffer | None = None  # set when the value is a buffer in memory
    alias_of: object = None
    """The graph node, when this value is a view of a buffer in memory: kernels read it by
    index arithmetic, and if it must exist (an extern or the output reads it) the node runs
    as an aliasing ATen view instead of a copy."""

    def load(self, index: tuple[ir.Index, ...]) -> ir.Expr:
        return self.loader(tuple(index))


def buffer_value(buffer: ir.Buffer) -> LazyValue:
    def loader(index):
        return ir.Load(buffer.name, ir.strided_index(index, buffer.strides), buffer.dtype)
    return LazyValue(tuple(buffer.shape), buffer.dtype, loader, buffer)


def ir_dtype(dtype: torch.dtype) -> str:
    if dtype in TORCH_TO_IR:
        return TORCH_TO_IR[dtype]
    if HALF_FLOATS[0] and dtype in HALF_TO_IR:
        return HALF_TO_IR[dtype]
    raise NotLowerable(f"dtype {dtype} has no kernel support")


def kernel_dtype(dtype: str) -> bool:
    """Can kernels of the graph being lowered load and compute `dtype`?"""
    return dtype in ir.DTYPES or (HALF_FLOATS[0] and dtype in ir.HALF_DTYPES)


def is_float(dtype: str) -> bool:
    return dtype in ("float32", "float64") or dtype in ir.HALF_DTYPES


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype of a buffer's dtype name: kernel dtypes, and the others (complex64,
    float16, uint8 ...) that only externs produce or read (`dtype_name` names them)."""
    return IR_TO_TORCH.get(name) or getattr(torch, name)


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, running = [], 1
    for size in reversed(shape):
        strides.append(running)
        running *= max(size, 1)
    return tuple(reversed(strides))
