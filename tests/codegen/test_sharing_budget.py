"""A pointwise value read by two kernels is recomputed in each or stored once, by its cost in
operations (GraphLowering.cheap_to_share). The GPU emitter recomputes more (triton.compile.
SHARED_OPS) where no reader broadcasts the value: GELU's tanh, shared by the recomputed GELU
and its backward, was stored as a float32 tensor between them in every GPT-2 layer."""

import torch

from tensorjit.codegen import ir
from two_emitters import compile_with


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
    assert len(kernels(compiled)) == 2, compiled.program  # no third kernel storing tanh
    for got, want in zip(compiled(*[t.cuda() if torch.cuda.is_available() else t for t in (x, grad)]),
                         gelu_and_backward(x.float(), grad.float())):
        # (eager rounds every bfloat16 op; the kernel computes in float32 and rounds once)
        torch.testing.assert_close(got.cpu().float(), want, rtol=2e-2, atol=2e-2)


def test_a_broadcast_reader_keeps_the_value_stored():
    q, positions = torch.randn(2, 4, 16, 8), torch.arange(16.0)
    for emitter in ("cpp", "triton"):
        compiled = compile_with(emitter, rotary, q, positions)
        assert len(kernels(compiled)) == 3, (emitter, compiled.program)
