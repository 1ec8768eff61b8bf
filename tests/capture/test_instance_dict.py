"""An object's __dict__ and its attributes are one namespace: a write through either is seen by the other."""

import torch

import tensorjit


class WritesDict:
    def run(self, x):
        self.__dict__["a"] = 10
        return x * self.a + self.__dict__["a"]


class WritesAttribute:
    def run(self, x):
        namespace = self.__dict__
        self.b = 3
        return x * namespace["b"] + len(namespace)


def test_writes_through_dunder_dict_and_attributes_see_each_other():
    for cls in (WritesDict, WritesAttribute):
        compiled = tensorjit.compile(lambda x, obj: obj.run(x), backend="eager", fullgraph=True)
        expected_obj, obj = cls(), cls()
        x = torch.ones(2)
        torch.testing.assert_close(compiled(x, obj), expected_obj.run(x))
        assert obj.__dict__ == expected_obj.__dict__


def test_assigning_class_of_an_object_made_in_the_function_changes_its_type():
    class Base:
        def __init__(self, x):
            self.x = x

    class Derived(Base):
        def __init__(self, x):
            super().__init__(x)
            self.y = x * 2

        def twice(self):
            return self.x * 2

    def fn(x):
        obj = Base(5)
        obj.__class__ = Derived
        return x + obj.twice(), isinstance(obj, Derived), hasattr(obj, "y"), obj

    x = torch.ones(1)
    out, is_derived, has_y, obj = tensorjit.compile(fn, backend="eager", fullgraph=True)(x)
    torch.testing.assert_close(out, x + 10)
    assert is_derived and not has_y and type(obj) is Derived


def test_assigning_class_of_an_object_from_outside_runs_eagerly():
    class A:
        pass

    class B(A):
        pass

    def fn(x, obj):
        obj.__class__ = B
        return x + 1, isinstance(obj, B)

    obj = A()
    out, is_b = tensorjit.compile(fn, backend="eager")(torch.ones(1), obj)
    assert is_b and type(obj) is B
