"""Custom torch.autograd.Function in compiled code, against torch.compile in one process.

A Function's apply is captured into the graph (torch.compile: one graph with its
autograd_function_apply; tensorjit: one node whose forward and backward the autograd stage
traces), so the graph counts match torch's and outputs and gradients equal eager's, through
the eager, aot_eager and inductor backends. A backward that cannot be traced (`.item()`)
is a logged graph break, and the Function runs eagerly, with eager's gradients.
"""

from __future__ import annotations

import pytest
import torch
import torch._dynamo

import tensorjit
from tensorjit import logs

from .harness import REFERENCE, CountingBackend

pytestmark = pytest.mark.skipif(REFERENCE, reason="compares tensorjit with torch.compile in one run")


class Exp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = x.exp()
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        y, = ctx.saved_tensors
        return grad * y


class Scale(torch.autograd.Function):
    """A non-tensor argument kept on ctx."""

    @staticmethod
    def forward(ctx, x, factor):
        ctx.factor = factor
        return x * factor

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.factor, None


class CubeWithIndex(torch.autograd.Function):
    """setup_context style, two outputs, one marked non-differentiable."""

    @staticmethod
    def forward(x):
        return x ** 3, (x > 0).to(x.dtype)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, = inputs
        ctx.save_for_backward(x)
        ctx.mark_non_differentiable(output[1])

    @staticmethod
    def backward(ctx, grad, _):
        x, = ctx.saved_tensors
        return 3 * x * x * grad


class StraightThrough(torch.autograd.Function):
    """A gradient eager autograd would not give: the point of writing a Function."""

    @staticmethod
    def forward(ctx, x, y):
        return torch.round(x * y)

    @staticmethod
    def backward(ctx, grad):
        return (grad if ctx.needs_input_grad[0] else None), (grad * 2 if ctx.needs_input_grad[1] else None)


class ItemInBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        x, = ctx.saved_tensors
        return grad * float(x.sum().item())


def exp_and_scale(x, w):
    return Exp.apply(x.sin() @ w).sum() + Scale.apply(x, 3.0).mean()


def cube(x, w):
    y, positive = CubeWithIndex.apply(x * w.sum())
    return (y * positive).sum()


def straight_through(x, w):
    return StraightThrough.apply(x, w[0]).pow(2).sum()


def under_no_grad(x, w):
    with torch.no_grad():
        y = Exp.apply(x)
    return (y * x @ w).sum()


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        return Exp.apply(self.linear(x)).mean()


PROGRAMS = [exp_and_scale, cube, straight_through, under_no_grad]


def run(program, use_tensorjit: bool, backend, calls: int = 2):
    """Graph count (with the counting backend), and each call's output and gradients."""
    (tensorjit.reset if use_tensorjit else torch._dynamo.reset)()
    counter = CountingBackend()
    compiled = (tensorjit.compile if use_tensorjit else torch.compile)(
        program, backend=counter if backend == "eager" else backend)
    results = []
    for seed in range(calls):
        torch.manual_seed(seed)
        x, w = torch.randn(4, 4, requires_grad=True), torch.randn(4, 4, requires_grad=True)
        out = compiled(x, w)
        out.backward()
        results.append((out.detach(), x.grad, w.grad))
    graphs = counter.graph_count if backend == "eager" or not use_tensorjit else \
        sum(len(entry.graphs) for entry in compiled.entries)
    return graphs, results


def eager(program, calls: int = 2):
    results = []
    for seed in range(calls):
        torch.manual_seed(seed)
        x, w = torch.randn(4, 4, requires_grad=True), torch.randn(4, 4, requires_grad=True)
        out = program(x, w)
        out.backward()
        results.append((out.detach(), x.grad, w.grad))
    return results


@pytest.mark.parametrize("program", PROGRAMS, ids=[p.__name__ for p in PROGRAMS])
def test_function_is_one_graph_as_in_torch(program):
    ours, results = run(program, True, "eager")
    theirs, _ = run(program, False, "eager")
    assert ours == theirs == 1
    torch.testing.assert_close(results, eager(program))


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("program", PROGRAMS, ids=[p.__name__ for p in PROGRAMS])
def test_forward_and_backward_traced_by_the_autograd_stage(program, backend):
    logs.clear()
    graphs, results = run(program, True, backend)
    torch.testing.assert_close(results, eager(program))
    assert graphs == 1
    assert not [line for line in logs.recent("graph_breaks") if "running the graph eagerly" in line]


def test_function_inside_a_module_with_parameters():
    torch.manual_seed(0)
    module = Block()
    reference = Block()
    reference.load_state_dict(module.state_dict())
    compiled = tensorjit.compile(module, backend="aot_eager")
    x = torch.randn(3, 4)
    compiled(x).backward()
    reference(x).backward()
    torch.testing.assert_close(module.linear.weight.grad, reference.linear.weight.grad)


def test_untraceable_backward_breaks_and_runs_eagerly():
    def program(x, w):
        return ItemInBackward.apply(x * w).sum() * 2

    logs.clear()
    _, results = run(program, True, "eager")
    torch.testing.assert_close(results, eager(program))
    reasons = "\n".join(logs.recent("graph_breaks"))
    assert "backward of ItemInBackward cannot be traced" in reasons
