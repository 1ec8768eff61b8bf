"""C++ emitter: `ir.Program` kernels -> one C++ translation unit.

Takes the Program's Pointwise/Reduction kernels and buffer table; returns C++
source (no torch headers) with one `extern "C" void kernelN(void** pointers)`
per kernel, plus the buffer names each kernel takes in pointer order. Loops are
plain nested `for`s over compile-time sizes: the outer ones parallel with
OpenMP when the work is large, the innermost contiguous one left for g++ to
vectorise.
"""

from __future__ import annotations

import math

from .. import ir
from ..ops import evaluate
from .vector_math import DISPATCH, VECTOR_MATH

CTYPES = {"float32": "float", "float64": "double", "int64": "int64_t", "int32": "int32_t", "bool": "bool"}
PARALLEL_THRESHOLD = 32768  # elements of work below which OpenMP costs more than it saves

# The vector math comes first: float32 transcendental ops call its tj_ functions, which g++
# inlines and vectorises (std::exp and friends stop vectorisation without -ffast-math).
PRELUDE = r"""
#include <cmath>
#include <cstdint>
#include <limits>
""" + VECTOR_MATH + DISPATCH + r"""
// c ? a : b, as a bit-mask blend for float (tj_selectf): from a ternary g++ may sink one side
// into a branch, and a long fused kernel (ten ops and a tanh) then fails to vectorise with
// "control flow in loop" -- 10x slower.
template <class T> static inline T tj_select(bool c, T a, T b) { return c ? a : b; }
template <> inline float tj_select<float>(bool c, float a, float b) { return tj_selectf(c, a, b); }
template <class T> static inline T tj_max(T a, T b) {
  return tj_select<T>(a != a, a, tj_select<T>(b != b, b, tj_select<T>(a > b, a, b)));
}
template <class T> static inline T tj_min(T a, T b) {
  return tj_select<T>(a != a, a, tj_select<T>(b != b, b, tj_select<T>(a < b, a, b)));
}
"""

UNARY = {"neg": "(-{0})", "abs": "std::abs({0})", "exp": "tj_exp<{T}>({0})", "log": "tj_log<{T}>({0})",
         "log1p": "tj_log1p<{T}>({0})", "expm1": "tj_expm1<{T}>({0})", "sqrt": "std::sqrt({0})",
         "rsqrt": "(({T})1 / std::sqrt({0}))", "tanh": "tj_tanh<{T}>({0})",
         "sigmoid": "tj_sigmoid<{T}>({0})", "erf": "tj_erf<{T}>({0})",
         "sin": "std::sin({0})", "cos": "std::cos({0})", "reciprocal": "(({T})1 / {0})",
         "floor": "std::floor({0})", "ceil": "std::ceil({0})", "trunc": "std::trunc({0})",
         "round": "std::nearbyint({0})", "sign": "(({T})({0} > ({T})0) - ({T})({0} < ({T})0))",
         "relu": "tj_select<{T}>({0} < ({T})0, ({T})0, {0})", "logical_not": "(!{0})", "isnan": "({0} != {0})"}
BINARY = {"add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})", "truediv": "({0} / {1})",
          "pow": "std::pow({0}, {1})", "maximum": "tj_max<{T}>({0}, {1})", "minimum": "tj_min<{T}>({0}, {1})",
          "eq": "({0} == {1})", "ne": "({0} != {1})", "lt": "({0} < {1})", "le": "({0} <= {1})",
          "gt": "({0} > {1})", "ge": "({0} >= {1})", "logical_and": "((bool){0} && (bool){1})",
          "logical_or": "((bool){0} || (bool){1})", "atan2": "std::atan2({0}, {1})", "fmod": "std::fmod({0}, {1})"}


def format_index(index: ir.Index) -> str:
    if isinstance(index, ir.IndexVar):
        return index.name
    if isinstance(index, ir.IndexConst):
        return f"{index.value}L"
    symbol = {"add": "+", "mul": "*", "floordiv": "/", "mod": "%"}[index.op]
    return f"({format_index(index.left)} {symbol} {format_index(index.right)})"


def format_constant(value, dtype: str) -> str:
    ctype = CTYPES[dtype]
    if dtype == "bool":
        return "true" if value else "false"
    if dtype.startswith("int"):
        return f"(({ctype}){int(value)}LL)"
    if math.isnan(value):
        return f"std::numeric_limits<{ctype}>::quiet_NaN()"
    if math.isinf(value):
        sign = "-" if value < 0 else ""
        return f"({sign}std::numeric_limits<{ctype}>::infinity())"
    return f"(({ctype}){float(value)!r})"


class CppOps:
    """The ops protocol for C++: each method appends a statement and returns a variable name."""

    def __init__(self, indent: str):
        self.lines: list[str] = []
        self.indent = indent
        self.buffers: set[str] = set()

    def assign(self, dtype: str, text: str) -> str:
        name = f"t{len(self.lines)}"  # deterministic: the source is the disk-cache key
        self.lines.append(f"{self.indent}const {CTYPES[dtype]} {name} = {text};")
        return name

    def load(self, buffer: str, index: ir.Index) -> str:
        self.buffers.add(buffer)
        return f"{buffer}[{format_index(index)}]"

    def constant(self, value, dtype: str) -> str:
        return format_constant(value, dtype)

    def index_expr(self, index: ir.Index, dtype: str) -> str:
        return f"(({CTYPES[dtype]}){format_index(index)})"

    def to_dtype(self, value: str, dtype: str, source_dtype: str) -> str:
        if dtype == "bool":
            return self.assign(dtype, f"({value} != 0)")
        return self.assign(dtype, f"static_cast<{CTYPES[dtype]}>({value})")

    def op(self, name: str, args: tuple, dtype: str, arg_dtypes: tuple) -> str:
        if name == "where":
            ctype = CTYPES[dtype]
            return self.assign(dtype, f"tj_select<{ctype}>({args[0]}, ({ctype}){args[1]}, ({ctype}){args[2]})")
        template = UNARY.get(name) or BINARY.get(name)
        operand_type = CTYPES[arg_dtypes[0] if arg_dtypes else dtype]
        return self.assign(dtype, template.format(*args, T=operand_type))


ScalarEmitter = CppOps  # the name kernels.py and older code use
