"""`weakref.ref(obj)` of an object from outside (calls.py `_weak_reference`, values/objects.py
WeakRefValue): the real reference, made at capture with the object's identity guarded, so
weakref.WeakKeyDictionary's Python methods (`in`, `[]`) trace through it."""

import weakref

import pytest
import torch

import tensorjit

STATES = weakref.WeakKeyDictionary()
FIRST, SECOND, THIRD = torch.nn.Module(), torch.nn.Module(), torch.nn.Module()
STATES[FIRST] = 2
STATES[SECOND] = 3


def _membership(x, module):
    if FIRST in STATES:
        x = torch.sin(x)
    if module in STATES:
        x = x + STATES[module]
    if 3 in STATES:  # an int is not weakly referenceable: WeakKeyDictionary answers False
        x = x * 7
    return x


def test_weak_key_dictionary_membership_and_lookup():
    compiled = tensorjit.compile(_membership, backend="eager", fullgraph=True)
    x = torch.randn(4)
    for module in (SECOND, THIRD, FIRST):
        torch.testing.assert_close(compiled(x, module), _membership(x, module))


def test_a_changed_dictionary_or_another_object_recompiles():
    compiled = tensorjit.compile(_membership, backend="eager", fullgraph=True)
    x = torch.randn(4)
    other = torch.nn.Module()
    torch.testing.assert_close(compiled(x, other), _membership(x, other))
    STATES[other] = 5
    try:
        torch.testing.assert_close(compiled(x, other), _membership(x, other))
    finally:
        del STATES[other]


def test_the_reference_is_cpythons_own():
    kept = weakref.ref(FIRST)

    def fn(x):
        return x + 1, weakref.ref(FIRST) is kept, weakref.ref(FIRST)() is FIRST

    assert tensorjit.compile(fn, backend="eager", fullgraph=True)(torch.zeros(1))[1:] == (True, True)

    def returned(x):
        return x + 1, weakref.ref(SECOND)

    assert tensorjit.compile(returned, backend="eager", fullgraph=True)(torch.zeros(1))[1] is weakref.ref(SECOND)


def test_a_reference_to_a_value_made_in_the_function_breaks():
    class Box:
        pass

    def fn(x):
        return x + 1, weakref.ref(Box())() is None

    with pytest.raises(tensorjit.GraphBreakError):
        tensorjit.compile(fn, backend="eager", fullgraph=True)(torch.zeros(1))
