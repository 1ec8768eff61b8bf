"""`id()` of a container read from outside (values/builtins.py `_id`): the real object's id,
guarded on that object's identity (another dict of equal contents recompiles)."""

import torch

import tensorjit

SHARED = {"a": 1}
ITEMS = [1.0, 2.0]


def test_id_of_a_global_dict_and_list_as_keys():
    def fn(x):
        memo = {id(SHARED): True, id(ITEMS): True}
        return x + 1.0 if id(SHARED) in memo and id(ITEMS) in memo else x + 2.0

    x = torch.zeros(1)
    torch.testing.assert_close(tensorjit.compile(fn, backend="eager", fullgraph=True)(x), fn(x))


def test_the_answer_holds_for_that_object_only():
    def fn(x, d):
        return x + (id(d) == id(SHARED))

    compiled = tensorjit.compile(fn, backend="eager", fullgraph=True)
    x = torch.zeros(1)
    torch.testing.assert_close(compiled(x, SHARED), fn(x, SHARED))
    other = {"a": 1}
    torch.testing.assert_close(compiled(x, other), fn(x, other))
