"""functools.wraps on functions made in the function (values/functions.py NestedFunctionValue):
their `__doc__` (what a function of that code gets), `__annotations__` (an empty dict when
none were given) and, on 3.12+, `__type_params__` are read as update_wrapper reads them."""

import functools

import torch

import tensorjit


def test_wraps_of_a_nested_function():
    def foo(x, y):
        def mul(x, y):
            "multiplies"
            return x * y

        @functools.wraps(mul)
        def wrapped(x, y):
            return mul(x, y)

        return wrapped(x, y), wrapped.__doc__, wrapped.__name__, wrapped.__wrapped__ is mul, wrapped.__annotations__

    x = torch.randn(2)
    got, want = tensorjit.compile(foo, backend="eager", fullgraph=True)(x, x), foo(x, x)
    torch.testing.assert_close(got[0], want[0])
    assert got[1:] == want[1:]
