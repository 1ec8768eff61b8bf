"""A class's Python `__getattr__` is inlined where lookup fails (on objects from outside, guarded on
the name staying out of the instance `__dict__`, and on objects made in the function), and a write
that ended in a class's Python `__setattr__` is replayed as the plain write it was."""

import torch

import tensorjit
from conformance.harness import CountingBackend

CALLS = []


class Prefixed:
    """Stores `x` as `pfx_x`; reads of `x` find it through __getattr__."""

    def __setattr__(self, key, value):
        CALLS.append(("set", key))
        super().__setattr__(f"pfx_{key}", value)

    def __getattr__(self, key):
        CALLS.append(("get", key))
        return self.__dict__[f"pfx_{key}"]


def test_getattr_of_an_object_from_outside_is_inlined_and_its_write_replayed_plainly():
    def fn(obj):
        obj.y = obj.x + 1

    obj = Prefixed()
    obj.x = torch.randn(3)
    CALLS.clear()
    tensorjit.compile(fn, backend="eager", fullgraph=True)(obj)
    # capture read x and wrote y through the class's methods; the replay did not call them again,
    # or y would have been stored as pfx_pfx_y
    assert set(obj.__dict__) == {"pfx_x", "pfx_y"}
    torch.testing.assert_close(obj.__dict__["pfx_y"], obj.__dict__["pfx_x"] + 1)
    assert CALLS == [("get", "x"), ("set", "y")]


def test_getattr_fallback_is_guarded_on_the_instance_dict():
    class Defaults:
        def __getattr__(self, key):
            return 10

    def fn(obj, x):
        return x * obj.scale

    backend = CountingBackend()
    opt = tensorjit.compile(fn, backend=backend, fullgraph=True)
    obj, x = Defaults(), torch.ones(2)
    torch.testing.assert_close(opt(obj, x), x * 10)
    obj.scale = 3  # now found in the instance dict: __getattr__ is not consulted
    torch.testing.assert_close(opt(obj, x), x * 3)
    assert backend.graph_count == 2


def test_getattr_and_dict_of_an_object_made_in_the_function():
    def fn(x):
        obj = Prefixed()
        obj.x = x
        obj.y = obj.x + 1
        return obj, obj.__dict__["pfx_y"]

    x = torch.randn(3)
    obj, y = tensorjit.compile(fn, backend="eager", fullgraph=True)(x)
    assert set(obj.__dict__) == {"pfx_x", "pfx_y"}
    assert obj.__dict__["pfx_x"] is x
    torch.testing.assert_close(y, x + 1)


def test_attribute_error_raised_by_an_inlined_getattr_answers_hasattr_and_getattr():
    class Mock:
        def __init__(self):
            self.a = 5

        def __getattr__(self, name):
            if name != "a":
                raise AttributeError("missing")
            return self.__dict__["a"]

    mock = Mock()

    def fn(x):
        if hasattr(mock, "b"):
            return torch.cos(x)
        return torch.sin(x) * getattr(mock, "c", 2)

    x = torch.randn(4)
    torch.testing.assert_close(tensorjit.compile(fn, backend="eager", fullgraph=True)(x), fn(x))
