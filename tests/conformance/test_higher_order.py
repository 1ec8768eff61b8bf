"""torch.cond and torch.utils.checkpoint in compiled code, against torch.compile in one process.

Both are one graph under torch.compile; under tensorjit too, with eager's outputs and
gradients through the eager, aot_eager and inductor backends. A cond branch capture cannot
hand over (it closes over a tensor of the frame) is a logged break with eager's results.
"""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
from torch.utils.checkpoint import checkpoint

import tensorjit
from tensorjit import logs

from .harness import REFERENCE, CountingBackend

pytestmark = pytest.mark.skipif(REFERENCE, reason="compares tensorjit with torch.compile in one run")

torch.manual_seed(0)
linear = torch.nn.Linear(4, 4)


def data_dependent_cond(x):
    return torch.cond(x.sum() > 0, lambda t: t.sin() * 2, lambda t: t.cos() - 1, (x,)) + 1


def two_operands(x):
    def positive(a, b):
        return a * b, a + b

    def negative(a, b):
        return a - b, a / (b.abs() + 1)

    first, second = torch.cond(x.mean() > 0, positive, negative, (x, x.t() * 2))
    return first.sum() + second.sum()


def constant_cond(x):
    return torch.cond(x.shape[0] > 2, lambda t: t * 3, lambda t: t * 4, (x,))


def checkpointed(x):
    return checkpoint(lambda t: linear(t).relu() * 2, x, use_reentrant=False).sum()


PROGRAMS = [data_dependent_cond, two_operands, constant_cond, checkpointed]


def run(program, use_tensorjit: bool, backend: str):
    (tensorjit.reset if use_tensorjit else torch._dynamo.reset)()
    counter = CountingBackend()
    compiled = (tensorjit.compile if use_tensorjit else torch.compile)(
        program, backend=counter if backend == "eager" else backend)
    return counter, [call(compiled, sign) for sign in (1.0, -1.0)]


def call(fn, sign: float):
    torch.manual_seed(1)
    x = (torch.rand(4, 4) * sign).requires_grad_()
    linear.zero_grad()
    out = fn(x)
    out.sum().backward()
    return out.detach(), x.grad, linear.weight.grad


@pytest.mark.parametrize("program", PROGRAMS, ids=[p.__name__ for p in PROGRAMS])
def test_one_graph_as_in_torch(program):
    ours, results = run(program, True, "eager")
    theirs, _ = run(program, False, "eager")
    assert ours.graph_count == theirs.graph_count == 1
    torch.testing.assert_close(results, [call(program, sign) for sign in (1.0, -1.0)])


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("program", PROGRAMS, ids=[p.__name__ for p in PROGRAMS])
def test_through_autograd_and_code_generation(program, backend):
    logs.clear()
    _, results = run(program, True, backend)
    torch.testing.assert_close(results, [call(program, sign) for sign in (1.0, -1.0)])
    assert not [line for line in logs.recent("graph_breaks") if "eagerly" in line]


def test_branch_closing_over_a_tensor_breaks_and_runs_eagerly():
    def program(x):
        scale = x.mean()
        return torch.cond(x.sum() > 0, lambda t: t * scale, lambda t: t - scale, (x,))

    logs.clear()
    _, results = run(program, True, "eager")
    torch.testing.assert_close(results, [call(program, sign) for sign in (1.0, -1.0)])
    assert "closes over a value that is not a constant" in "\n".join(logs.recent("graph_breaks"))
