"""Python attributes in a tensor's own `__dict__` (`x.tag = ...`): read from the run-time
tensor through a guarded source, written in the function and replayed after the graph."""

import pytest
import torch

import tensorjit
from conformance.harness import CountingBackend


def test_an_attribute_of_an_input_tensor_is_read_and_guarded():
    def fn(x):
        return x * x.scale

    backend = CountingBackend()
    opt = tensorjit.compile(fn, backend=backend, fullgraph=True)
    x = torch.randn(4)
    x.scale = 4
    torch.testing.assert_close(opt(x), x * 4)
    x.scale = 5  # the constant is guarded: a new value recompiles
    torch.testing.assert_close(opt(x), x * 5)
    x.scale = torch.full((4,), 2.0)  # a tensor attribute becomes a graph input
    torch.testing.assert_close(opt(x), x * 2)
    assert backend.graph_count == 3


def test_a_missing_attribute_is_guarded_missing():
    def fn(x):
        return x + 1 if hasattr(x, "tag") else x - 1

    opt = tensorjit.compile(fn, backend="eager", fullgraph=True)
    x = torch.zeros(2)
    torch.testing.assert_close(opt(x), x - 1)
    x.tag = True
    torch.testing.assert_close(opt(x), x + 1)


def test_attributes_written_in_the_function_land_on_the_tensors():
    def fn(x, y):
        x.partner = y
        z = x * 2
        z.note = 3
        return z, z * x.partner + z.note

    opt = tensorjit.compile(fn, backend="eager", fullgraph=True)
    x, y = torch.randn(3), torch.randn(3)
    z, out = opt(x, y)
    torch.testing.assert_close(out, x * 2 * y + 3)
    assert x.partner is y and z.note == 3


def test_writes_on_tensors_in_a_list_across_a_graph_break():
    def fn(xs, y):
        for t in xs:
            t.y = y * 2
        print("break")
        total = 1
        for t in xs:
            total = t.y * total
        return total

    backend = CountingBackend()
    xs = [torch.randn(2) for _ in range(3)]
    y = torch.randn(2)
    out = tensorjit.compile(fn, backend=backend)(xs, y)
    torch.testing.assert_close(out, (y * 2) ** 3)
    assert all(torch.equal(t.y, y * 2) for t in xs)
    assert backend.graph_count == 2


def test_a_class_attribute_name_still_breaks():
    def fn(x, y):
        x.real = y  # `.data` is modelled (test_tensor_data_swap.py); this one is not
        return x + 1

    with pytest.raises(tensorjit.GraphBreakError):
        tensorjit.compile(fn, backend="eager", fullgraph=True)(torch.ones(2), torch.zeros(2))


def test_grad_assigned_in_the_function_lands_and_is_read_back():
    def fn(x, p):
        y = x + 10
        y.grad = x
        p.grad = x * 2
        return y, p.grad + 1

    p = torch.nn.Parameter(torch.zeros(5))
    x = torch.ones(5)
    y, read = tensorjit.compile(fn, backend="eager", fullgraph=True)(x, p)
    assert y.grad is x
    torch.testing.assert_close(p.grad, x * 2)
    torch.testing.assert_close(read, x * 2 + 1)


def test_a_grad_the_setter_refuses_breaks():
    def fn(x):
        y = x + 1
        y.grad = torch.ones(3)  # another shape: eager raises
        return y

    with pytest.raises(tensorjit.GraphBreakError):
        tensorjit.compile(fn, backend="eager", fullgraph=True)(torch.ones(5))


def test_grad_of_a_leaf_made_in_the_function_is_none():
    def fn(a):
        made = torch.ones(2, 2)
        leaf = torch.zeros(2, requires_grad=True)
        return a + made, made.grad, leaf.grad

    out, made_grad, leaf_grad = tensorjit.compile(fn, backend="eager", fullgraph=True)(torch.ones(2, 2))
    assert made_grad is None and leaf_grad is None
    torch.testing.assert_close(out, torch.full((2, 2), 2.0))
