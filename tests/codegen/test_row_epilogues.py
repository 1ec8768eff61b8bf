"""A pointwise kernel that reads a reduction's results moves up behind that reduction
(`schedule.hoist_row_epilogues`) when it can join its group: over the reduction's rows
exactly (batch norm's running statistics), or over rows it extends and reads within (a layer
norm's input gradient, which the graph's order put after the column sums of the weight and
bias gradients)."""

import pytest
import torch

from tensorjit.codegen import ir
from two_emitters import compile_with, on_device


def layer_norm_backward_by_hand(x, weight, grad):
    """The row sums, then the weight and bias gradients' column sums, then the input gradient
    (a lazy value, computed when returned: after the column sums)."""
    mean = x.mean(-1, keepdim=True)
    centered = x - mean
    rstd = torch.rsqrt((centered * centered).mean(-1, keepdim=True) + 1e-5)
    normed = centered * rstd
    scaled = grad * weight
    total, dot = scaled.sum(-1, keepdim=True), (scaled * normed).sum(-1, keepdim=True)
    weight_grad, bias_grad = (grad * normed).sum((0, 1)), grad.sum((0, 1))
    return weight_grad, bias_grad, rstd / x.shape[-1] * (scaled * x.shape[-1] - total - normed * dot)


@pytest.mark.parametrize("emitter", ["cpp", "triton"])
def test_the_input_gradient_joins_the_row_sums_past_the_column_sums(emitter):
    """The input gradient extends the row sums' rows and reads them within the row: it moves up
    behind them (`schedule.hoist_row_epilogues`) and joins their group instead of reading
    the gradient and the input again in a kernel of its own after the column sums."""
    inputs = (torch.randn(4, 8, 64), torch.randn(64), torch.randn(4, 8, 64))
    compiled = compile_with(emitter, layer_norm_backward_by_hand, *inputs)
    full_size = [m for step in compiled.program.steps if isinstance(step, ir.LoopGroup) for m in step.members
                 if isinstance(m, ir.Pointwise) and m.ranges == (4, 8, 64)]
    assert [m.output for m in full_size] == [compiled.program.outputs[2]], compiled.program
    for got, want in zip(compiled(*on_device(emitter, inputs)), layer_norm_backward_by_hand(*inputs)):
        torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-4)
