"""Pointwise ops lowered into kernels (not ATen externs) by both emitters, against eager.

Every op here once ran only through the old Triton path's lowering; now the shared
@lowering registry has them and both emitters implement their ops (C++ here; Triton in
its interpreter on CPU tensors, tests/conftest.py). Each case checks the values and that
no step of the program is an Extern.
"""

import pytest
import torch

from two_emitters import EMITTERS, check, compile_with, steps


def unit_interval():
    return torch.linspace(-0.999, 0.999, 64)


FLOAT_UNARY = {
    "tan": (torch.tan, torch.linspace(-1.4, 1.4, 64)), "asin": (torch.asin, unit_interval()),
    "acos": (torch.acos, unit_interval()), "atan": (torch.atan, torch.linspace(-30, 30, 64)),
    "sinh": (torch.sinh, torch.linspace(-5, 5, 64)), "cosh": (torch.cosh, torch.linspace(-5, 5, 64)),
    "asinh": (torch.asinh, torch.linspace(-30, 30, 64)), "acosh": (torch.acosh, torch.linspace(1, 30, 64)),
    "atanh": (torch.atanh, unit_interval()), "exp2": (torch.exp2, torch.linspace(-20, 20, 64)),
    "log2": (torch.log2, torch.tensor([0.5, 1, 2, 8, 1024, 3, 0.1, 1e-30])),
    "log10": (torch.log10, torch.tensor([0.5, 1, 10, 1000, 3, 0.1, 1e-30])),
    "erfinv": (torch.special.erfinv, torch.cat([unit_interval(), torch.tensor([1.0, -1.0, 1.5, 0.0, -0.9999999])])),
    "lgamma": (torch.lgamma, torch.cat([torch.linspace(0.1, 40, 60), torch.tensor([0.0, -1.0, -2.5, 1e30])])),
}


@pytest.mark.parametrize("emitter", EMITTERS)
@pytest.mark.parametrize("name", sorted(FLOAT_UNARY))
def test_float_unary(emitter, name):
    fn, x = FLOAT_UNARY[name]
    # Triton's interpreter has no libdevice: its stand-ins (interpreter_math.py) are looser
    tolerance = 2e-6 if emitter == "cpp" else 3e-5
    check(emitter, lambda x: fn(x * 1.0) * 2, x, rtol=tolerance, atol=1e-6)


@pytest.mark.parametrize("emitter", EMITTERS)
def test_float_unary_of_integers_computes_in_float(emitter):
    x = torch.arange(1, 9)
    check(emitter, lambda x: (torch.log2(x), torch.lgamma(x), torch.atan(x)), x)


@pytest.mark.parametrize("emitter", EMITTERS)
def test_sign_and_round(emitter):
    x = torch.tensor([-2.5, -1.5, -0.5, 0.0, 0.5, 1.5, 2.5, 3.7, float("nan"), -0.0, 1234.5678, 0.125])
    check(emitter, lambda x: (torch.sign(x), torch.round(x), torch.round(x, decimals=2),
                              torch.round(x * 1000, decimals=-2), torch.round(x, decimals=40)), x)
    n = torch.tensor([-3, 0, 4])
    check(emitter, lambda n: (torch.sign(n), torch.round(n) + 1), n)
    check(emitter, lambda x: torch.round(x, decimals=400) + 1, x, externs=1)  # 10^400: no double


@pytest.mark.parametrize("emitter", EMITTERS)
def test_fmod_and_remainder(emitter):
    a = torch.tensor([-7.0, 7.0, -7.5, 7.5, 0.0, 3.0, -3.0, 1e-3])
    b = torch.tensor([3.0, -3.0, 2.0, -2.0, 5.0, 3.0, -1.5, 0.0])
    check(emitter, lambda a, b: (torch.fmod(a, b), torch.remainder(a, b), a % 2.5, torch.fmod(a, -2.0),
                                 torch.remainder(-5.0, b)), a, b)
    n = torch.tensor([-7, 7, -6, 0, 5])
    check(emitter, lambda n: (n % 3, n % -3, torch.fmod(n, 3), torch.fmod(n, -4)), n)


@pytest.mark.parametrize("emitter", EMITTERS)
def test_integer_division_by_a_tensor_stays_with_aten(emitter):
    # eager raises for a zero divisor; C's % on zero is undefined behaviour
    n, d = torch.tensor([-7, 7, 5]), torch.tensor([2, -3, 1])
    compiled = compile_with(emitter, lambda n, d: torch.fmod(n, d) + 1, n, d)
    assert steps(compiled) == ["Extern", "Pointwise"]
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        compiled(n, torch.tensor([2, -3, 0]))


@pytest.mark.parametrize("emitter", EMITTERS)
def test_bitwise(emitter):
    a, b = torch.tensor([0, 1, 6, -8, 255]), torch.tensor([3, 3, 5, 7, -1])
    check(emitter, lambda a, b: (a & b, a | b, a ^ b, ~a, a & 6, 12 ^ b), a, b)
    p, q = torch.tensor([True, False, True, False]), torch.tensor([True, True, False, False])
    check(emitter, lambda p, q: (p & q, p | q, p ^ q, ~p, torch.bitwise_not(q)), p, q)


@pytest.mark.parametrize("emitter", EMITTERS)
def test_lift_fresh_copy(emitter):
    x = torch.randn(5)
    check(emitter, lambda x: torch.ops.aten.lift_fresh_copy(x) * 2, x)


@pytest.mark.parametrize("emitter", EMITTERS)
def test_division_with_rounding(emitter):
    a = torch.tensor([7.0, -7.0, 7.5, -0.5, 0.0, 1e30, float("inf"), 5.0, -5.0, 0.3, -1e-30])
    b = torch.tensor([2.0, 2.0, -2.0, 3.0, -3.0, 3e-9, 2.0, 0.0, 0.0, 0.1, 7.0])
    check(emitter, lambda a, b: (torch.div(a, b, rounding_mode="floor"), torch.div(a, b, rounding_mode="trunc"),
                                 a // 0.25, torch.floor_divide(a, -3.0)), a, b)
    n = torch.tensor([7, -7, 0, 6, -6, 1])
    check(emitter, lambda n: (n // 2, n // -4, torch.div(n, 3, rounding_mode="trunc"),
                              torch.div(n, -3, rounding_mode="trunc"), torch.div(n, 2, rounding_mode=None)), n)


@pytest.mark.parametrize("emitter", EMITTERS)
def test_flip_repeat_full_like_clamp_by_tensors_isinf(emitter):
    x = torch.randn(3, 4, 5)
    compiled = check(emitter, lambda x: (x.flip(0, 2) * 2, x.flip(-1).reshape(12, 5)[1:, ::2] + 1,
                                         x.repeat(2, 1, 3), x[0].repeat(2, 2, 1) - 1), x)
    assert "Extern" not in steps(compiled)
    low, high = torch.randn(4, 5), torch.randn(5)
    y = torch.tensor([1.0, float("inf"), -float("inf"), float("nan"), 0.0])
    check(emitter, lambda x, low, high, y: (torch.full_like(x, 2.5) + x, torch.clamp(x, low, high),
                                            torch.clamp(x, min=low), torch.clamp(x, max=high), torch.isinf(y),
                                            torch.isinf(torch.arange(3, device=x.device))), x, low, high, y)


@pytest.mark.parametrize("emitter", EMITTERS)
def test_reductions_of_a_0d_tensor(emitter):
    s = torch.tensor(3.5)
    check(emitter, lambda s: (s.sum(), s.mean(), s.amax(), torch.prod(s, 0), s.sum(0, keepdim=True) * 2,
                              (s > 0).sum(), s.any()), s)
    x = torch.tensor([[0.0, 0.0], [0.0, -2.0]])
    check(emitter, lambda x: (x.any(), (x * 0).any()), x)
