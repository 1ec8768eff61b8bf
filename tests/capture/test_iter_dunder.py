"""`obj.__iter__()` of a constant range, string or tuple (values/builtins.py `fold`) is iter(obj)."""

import torch

import tensorjit


def test_range_iter_dunder():
    def fn(x):
        it = range(3).__iter__()
        return x + next(it) + next(it)

    x = torch.zeros(2)
    torch.testing.assert_close(tensorjit.compile(fn, backend="eager", fullgraph=True)(x), fn(x))
