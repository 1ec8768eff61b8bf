"""Triton source text for each scalar operation.

Takes operand expressions (strings naming Triton values: variables, literals)
and returns the expression text computing the operation, e.g.
`binary("add", "tmp0", "tmp1") -> "tmp0 + tmp1"`. The Triton emitter's
implementation of the scalar-op protocol calls these and binds each result to
a fresh variable; this module holds no state.

Semantics follow eager PyTorch where Triton's default differs:
  * maximum/minimum propagate NaN (tl.maximum does not);
  * floor division and remainder round toward negative infinity for integers
    (Triton's `//` and `%` truncate, like C);
  * reduced-precision floats are computed in float32 (the emitter upcasts on
    load and rounds on store, as torch.compile does; eager rounds after every
    op, so results agree to the dtype's tolerance, not bit for bit).
"""

from __future__ import annotations

import math

import torch

from tensorjit.codegen.triton import interpreter_math

TRITON_DTYPES: dict[torch.dtype, str] = {
    torch.float32: "tl.float32",
    torch.float64: "tl.float64",
    torch.float16: "tl.float16",
    torch.bfloat16: "tl.bfloat16",
    torch.int8: "tl.int8",
    torch.int16: "tl.int16",
    torch.int32: "tl.int32",
    torch.int64: "tl.int64",
    torch.uint8: "tl.uint8",
    torch.bool: "tl.int1",
}

COMPUTE_DTYPES: dict[torch.dtype, torch.dtype] = {torch.float16: torch.float32, torch.bfloat16: torch.float32}
"""Dtypes kept in registers as another: half floats are computed in float32."""


def triton_dtype(dtype: torch.dtype) -> str:
    return TRITON_DTYPES[dtype]


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return COMPUTE_DTYPES.get(dtype, dtype)


INFIX: dict[str, str] = {
    "add": "+", "sub": "-", "mul": "*", "truediv": "/",
    "eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">=",
    "bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^",
    "logical_and": "&", "logical_or": "|",
    "bitwise_left_shift": "<<", "bitwise_right_shift": ">>",
}

CALLS: dict[str, str] = {
    "exp": "tl.exp", "exp2": "tl.exp2", "log": "tl.log", "log2": "tl.log2", "sqrt": "tl.sqrt",
    "sin": "tl.sin", "cos": "tl.cos", "abs": "tl.abs", "floor": "tl.floor", "ceil": "tl.ceil",
    "sigmoid": "tl.sigmoid", "erf": "tl.erf",
    "rsqrt": "tl.rsqrt", "tanh": "libdevice.tanh", "log1p": "libdevice.log1p",
    "expm1": "libdevice.expm1", "tan": "libdevice.tan", "asin": "libdevice.asin", "acos": "libdevice.acos",
    "atan": "libdevice.atan", "sinh": "libdevice.sinh", "cosh": "libdevice.cosh", "asinh": "libdevice.asinh",
    "acosh": "libdevice.acosh", "atanh": "libdevice.atanh", "erfinv": "libdevice.erfinv",
    "lgamma": "libdevice.lgamma", "trunc": "libdevice.trunc", "round": "libdevice.nearbyint",
    "log10": "libdevice.log10",
    "pow": "libdevice.pow", "atan2": "libdevice.atan2", "fmod": "libdevice.fmod",
}


INTERPRETER_FORMULAS = interpreter_math.FORMULAS
"""Stand-ins for libdevice under Triton's interpreter (see interpreter_math.py)."""


def interpreted() -> bool:
    try:
        from triton import knobs

        return bool(knobs.runtime.interpret)
    except ImportError:
        return False


def call(name: str, *operands: str) -> str:
    if interpreted() and name in INTERPRETER_FORMULAS:
        return INTERPRETER_FORMULAS[name].format(*operands)
    return f"{CALLS[name]}({', '.join(operands)})"


def binary(name: str, left: str, right: str) -> str:
    if name in INFIX:
        return f"({left}) {INFIX[name]} ({right})"
    if name == "maximum":
        return f"tl.where(({left} > {right}) | ({left} != {left}), {left}, {right})"
    if name == "minimum":
        return f"tl.where(({left} < {right}) | ({left} != {left}), {left}, {right})"
    if name in CALLS:
        return call(name, left, right)
    raise NotImplementedError(f"triton emitter: no binary op {name!r}")


def unary(name: str, operand: str) -> str:
    if name == "neg":
        return f"-({operand})"
    if name in ("logical_not", "bitwise_not"):
        return f"~({operand})" if name == "bitwise_not" else f"({operand}) == 0"
    if name == "reciprocal":
        return f"1.0 / ({operand})"
    if name == "relu":
        return f"tl.where({operand} < 0, 0, {operand})"
    if name == "sign":
        return f"(({operand}) > 0).to({operand}.dtype) - (({operand}) < 0).to({operand}.dtype)"
    if name == "isnan":
        return f"({operand}) != ({operand})"
    if name == "isinf":
        return f"tl.abs({operand}) == float('inf')"
    if name == "square":
        return f"({operand}) * ({operand})"
    if name in CALLS:
        return call(name, operand)
    raise NotImplementedError(f"triton emitter: no unary op {name!r}")


def where(condition: str, true_value: str, false_value: str) -> str:
    return f"tl.where({condition}, {true_value}, {false_value})"


def cast(value: str, dtype: torch.dtype) -> str:
    if dtype == torch.bool:
        return f"({value}) != 0"
    if dtype == torch.bfloat16 and interpreted():
        return f"_interpreter_to_bfloat16({value})"  # the interpreter truncates; eager rounds to nearest even
    return f"({value}).to({triton_dtype(dtype)})"


def constant(value: float | int | bool, dtype: torch.dtype, shape: str = "[1]") -> str:
    """A literal of `dtype`, as a one-element block of `shape` ("[1, 1]" in 2-D kernels; broadcast on use).

    Not a 0-d `tl.full([], ...)`: Triton's interpreter splats a 0-d comparison
    result with its operands' dtype, so `(c != c) | block_mask` on a 0-d
    constant c fails there ("ufunc 'bitwise_or' not supported"). A [1] block
    broadcasts instead and behaves the same on a GPU (Inductor writes
    constants this way too)."""
    if dtype == torch.bool:
        return "True" if value else "False"
    if dtype.is_floating_point:
        if math.isnan(value):
            literal = 'float("nan")'
        elif math.isinf(value):
            literal = 'float("inf")' if value > 0 else '-float("inf")'
        else:
            literal = repr(float(value))
        return f"tl.full({shape}, {literal}, {triton_dtype(compute_dtype(dtype))})"
    return f"tl.full({shape}, {int(value)}, {triton_dtype(dtype)})"


REDUCTION_INITIAL: dict[str, str] = {"sum": "0", "prod": "1", "max": "-float('inf')", "min": "float('inf')"}


def reduction_identity(kind: str, dtype: torch.dtype) -> str:
    """The value masked-out lanes take so they do not change the reduction."""
    if kind in ("sum", "any", "welford", "xor_sum"):
        return "0"
    if kind == "prod":
        return "1"
    if kind in ("max", "argmax"):
        return "-float('inf')" if dtype.is_floating_point else str(torch.iinfo(dtype).min if dtype != torch.bool else 0)
    if kind in ("min", "argmin"):
        return "float('inf')" if dtype.is_floating_point else str(torch.iinfo(dtype).max if dtype != torch.bool else 1)
    raise NotImplementedError(f"triton emitter: no reduction {kind!r}")
