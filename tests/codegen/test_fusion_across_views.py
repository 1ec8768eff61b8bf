"""A reduction's epilogue that loops over the rows flattened (the reduction's output viewed
to [rows, features], as a matrix product needs) still joins the reduction's row group
(schedule.over_rows): layer norm feeding a linear layer is one pass over memory."""

import pytest
import torch
import torch.nn.functional as F

from tensorjit.codegen import ir
from two_emitters import EMITTERS, compile_with, on_device


def norm_then_project(x, residual, weight, bias, projection):
    hidden = x + residual
    normed = F.layer_norm(hidden, (hidden.shape[-1],), weight, bias)
    return hidden, normed.view(-1, hidden.shape[-1]) @ projection


def softmax_flattened(x):
    return (x.softmax(-1).view(-1, x.shape[-1]) * 3).sum(-1)


@pytest.mark.parametrize("emitter", EMITTERS)
def test_layer_norm_viewed_for_a_product_is_one_group(emitter):
    inputs = on_device(emitter, (torch.randn(2, 8, 64), torch.randn(2, 8, 64), torch.randn(64),
                                 torch.randn(64), torch.randn(64, 32)))
    compiled = compile_with(emitter, norm_then_project, *inputs)
    kernels = [s for s in compiled.program.steps if not isinstance(s, ir.Extern)]
    assert len(kernels) == 1 and isinstance(kernels[0], ir.LoopGroup), compiled.program
    for got, want in zip(compiled(*inputs), norm_then_project(*inputs)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("emitter", EMITTERS)
@pytest.mark.parametrize("shape", [(3, 5, 16), (2, 3, 4, 8)])
def test_flattened_epilogues_store_where_eager_does(emitter, shape):
    [x] = on_device(emitter, (torch.randn(shape),))
    compiled = compile_with(emitter, softmax_flattened, x)
    groups = [s for s in compiled.program.steps if isinstance(s, ir.LoopGroup)]
    assert len(groups) == 1, compiled.program
    torch.testing.assert_close(compiled(x), softmax_flattened(x), rtol=1e-5, atol=1e-5)
