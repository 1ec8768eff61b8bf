"""The scalar-op protocol every emitter implements.

Takes an `ir.Expr` tree and a handler object; `evaluate` walks the tree
bottom-up (each shared subexpression once) and calls the handler's methods,
returning whatever the handler returns for the root (a C++ variable name, a
Triton expression string...). An emitter implements every method of `OpsHandler`.
"""

from __future__ import annotations

from typing import Any, Protocol

from . import ir

UNARY = ("neg", "abs", "exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "tanh", "sigmoid",
         "erf", "sin", "cos", "reciprocal", "floor", "ceil", "trunc", "round", "logical_not",
         "isnan", "sign", "relu", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh",
         "atanh", "exp2", "log2", "log10", "erfinv", "lgamma", "bitwise_not")
BINARY = ("add", "sub", "mul", "truediv", "pow", "maximum", "minimum", "eq", "ne", "lt", "le",
          "gt", "ge", "logical_and", "logical_or", "atan2", "fmod", "bitwise_and", "bitwise_or",
          "bitwise_xor", "truncdiv")
"""fmod and the bitwise ops take integers too (fmod of integers truncates, as C's %; a lowering
only emits it with a divisor known to be nonzero). bitwise_not of a bool is logical not.
truncdiv is integer division rounding toward zero (C's /), integers only, nonzero divisor."""
TERNARY = ("where",)
REDUCTIONS = ("sum", "max", "min", "prod", "any", "argmax", "argmin")


class OpsHandler(Protocol):
    def load(self, buffer: str, index: ir.Index) -> Any: ...
    def constant(self, value: Any, dtype: str) -> Any: ...
    def index_expr(self, index: ir.Index, dtype: str) -> Any: ...
    def to_dtype(self, value: Any, dtype: str, source_dtype: str) -> Any: ...
    # An ir.IndirectIndex, given its already-evaluated value: check its range, bind the
    # checked position, and use it wherever the node appears in an index passed to load or
    # index_expr afterwards. Called once per distinct node, before the loads that use it.
    def indirect(self, index: ir.IndirectIndex, value: Any) -> Any: ...
    # Every name in UNARY, BINARY, TERNARY is a method: handler.add(a, b, dtype=...)
    # taking already-evaluated operands and the result dtype.
    def op(self, name: str, args: tuple, dtype: str, arg_dtypes: tuple) -> Any: ...


def evaluate(expr: ir.Expr, handler: OpsHandler, memo: dict | None = None) -> Any:
    """Emit `expr` through `handler`, once per distinct subexpression."""
    memo = {} if memo is None else memo
    if expr in memo:
        return memo[expr]
    if isinstance(expr, ir.Load):
        bind_indirect(expr.index, handler, memo)
        result = handler.load(expr.buffer, expr.index)
    elif isinstance(expr, ir.Constant):
        result = handler.constant(expr.value, expr.dtype)
    elif isinstance(expr, ir.IndexValue):
        bind_indirect(expr.index, handler, memo)
        result = handler.index_expr(expr.index, expr.dtype)
    elif expr.name == "to_dtype":
        source = expr.args[0]
        result = handler.to_dtype(evaluate(source, handler, memo), expr.dtype, dtype_of(source))
    else:
        args = tuple(evaluate(a, handler, memo) for a in expr.args)
        result = handler.op(expr.name, args, expr.dtype, tuple(dtype_of(a) for a in expr.args))
    memo[expr] = result
    return result


def bind_indirect(index: ir.Index, handler: OpsHandler, memo: dict) -> None:
    """Evaluate the values of `index`'s IndirectIndex atoms and hand them to the handler."""
    for node in ir.indirect_indices(index):
        if node not in memo:
            memo[node] = handler.indirect(node, evaluate(node.value, handler, memo))


def dtype_of(expr: ir.Expr) -> str:
    return expr.dtype
