"""C++ text for the ATen pointwise ops the CPU code generator fuses (float32 and float64).

Each entry maps an op to a function of its operand expressions (C++ strings) and its
scalar arguments; `None` for an op means it is not lowered (the graph calls ATen).
"""

from __future__ import annotations

from typing import Callable

import torch

aten = torch.ops.aten


def _binary(symbol: str) -> Callable:
    return lambda a, b, alpha=None: f"({a} {symbol} {b})" if alpha in (None, 1) else f"({a} {symbol} ({alpha}) * {b})"


def _gelu(a, approximate="none"):
    # Constants are T(...): a bare double literal would promote float math to double.
    if approximate == "tanh":
        return (f"(T(0.5) * {a} * (T(1) + std::tanh(T(0.7978845608028654) * ({a} + T(0.044715) * {a} * {a} * {a}))))")
    return f"(T(0.5) * {a} * (T(1) + std::erf({a} * T(0.7071067811865476))))"


# Transcendental functions compile to scalar libm calls here (vectorised math needs
# -ffast-math or a vector library such as Sleef, which ATen uses): ATen's kernels for
# them are faster than a fused scalar loop, so they are not fused (measured: a gelu
# chain ran 1.5x slower fused; pure arithmetic chains run 13x faster fused).
TRANSCENDENTAL = {aten.exp.default, aten.log.default, aten.sin.default, aten.cos.default, aten.tanh.default,
                  aten.erf.default, aten.sigmoid.default, aten.gelu.default}

POINTWISE: dict = {
    aten.add.Tensor: _binary("+"), aten.add.Scalar: _binary("+"),
    aten.sub.Tensor: _binary("-"), aten.sub.Scalar: _binary("-"),
    aten.mul.Tensor: lambda a, b: f"({a} * {b})", aten.mul.Scalar: lambda a, b: f"({a} * {b})",
    aten.div.Tensor: lambda a, b: f"({a} / {b})", aten.div.Scalar: lambda a, b: f"({a} / {b})",
    aten.neg.default: lambda a: f"(-{a})",
    aten.abs.default: lambda a: f"std::abs({a})",
    aten.exp.default: lambda a: f"std::exp({a})",
    aten.log.default: lambda a: f"std::log({a})",
    aten.sqrt.default: lambda a: f"std::sqrt({a})",
    aten.rsqrt.default: lambda a: f"(T(1) / std::sqrt({a}))",
    aten.sin.default: lambda a: f"std::sin({a})",
    aten.cos.default: lambda a: f"std::cos({a})",
    aten.tanh.default: lambda a: f"std::tanh({a})",
    aten.erf.default: lambda a: f"std::erf({a})",
    aten.sigmoid.default: lambda a: f"(T(1) / (T(1) + std::exp(-{a})))",
    aten.relu.default: lambda a: f"std::max({a}, (T)0)",
    aten.gelu.default: _gelu,
    aten.reciprocal.default: lambda a: f"(T(1) / {a})",
    aten.pow.Tensor_Scalar: lambda a, b: f"({a} * {a})" if b == 2 else f"std::pow({a}, (T)({b}))",
    aten.maximum.default: lambda a, b: f"std::max({a}, {b})",
    aten.minimum.default: lambda a, b: f"std::min({a}, {b})",
    aten.clamp_min.default: lambda a, b: f"std::max({a}, (T)({b}))",
    aten.clamp_max.default: lambda a, b: f"std::min({a}, (T)({b}))",
}
