"""Reductions over every dimension but the last (bias and norm-weight gradients), with their
producers and the matrix products that read them, give eager's results."""

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from tensorjit.codegen.triton import compile_aten_graph, decompositions


def compile_fn(fn, *inputs):
    gm = make_fx(fn, decomposition_table=decompositions())(*inputs)
    return compile_aten_graph(gm, list(inputs)), gm


@pytest.mark.parametrize("shape", [(64, 48), (4, 16, 40), (3, 130, 5)])
def test_bias_gradient_pattern(device, shape):
    grad, x = torch.randn(shape, device=device), torch.randn(shape, device=device)
    dims = list(range(len(shape) - 1))

    def fn(grad, x):
        scaled = grad * torch.sigmoid(x)
        return scaled, scaled.sum(dims), (grad * x).amax(dims)
    compiled, gm = compile_fn(fn, grad, x)
    for got, want in zip(compiled(grad, x), fn(grad, x)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_mean_over_leading_dimensions_and_keepdim_stays_correct(device):
    x = torch.randn(6, 10, 12, device=device)
    fn = lambda x: ((x * 2).mean([0, 1]), (x + 1).sum([0, 1], keepdim=True), (x - 1).sum(0))  # noqa: E731
    compiled, _ = compile_fn(fn, x)
    for got, want in zip(compiled(x), fn(x)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_a_product_reading_the_group_waits_for_it_and_the_bias_sum_joins(device):
    # backward of a linear layer: the gradient feeds a matrix product and the bias sum
    grad, x, w = (torch.randn(32, 24, device=device), torch.randn(32, 24, device=device),
                  torch.randn(24, 16, device=device))

    def fn(grad, x, w):
        g = grad * torch.sigmoid(x)
        return g @ w, g.sum(0, keepdim=True).view(24)
    compiled, gm = compile_fn(fn, grad, x, w)
    for got, want in zip(compiled(grad, x, w), fn(grad, x, w)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


@pytest.fixture
def small_splits(monkeypatch):
    """Split small reductions too, so that the interpreter runs these tests quickly."""
    from tensorjit.codegen.triton import split_reductions

    monkeypatch.setattr(split_reductions, "MIN_WORK", 1 << 14)


@pytest.mark.parametrize("shape", [(4096, 48), (8, 256, 40)])
def test_long_column_reductions_split_in_two_kernels(device, shape, small_splits):
    # few outputs over many rows (a bias gradient): partial results per block of rows, then
    # the partials reduced (split_reductions.py); sum, max and mean, two in one group
    grad, x = torch.randn(shape, device=device), torch.randn(shape, device=device)
    dims = list(range(len(shape) - 1))

    def fn(grad, x):
        return (grad * x).sum(dims), grad.sum(dims), (grad * x).amax(dims), (x * 3).mean(dims)
    compiled, _ = compile_fn(fn, grad, x)
    partials = [b for b in compiled.program.buffers if b.name.endswith("_partials")]
    assert len(partials) >= 3 and all(b.dtype == "float32" for b in partials), compiled.program
    for got, want in zip(compiled(grad, x), fn(grad, x)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_half_precision_partials_are_float32(device, small_splits):
    x = torch.randn(2048, 24, device=device).to(torch.bfloat16)
    compiled, _ = compile_fn(lambda x: x.sum(0), x)
    partials = [b for b in compiled.program.buffers if b.name.endswith("_partials")]
    assert [b.dtype for b in partials] == ["float32"]
    torch.testing.assert_close(compiled(x), x.sum(0), rtol=2e-2, atol=2e-1)


def test_batch_norm_statistics_over_few_channels_split(device, small_splits):
    # sums over N, H, W for each channel (a row reduction with few rows): partials over N
    grad, x = torch.randn(16, 4, 16, 32, device=device), torch.randn(16, 4, 16, 32, device=device)

    def fn(grad, x):
        return (grad * x).sum([0, 2, 3]), grad.sum([0, 2, 3])
    compiled, _ = compile_fn(fn, grad, x)
    assert any(b.name.endswith("_partials") for b in compiled.program.buffers), compiled.program
    for got, want in zip(compiled(grad, x), fn(grad, x)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-3)


def test_small_reductions_stay_one_kernel(device):
    x = torch.randn(4096, 48, device=device)  # 196k elements: below MIN_WORK
    compiled, _ = compile_fn(lambda x: x.sum(0), x)
    assert not any(b.name.endswith("_partials") for b in compiled.program.buffers)


def test_norm_weight_gradients_reading_row_statistics_are_column_reductions(device):
    """A layer-norm weight gradient sums grad * (x - mean[row]) * rstd[row] over the rows: the
    per-row statistics are read along the reduction, the same for every output, and do not make
    it a row reduction (it was one: 2048 strided lanes a program, 19 us a GPT-2 layer). Its
    bfloat16 epilogues run in the split's second kernel."""
    from tensorjit.codegen import ir
    from tensorjit.codegen.triton.kernels import is_column_reduction

    grad, x = torch.randn(16384, 64, device=device), torch.randn(16384, 64, device=device)

    def fn(grad, x):
        mean, rstd = x.mean(1, keepdim=True), torch.rsqrt(x.var(1, keepdim=True) + 1e-5)
        weight_grad = (grad * (x - mean) * rstd).sum(0)
        return weight_grad.to(torch.bfloat16), grad.sum(0).to(torch.bfloat16), (x - mean) * rstd
    compiled, _ = compile_fn(fn, grad, x)
    steps = compiled.program.steps
    partials = [s for s in steps if s.name.endswith("_partials")]
    assert partials and all(is_column_reduction(s) for s in partials if isinstance(s, ir.LoopGroup)), steps
    for got, want in zip(compiled(grad, x), fn(grad, x)):
        torch.testing.assert_close(got.float(), want.float(), rtol=2e-2, atol=2e-2)
