"""A pointwise value read by two kernels is recomputed in each or stored once, by its cost in
operations (GraphLowering.cheap_to_share). The GPU emitter recomputes more (triton.compile.
SHARED_OPS) where no reader broadcasts the value: GELU's tanh, shared by the recomputed GELU
and its backward, was stored as a float32 tensor between them in every GPT-2 layer."""

import pytest
import torch

from tensorjit.codegen import ir
from tensorjit.codegen.memory import names_written
from two_emitters import compile_with, on_device


def gelu_and_backward(x, grad):
    inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    t = torch.tanh(inner)
    y = 0.5 * x * (1 + t)
    dy = grad * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * 0.7978845608028654 * (1 + 0.134145 * x * x))
    return y * 2, dy * 3  # (each in its own kernel: readers of the shared tanh in two kernels)


def rotary(q, positions):
    """A table computed once per position, read for every head: recomputing it per element of
    q would repeat its transcendentals heads x batch times."""
    angles = positions[:, None] * torch.exp(torch.arange(8.0, device=positions.device) * -0.5)[None, :]
    table = torch.cos(torch.sin(angles) * 3 + 1) * torch.tanh(angles)
    return q * table, q.flip(-1) * table


def kernels(compiled):
    return [s for s in compiled.program.steps if not isinstance(s, ir.Extern)]


def test_the_gpu_emitter_recomputes_a_shared_tanh():
    x, grad = torch.randn(64, 96, dtype=torch.bfloat16), torch.randn(64, 96, dtype=torch.bfloat16)
    compiled = compile_with("triton", gelu_and_backward, x, grad)
    written = {name for kernel in kernels(compiled) for name in names_written(kernel)}
    assert written == set(compiled.program.outputs), compiled.program  # no kernel storing tanh
    for got, want in zip(compiled(*[t.cuda() if torch.cuda.is_available() else t for t in (x, grad)]),
                         gelu_and_backward(x.float(), grad.float())):
        # (eager rounds every bfloat16 op; the kernel computes in float32 and rounds once)
        torch.testing.assert_close(got.cpu().float(), want, rtol=2e-2, atol=2e-2)


def test_a_broadcast_reader_keeps_the_value_stored():
    # (readers over more than triton.small_kernels.SMALL elements: smaller ones share a launch)
    q, positions = torch.randn(4, 4, 16, 8), torch.arange(16.0)
    for emitter in ("cpp", "triton"):
        compiled = compile_with(emitter, rotary, q, positions)
        assert len(kernels(compiled)) == 3, (emitter, compiled.program)


def layer_norm_backward(x, weight, bias, grad):
    x, weight, bias = (t.detach().requires_grad_() for t in (x, weight, bias))
    y = torch.nn.functional.layer_norm(x, (x.shape[-1],), weight, bias)
    return torch.autograd.grad(y, (x, weight, bias), grad)


def stored_full_size(compiled, shape) -> list:
    """Buffers of `shape` a kernel writes to memory that are not the graph's outputs."""
    local = {name for step in compiled.program.steps if isinstance(step, ir.LoopGroup) for name in step.local}
    return [b for b in compiled.program.buffers if b.kind == "temp" and tuple(b.shape) == shape
            and b.name not in local and b.name not in compiled.program.outputs]


@pytest.mark.parametrize("emitter, dtype", [("cpp", torch.float32), ("triton", torch.float32),
                                            ("triton", torch.bfloat16)])
def test_layer_norm_backward_recomputes_its_gradient_for_the_column_sums(emitter, dtype):
    """The upcast gradient and its product with the weight are read by the row sums, the
    input gradient and the column sums of the weight and bias gradients: each reader
    recomputes them from the (narrower) gradient instead of a float32 copy being written
    for the column sums to read back (GPT-2's backward: 12.6 MB per layer norm)."""
    shape = (4, 8, 64)
    inputs = (torch.randn(shape), torch.randn(64), torch.randn(64), torch.randn(shape))
    inputs = tuple(t.to(dtype) for t in inputs)
    compiled = compile_with(emitter, layer_norm_backward, *inputs)
    assert stored_full_size(compiled, shape) == [], compiled.program
    expected = layer_norm_backward(*(t.float() for t in inputs))
    tolerance = 1e-4 if dtype == torch.float32 else 5e-2
    for got, want in zip(compiled(*on_device(emitter, inputs)), expected):
        torch.testing.assert_close(got.cpu().float(), want, rtol=tolerance, atol=tolerance)


def test_an_exponential_read_by_a_sum_stays_row_local_scratch():
    """softmax's exp(x - max) is read by the sum and the division: too costly to compute twice
    a row, it stays a member of the row group (row-local, never stored)."""
    compiled = compile_with("cpp", lambda x: torch.softmax(x, -1), torch.randn(4, 33))
    [group] = [s for s in compiled.program.steps if isinstance(s, ir.LoopGroup)]
    assert [type(m).__name__ for m in group.members] == ["Reduction", "Pointwise", "Reduction", "Pointwise"]

