"""Operators on plain Python values that capture has no symbolic rule for.

Sequence comparisons (list == list, tuple < tuple) compare item by item as
CPython does: identity first, then ==, and the first unequal pair decides.
`int * list` repeats like `list * int`; `dict | dict` merges. `==` and `!=` between objects whose
classes keep object's own __eq__ compare identity, which is all object.__eq__ does.
"""

from __future__ import annotations

import operator

from ..values.base import ConstantValue, Value
from ..values.containers import DictValue, ListValue, SequenceValue, TupleValue
from ..values.objects import lookup_static
from .collections import counter_binary

_ORDERINGS = (operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge)


def plain_binary(tx, op, a: Value, b: Value, same_object) -> Value | None:
    """The value of `a op b`, or None when this module has no rule for the operands."""
    counted = counter_binary(op, a, b)
    if counted is not None:
        return counted
    if op in _ORDERINGS and _same_sequence_kind(a, b):
        return _compare_sequences(tx, op, a, b, same_object)
    if op in (operator.mul, operator.imul) and isinstance(b, SequenceValue) and a.is_constant() \
            and isinstance(a.constant(), int) and not isinstance(a, SequenceValue):
        return b.rebuild(b.items * a.constant())
    if op in (operator.or_, operator.ior) and type(a) is DictValue and isinstance(b, DictValue) \
            and a.cls is dict:
        return _merge_dicts(tx, op, a, b)
    if op in (operator.eq, operator.ne) and _identity_equality(a) and _identity_equality(b):
        same = same_object(a, b)
        return ConstantValue(same if op is operator.eq else not same)
    return None


def _merge_dicts(tx, op, a: DictValue, b: DictValue) -> Value:
    if op is operator.ior:  # `d |= other` updates d in place, as dict.update
        a.mutate(tx)
        a.items.update(b.items)
        return a
    return DictValue({**a.items, **b.items})


def _same_sequence_kind(a: Value, b: Value) -> bool:
    return (isinstance(a, ListValue) and isinstance(b, ListValue)) or \
        (isinstance(a, TupleValue) and isinstance(b, TupleValue))


def _compare_sequences(tx, op, a: SequenceValue, b: SequenceValue, same_object) -> Value:
    for x, y in zip(a.items, b.items):
        if same_object(x, y) or tx.binary_op(operator.eq, x, y).truth(tx):
            continue
        if op is operator.eq or op is operator.ne:
            return ConstantValue(op is operator.ne)
        return tx.binary_op(op, x, y)
    return ConstantValue(op(len(a.items), len(b.items)))


def _identity_equality(value: Value) -> bool:
    """Whether == on this value is object.__eq__: identity (None, modules, plain user objects)."""
    if value.is_constant() and value.constant() is None:
        return True
    kind = value.python_type()
    if kind in (int, float, bool, str, complex, bytes, list, tuple, dict, set, frozenset):
        return False
    return lookup_static(kind, "__eq__")[0] is object.__eq__ and lookup_static(kind, "__ne__")[0] is object.__ne__
