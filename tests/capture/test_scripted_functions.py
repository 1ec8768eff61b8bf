"""Calling objects capture has no handler for (calls.py `call_object`): torch.jit.script and
torch.jit.trace results are traced through the Python function they keep for compilers
(`_torchdynamo_inline`), whatever Python `__call__` wraps them; an unhashable callable object
is called through its `__call__` (the handler lookup hashed it: an internal error)."""

import torch

import tensorjit


def affine(a, b):
    return a + b * 0.67


class Scale:
    def __init__(self, k):
        self.k = k

    def __eq__(self, other):  # no __hash__: unhashable
        return isinstance(other, Scale) and other.k == self.k

    def __call__(self, x):
        return x * self.k


def _check(fn, *args):
    torch.testing.assert_close(tensorjit.compile(fn, backend="eager", fullgraph=True)(*args), fn(*args))


def test_a_scripted_function_is_traced_through_its_python_function():
    scripted = torch.jit.script(affine)
    _check(lambda a, b: scripted(a, b) + 1, torch.randn(10), torch.randn(10))


def test_a_traced_function_is_traced_through_its_python_function():
    traced = torch.jit.trace(affine, [torch.zeros(10), torch.zeros(10)])
    _check(lambda a, b: traced(a, b) + 1, torch.randn(10), torch.randn(10))


def test_a_python_call_wrapping_script_function_call(monkeypatch):
    original = torch._C.ScriptFunction.__call__

    def wrapped(*args, **kwargs):  # as torch.testing._internal.common_utils installs it
        return original(*args, **kwargs)

    monkeypatch.setattr(torch._C.ScriptFunction, "__call__", wrapped)
    scripted = torch.jit.script(affine)
    _check(lambda a, b: scripted(a, b) + 1, torch.randn(10), torch.randn(10))


def test_an_unhashable_callable_object():
    scale = Scale(3)
    _check(lambda x: scale(x) + 1, torch.ones(2))
