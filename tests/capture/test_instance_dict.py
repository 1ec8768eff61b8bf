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
