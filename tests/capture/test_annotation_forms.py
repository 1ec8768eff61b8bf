"""Annotations evaluated in the function (calls.py `binary_op`, opcodes.py subscripts): type
unions `torch.Tensor | None` and typing forms subscripted with lists (`Callable[[T], T]`) fold
to the real objects, as they are pure; and torch.Size.numel() is the product of the sizes."""

import typing

import torch

import tensorjit

T = typing.TypeVar("T")


def _check(fn, *args):
    got, want = tensorjit.compile(fn, backend="eager", fullgraph=True)(*args), fn(*args)
    assert type(got) is type(want)
    if isinstance(want, torch.Tensor):
        torch.testing.assert_close(got, want)
    else:
        assert got == want


def test_union_annotations():
    def fn(x):
        def inner(y: torch.Tensor | None, z: None | torch.Tensor | list[int]):
            return y

        return x + 1, inner

    out, inner = tensorjit.compile(fn, backend="eager", fullgraph=True)(torch.ones(3))
    torch.testing.assert_close(out, torch.full((3,), 2.0))
    assert inner.__annotations__ == {"y": torch.Tensor | None, "z": None | torch.Tensor | list[int]}


def test_callable_subscripted_with_a_list():
    def fn(x):
        def apply(c: typing.Callable[[T], T], y: T) -> T:
            return c(y)

        return apply(torch.sum, x)

    _check(fn, torch.randn(3))


def test_size_numel():
    _check(lambda x: x.size().numel() + torch.Size([10, 8]).numel(), torch.rand(10, 1, 8, 1))
