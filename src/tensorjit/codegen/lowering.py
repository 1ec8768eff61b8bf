"""Lowerings: ATen op -> LazyValue built from `ir` expressions.

Takes the node's arguments (LazyValues for tensors, Python values otherwise) and
the node's meta value (a fake/real tensor giving result shape and dtype);
returns a LazyValue, or raises NotLowerable so the node runs as an ATen Extern.
Each lowering is registered beside its definition with `@lowering(aten.op, ...)`.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from . import ir
from .values import LazyValue, NotLowerable, ir_dtype, is_float, kernel_dtype

aten = torch.ops.aten
LOWERINGS: dict = {}


def lowering(*targets) -> Callable:
    def register(fn):
        for target in targets:
            packets = [getattr(target, name) for name in target.overloads()] \
                if isinstance(target, torch._ops.OpOverloadPacket) else [target]
            for overload in packets:
                LOWERINGS[overload] = fn
        return fn
    return register


# -- helpers -----------------------------------------------------------------------
def broadcast_load(value, shape: tuple[int, ...], index, dtype: str) -> ir.Expr:
    """Load `value` (LazyValue or Python scalar) at `index` of the broadcast `shape`, cast to dtype."""
    if not isinstance(value, LazyValue):
        if isinstance(value, torch.Tensor) or not isinstance(value, (int, float, bool)):
            raise NotLowerable(f"unsupported operand {type(value).__name__}")
        return ir.Constant(cast_python(value, dtype), dtype)
    if not kernel_dtype(value.dtype):
        raise NotLowerable(f"load of {value.dtype}")
    offset = len(shape) - len(value.shape)
    own = tuple(ir.IndexConst(0) if size == 1 else index[offset + i] for i, size in enumerate(value.shape))
    return to_dtype(value.load(own), dtype)


def cast_python(value, dtype: str):
    if dtype == "bool":
        return bool(value)
    if dtype.startswith("int"):
        return int(value)
    return float(value)


def to_dtype(expr: ir.Expr, dtype: str) -> ir.Expr:
    if expr.dtype == dtype:
        return expr
    if isinstance(expr, ir.Constant):
        return ir.Constant(cast_python(expr.value, dtype), dtype)
    return ir.Op("to_dtype", (expr,), dtype)


def result_info(meta) -> tuple[tuple[int, ...], str]:
    if not isinstance(meta, torch.Tensor):
        raise NotLowerable("result is not a single tensor")
    return tuple(int(s) for s in meta.shape), ir_dtype(meta.dtype)


def operand_dtype(args, fallback: str) -> str:
    """The promoted dtype of the tensor/scalar operands (computation dtype of comparisons)."""
    tensors = [torch.empty((), dtype=_TORCH[a.dtype]) for a in args if isinstance(a, LazyValue)]
    scalars = [a for a in args if isinstance(a, (int, float, bool))]
    if not tensors:
        return fallback
    dtype = tensors[0].dtype
    for t in tensors[1:]:
        dtype = torch.promote_types(dtype, t.dtype)
    for s in scalars:
        dtype = torch.result_type(torch.empty((), dtype=dtype), s)
    return ir_dtype(dtype)


from .values import IR_TO_TORCH as _TORCH  # noqa: E402


def pointwise(name: str, args, meta, compute: str | None = None) -> LazyValue:
    shape, out_dtype = result_info(meta)
    compute = compute or out_dtype

    def loader(index):
        operands = tuple(broadcast_load(a, shape, index, compute) for a in args)
        return to_dtype(ir.Op(name, operands, op_result_dtype(name, compute)), out_dtype)
    return LazyValue(shape, out_dtype, loader)


COMPARISONS = {"eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_not", "isnan"}


def op_result_dtype(name: str, compute: str) -> str:
    return "bool" if name in COMPARISONS else compute


def make_pointwise(name: str, float_only: bool = False, compare: bool = False):
    def lower(meta, *args, **kwargs):
        if kwargs.get("alpha", 1) != 1 or kwargs.get("rounding_mode") is not None:
            raise NotLowerable("unsupported keyword")
        if len(args) > len(_ARITY.get(name, "xx")):
            raise NotLowerable("extra positional arguments")
        _, out_dtype = result_info(meta)
        if float_only and not is_float(out_dtype):
            raise NotLowerable(f"{name} on {out_dtype}")
        compute = operand_dtype(args, out_dtype) if compare else out_dtype
        return pointwise(name, args, meta, compute)
    return lower


FLOAT_UNARY = ("tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "exp2", "log2",
               "log10", "erfinv", "lgamma")
_ARITY = {n: "x" for n in ("neg", "abs", "exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "tanh",
                          "sigmoid", "erf", "sin", "cos", "reciprocal", "floor", "ceil", "trunc",
                          "logical_not", "isnan", "sign", "relu", "bitwise_not") + FLOAT_UNARY}

for _name, _target, _float in [
    ("neg", aten.neg, False), ("abs", aten.abs, False), ("exp", aten.exp, True),
    ("log", aten.log, True), ("log1p", aten.log1p, True), ("expm1", aten.expm1, True),
    ("sqrt", aten.sqrt, True), ("rsqrt", aten.rsqrt, True), ("tanh", aten.tanh, True),
    ("sigmoid", aten.sigmoid, True), ("erf", aten.erf, True), ("sin", aten.sin, True),
    ("cos", aten.cos, True), ("reciprocal", aten.reciprocal, True), ("floor", aten.floor, True),
    ("ceil", aten.ceil, True), ("trunc", aten.trunc, True), ("relu", aten.relu, False),
    ("add", aten.add, False), ("sub", aten.sub, False), ("mul", aten.mul, False),
    ("truediv", aten.div, True), ("pow", aten.pow, True), ("maximum", aten.maximum, False),
    ("minimum", aten.minimum, False), ("atan2", aten.atan2, True),
] + [(_name, getattr(aten, _name), True) for _name in FLOAT_UNARY]:
    lowering(_target)(make_pointwise(_name, _float))

for _name, _target in [("eq", aten.eq), ("ne", aten.ne), ("lt", aten.lt), ("le", aten.le),
                       ("gt", aten.gt), ("ge", aten.ge), ("logical_and", aten.logical_and),
                       ("logical_or", aten.logical_or), ("logical_not", aten.logical_not),
                       ("isnan", aten.isnan)]:
    lowering(_target)(make_pointwise(_name, compare=True))


def integer_or_bool(name: str):
    """A lowering of an op torch defines on integers and bools only (bitwise_and...)."""
    general = make_pointwise(name)

    def lower(meta, *args):
        if is_float(result_info(meta)[1]):
            raise NotLowerable(f"{name} of floats")
        return general(meta, *args)
    return lower


for _name in ("bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not"):
    lowering(getattr(aten, _name))(integer_or_bool(_name))


@lowering(aten.sign.default)
def lower_sign(meta, x):
    if result_info(meta)[1] == "bool":
        raise NotLowerable("sign of bools")
    return pointwise("sign", (x,), meta)


@lowering(aten.round.default)
def lower_round(meta, x):
    """Half to even (nearbyint), as eager; integers are already round."""
    shape, dtype = result_info(meta)
    if not is_float(dtype):
        return LazyValue(shape, dtype, lambda index: broadcast_load(x, shape, index, dtype))
    return pointwise("round", (x,), meta)


@lowering(aten.round.decimals)
def lower_round_decimals(meta, x, *, decimals=0):
    """round(x * 10^d) / 10^d, or for d < 0 round(x / 10^-d) * 10^-d, in the value's dtype (as
    eager: 10^d is a constant of that dtype, so the same roundings happen)."""
    shape, dtype = result_info(meta)
    if not is_float(dtype) or abs(decimals) > 300:  # 10^d must be a finite double here
        raise NotLowerable("round with decimals of integers, or of hundreds of decimals")
    scale = ir.Constant(float(10 ** abs(decimals)), dtype)
    first, then = ("mul", "truediv") if decimals >= 0 else ("truediv", "mul")

    def loader(index):
        value = broadcast_load(x, shape, index, dtype)
        return ir.Op(then, (ir.Op("round", (ir.Op(first, (value, scale), dtype),), dtype), scale), dtype)
    return LazyValue(shape, dtype, loader)


def nonzero_divisor(divisor, dtype: str) -> None:
    """Integer fmod/remainder: eager raises ZeroDivisionError for a zero divisor, and C's % on
    zero is undefined, so only a divisor known to be nonzero is lowered."""
    if not is_float(dtype) and (isinstance(divisor, LazyValue) or divisor == 0):
        raise NotLowerable("integer division by a tensor (eager checks for zero)")


@lowering(aten.fmod.Tensor, aten.fmod.Scalar)
def lower_fmod(meta, x, divisor):
    nonzero_divisor(divisor, result_info(meta)[1])
    return pointwise("fmod", (x, divisor), meta)


@lowering(aten.remainder.Tensor, aten.remainder.Scalar, aten.remainder.Scalar_Tensor)
def lower_remainder(meta, x, divisor):
    """Python's modulo (the result takes the divisor's sign): fmod, plus the divisor where
    the remainder is nonzero and its sign differs from the divisor's (eager's own formula)."""
    shape, dtype = result_info(meta)
    nonzero_divisor(divisor, dtype)

    def loader(index):
        a, b = broadcast_load(x, shape, index, dtype), broadcast_load(divisor, shape, index, dtype)
        zero = ir.Constant(cast_python(0, dtype), dtype)
        modulo = ir.Op("fmod", (a, b), dtype)
        signs_differ = ir.Op("ne", (ir.Op("lt", (b, zero), "bool"), ir.Op("lt", (modulo, zero), "bool")), "bool")
        adjust = ir.Op("logical_and", (ir.Op("ne", (modulo, zero), "bool"), signs_differ), "bool")
        return ir.Op("where", (adjust, ir.Op("add", (modulo, b), dtype), modulo), dtype)
    return LazyValue(shape, dtype, loader)


@lowering(aten.div.Tensor_mode, aten.div.Scalar_mode)
def lower_div_mode(meta, x, divisor, *, rounding_mode=None):
    """Division rounded toward zero ("trunc") or down ("floor", floor_divide's decomposition)."""
    shape, dtype = result_info(meta)
    if rounding_mode is None:
        return pointwise("truediv", (x, divisor), meta)
    nonzero_divisor(divisor, dtype)
    floor = rounding_mode == "floor"

    def loader(index):
        a, b = broadcast_load(x, shape, index, dtype), broadcast_load(divisor, shape, index, dtype)
        if is_float(dtype):
            return floor_divide_float(a, b, dtype) if floor else ir.Op("trunc", (ir.Op("truediv", (a, b), dtype),), dtype)
        quotient = ir.Op("truncdiv", (a, b), dtype)
        if not floor:
            return quotient
        zero = ir.Constant(0, dtype)
        inexact = ir.Op("ne", (ir.Op("fmod", (a, b), dtype), zero), "bool")
        signs_differ = ir.Op("ne", (ir.Op("lt", (a, zero), "bool"), ir.Op("lt", (b, zero), "bool")), "bool")
        down = ir.Op("logical_and", (inexact, signs_differ), "bool")
        return ir.Op("sub", (quotient, to_dtype(down, dtype)), dtype)
    return LazyValue(shape, dtype, loader)


def floor_divide_float(a: ir.Expr, b: ir.Expr, dtype: str) -> ir.Expr:
    """Python's float //, as eager computes it: (a - fmod(a, b)) / b, one less when the
    remainder's sign differs from b's, then rounded to the nearest integer (the quotient of
    exact values is one); a zero quotient keeps the sign of a / b; b == 0 gives a / b."""
    def op(name, *args, result=dtype):
        return ir.Op(name, args, result)
    zero, one, half = (ir.Constant(v, dtype) for v in (0.0, 1.0, 0.5))
    remainder = op("fmod", a, b)
    quotient = op("truediv", op("sub", a, remainder), b)
    adjust = op("logical_and", op("ne", remainder, zero, result="bool"),
                op("ne", op("lt", b, zero, result="bool"), op("lt", remainder, zero, result="bool"), result="bool"),
                result="bool")
    quotient = op("where", adjust, op("sub", quotient, one), quotient)
    floored = op("floor", quotient)
    floored = op("where", op("gt", op("sub", quotient, floored), half, result="bool"), op("add", floored, one), floored)
    signed_zero = op("mul", zero, op("truediv", a, b))
    result = op("where", op("ne", quotient, zero, result="bool"), floored, signed_zero)
    return op("where", op("eq", b, zero, result="bool"), op("truediv", a, b), result)


_lower_pow = make_pointwise("pow", True)


@lowering(aten.pow)
def lower_pow(meta, base, exponent):
    """x**2 and x**3 multiply, as eager's pow kernel does for these exponents (exact and
    vectorisable); anything else is pow."""
    shape, dtype = result_info(meta)
    if isinstance(base, LazyValue) and not isinstance(exponent, bool) and exponent in (2, 3) \
            and is_float(dtype):
        def loader(index):
            value = broadcast_load(base, shape, index, dtype)
            square = ir.Op("mul", (value, value), dtype)
            return square if exponent == 2 else ir.Op("mul", (square, value), dtype)
        return LazyValue(shape, dtype, loader)
    return _lower_pow(meta, base, exponent)


@lowering(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def lower_where(meta, condition, a, b):
    shape, dtype = result_info(meta)

    def loader(index):
        cond = broadcast_load(condition, shape, index, "bool")
        return ir.Op("where", (cond, broadcast_load(a, shape, index, dtype),
                               broadcast_load(b, shape, index, dtype)), dtype)
    return LazyValue(shape, dtype, loader)


@lowering(aten.clamp.default, aten.clamp.Tensor)
def lower_clamp(meta, x, low=None, high=None):
    """maximum with low, then minimum with high (scalars or tensors; NaN propagates)."""
    shape, dtype = result_info(meta)

    def loader(index):
        value = broadcast_load(x, shape, index, dtype)
        for name, bound in (("maximum", low), ("minimum", high)):
            if bound is not None:
                value = ir.Op(name, (value, broadcast_load(bound, shape, index, dtype)), dtype)
        return value
    return LazyValue(shape, dtype, loader)


@lowering(aten.isinf.default)
def lower_isinf(meta, x):
    """|x| == inf (integers never are)."""
    shape, _ = result_info(meta)
    if not isinstance(x, LazyValue):
        raise NotLowerable("isinf of a non-tensor")
    if not is_float(x.dtype):
        return LazyValue(shape, "bool", lambda index: ir.Constant(False, "bool"))

    def loader(index):
        magnitude = ir.Op("abs", (broadcast_load(x, shape, index, x.dtype),), x.dtype)
        return ir.Op("eq", (magnitude, ir.Constant(float("inf"), x.dtype)), "bool")
    return LazyValue(shape, "bool", loader)


@lowering(aten._to_copy.default, aten.clone.default, aten.alias.default, aten.lift_fresh_copy.default)
def lower_copy(meta, x, **kwargs):
    if kwargs.get("device") not in (None, torch.device("cpu")) and str(kwargs.get("device")) != "cpu":
        raise NotLowerable("device copy")
    shape, dtype = result_info(meta)
    return LazyValue(shape, dtype, lambda index: broadcast_load(x, shape, index, dtype))


@lowering(aten.copy.default)
def lower_copy_into(meta, x, source, non_blocking=False):
    """The functional form of x.copy_(source): source broadcast to x's shape, in x's dtype."""
    shape, dtype = result_info(meta)
    if not isinstance(x, LazyValue) or x.shape != shape:
        raise NotLowerable("copy into a tensor of another shape")
    return LazyValue(shape, dtype, lambda index: broadcast_load(source, shape, index, dtype))


@lowering(aten.full.default)
def lower_full(meta, size, value, **kwargs):
    shape, dtype = result_info(meta)
    return LazyValue(shape, dtype, lambda index: ir.Constant(cast_python(value, dtype), dtype))


@lowering(aten.full_like.default)
def lower_full_like(meta, x, value, **kwargs):
    return lower_full(meta, None, value)


@lowering(aten.scalar_tensor.default)
def lower_scalar_tensor(meta, value, **kwargs):
    return lower_full(meta, (), value)


@lowering(aten.arange.start_step, aten.arange.default, aten.arange.start)
def lower_arange(meta, *args, **kwargs):
    shape, dtype = result_info(meta)
    numbers = [a for a in args if isinstance(a, (int, float))]
    if len(numbers) == 1:
        numbers = [0, numbers[0]]
    start, step = numbers[0], (numbers[2] if len(numbers) > 2 else 1)
    if not all(isinstance(n, int) for n in (start, step)):
        raise NotLowerable("float arange")
    return LazyValue(shape, dtype, lambda index: to_dtype(ir.IndexValue(
        ir.index_add(ir.IndexConst(start), ir.index_mul(index[0], ir.IndexConst(step))), "int64"), dtype))
