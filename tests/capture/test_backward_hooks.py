"""Hooks on tensors made in the function (values/hooks.py): traced into the graph's backward,
run on the gradient from all the tensor's uses, in registration order; a hook with side
effects, or on a tensor sharing its storage, breaks the graph and runs eagerly."""

import pytest
import torch

import tensorjit
BACKENDS = ["eager", "aot_eager", "inductor"]


def _compare(fn, backend, fullgraph=True):
    """fullgraph=True: one graph, no break."""
    compiled = tensorjit.compile(fn, backend=backend, fullgraph=fullgraph)
    x = torch.randn(4)
    xc, xe = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    out_c, out_e = compiled(xc), fn(xe)
    out_c.sum().backward()
    out_e.sum().backward()
    torch.testing.assert_close(out_c, out_e)
    torch.testing.assert_close(xc.grad, xe.grad)


def uses_before_and_after(x):
    y = x * 2
    z = y + 1
    y.register_hook(lambda g: g * 2)
    w = y * 3
    return z + w * y


def returns_none(x):
    y = x * 2
    y.register_hook(lambda g: None)
    return y * y


def two_hooks_in_order(x):
    y = x * 2
    y.register_hook(lambda g: g * 2)
    y.register_hook(lambda g: g + 1)
    return y * y


def removed(x):
    y = x * 2
    handle = y.register_hook(lambda g: g * 5)
    y.register_hook(lambda g: g + 1)
    handle.remove()
    return y * y


def reads_a_tensor(x):
    w = x.sin()
    y = x * 2
    y.register_hook(lambda g: g * w)
    return y * 3


def written_after(x):
    y = x * 2
    v = y[:2]
    y.register_hook(lambda g: g * 2)
    v.mul_(3)
    return y * y


def returned(x):
    y = x * 2
    y.register_hook(lambda g: g * 10)
    return y


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", [uses_before_and_after, returns_none, two_hooks_in_order, removed, reads_a_tensor,
                                written_after, returned], ids=lambda f: f.__name__)
def test_a_hook_on_a_made_tensor_runs_in_the_backward(fn, backend):
    _compare(fn, backend)


def test_a_hook_with_side_effects_breaks_and_runs():
    calls = []

    def fn(x):
        y = x * 2
        y.register_hook(lambda g: calls.append(g.clone()))
        return y * y

    _compare(fn, "aot_eager", fullgraph=False)
    assert len(calls) == 2  # compiled, then eager
    torch.testing.assert_close(calls[0], calls[1])


def test_a_hook_on_a_view_breaks_and_runs():
    def fn(x):
        y = x * 2
        v = y.view(2, 2)
        v.register_hook(lambda g: g * 2)
        return (y * 3) + v.reshape(4)

    _compare(fn, "aot_eager", fullgraph=False)
    with pytest.raises(tensorjit.GraphBreakError):
        tensorjit.compile(fn, backend="eager", fullgraph=True)(torch.randn(4, requires_grad=True))


def test_a_hook_after_a_break_still_runs():
    def fn(x):
        y = x * 2
        y.register_hook(lambda g: g * 2)
        print("", end="")
        return y * 3

    _compare(fn, "aot_eager", fullgraph=False)
