"""The Triton implementation of the scalar-op protocol.

`TritonOps(kernel)` takes a `TritonKernel` being built and answers each
scalar operation (load, store, constant, add, exp, where, to_dtype,
reduction, ...) by appending Triton source to the kernel and returning the
name of the variable holding the result. Values are those names (strings);
the dtype of each is tracked beside it, because Triton's text does not say
it and some operations (integer division, casts, constants) depend on it.

Index expressions arrive already printed as Triton text over `xindex` and
`rindex` (see `indexing.py`).
"""

from __future__ import annotations

from typing import Any

import torch

from tensorjit.codegen.triton import expressions
from tensorjit.codegen.triton.expressions import compute_dtype, triton_dtype
from tensorjit.codegen.triton.kernel import TritonKernel

UNARY = (
    "neg", "abs", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "sin", "cos", "tan",
    "tanh", "sigmoid", "erf", "erfinv", "floor", "ceil", "trunc", "round", "asin", "acos", "atan", "sinh", "cosh",
    "asinh", "acosh", "atanh", "lgamma", "reciprocal", "relu", "sign", "square", "bitwise_not",
)
FLOAT_ONLY = {"exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "sin", "cos", "tan", "tanh",
              "sigmoid", "erf", "erfinv", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "lgamma",
              "reciprocal"}
COMPARISONS = ("eq", "ne", "lt", "le", "gt", "ge")
ARITHMETIC = ("add", "sub", "mul", "maximum", "minimum", "bitwise_and", "bitwise_or", "bitwise_xor",
              "bitwise_left_shift", "bitwise_right_shift", "pow", "atan2", "fmod")


class TritonOps:
    """Scalar operations as Triton source; see the module docstring."""

    def __init__(self, kernel: TritonKernel):
        self.kernel = kernel
        self.dtypes: dict[str, torch.dtype] = {}

    def _bind(self, expression: str, dtype: torch.dtype, hoist: bool = False) -> str:
        name = self.kernel.compute(expression, hoist=hoist)
        self.dtypes[name] = dtype
        return name

    def dtype_of(self, value: str) -> torch.dtype:
        return self.dtypes.get(value, torch.float32)

    # -- memory -------------------------------------------------------------

    def load(self, buffer: str, index: str, dtype: torch.dtype, uses_row: bool = True) -> str:
        name = self.kernel.load(buffer, index, dtype, uses_row)
        self.dtypes[name] = compute_dtype(dtype)
        return name

    def store(self, buffer: str, index: str, value: str, dtype: torch.dtype, uses_row: bool = True) -> None:
        self.kernel.store(buffer, index, value, dtype, uses_row)

    # -- values -------------------------------------------------------------

    def constant(self, value: Any, dtype: torch.dtype) -> str:
        shape = "[1, 1]" if self.kernel.is_reduction else "[1]"  # the rank of every other value in the kernel
        return self._bind(expressions.constant(value, dtype, shape), compute_dtype(dtype))

    def index_expr(self, index: str, dtype: torch.dtype) -> str:
        return self._bind(f"({index}).to({triton_dtype(dtype)})", dtype)

    def to_dtype(self, value: str, dtype: torch.dtype) -> str:
        target = compute_dtype(dtype)
        if dtype != target:  # rounding through the narrow type is part of the cast's meaning
            narrow = self._bind(expressions.cast(value, dtype), dtype)
            return self._bind(expressions.cast(narrow, target), target)
        if self.dtype_of(value) == target:
            return value
        return self._bind(expressions.cast(value, target), target)

    def where(self, condition: str, true_value: str, false_value: str) -> str:
        dtype = _promote(self.dtype_of(true_value), self.dtype_of(false_value))
        return self._bind(expressions.where(condition, true_value, false_value), dtype)

    # -- arithmetic ---------------------------------------------------------

    def unary(self, name: str, value: str) -> str:
        dtype = self.dtype_of(value)
        if name in FLOAT_ONLY and not dtype.is_floating_point:
            value, dtype = self.to_dtype(value, torch.float32), torch.float32
        return self._bind(expressions.unary(name, value), dtype)

    def binary(self, name: str, left: str, right: str) -> str:
        dtype = _promote(self.dtype_of(left), self.dtype_of(right))
        if name in COMPARISONS:
            return self._bind(expressions.binary(name, left, right), torch.bool)
        if name in ("logical_and", "logical_or"):
            return self._bind(expressions.binary(name, f"{left} != 0", f"{right} != 0"), torch.bool)
        if name == "truediv":
            if not dtype.is_floating_point:
                left, right, dtype = self.to_dtype(left, torch.float32), self.to_dtype(right, torch.float32), torch.float32
            return self._bind(expressions.binary("truediv", left, right), dtype)
        if name == "floordiv":
            text = (expressions.float_floor_division if dtype.is_floating_point else expressions.integer_floor_division)
            return self._bind(text(left, right), dtype)
        if name == "atan2" and not dtype.is_floating_point:
            left, right, dtype = self.to_dtype(left, torch.float32), self.to_dtype(right, torch.float32), torch.float32
        if name == "fmod" and not dtype.is_floating_point:
            return self._bind(f"({left}) % ({right})", dtype)  # Triton's integer % truncates, as fmod does
        if name == "mod":
            if dtype.is_floating_point:
                return self._bind(f"({left}) - tl.floor(({left}) / ({right})) * ({right})", dtype)
            return self._bind(expressions.integer_remainder(left, right), dtype)
        return self._bind(expressions.binary(name, left, right), dtype)

    def logical_not(self, value: str) -> str:
        return self._bind(f"({value}) == 0", torch.bool)

    def isnan(self, value: str) -> str:
        return self._bind(expressions.unary("isnan", value), torch.bool)

    def isinf(self, value: str) -> str:
        return self._bind(expressions.unary("isinf", value), torch.bool)

    # -- reductions ---------------------------------------------------------

    def reduction(self, kind: str, value: str, dtype: torch.dtype) -> str:
        result = self.kernel.reduction(kind, value, dtype)
        self.dtypes[result] = torch.int64 if kind in ("argmax", "argmin") else compute_dtype(dtype)
        return result

    def __getattr__(self, name: str):
        # ops.exp(x), ops.add(a, b): the protocol's one-method-per-op spelling.
        if name in UNARY:
            return lambda value: self.unary(name, value)
        if name in ARITHMETIC or name in COMPARISONS or name in ("truediv", "floordiv", "mod", "logical_and",
                                                                   "logical_or"):
            return lambda left, right: self.binary(name, left, right)
        raise AttributeError(f"triton emitter: no scalar op {name!r}")


def _promote(left: torch.dtype, right: torch.dtype) -> torch.dtype:
    if left == right:
        return left
    return torch.promote_types(left, right)
