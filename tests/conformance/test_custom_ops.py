"""torch.library.custom_op in compiled code, against torch.compile in one process.

Custom ops stay calls in the graph (one graph, as torch.compile); their fake implementation
gives shapes; register_autograd gives gradients; ops that mutate their arguments
(mutates_args) are functionalized, so inputs they write are written back, through the
eager, aot_eager and inductor backends.
"""

from __future__ import annotations

import pytest
import torch
import torch._dynamo

import tensorjit
from tensorjit import logs

from .harness import REFERENCE, CountingBackend

pytestmark = pytest.mark.skipif(REFERENCE, reason="compares tensorjit with torch.compile in one run")


@torch.library.custom_op("tensorjit_test::scaled_sin", mutates_args=())
def scaled_sin(x: torch.Tensor, scale: float) -> torch.Tensor:
    return x.sin() * scale


@scaled_sin.register_fake
def _(x, scale):
    return torch.empty_like(x)


def _scaled_sin_backward(ctx, grad):
    x, = ctx.saved_tensors
    return grad * x.cos() * ctx.scale, None


def _scaled_sin_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])
    ctx.scale = inputs[1]


scaled_sin.register_autograd(_scaled_sin_backward, setup_context=_scaled_sin_setup)


@torch.library.custom_op("tensorjit_test::add_into", mutates_args=("out",))
def add_into(x: torch.Tensor, out: torch.Tensor) -> None:
    out.add_(x)


@add_into.register_fake
def _(x, out):
    return None


@torch.library.custom_op("tensorjit_test::split_and_count", mutates_args=("counter",))
def split_and_count(x: torch.Tensor, counter: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    counter.add_(1)
    return x.clamp(min=0), x.clamp(max=0)


@split_and_count.register_fake
def _(x, counter):
    return torch.empty_like(x), torch.empty_like(x)


def differentiable(x, buffer):
    return scaled_sin(x * 2, 0.5).sum() + x.mean()


def writes_a_new_tensor(x, buffer):
    scratch = torch.zeros_like(x)
    add_into(x.detach() * 3, scratch)
    return (scratch + x).sum()


def writes_an_input(x, buffer):
    add_into(x.detach(), buffer)
    return (buffer * x).sum()


def writes_a_view_of_an_input(x, buffer):
    add_into(x.detach()[1:], buffer[1:])
    return (buffer * 2).sum() + x.sum()


def two_results_and_a_write(x, buffer):
    positive, negative = split_and_count(x.detach(), buffer)  # no autograd formula: not differentiated
    return (positive * 2 - negative).sum() + buffer.sum() + x.sum()


def through_the_packet(x, buffer):
    torch.ops.tensorjit_test.add_into(x.detach(), buffer)  # an unused None result: the call must stay
    return x.sum() * 2


PROGRAMS = [differentiable, writes_a_new_tensor, writes_an_input, writes_a_view_of_an_input,
            two_results_and_a_write, through_the_packet]


def call(program, compiled, seed: int):
    torch.manual_seed(seed)
    x, buffer = torch.randn(5, requires_grad=True), torch.ones(5)
    out = compiled(x, buffer)
    out.backward()
    return out.detach(), x.grad, buffer


def run(program, use_tensorjit: bool, backend):
    (tensorjit.reset if use_tensorjit else torch._dynamo.reset)()
    counter = CountingBackend()
    compiled = (tensorjit.compile if use_tensorjit else torch.compile)(
        program, backend=counter if backend == "eager" else backend)
    return counter, [call(program, compiled, seed) for seed in range(2)]


@pytest.mark.parametrize("program", PROGRAMS, ids=[p.__name__ for p in PROGRAMS])
def test_custom_ops_stay_in_one_graph_as_in_torch(program):
    ours, results = run(program, True, "eager")
    theirs, _ = run(program, False, "eager")
    assert ours.graph_count == theirs.graph_count == 1
    torch.testing.assert_close(results, [call(program, program, seed) for seed in range(2)])


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("program", PROGRAMS, ids=[p.__name__ for p in PROGRAMS])
def test_custom_ops_through_autograd_and_code_generation(program, backend):
    logs.clear()
    _, results = run(program, True, backend)
    torch.testing.assert_close(results, [call(program, program, seed) for seed in range(2)])
    assert not [line for line in logs.recent("graph_breaks") if "eagerly" in line]
