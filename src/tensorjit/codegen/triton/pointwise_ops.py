"""ATen pointwise operators as calls on the Triton scalar-op emitter.

`POINTWISE[op](ops, *arguments, **keywords)` takes a `TritonOps` and the
operator's arguments (emitter values for tensors, Python numbers for scalars)
and returns the emitter value of one output element. Each entry is registered
next to its definition. Used by the direct ATen-graph lowering (`direct.py`).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from tensorjit.codegen.triton.emitter import TritonOps

aten = torch.ops.aten
prims = torch.ops.prims

POINTWISE: dict[Any, Callable[..., str]] = {}


def register(*operators):
    def decorate(function):
        for operator in operators:
            for overload in _overloads(operator):
                if overload in POINTWISE:
                    raise ValueError(f"pointwise lowering for {overload} registered twice")
                POINTWISE[overload] = function
        return function

    return decorate


def _overloads(operator):
    if isinstance(operator, torch._ops.OpOverload):
        return [operator]
    return [getattr(operator, name) for name in operator.overloads()]


def value(ops: TritonOps, argument: Any, dtype: torch.dtype = torch.float32) -> str:
    """An emitter value for a tensor value (already a str) or a Python scalar."""
    if isinstance(argument, str):
        return argument
    if isinstance(argument, bool):
        return ops.constant(argument, torch.bool)
    if isinstance(argument, int):
        return ops.constant(argument, torch.int64 if not dtype.is_floating_point else dtype)
    return ops.constant(float(argument), dtype if dtype.is_floating_point else torch.float32)


def _binary(name):
    def lower(ops, left, right, **_):
        dtype = ops.dtype_of(left) if isinstance(left, str) else ops.dtype_of(right) if isinstance(right, str) else torch.float32
        return ops.binary(name, value(ops, left, dtype), value(ops, right, dtype))

    return lower


def _unary(name):
    return lambda ops, operand, **_: ops.unary(name, operand)


for _name in ("mul", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge", "bitwise_and", "bitwise_or",
              "bitwise_xor", "logical_and", "logical_or", "atan2", "fmod", "remainder"):
    register(getattr(aten, _name))(_binary("mod" if _name == "remainder" else _name))
register(prims.mul)(_binary("mul"))
register(prims.maximum)(_binary("maximum"))
register(prims.minimum)(_binary("minimum"))
for _name in ("exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "sin", "cos", "tan", "tanh",
              "sigmoid", "erf", "erfinv", "floor", "ceil", "trunc", "round", "asin", "acos", "atan", "sinh", "cosh",
              "asinh", "acosh", "atanh", "lgamma", "reciprocal", "relu", "sign", "abs", "neg", "bitwise_not"):
    register(getattr(aten, _name))(_unary(_name))


@register(aten.pow)
def pow(ops, base, exponent):
    """x**2 and x**3 multiply, as eager's pow kernel does for these exponents (exact, and
    cheaper than a libdevice call); everything else is pow."""
    if isinstance(base, str) and not isinstance(exponent, (str, bool)) and exponent in (2, 3) \
            and ops.dtype_of(base).is_floating_point:
        square = ops.binary("mul", base, base)
        return square if exponent == 2 else ops.binary("mul", square, base)
    return _binary("pow")(ops, base, exponent)


@register(aten.add, prims.add)
def add(ops, left, right, alpha=1):
    if alpha != 1:
        right = mul(ops, right, alpha)
    return _binary("add")(ops, left, right)


@register(aten.sub, prims.sub)
def sub(ops, left, right, alpha=1):
    if alpha != 1:
        right = mul(ops, right, alpha)
    return _binary("sub")(ops, left, right)


def mul(ops, left, right):
    return _binary("mul")(ops, left, right)


@register(aten.div.Tensor, aten.div.Scalar, prims.div)
def div(ops, left, right):
    return _binary("truediv")(ops, left, right)


@register(aten.div.Tensor_mode, aten.div.Scalar_mode)
def div_mode(ops, left, right, rounding_mode=None):
    if rounding_mode == "floor":
        return _binary("floordiv")(ops, left, right)
    quotient = _binary("truediv")(ops, left, right)
    return ops.unary("trunc", quotient) if rounding_mode == "trunc" else quotient


@register(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def where(ops, condition, true_value, false_value):
    dtype = next((ops.dtype_of(v) for v in (true_value, false_value) if isinstance(v, str)), torch.float32)
    return ops.where(condition, value(ops, true_value, dtype), value(ops, false_value, dtype))


@register(aten.clamp.default)
def clamp(ops, operand, minimum=None, maximum=None):
    dtype = ops.dtype_of(operand)
    if minimum is not None:
        operand = ops.binary("maximum", operand, value(ops, minimum, dtype))
    if maximum is not None:
        operand = ops.binary("minimum", operand, value(ops, maximum, dtype))
    return operand


@register(aten.clone.default, aten.alias.default, aten.lift_fresh_copy.default)
def identity(ops, operand, **_):
    return operand


@register(prims.convert_element_type.default)
def convert(ops, operand, dtype):
    return ops.to_dtype(operand, dtype)


@register(aten._to_copy.default)
def to_copy(ops, operand, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False,
            memory_format=None):
    return operand if dtype is None else ops.to_dtype(operand, dtype)


@register(aten.isnan.default)
def isnan(ops, operand):
    return ops.isnan(operand)


@register(aten.logical_not.default)
def logical_not(ops, operand):
    return ops.logical_not(operand)
