"""`C.__subclasses__()` of a class read from outside (values/builtins.py `_subclasses`): a new list
of the classes alive now, each read through its place in the run-time list (sources.py
SubclassesSource), so that a class defined or freed since recompiles and no compiled code keeps
a class alive that the program dropped."""

import gc
import weakref

import pytest
import torch

import tensorjit


class Base:
    pass


class First(Base):
    pass


def _listing(x):
    return x + 1, Base.__subclasses__()


def test_the_live_subclasses_in_a_new_list():
    compiled = tensorjit.compile(_listing, backend="eager", fullgraph=True)
    x = torch.zeros(1)
    got = compiled(x)[1]
    assert got == _listing(x)[1] == [First]
    assert compiled(x)[1] is not got  # a new list per call, as Python's


def test_a_class_defined_or_freed_later_is_seen():
    compiled = tensorjit.compile(_listing, backend="eager", fullgraph=True)
    x = torch.zeros(1)
    compiled(x)

    class Second(Base):
        pass

    assert compiled(x)[1] == _listing(x)[1] == [First, Second]
    second = weakref.ref(Second)
    del Second
    gc.collect()
    assert second() is None  # the compiled entry holds no reference to it
    assert compiled(x)[1] == _listing(x)[1] == [First]

    class Third(Base):  # as many subclasses as before, another class
        pass

    assert compiled(x)[1] == _listing(x)[1] == [First, Third]


def test_a_class_made_in_the_function_still_breaks():
    def fn(x):
        class Local:
            pass
        return x + 1, Local.__subclasses__()

    with pytest.raises(tensorjit.GraphBreakError):
        tensorjit.compile(fn, backend="eager", fullgraph=True)(torch.zeros(1))
