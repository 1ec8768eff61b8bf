"""Instances of user subclasses of dict, set, frozenset and tuple made inside the function stay in the graph."""

import collections

import torch

import tensorjit


class AddsOne(set):
    def add(self, item):
        return super().add(item + 1)

    def contains(self, item):
        return True


class Letters(frozenset):
    pass


class Plain(dict):
    pass


class WithMethod(dict):
    def add_1(self, x):
        return x + 1

    @property
    def size(self):
        return len(self)


class Pair(tuple):
    pass


class Scaled(dict):
    def __init__(self, factor, **items):
        super().__init__(**items)
        self["factor"] = factor


def compiled_and_eager(fn, *args):
    out = tensorjit.compile(fn, backend="eager", fullgraph=True)(*args)
    return out, fn(*args)


def test_set_subclass_methods_and_base_methods():
    def fn(x):
        s = AddsOne([1, 2])
        s.add(3)
        set.add(s, 10)  # the base's add, not the override
        return x + 1, s, s == {1, 2, 4, 10}, s.contains(9), type(s) is AddsOne, type(s.copy())

    out, expected = compiled_and_eager(fn, torch.randn(2))
    assert repr(out[1:]) == repr(expected[1:]) and type(out[1]) is AddsOne


def test_frozenset_and_tuple_subclasses_keep_their_class():
    def fn(x):
        f, t = Letters("abc"), Pair([1, 2])
        return x + 1, f, type(f | {"d"}), type(f.copy()), t, type(t), len(t), t[1]

    out, expected = compiled_and_eager(fn, torch.randn(2))
    assert out[1:] == expected[1:] and type(out[1]) is Letters and type(out[4]) is Pair


def test_dict_subclasses_with_methods_properties_and_init():
    def fn(x):
        d = Plain(x=5)
        d["y"] = 2
        m = WithMethod(a=1, b=2)
        s = Scaled(3, z=1)
        return m.add_1(x * d["x"]) * s["factor"], d, type(d), m.size, s

    out, expected = compiled_and_eager(fn, torch.randn(2))
    torch.testing.assert_close(out[0], expected[0])
    assert out[1:] == expected[1:] and type(out[1]) is Plain and type(out[4]) is Scaled


def test_a_set_made_in_the_function_is_a_new_set_on_each_call():
    def fn(x):
        return x + 1, {1, 2}

    compiled = tensorjit.compile(fn, backend="eager")
    first = compiled(torch.randn(2))[1]
    first.add(3)
    assert compiled(torch.randn(2))[1] == {1, 2}


class Instantier(collections.OrderedDict):
    pass


class Totals(dict):
    def total(self):
        return sum(self.values())


def test_instances_of_plain_dict_subclasses_from_outside_are_read_as_dicts():
    @tensorjit.compile(fullgraph=True, backend="eager")
    def contains(x, d):
        if "key1" in d:
            x = x + 2
        if "key2" in d:
            x = x + 4
        return x + 8

    assert contains(torch.ones(1), Instantier({"key1": 1})).item() == 11
    assert contains(torch.ones(1), Instantier({"key2": 1})).item() == 13

    @tensorjit.compile(fullgraph=True, backend="eager")
    def writes(x, d):
        d["new"] = 5
        return x * d.total() + len(d)

    d = Totals(a=1)
    assert writes(torch.ones(1), d).item() == 8
    assert d == {"a": 1, "new": 5} and type(d) is Totals


def test_attributes_of_a_dict_subclass_instance_are_read_and_their_names_guarded():
    def fn(x, d):
        return x * len(d) + d.scale + (d.extra if hasattr(d, "extra") else 0)

    compiled = tensorjit.compile(fn, backend="eager", fullgraph=True)
    d = Totals(a=1)
    d.scale = 2
    assert compiled(torch.zeros(1), d).item() == 2
    d.scale = 3
    assert compiled(torch.zeros(1), d).item() == 3
    d.extra = 10
    assert compiled(torch.zeros(1), d).item() == 13


class TupleWithNew(tuple):
    def __new__(cls, arg, newarg=None):
        self = super().__new__(cls, arg)
        self.newarg = newarg
        return self


class GrandchildTuple(TupleWithNew):
    pass


class PlainTuple(tuple):
    pass


class TaggedDict(dict):
    pass


def test_python_new_of_container_subclasses_and_base_new_calls():
    def fn(x, klass):
        t = TupleWithNew([1, 2], newarg=5)
        g = GrandchildTuple([1, 2, 3])
        exact = tuple.__new__(tuple, [1, 2])
        plain = PlainTuple.__new__(PlainTuple, [3])
        d = dict.__new__(klass)
        d["x"] = x * 2
        if isinstance(d, TaggedDict):
            d.tag = 3
        return x + t.newarg, t, g, exact, plain, d

    compiled = tensorjit.compile(fn, backend="eager", fullgraph=True)
    for klass in (TaggedDict, dict):
        out, ref = compiled(torch.ones(1), klass), fn(torch.ones(1), klass)
        assert [type(v) for v in out] == [type(v) for v in ref]
        torch.testing.assert_close(out[0], ref[0])
        assert out[1:5] == ref[1:5] and out[1].newarg == 5 and out[2].newarg is None
        torch.testing.assert_close(dict(out[5]), dict(ref[5]))
        assert getattr(out[5], "tag", None) == getattr(ref[5], "tag", None)


class _PlusOne(dict):
    def __setitem__(self, key, value):
        super().__setitem__(key, value + 1)

    def __getitem__(self, key):
        return dict.__getitem__(self, key) * 2

    def __delitem__(self, key):
        super().__delitem__(key)
        dict.__setitem__(self, "deleted", key)


def test_subscript_dunders_of_a_dict_subclass_run_where_python_calls_them():
    def fn(x):
        d = _PlusOne(x=5 * x)  # the constructor bypasses __setitem__, as in Python
        d["y"] = 10
        d["z"] = x
        del d["z"]
        return d, d["y"], d.get("y"), d["x"]

    backend = __import__("conformance.harness", fromlist=["CountingBackend"]).CountingBackend()
    x = torch.randn(4)
    out, ref = tensorjit.compile(fn, backend=backend, fullgraph=True)(x), fn(x)
    assert type(out[0]) is _PlusOne and dict(out[0]).keys() == dict(ref[0]).keys()
    torch.testing.assert_close(dict(out[0])["x"], dict(ref[0])["x"])
    assert dict(out[0])["y"] == 11 and out[1:3] == ref[1:3] == (22, 11)
    torch.testing.assert_close(out[3], ref[3])
    assert backend.graph_count == 1
