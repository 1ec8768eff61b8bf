"""A graph given a tensor and a view of it, both requiring grad (autograd/joint.py `_own_leaf`).

The runtime's autograd.Function takes them as two inputs and returns a gradient for each;
autograd then adds the view's to the base's through the view's own history. Traced with the
view still a view of the base input, the base's gradient counted the view's uses twice.
"""

import pytest
import torch

import tensorjit


def both(y, v):
    return (y * 3).sum() + (v * v).sum()


def _grads(compiled, make):
    x = torch.arange(4.0, requires_grad=True)
    y, v = make(x)
    compiled(y, v).backward()
    return x.grad


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("make", [
    lambda x: (x * 2, None),             # a tensor made by autograd, and its view
    lambda x: (x, None),                 # a leaf and its view
], ids=["non-leaf", "leaf"])
def test_a_view_of_another_input_gets_its_own_gradient(backend, make):
    def pair(x):
        y, _ = make(x)
        return y, y.view(2, 2)

    compiled = tensorjit.compile(both, backend=backend)
    torch.testing.assert_close(_grads(compiled, pair), _grads(both, pair))


def test_a_hook_on_the_view_sees_the_views_gradient_only():
    def pair(x):
        y = x * 2
        v = y.view(2, 2)
        v.register_hook(lambda g: g * 10)
        return y, v

    compiled = tensorjit.compile(both, backend="aot_eager")
    torch.testing.assert_close(_grads(compiled, pair), _grads(both, pair))
