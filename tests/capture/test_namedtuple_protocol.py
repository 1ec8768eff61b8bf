"""A namedtuple whose class overrides the sequence protocol (builder.py `_is_namedtuple`) is an
object to capture, its fields read as attributes: read as a tuple, its fields were graph inputs
taken through `t[i]`, which ran the class's `__getitem__` (a silent wrong answer, or a crash)."""

import collections
import typing

import torch

import tensorjit


class Doubled(collections.namedtuple("Doubled", ["a", "b"])):
    def __getitem__(self, index):
        return tuple.__getitem__(self, index) * 2


class Sliced(typing.NamedTuple):
    a: torch.Tensor
    b: torch.Tensor

    def __getitem__(self, index):
        return Sliced(self.a[index], self.b[index])


def test_fields_are_read_as_attributes_not_through_getitem():
    def fn(t):
        return t.a + 1, t[1]  # t[1]: tuple.__getitem__ of an object from outside, a break

    p = Doubled(torch.ones(2), torch.ones(2))
    for got, want in zip(tensorjit.compile(fn, backend="eager")(p), fn(p)):
        torch.testing.assert_close(got, want)


def test_a_getitem_returning_the_class():
    def fn(t):
        return t.a + 1, t[0]

    t = Sliced(torch.randn(2), torch.randn(2))
    compiled = tensorjit.compile(fn, backend="eager", fullgraph=True)
    (got, got_item), (want, want_item) = compiled(t), fn(t)
    torch.testing.assert_close(got, want)
    assert type(got_item) is Sliced
    torch.testing.assert_close(tuple(got_item), tuple(want_item))


class Point(typing.NamedTuple):
    a: torch.Tensor


class TaggedPoint(Point):  # a subclass without __slots__: its instances have a __dict__
    pass


def test_instance_attributes_of_a_namedtuple_subclass_are_read():
    def fn(t):
        return t.a + getattr(t, "c", 0)

    t = TaggedPoint(torch.ones(2))
    t.c = 5
    compiled = tensorjit.compile(fn, backend="eager")
    torch.testing.assert_close(compiled(t), fn(t))  # getattr's default answered: a silent wrong answer
    t.c = 7
    torch.testing.assert_close(compiled(t), fn(t))


def test_an_attribute_written_on_one_from_outside_lands_and_is_read_back():
    def fn(t):
        t.d = torch.tensor(3.0)
        return t, t.d + 1

    t = TaggedPoint(torch.ones(2))
    out, read = tensorjit.compile(fn, backend="eager", fullgraph=True)(t)
    assert out is t
    torch.testing.assert_close(t.d, torch.tensor(3.0))
    torch.testing.assert_close(read, torch.tensor(4.0))
