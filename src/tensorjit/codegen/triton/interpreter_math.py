"""Stand-ins for what Triton's interpreter lacks, so CI covers the lowering without a GPU.

Triton's interpreter (TRITON_INTERPRET=1, how CI runs kernels on CPU tensors)
has no libdevice, and it converts float32 to bfloat16 by truncation (a GPU
rounds to nearest even, as eager does). Under the interpreter only:

  * `FORMULAS[name]` is a text template over the operands `{0}`, `{1}` that
    replaces `libdevice.<name>(...)`;
  * `PRELUDE` is Triton source defining the helper functions those templates
    and `to_bfloat16` call; kernel.py appends it to every interpreted kernel.

Accuracy: about float32 rounding (relative 1e-6) for finite arguments of
moderate size, the ones tests use. These are not substitutes for libdevice on
a GPU, where none of this is emitted.
"""

from __future__ import annotations

FORMULAS: dict[str, str] = {
    "tanh": "(2.0 * tl.sigmoid(2.0 * ({0})) - 1.0)",
    "log1p": "tl.log(1.0 + ({0}))",
    "expm1": "(tl.exp({0}) - 1.0)",
    "trunc": "tl.where(({0}) < 0, tl.ceil({0}), tl.floor({0}))",
    "pow": ("tl.where(({1}) == 0, 1.0, tl.where(({0}) < 0, tl.where(tl.floor({1}) == ({1}), "
            "tl.where(tl.floor(({1}) * 0.5) * 2.0 == ({1}), 1.0, -1.0) * tl.exp(({1}) * tl.log(-({0}))), "
            "float('nan')), tl.exp(({1}) * tl.log({0}))))"),
    "sinh": "((tl.exp({0}) - tl.exp(-({0}))) * 0.5)",
    "cosh": "((tl.exp({0}) + tl.exp(-({0}))) * 0.5)",
    "tan": "(tl.sin({0}) / tl.cos({0}))",
    "log10": "(tl.log({0}) * 0.4342944819032518)",
    # odd: log(|x| + sqrt(x^2 + 1)) with the sign put back (x + sqrt(...) cancels for x < 0)
    "asinh": "tl.where(({0}) < 0, -1.0, 1.0) * tl.log(tl.abs({0}) + tl.sqrt(({0}) * ({0}) + 1.0))",
    "acosh": "tl.log(({0}) + tl.sqrt(({0}) * ({0}) - 1.0))",
    "atanh": "(0.5 * tl.log((1.0 + ({0})) / (1.0 - ({0}))))",
    "atan": "_interpreter_atan({0})",
    "asin": "_interpreter_asin({0})",
    "acos": "_interpreter_acos({0})",
    "atan2": "_interpreter_atan2({0}, {1})",
    "erfinv": "_interpreter_erfinv({0})",
    "lgamma": "_interpreter_lgamma({0})",
    "round": "_interpreter_round({0})",
    # Triton's float % is C's fmod (LLVM frem); the interpreter runs it as numpy.fmod, exactly.
    "fmod": "(({0}) % ({1}))",
}

PRELUDE = '''

@triton.jit
def _interpreter_atan(x):
    # Cephes atanf: reduce |x| to [0, tan(pi/8)], then an odd polynomial.
    a = tl.abs(x)
    big = a > 2.414213562373095
    middle = a > 0.4142135623730950
    safe = tl.where(a == 0, 1.0, a)
    t = tl.where(big, -1.0 / safe, tl.where(middle, (a - 1.0) / (a + 1.0), a))
    base = tl.where(big, 1.5707963267948966, tl.where(middle, 0.7853981633974483, 0.0))
    z = t * t
    p = (((8.05374449538e-2 * z - 1.38776856032e-1) * z + 1.99777106478e-1) * z - 3.33329491539e-1) * z * t + t
    result = base + p
    return tl.where(x < 0, -result, result)


@triton.jit
def _interpreter_asin(x):
    # (1 - x)(1 + x) rather than 1 - x*x keeps precision near |x| = 1.
    cosine = tl.sqrt((1.0 - x) * (1.0 + x))
    return tl.where(cosine == 0, tl.where(x < 0, -1.5707963267948966, 1.5707963267948966),
                    _interpreter_atan(x / tl.where(cosine == 0, 1.0, cosine)))


@triton.jit
def _interpreter_acos(x):
    # 2 atan(sqrt((1 - x) / (1 + x))): no cancellation near x = 1.
    ratio = (1.0 - x) / tl.where(x == -1.0, 1.0, 1.0 + x)
    return tl.where(x == -1.0, 3.141592653589793, 2.0 * _interpreter_atan(tl.sqrt(ratio)))


@triton.jit
def _interpreter_atan2(y, x):
    safe = tl.where(x == 0, 1.0, x)
    angle = tl.where(x == 0, tl.where(y < 0, -1.5707963267948966, tl.where(y > 0, 1.5707963267948966, 0.0)),
                     _interpreter_atan(y / safe))
    return tl.where(x < 0, tl.where(y < 0, angle - 3.141592653589793, angle + 3.141592653589793), angle)


@triton.jit
def _interpreter_erfinv(x):
    # Giles' single-precision approximation, then one Newton step on erf.
    w = -tl.log((1.0 - x) * (1.0 + x))
    central = w - 2.5
    p = 2.81022636e-08
    p = 3.43273939e-07 + p * central
    p = -3.5233877e-06 + p * central
    p = -4.39150654e-06 + p * central
    p = 0.00021858087 + p * central
    p = -0.00125372503 + p * central
    p = -0.00417768164 + p * central
    p = 0.246640727 + p * central
    p = 1.50140941 + p * central
    tail = tl.sqrt(w) - 3.0
    q = -0.000200214257
    q = 0.000100950558 + q * tail
    q = 0.00134934322 + q * tail
    q = -0.00367342844 + q * tail
    q = 0.00573950773 + q * tail
    q = -0.0076224613 + q * tail
    q = 0.00943887047 + q * tail
    q = 1.00167406 + q * tail
    q = 2.83297682 + q * tail
    y = tl.where(w < 5.0, p, q) * x
    y = y - (tl.erf(y) - x) / (1.1283791670955126 * tl.exp(-y * y))
    return tl.where(tl.abs(x) == 1.0, x * float("inf"), y)


@triton.jit
def _interpreter_lgamma_positive(x):
    # Stirling's series at z >= 8, shifting smaller x up by eight: lgamma(x) = lgamma(x + 8) - log(x (x+1) ... (x+7)).
    small = x < 8.0
    z = tl.where(small, x + 8.0, x)
    product = tl.where(small, x * (x + 1.0) * (x + 2.0) * (x + 3.0) * (x + 4.0) * (x + 5.0) * (x + 6.0) * (x + 7.0),
                       1.0)
    inverse = 1.0 / z
    inverse_squared = inverse * inverse
    series = inverse * (0.08333333333333333 - inverse_squared * (0.002777777777777778
                                                                 - inverse_squared * 0.0007936507936507937))
    return (z - 0.5) * tl.log(z) - z + 0.9189385332046728 + series - tl.log(tl.abs(product))


@triton.jit
def _interpreter_lgamma(x):
    # Reflection for x < 0: lgamma(x) = log(pi / |sin(pi x)|) - lgamma(1 - x); sin of the exact fraction.
    negative = x < 0
    positive = _interpreter_lgamma_positive(tl.where(negative, 1.0 - x, x))
    fraction = x - tl.floor(x)
    reflected = tl.log(3.141592653589793 / tl.abs(tl.sin(3.141592653589793 * fraction))) - positive
    return tl.where(negative, reflected, positive)


@triton.jit
def _interpreter_round(x):
    # Half to even, as eager's round (nearbyint): x - floor(x) is exact.
    down = tl.floor(x)
    fraction = x - down
    even = down - 2.0 * tl.floor(down * 0.5) == 0
    return tl.where(fraction > 0.5, down + 1.0, tl.where(fraction < 0.5, down, tl.where(even, down, down + 1.0)))


@triton.jit
def _interpreter_to_bfloat16(x):
    # The interpreter truncates float32 -> bfloat16 (and reads other sources as integers): round to
    # nearest even on the float32 bits first, so the conversion that follows is exact.
    value = x.to(tl.float32)
    bits = value.to(tl.uint32, bitcast=True)
    bits = bits + 0x7FFF + ((bits >> 16) & 1)
    rounded = (bits & 0xFFFF0000).to(tl.float32, bitcast=True)
    return tl.where(value != value, value, rounded).to(tl.bfloat16)
'''
