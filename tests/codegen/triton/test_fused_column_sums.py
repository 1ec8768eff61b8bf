"""A column reduction runs inside the kernel producing what it sums (`triton.fused_column_sums`):
a linear layer's bias gradient summed GELU's backward output over the rows in a kernel of its
own, reading back what the kernel before had just stored."""

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from tensorjit.codegen import ir
from tensorjit.codegen.triton import compile as triton_compile, decompositions
from tensorjit.codegen.triton.kernels import lane_members
from tensorjit.codegen.verify import verify


def compile_fn(fn, *inputs):
    compiled = triton_compile.compile_graph(make_fx(fn, decomposition_table=decompositions())(*inputs), list(inputs))
    verify(compiled.program)
    return compiled


def kernels(program: ir.Program) -> list:
    return [step for step in program.steps if not isinstance(step, ir.Extern)]


def lane_loops(text: str) -> int:
    """Loops over a kernel's lanes (a row epilogue's loop over one element left out)."""
    return text.count("for roffset") - text.count("for roffset in range(0, 1,")


def gelu_backward_and_bias_gradient(x, grad_h, weight):
    """GELU recomputed for the weight gradient, GELU's backward, the next product's input
    gradient, and the bias gradient: the backward of linear -> GELU."""
    recomputed = torch.nn.functional.gelu(x, approximate="tanh")
    grad_x = torch.ops.aten.gelu_backward(grad_h, x, approximate="tanh")
    return grad_h.t() @ recomputed, grad_x @ weight, grad_x.sum(0)


def inputs_of(rows, width, device, dtype=torch.float32):
    return (torch.randn(rows, width, device=device, dtype=dtype), torch.randn(rows, width, device=device, dtype=dtype),
            torch.randn(width, 16, device=device, dtype=dtype))


@pytest.mark.parametrize("rows, width, split", [(32, 96, False), (1024, 1024, True)])
def test_the_bias_gradient_is_summed_in_the_kernel_computing_gelus_backward(device, rows, width, split):
    """Unsplit, the whole sum joins the producer; split (many rows, `split_reductions`), the
    partial sums do and a small kernel adds them."""
    inputs = inputs_of(rows, width, device)
    compiled = compile_fn(gelu_backward_and_bias_gradient, *inputs)
    found = kernels(compiled.program)
    assert len(found) == (2 if split else 1), compiled.program
    group = found[0]
    assert isinstance(group, ir.LoopGroup) and len(lane_members(group)) == 2, compiled.program
    text = compiled.hook.kernels[group.name].source
    assert lane_loops(text) == 1, text  # the producer's elements and the sum in one loop
    for got, want in zip(compiled(*inputs), gelu_backward_and_bias_gradient(*inputs)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-3)


def test_bfloat16_partial_sums_match_eager(device):
    inputs = inputs_of(64, 96, device, torch.bfloat16)
    compiled = compile_fn(gelu_backward_and_bias_gradient, *inputs)
    assert len(kernels(compiled.program)) == 1, compiled.program
    expected = gelu_backward_and_bias_gradient(*(t.float() for t in inputs))
    for got, want in zip(compiled(*inputs), expected):
        torch.testing.assert_close(got.float(), want, rtol=5e-2, atol=2e-1)


def read_twice(x, y):
    produced = torch.exp(x) * y
    return produced @ y.t(), (produced * produced.flip(0)).sum(0)


def test_a_sum_reading_the_output_at_other_elements_stays_apart(device):
    """Each lane of the fused loop holds its own element only: a sum reading the producer's
    output at another element (a row of the other end) keeps its own kernel."""
    x, y = torch.randn(32, 96, device=device), torch.randn(32, 96, device=device)
    compiled = compile_fn(read_twice, x, y)
    assert not any(isinstance(k, ir.LoopGroup) and lane_members(k) for k in kernels(compiled.program)), \
        compiled.program
    for got, want in zip(compiled(x, y), read_twice(x, y)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def two_sums(x, y):
    produced = torch.exp(x) * y
    return produced @ y.t(), produced.t().contiguous().sum(1) + produced.sum(0)


def test_two_sums_of_one_producer_share_its_loop(device):
    """Both sums run over the producer's rows (one through a transposed copy, which the sum
    reads through): one loop computes each element once and adds it to both."""
    x, y = torch.randn(48, 80, device=device), torch.randn(48, 80, device=device)
    compiled = compile_fn(two_sums, x, y)
    [group] = kernels(compiled.program)
    assert len(lane_members(group)) == 1 and sum(isinstance(m, ir.Reduction) for m in group.members) == 2, \
        compiled.program
    assert lane_loops(compiled.hook.kernels[group.name].source) == 1
    for got, want in zip(compiled(x, y), two_sums(x, y)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def batch_norm_sums(out, grad, x):
    """Batch norm's backward sums over a channels-last ReLU backward: each channel's sum runs
    over N, H, W, consecutive across channels in memory."""
    relu_grad = torch.where(out > 0, grad, torch.zeros_like(grad))
    return relu_grad * 2, relu_grad.sum((0, 2, 3)), (relu_grad * x).sum((0, 2, 3))


def test_a_channels_last_producer_is_looped_by_where_it_stores(device):
    """The producer's loops (N, C, H, W) store with channels-last strides: each of its variables
    is recovered from the offset the sums read by those strides."""
    out, grad, x = (torch.randn(4, 24, 6, 5, device=device).to(memory_format=torch.channels_last) for _ in range(3))
    compiled = compile_fn(batch_norm_sums, out, grad, x)
    groups = [k for k in kernels(compiled.program) if isinstance(k, ir.LoopGroup) and lane_members(k)]
    assert len(groups) == 1 and sum(isinstance(m, ir.Reduction) for m in groups[0].members) == 2, compiled.program
    for got, want in zip(compiled(out, grad, x), batch_norm_sums(out, grad, x)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
