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
// atan where g++ cannot see it: without errno (-fno-math-errno) it folds sin(atan(x)) into
// x / sqrt(x*x + 1), copysign(1, x) for large |x|, and cos(atan(x)) alike, so a NaN gave 1 and 0
// (eager: NaN) and cos(atan(inf)) 0 (eager: 6.1e-17). atan is a libm call either way (no vector one).
template <class T> __attribute__((noinline)) static T tj_atan(T x) { return std::atan(x); }
// erfinv (no std:: one): Giles' single-precision approximation ("Approximating the erfinv
// function", GPU Computing Gems), then Newton steps on std::erf in double, which bring it to
// double precision. Not vectorised (std::erf); |y| = 1 gives +-inf and |y| > 1 NaN, as eager.
static inline double tj_erfinv_double(double y) {
  if (!(std::fabs(y) < 1.0)) return std::fabs(y) == 1.0 ? y * std::numeric_limits<double>::infinity()
                                                         : std::numeric_limits<double>::quiet_NaN();
  double w = -std::log((1.0 - y) * (1.0 + y)), p;
  if (w < 5.0) {
    w -= 2.5;
    p = 2.81022636e-08; p = 3.43273939e-07 + p * w; p = -3.5233877e-06 + p * w;
    p = -4.39150654e-06 + p * w; p = 0.00021858087 + p * w; p = -0.00125372503 + p * w;
    p = -0.00417768164 + p * w; p = 0.246640727 + p * w; p = 1.50140941 + p * w;
  } else {
    w = std::sqrt(w) - 3.0;
    p = -0.000200214257; p = 0.000100950558 + p * w; p = 0.00134934322 + p * w;
    p = -0.00367342844 + p * w; p = 0.00573950773 + p * w; p = -0.0076224613 + p * w;
    p = 0.00943887047 + p * w; p = 1.00167406 + p * w; p = 2.83297682 + p * w;
  }
  double x = p * y;
  for (int step = 0; step < 2; ++step)
    x -= (std::erf(x) - y) / (1.1283791670955126 * std::exp(-x * x));
  return x;
}
template <class T> static inline T tj_erfinv(T y) { return (T)tj_erfinv_double((double)y); }
"""

UNARY = {"neg": "(-{0})", "abs": "std::abs({0})", "exp": "tj_exp<{T}>({0})", "log": "tj_log<{T}>({0})",
         "log1p": "tj_log1p<{T}>({0})", "expm1": "tj_expm1<{T}>({0})", "sqrt": "std::sqrt({0})",
         "rsqrt": "(({T})1 / std::sqrt({0}))", "tanh": "tj_tanh<{T}>({0})",
         "sigmoid": "tj_sigmoid<{T}>({0})", "erf": "tj_erf<{T}>({0})",
         "sin": "std::sin({0})", "cos": "std::cos({0})", "reciprocal": "(({T})1 / {0})",
         "floor": "std::floor({0})", "ceil": "std::ceil({0})", "trunc": "std::trunc({0})",
         "round": "std::nearbyint({0})", "sign": "(({T})({0} > ({T})0) - ({T})({0} < ({T})0))",
         "relu": "tj_select<{T}>({0} < ({T})0, ({T})0, {0})", "logical_not": "(!{0})", "isnan": "({0} != {0})",
         # std:: (scalar loops, like sin and cos): no branch-free versions in vector_math.py yet
         "tan": "std::tan({0})", "asin": "std::asin({0})", "acos": "std::acos({0})", "atan": "tj_atan<{T}>({0})",
         "sinh": "std::sinh({0})", "cosh": "std::cosh({0})", "asinh": "std::asinh({0})",
         "acosh": "std::acosh({0})", "atanh": "std::atanh({0})", "exp2": "std::exp2({0})",
         "log2": "std::log2({0})", "log10": "std::log10({0})", "erfinv": "tj_erfinv<{T}>({0})",
         "lgamma": "std::lgamma({0})", "bitwise_not": "(~{0})"}
BINARY = {"add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})", "truediv": "({0} / {1})",
          "pow": "std::pow({0}, {1})", "maximum": "tj_max<{T}>({0}, {1})", "minimum": "tj_min<{T}>({0}, {1})",
          "eq": "({0} == {1})", "ne": "({0} != {1})", "lt": "({0} < {1})", "le": "({0} <= {1})",
          "gt": "({0} > {1})", "ge": "({0} >= {1})", "logical_and": "((bool){0} && (bool){1})",
          "logical_or": "((bool){0} || (bool){1})", "atan2": "std::atan2({0}, {1})", "fmod": "std::fmod({0}, {1})",
          "bitwise_and": "({0} & {1})", "bitwise_or": "({0} | {1})", "bitwise_xor": "({0} ^ {1})",
          "truncdiv": "({0} / {1})"}
INTEGER_FORMS = {"fmod": "({0} % {1})", "bitwise_not": "(~{0})"}
"""Integer operands: C's % truncates like fmod (std::fmod would go through double)."""
BOOL_FORMS = {"bitwise_not": "(!{0})"}


def format_index(index: ir.Index, indirect: dict | None = None) -> str:
    """C++ text of `index`; `indirect` names the variable holding each checked IndirectIndex."""
    if isinstance(index, ir.IndexVar):
        return index.name
    if isinstance(index, ir.IndexConst):
        return f"{index.value}L"
    if isinstance(index, ir.IndirectIndex):
        return indirect[index]
    symbol = {"add": "+", "mul": "*", "floordiv": "/", "mod": "%"}[index.op]
    return f"({format_index(index.left, indirect)} {symbol} {format_index(index.right, indirect)})"


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
        self.indirect_names: dict[ir.IndirectIndex, str] = {}

    def assign(self, dtype: str, text: str) -> str:
        name = f"t{len(self.lines)}"  # deterministic: the source is the disk-cache key
        self.lines.append(f"{self.indent}const {CTYPES[dtype]} {name} = {text};")
        return name

    def load(self, buffer: str, index: ir.Index) -> str:
        self.buffers.add(buffer)
        return f"{buffer}[{format_index(index, self.indirect_names)}]"

    def indirect(self, index: ir.IndirectIndex, value: str) -> str:
        """The position `value` names, checked: outside [0, size) the kernel reads element 0
        and sets `tj_bad`, which it returns (the kernel declares it: `ir.checks_indices`);
        the wrapper then runs the graph through ATen, which raises eager's error."""
        position = self.assign("int64", f"static_cast<int64_t>({value})")
        if index.wrap:
            position = self.assign("int64", f"({position} + ({position} < 0) * {index.size}L)")
        inside = self.assign("bool", f"(static_cast<uint64_t>({position}) < {index.size}UL)")
        self.lines.append(f"{self.indent}tj_bad |= !{inside};")
        name = self.assign("int64", f"({inside} ? {position} : 0L)")
        self.indirect_names[index] = name
        return name

    def constant(self, value, dtype: str) -> str:
        return format_constant(value, dtype)

    def index_expr(self, index: ir.Index, dtype: str) -> str:
        return f"(({CTYPES[dtype]}){format_index(index, self.indirect_names)})"

    def to_dtype(self, value: str, dtype: str, source_dtype: str) -> str:
        if dtype == "bool":
            return self.assign(dtype, f"({value} != 0)")
        return self.assign(dtype, f"static_cast<{CTYPES[dtype]}>({value})")

    def op(self, name: str, args: tuple, dtype: str, arg_dtypes: tuple) -> str:
        if name == "where":
            ctype = CTYPES[dtype]
            return self.assign(dtype, f"tj_select<{ctype}>({args[0]}, ({ctype}){args[1]}, ({ctype}){args[2]})")
        operand_dtype = arg_dtypes[0] if arg_dtypes else dtype
        template = UNARY.get(name) or BINARY.get(name)
        if operand_dtype == "bool":
            template = BOOL_FORMS.get(name, template)
        elif operand_dtype.startswith("int"):
            template = INTEGER_FORMS.get(name, template)
        operand_type = CTYPES[operand_dtype]
        return self.assign(dtype, template.format(*args, T=operand_type))


ScalarEmitter = CppOps  # the name kernels.py and older code use
