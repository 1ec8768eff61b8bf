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


def test_a_transposed_operand_is_padded_along_its_rows():
    # a tied LM head: x @ weight.t() with a vocabulary-sized, misaligned N
    x, weight = torch.randn(12, 16), torch.randn(37, 16)
    fn = lambda x, w: torch.mm(x, w.t()) * 2
    gm = make_fx(fn, tracing_mode="fake")(x, weight)
    assert pad_matmuls(gm, devices=("cpu",), min_work=0) == 1
    [pad] = [n for n in gm.graph.nodes if n.target is aten.constant_pad_nd.default]
    assert pad.args[0].meta["val"].is_contiguous()  # reads the weight along its rows
    torch.testing.assert_close(gm(x, weight), fn(x, weight))


def test_a_returned_product_stays_a_slice_of_the_padded_one():
    x, weight = torch.randn(12, 16), torch.randn(37, 16)
    fn = lambda x, w: torch.mm(x, w.t())
    gm = make_fx(fn, tracing_mode="fake")(x, weight)
    assert pad_matmuls(gm, devices=("cpu",), min_work=0) == 1
    assert not [n for n in gm.graph.nodes if n.target is aten.clone.default]
    torch.testing.assert_close(gm(x, weight), fn(x, weight))


def test_a_product_returned_through_a_view_stays_a_slice():
    # GPT-2's logits: [batch * tokens, vocabulary] viewed to [batch, tokens, vocabulary]
    x, weight = torch.randn(2, 6, 16), torch.randn(37, 16)
    fn = lambda x, w: torch.mm(x.view(12, 16), w.t()).view(2, 6, 37)
    gm = make_fx(fn, tracing_mode="fake")(x, weight)
    assert pad_matmuls(gm, devices=("cpu",), min_work=0) == 1
    assert not [n for n in gm.graph.nodes if n.target is aten.clone.default]
    [view] = [n for n in gm.graph.nodes if n.target is aten.view.default and n.meta["val"].dim() == 3]
    assert view.meta["val"].stride() == (6 * 40, 40, 1)
    torch.testing.assert_close(gm(x, weight), fn(x, weight))
