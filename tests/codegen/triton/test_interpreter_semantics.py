"""Where Triton's interpreter differs from a GPU, and what the emitter does so both match eager.

Regressions for failures of the OpInfo run under the interpreter:
  * a 0-d constant's comparison, splatted against a block, became a float
    array there, so `(c != c) | mask` raised (logsigmoid's minimum(0, x));
    constants are one-element blocks now;
  * float32 -> bfloat16 truncated there (a GPU rounds to nearest even, as
    eager does): x.to(bfloat16) gave -8.4375 for -8.5;
  * libdevice is missing there: stand-ins (interpreter_math.py) must be
    accurate, including at the edges of their range reduction.
On a GPU the same tests check the real compiler's code.
"""

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from tensorjit.codegen.triton import compile_aten_graph, decompositions


def compiled_result(function, arguments):
    graph = make_fx(function, decomposition_table=decompositions())(*arguments)
    compiled = compile_aten_graph(graph, arguments)
    assert getattr(compiled, "kernel_sources", None), "expected the graph to be compiled, not run eagerly"
    return compiled(*arguments)


def test_constants_meet_comparison_masks(device):
    def function(x, integers):
        return (torch.minimum(torch.zeros((), device=x.device), x) - torch.log1p(torch.exp(-x.abs())),
                torch.where(x > 0, x, 0.0).sum(-1) + 1.0,
                torch.maximum(x.amax(-1), torch.zeros((), device=x.device)),
                integers // 3, integers % -4)

    x = torch.randn(4, 16, device=device)
    x[0, 3] = float("nan")
    integers = torch.randint(-20, 20, (4, 16), device=device, dtype=torch.int32)
    for actual, expected in zip(compiled_result(function, [x, integers]), function(x, integers)):
        torch.testing.assert_close(actual, expected, rtol=1e-6, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("columns", [8, 6, 30000])  # persistent unmasked, persistent masked, looped
def test_reductions_of_constants_count_every_element(columns, device):
    # Constants are [1, 1] blocks in reduction kernels: reducing one without broadcasting it
    # to the row first would sum one element.
    def function(x):
        return (torch.full((4, columns), 2.0, device=x.device).sum(-1) + x,
                torch.ones(4, columns, device=x.device).prod(-1) * x)

    x = torch.randn(4, device=device)
    for actual, expected in zip(compiled_result(function, [x]), function(x)):
        torch.testing.assert_close(actual, expected)


def test_bfloat16_conversion_rounds_to_nearest_even(device):
    ties = torch.tensor([1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8), -8.5, 3.0e38, float("inf"), float("nan"), -0.0],
                        device=device)
    x = torch.cat([ties, torch.randn(56, device=device) * 10])
    y = torch.randn(64, device=device).bfloat16()
    integers = torch.randint(-(2**20), 2**20, (64,), device=device, dtype=torch.int32)

    def function(x, y, integers):
        return x.bfloat16(), (x * 3).bfloat16(), integers.bfloat16(), y + y

    for actual, expected in zip(compiled_result(function, [x, y, integers]), function(x, y, integers)):
        assert actual.dtype == expected.dtype
        torch.testing.assert_close(actual, expected, rtol=0, atol=0, equal_nan=True)


EDGES = [0.0, 1e-8, -1e-8, 0.3, 0.4142135, 0.41421357, 1.0, 2.4142134, 2.4142137, 7.5, -7.5, 1e6, -1e6]
STAND_INS = {
    "atan": (torch.atan, EDGES),
    "asin": (torch.asin, [0.0, 0.5, -0.5, 0.999, -0.999, 1.0, -1.0, 0.70710677, 1e-6]),
    "acos": (torch.acos, [0.0, 0.5, -0.5, 0.999, -0.999, 1.0, -1.0, 0.70710677, 1e-6]),
    "erfinv": (torch.erfinv, [0.0, 0.1, -0.1, 0.5, -0.9, 0.99, -0.999, 0.9999, 1.0, -1.0]),
    "lgamma": (torch.lgamma, [0.5, 1.0, 2.0, 1e-3, 3.7, 7.99, 8.0, 30.5, 200.0, -0.5, -2.3, -7.9, -1.0, 0.0]),
    "round": (torch.round, [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, 2.7, -2.7, 8388609.0, 0.0]),
}


@pytest.mark.parametrize("name", STAND_INS)
def test_interpreter_stand_ins_at_range_edges(name, device):
    eager, values = STAND_INS[name]
    x = torch.tensor(values, device=device)
    expected = eager(x)
    actual = compiled_result(lambda v: (eager(v),), [x])[0]
    torch.testing.assert_close(actual, expected, rtol=3e-6, atol=1e-6, equal_nan=True)


def test_atan2_and_fmod_in_every_quadrant(device):
    y = torch.tensor([1.0, 1.0, -1.0, -1.0, 0.0, 2.0, -2.0, 0.0, 5.5, -5.5], device=device)
    x = torch.tensor([1.0, -1.0, 1.0, -1.0, 1.0, 0.0, 0.0, -1.0, 2.0, 2.0], device=device)

    def function(y, x):
        return torch.atan2(y, x), torch.fmod(y, torch.where(x == 0, 3.0, x))

    for actual, expected in zip(compiled_result(function, [y, x]), function(y, x)):
        torch.testing.assert_close(actual, expected, rtol=3e-6, atol=1e-6)
