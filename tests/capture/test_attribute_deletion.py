"""`del obj.name` (DELETE_ATTR), delattr() and __delattr__ in compiled code."""

import pytest
import torch

import tensorjit


class Pair:
    def __init__(self, a, b):
        self.a = a
        self.b = b


class Guarded:
    def __init__(self, val):
        self.val = val
        self.deletion_attempted = False

    def __delattr__(self, attr):
        if attr == "val":
            self.deletion_attempted = True
        else:
            super().__delattr__(attr)


def test_deleting_attributes_of_an_input_and_of_an_object_made_in_the_function():
    @tensorjit.compile(backend="eager", fullgraph=True)
    def fn(x, obj):
        del obj.a
        obj.c = x + 1
        del obj.c
        tmp = Pair(x + 2, x + 3)
        delattr(tmp, "b")
        if hasattr(obj, "a"):
            return x + 1
        return tmp

    x = torch.zeros([])
    obj = Pair(x, x)
    made = fn(x, obj)
    assert not hasattr(obj, "a") and not hasattr(obj, "c") and not hasattr(made, "b")
    assert obj.b.item() == 0 and made.a.item() == 2


def test_a_python_delattr_is_inlined_and_reaches_object_delattr():
    @tensorjit.compile(backend="eager", fullgraph=True)
    def fn(t):
        a = Guarded(1)
        del a.val
        del a.deletion_attempted
        return t + 1, hasattr(a, "val"), hasattr(a, "deletion_attempted")

    out, has_val, has_flag = fn(torch.ones(1))
    assert (has_val, has_flag) == (True, False)


def test_reading_a_deleted_attribute_raises_attribute_error():
    @tensorjit.compile(backend="eager")
    def fn(x, obj):
        del obj.a
        x = x + 1
        obj.a
        return x

    x = torch.zeros([])
    obj = Pair(x, x)
    with pytest.raises(AttributeError):
        fn(x, obj)
    assert not hasattr(obj, "a")
