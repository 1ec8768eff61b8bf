"""Padding misaligned matrix products keeps every result and every later node's layout."""

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from tensorjit.codegen.triton.pad_matmul import pad_matmuls

aten = torch.ops.aten


def products(graph) -> list:
    return [n for n in graph.nodes if n.target in (aten.mm.default, aten.addmm.default, aten.bmm.default)]


@pytest.mark.parametrize("case", ["mm", "addmm", "addmm_2d_bias", "bmm"])
def test_padded_products_equal_the_originals(case):
    a, b = torch.randn(13, 21), torch.randn(21, 37)
    functions = {
        "mm": (lambda a, b: torch.mm(a, b).relu().view(-1), (a, b)),
        "addmm": (lambda a, b, c: torch.addmm(c, a, b) * 2, (a, b, torch.randn(37))),
        "addmm_2d_bias": (lambda a, b, c: torch.addmm(c, a, b), (a, b, torch.randn(13, 37))),
        "bmm": (lambda a, b: torch.bmm(a, b).sum(-1), (torch.randn(3, 13, 21), torch.randn(3, 21, 37))),
    }
    fn, inputs = functions[case]
    gm = make_fx(fn, tracing_mode="fake")(*inputs)
    assert pad_matmuls(gm, devices=("cpu",), min_work=0) == 1
    [product] = products(gm.graph)
    padded_shape = product.meta["val"].shape
    assert all(size % 4 == 0 for size in padded_shape[-2:])
    torch.testing.assert_close(gm(*inputs), fn(*inputs))


def test_aligned_or_small_products_are_left_alone():
    gm = make_fx(torch.mm, tracing_mode="fake")(torch.randn(16, 8), torch.randn(8, 32))
    assert pad_matmuls(gm, devices=("cpu",), min_work=0) == 0
    gm = make_fx(torch.mm, tracing_mode="fake")(torch.randn(15, 8), torch.randn(8, 31))
    assert pad_matmuls(gm, devices=("cpu",)) == 0  # too little work to pay for two copies
    assert pad_matmuls(gm) == 0  # CPU graphs are not padded by default
