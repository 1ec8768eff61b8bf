"""`x.data = y` (attributes.py `_swap_data`): in the graph `x` becomes `y.detach()`; on a tensor
from outside the swap is replayed after the graph, so the caller's `x` holds `y`'s storage."""

import pytest
import torch

import tensorjit


def swap_and_write(x, y):
    x.data = y
    x.add_(1)
    return x, x * 2


def swap_made(x, y):
    z = x * 1
    z.data = y
    return z + 1


def _run(fn, *args):
    return fn(*[a.clone() for a in args]), args


def test_an_input_takes_the_other_tensors_storage():
    compiled = tensorjit.compile(swap_and_write, backend="eager", fullgraph=True)
    x, y = torch.ones(5), torch.zeros(3)
    out, doubled = compiled(x, y)
    assert out is x
    assert x.untyped_storage().data_ptr() == y.untyped_storage().data_ptr()
    torch.testing.assert_close(y, torch.ones(3))
    torch.testing.assert_close(doubled, torch.full((3,), 2.0))


@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_a_made_tensor_reads_the_new_data(backend):
    compiled = tensorjit.compile(swap_made, backend=backend, fullgraph=True)
    torch.testing.assert_close(compiled(torch.ones(2), torch.zeros(2)), torch.ones(2))


def test_under_functionalize():
    def fn(x, y):
        x.data = y
        return x + 1

    opt_fn = torch.func.functionalize(tensorjit.compile(fn, backend="eager", fullgraph=True))
    x, y = torch.ones(5), torch.zeros(5)
    torch.testing.assert_close(opt_fn(x, y), torch.ones(5))
    torch.testing.assert_close(x, torch.zeros(5))


def test_a_tensor_that_requires_grad_breaks_and_runs():
    def fn(x, y):
        x.data = y
        return x * 2

    x = torch.ones(3, requires_grad=True)
    out = tensorjit.compile(fn, backend="eager")(x, torch.zeros(3))
    torch.testing.assert_close(out, torch.zeros(3))
    assert out.requires_grad and x.requires_grad
