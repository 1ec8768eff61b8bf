"""`copy.deepcopy` of plain data made symbolically: constants and the builtin containers holding them.

The copy module is not traced (skipfiles). Deep-copying a list, dict or tuple of numbers,
strings and None, nested in each other, makes new containers of the same items (immutable ones
are shared, as deepcopy shares them), and a container met twice is copied once, as deepcopy's
memo does. Anything else (tensors, modules, user objects, a deepcopy with a memo of its own) is a
graph break: deepcopy runs eagerly.
"""

from __future__ import annotations

import copy

from ..breaks import GraphBreak
from ..values.base import ConstantValue, Value
from ..values.containers import DictValue, ListValue, TupleValue
from .registry import capture_rule

_IMMUTABLE = (int, float, bool, str, bytes, complex, type(None))


@capture_rule(copy.deepcopy, applies=lambda args, kwargs: len(args) == 1 and not kwargs)
def _deepcopy(tx, value: Value) -> Value:
    return _copied(value, {})


def _copied(value: Value, memo: dict[int, Value]) -> Value:
    if id(value) in memo:
        return memo[id(value)]
    if type(value) is ConstantValue and isinstance(value.constant(), _IMMUTABLE):
        return value
    if type(value) is ListValue:
        new = memo[id(value)] = ListValue([])
        new.items = [_copied(item, memo) for item in value.items]
        return new
    if type(value) is DictValue and value.cls is dict:
        new = memo[id(value)] = DictValue({})
        new.items = {key: _copied(item, memo) for key, item in value.items.items()}
        return new
    if type(value) is TupleValue and value.cls is tuple:
        return TupleValue([_copied(item, memo) for item in value.items])
    raise GraphBreak("unsupported-call", f"copy.deepcopy of {value!r}", "it runs eagerly")
