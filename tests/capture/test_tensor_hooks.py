"""Tensor hooks registered on tensors from outside the function (values/hooks.py; made in it: test_backward_hooks.py): replayed
after the graph, with a handle whose remove() in the function cancels the registration."""

import pytest
import torch
from torch.utils.hooks import RemovableHandle

import tensorjit
from conformance.harness import CountingBackend


def test_a_hook_on_an_input_is_registered_after_one_graph():
    def fn(x, y):
        x.register_hook(lambda grad: grad * 2)
        return x, y * y

    backend = CountingBackend()
    v = torch.zeros(3, requires_grad=True)
    out, _ = tensorjit.compile(fn, backend=backend, fullgraph=True)(v, torch.randn(2))
    out.backward(torch.tensor([1.0, 2.0, 3.0]))
    torch.testing.assert_close(v.grad, torch.tensor([2.0, 4.0, 6.0]))
    assert backend.graph_count == 1


def test_a_removed_handle_cancels_its_hook_and_is_returned():
    def fn(x, z):
        handle = x.register_hook(lambda grad: grad * 2)
        z = z * z
        handle.remove()
        handle.remove()
        kept = x.register_hook(lambda grad: grad * 3)
        return x, z, handle, kept

    v = torch.zeros(3, requires_grad=True)
    out, _, handle, kept = tensorjit.compile(fn, backend="eager", fullgraph=True)(v, torch.randn(2))
    assert isinstance(handle, RemovableHandle) and isinstance(kept, RemovableHandle)
    out.backward(torch.ones(3))
    torch.testing.assert_close(v.grad, torch.full((3,), 3.0))
    kept.remove()  # the real handle: removing it outside takes the hook away
    v.grad = None
    v.backward(torch.ones(3))
    torch.testing.assert_close(v.grad, torch.ones(3))


def test_a_handle_stored_on_a_module():
    def fn(x, mod):
        mod.handle = x.register_hook(lambda grad: grad * 2)
        return x * 1

    mod = torch.nn.Module()
    mod.handle = None
    v = torch.zeros(3, requires_grad=True)
    out = tensorjit.compile(fn, backend="eager", fullgraph=True)(v, mod)
    assert isinstance(mod.handle, RemovableHandle)
    out.backward(torch.ones(3))
    torch.testing.assert_close(v.grad, torch.full((3,), 2.0))


def test_a_hook_on_a_tensor_made_in_the_function_runs_in_the_graphs_backward():
    def fn(x):
        y = x * 2
        y.register_hook(lambda grad: grad + 1)
        return y.sum()

    x = torch.ones(2, requires_grad=True)
    tensorjit.compile(fn, backend="eager", fullgraph=True)(x).backward()  # test_backward_hooks.py: more
    torch.testing.assert_close(x.grad, torch.full((2,), 4.0))
