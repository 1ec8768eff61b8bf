"""Classes with `__new__` written in Python, instantiated in the function (calls.py `_python_new`):
`__new__` is inlined, and `__init__` runs on its result only where that is an instance of the
class called (the `__init__` of the result's own class), as type.__call__ does."""

import torch

import tensorjit


class Counted:
    def __new__(cls, *args):
        instance = super().__new__(cls)
        instance.made_by_new = True
        return instance

    def __init__(self, scale):
        self.scale = scale


class Other:
    def __init__(self):
        self.scale = 11  # never run by Elsewhere()


class Elsewhere:
    def __new__(cls):
        instance = object.__new__(Other)  # not a Elsewhere: __init__ is not called
        instance.scale = 7
        return instance

    def __init__(self):
        self.scale = 13


class Base1:
    def __new__(cls):
        return super().__new__(cls)

    def __init__(self):
        super().__init__()
        self.base1 = 3


class Base2:
    def __new__(cls):
        return super().__new__(cls)

    def __init__(self):
        super().__init__()
        self.base2 = 5


class Derived(Base1, Base2):
    def __new__(cls):
        return super().__new__(cls)


def _check(fn):
    x = torch.randn(4)
    torch.testing.assert_close(tensorjit.compile(fn, backend="eager", fullgraph=True)(x), fn(x))


def test_new_then_init():
    _check(lambda x: x * Counted(5).scale + Counted(2).made_by_new)


def test_new_returning_another_class_skips_init():
    _check(lambda x: x * Elsewhere().scale)


def test_new_through_the_mro():
    _check(lambda x: x * Derived().base1 * Derived().base2)
