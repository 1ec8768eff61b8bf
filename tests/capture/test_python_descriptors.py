"""Descriptors written in Python on objects from outside (attributes.py, values/objects.py): an
assignment through a `__set__` is inlined; a descriptor without `__get__` leaves reads to the
instance __dict__, which capture holds once the function wrote it."""

import torch

import tensorjit


class Doubling:
    def __set__(self, obj, value):
        obj.__dict__["field"] += value * 2


class Holder:
    field = Doubling()

    def __init__(self):
        self.__dict__["field"] = 0


def test_an_assignment_through_a_python_set_is_inlined():
    def fn(x, holder):
        holder.field = 10
        return x + holder.field

    compiled = tensorjit.compile(fn, backend="eager", fullgraph=True)
    eager_holder, holder = Holder(), Holder()
    for _ in range(2):
        torch.testing.assert_close(compiled(torch.zeros(2), holder), fn(torch.zeros(2), eager_holder))
        assert holder.field == eager_holder.field


def test_a_set_only_descriptor_reads_the_written_dict():
    def fn(x, holder):
        holder.__dict__["field"] = 5
        return x + holder.field

    holder = Holder()
    out = tensorjit.compile(fn, backend="eager", fullgraph=True)(torch.zeros(2), holder)
    torch.testing.assert_close(out, torch.full((2,), 5.0))
    assert holder.field == 5


class Stored:
    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        return obj.__dict__.get("_internal", "default")

    def __set__(self, obj, value):
        obj.__dict__["_internal"] = f"desc_{value}"


class WithStored:
    desc = Stored()


def test_a_python_get_reads_what_the_function_wrote():
    def fn(obj):
        obj.desc = "hello"
        obj.__dict__["_internal"] = "direct"
        return obj.desc

    obj = WithStored()
    # __get__ was run for real at capture, before the writes landed: 'default', a silent wrong answer
    assert tensorjit.compile(fn, backend="eager", fullgraph=True)(obj) == "direct"
    assert obj.__dict__["_internal"] == "direct"


def test_a_python_get_after_a_namespace_write():
    def fn(obj):
        obj.__dict__["_internal"] = "direct"
        return obj.desc

    # main ran __get__ for real at capture: 'default', a silent wrong answer
    assert tensorjit.compile(fn, backend="eager", fullgraph=True)(WithStored()) == "direct"
