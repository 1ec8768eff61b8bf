"""super() in classmethods and __new__: lookup follows the class's own MRO, bound to the class."""

import torch

import tensorjit


class Base:
    @classmethod
    def make(cls):
        return super().__new__(cls)

    @classmethod
    def name(cls):
        return cls.__name__


class Derived(Base):
    @classmethod
    def make(cls):
        return super().make()

    @classmethod
    def name(cls):
        return "derived:" + super().name()


def test_super_in_a_classmethod_binds_the_class_itself():
    def fn(x):
        return Derived.make(), Derived.name(), x + 1

    made, name, _ = tensorjit.compile(fn, backend="eager", fullgraph=True)(torch.zeros(1))
    assert type(made) is Derived and name == "derived:Derived"
