"""while_loop, scan and map in compiled code, against torch.compile in one process.

torch.compile keeps each as one operator node (while_loop, scan, map_impl) in one graph; tensorjit
too, with eager's results through the eager, aot_eager and inductor backends. A function that
closes over a tensor of the frame is a logged break with eager's results.
"""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
from torch._higher_order_ops.map import map as loop_map
from torch._higher_order_ops.scan import scan
from torch._higher_order_ops.while_loop import while_loop

import tensorjit
from tensorjit import logs

from .harness import REFERENCE, CountingBackend

pytestmark = pytest.mark.skipif(REFERENCE, reason="compares tensorjit with torch.compile in one run")


def doubling_loop(x):
    def condition(i, v):
        return i < 5

    def body(i, v):
        return i + 1, v * 2 + 1
    return while_loop(condition, body, (torch.tensor(0), x))


def data_dependent_loop(x):
    def condition(v, total):
        return total.sum() < 100

    def body(v, total):
        return v.clone(), total + v.abs()
    return while_loop(condition, body, (x, torch.zeros_like(x)))


def cumulative(x):
    def combine(carry, row):
        carry = carry + row
        return carry, carry.sin()
    return scan(combine, torch.zeros(x.shape[1]), x)


def structured_scan(x):
    def combine(carry, pair):
        total, count = carry
        a, b = pair
        return (total + a * b, count + 1), [a - total, b.cos()]
    return scan(combine, (torch.zeros(3), torch.zeros(())), (x, x.flip(0)), dim=0, reverse=True)


def scan_over_dim_one(x):
    return scan(lambda carry, column: (carry * column, carry + column), torch.ones(x.shape[0]), x, dim=1)


def mapped(x):
    return loop_map(lambda row, scale: row.sin() * scale + 1, x, torch.tensor(3.0))


def mapped_pairs(x):
    return loop_map(lambda pair: (pair[0] + pair[1], pair[0] * pair[1]), (x, x.cos()))


PROGRAMS = [doubling_loop, data_dependent_loop, cumulative, structured_scan, scan_over_dim_one, mapped,
            mapped_pairs]
OPERATORS = {"while_loop", "scan", "map_impl"}


def operators(counter: CountingBackend) -> set[str]:
    return {getattr(node.target, "__name__", str(node.target)) for graph in counter.graphs
            for node in graph.graph.nodes if node.op == "call_function"} & OPERATORS


@pytest.mark.parametrize("program", PROGRAMS, ids=[p.__name__ for p in PROGRAMS])
def test_one_operator_node_as_in_torch(program):
    x = torch.randn(4, 3)
    torch._dynamo.reset()
    theirs = CountingBackend()
    expected = program(x)
    torch.testing.assert_close(torch.compile(program, backend=theirs)(x), expected)
    tensorjit.reset()
    ours = CountingBackend()
    torch.testing.assert_close(tensorjit.compile(program, backend=ours)(x), expected)
    assert ours.graph_count == theirs.graph_count == 1
    assert operators(ours) == operators(theirs) != set()


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("program", PROGRAMS, ids=[p.__name__ for p in PROGRAMS])
def test_through_autograd_and_code_generation(program, backend):
    tensorjit.reset()
    logs.clear()
    x = torch.randn(4, 3)
    torch.testing.assert_close(tensorjit.compile(program, backend=backend)(x), program(x))
    assert not [line for line in logs.recent("graph_breaks") if "running the graph eagerly" in line]


@pytest.mark.parametrize("program", [cumulative, structured_scan, mapped], ids=["scan", "structured_scan", "map"])
def test_gradients_through_autograd(program):
    def gradient(fn):
        x = torch.randn(4, 3, generator=torch.Generator().manual_seed(0)).requires_grad_()
        out = fn(x)
        total = sum(leaf.sum() for leaf in torch.utils._pytree.tree_leaves(out))
        return torch.autograd.grad(total, x)
    tensorjit.reset()
    torch.testing.assert_close(gradient(tensorjit.compile(program, backend="aot_eager")), gradient(program))


def test_function_closing_over_a_frame_tensor_breaks_and_runs_eagerly():
    def program(x):
        offset = x.mean()
        return loop_map(lambda row: row + offset, x)
    tensorjit.reset()
    logs.clear()
    x = torch.randn(4, 3)
    torch.testing.assert_close(tensorjit.compile(program, backend="eager")(x), program(x))
    assert any("loop operator" in line for line in logs.recent("graph_breaks"))


def test_getattr_with_a_default_on_a_builtin_type():
    """`getattr(tuple, "_fields", None)` (pytree's namedtuple check, which while_loop, scan, map and
    flex_attention reach) is the default, not an internal error."""
    def program(x):
        return x + (1 if getattr(tuple, "_fields", None) is None else 2) + hasattr(list, "_fields")
    tensorjit.reset()
    counter = CountingBackend()
    torch.testing.assert_close(tensorjit.compile(program, backend=counter)(torch.ones(2)), program(torch.ones(2)))
    assert counter.graph_count == 1
