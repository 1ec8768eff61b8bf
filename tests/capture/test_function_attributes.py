"""Attributes written on a function made in the compiled function (functools.wraps, markers)."""

import functools

import torch

import tensorjit


def cool_name(x):
    "doc of cool_name"
    return x.sin()


cool_name.extra = 5


def test_functools_wraps_on_a_closure_made_in_the_function():
    @tensorjit.compile(backend="eager", fullgraph=True)
    def fn(x):
        y = x.cos()

        @functools.wraps(cool_name)
        def uncool_name():
            return cool_name(y)

        uncool_name.marked = True
        return uncool_name, uncool_name.__name__, uncool_name.extra

    wrapper, name, extra = fn(torch.ones([]))
    assert (wrapper.__name__, wrapper.__qualname__, wrapper.__doc__) == ("cool_name", "cool_name", "doc of cool_name")
    assert wrapper.__wrapped__ is cool_name and wrapper.__module__ == cool_name.__module__
    assert (wrapper.extra, wrapper.marked, name, extra) == (5, True, "cool_name", 5)
    torch.testing.assert_close(wrapper(), torch.ones([]).cos().sin())


def test_a_decorator_made_and_called_in_the_function():
    def maybe(f):
        @functools.wraps(f)
        def inner(x, *args, **kwargs):
            return x if x is None else f(x, *args, **kwargs)
        return inner

    fn = tensorjit.compile(lambda x, norm: maybe(norm)(x.sin()), backend="eager", fullgraph=True)
    torch.testing.assert_close(fn(torch.ones([]), torch.cos), torch.ones([]).sin().cos())


def test_reading_a_missing_attribute_of_a_nested_function_raises_attribute_error():
    def fn(x):
        def inner():
            return x
        try:
            return inner.missing
        except AttributeError:
            return x + 1

    torch.testing.assert_close(tensorjit.compile(fn, backend="eager", fullgraph=True)(torch.ones(1)), torch.ones(1) + 1)


def test_annotations_of_a_function_made_in_the_function_with_typing_forms():
    import typing

    class Variable:
        pass

    def fn(x):
        x = x / 3.0

        def inner(y: typing.List[Variable], z: int = 0) -> typing.Optional[int]:
            return x + 1

        return inner, typing.Tuple[int, str]

    inner, alias = tensorjit.compile(fn, backend="eager", fullgraph=True)(torch.ones(2))
    assert inner.__annotations__ == {"y": typing.List[Variable], "z": int, "return": typing.Optional[int]}
    assert alias == typing.Tuple[int, str]
    torch.testing.assert_close(inner([]), torch.ones(2) / 3.0 + 1)
