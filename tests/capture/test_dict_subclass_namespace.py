"""The instance `__dict__` of a dict or OrderedDict subclass instance from outside
(values/containers.py DictValue.getattr): read and written as the object's namespace, writes
replayed after the graph and read back by later attribute reads; its properties are inlined."""

import collections

import torch

import tensorjit


class Tracked(collections.OrderedDict):
    pass


class Lazy(dict):
    pass


class WithProperty(collections.OrderedDict):
    def __init__(self):
        super().__init__()
        self.__dict__["_value"] = 0

    @property
    def value(self):
        return self.__dict__.get("_value", 0)

    @value.setter
    def value(self, v):
        self.__dict__["_value"] = v


def _compiled(fn):
    return tensorjit.compile(fn, backend="eager", fullgraph=True)


def test_namespace_writes_land_and_are_read_back():
    def fn(d):
        if "tracker" not in d.__dict__:
            d.__dict__["tracker"] = []
        d.__dict__["tracker"].append(1)
        d.__dict__["a"] = 1
        return len(d.__dict__["tracker"]), d.a + 1

    d = Tracked()
    assert _compiled(fn)(d) == (1, 2)
    assert d.__dict__ == {"tracker": [1], "a": 1}


def test_hasattr_then_a_namespace_write():
    def fn(m):
        if not hasattr(m, "_cache"):
            m.__dict__["_cache"] = {}
        m.__dict__["_cache"]["key"] = "value"
        return m._cache["key"]

    m = Lazy()
    assert _compiled(fn)(m) == "value"
    assert m._cache == {"key": "value"}


def test_a_property_of_an_ordered_dict_subclass():
    def fn(m, x):
        m.value = 100
        return x + m.value

    m = WithProperty()
    torch.testing.assert_close(_compiled(fn)(m, torch.zeros(1)), torch.full((1,), 100.0))
    assert m.__dict__["_value"] == 100
