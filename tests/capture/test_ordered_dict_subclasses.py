"""Instances of Python subclasses of collections.OrderedDict made in the function
(values/container_subclasses.py MADE_BY_KIND, polyfills/collections.py OrderedDictValue with
`cls`): OrderedDict's own methods traced, a Python `__new__`/`__init__` inlined, and an instance
leaving the function rebuilt through OrderedDict's own C bookkeeping, so it stays a working
OrderedDict (move_to_end, popitem(last=False), order-sensitive ==)."""

from collections import OrderedDict

import torch

import tensorjit


class Plain(OrderedDict):
    pass


class WithInit(OrderedDict):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.tag = "made"


class WithNew(OrderedDict):
    def __new__(cls, *args, **kwargs):
        return super().__new__(cls, *args, **kwargs)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)


def _fill(kind, x):
    d = kind(first=1)
    d["key"] = x
    d["last"] = 2
    d.move_to_end("first")
    assert "key" in d
    return d["key"] + 1, d


def test_made_in_the_function_as_eager_makes_them():
    for kind in (Plain, WithInit, WithNew):
        def fn(x):
            return _fill(kind, x)

        x = torch.rand(4)
        expected, expected_dict = fn(x)
        got, got_dict = tensorjit.compile(fn, backend="eager", fullgraph=True)(x)
        torch.testing.assert_close(got, expected)
        assert type(got_dict) is kind and list(got_dict) == list(expected_dict) == ["key", "last", "first"]
        assert getattr(got_dict, "tag", None) == getattr(expected_dict, "tag", None)


def test_the_rebuilt_instance_keeps_ordered_dict_behaviour():
    def fn(x):
        return _fill(WithNew, x)

    _, d = tensorjit.compile(fn, backend="eager", fullgraph=True)(torch.rand(4))
    d.move_to_end("key")
    assert list(d) == ["last", "first", "key"]
    assert d.popitem(last=False)[0] == "last"
    assert d != WithNew([("key", d["key"]), ("first", 1)]) and d == WithNew([("first", 1), ("key", d["key"])])


def test_order_sensitive_methods_in_the_function():
    def fn(x):
        d = Plain(a=x, b=2, c=3)
        d.move_to_end("a", last=False)
        k, v = d.popitem(last=False)
        d.move_to_end("b")
        return v * 2, k, list(d)

    x = torch.rand(2)
    got = tensorjit.compile(fn, backend="eager", fullgraph=True)(x)
    expected = fn(x)
    torch.testing.assert_close(got[0], expected[0])
    assert got[1:] == expected[1:]
