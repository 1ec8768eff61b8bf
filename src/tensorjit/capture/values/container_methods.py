"""Methods of symbolic lists, tuples, dicts, sets and iterators.

Each method is a small function registered under (container class, name);
`call_container_method` dispatches to it. Mutating methods call
`owner.mutate(tx)` first so that a container from outside the function is
written back after the graph runs.
"""

from __future__ import annotations

from typing import Callable

from ..breaks import GraphBreak
from .base import ConstantValue, Value
from .containers import DictValue, DictViewValue, IteratorValue, ListValue, SetValue, TupleValue

_METHODS: dict[tuple[type, str], Callable] = {}


def method(cls: type, *names: str):
    def register(fn):
        for name in names:
            key = (cls, name)
            if key in _METHODS:
                raise AssertionError(f"duplicate container method {key}")
            _METHODS[key] = fn
        return fn
    return register


def call_container_method(tx, owner: Value, name: str, args: list[Value], kwargs: dict[str, Value]) -> Value:
    for cls in type(owner).__mro__:
        fn = _METHODS.get((cls, name))
        if fn is not None:
            return fn(tx, owner, *args, **kwargs)
    raise GraphBreak("container-method", f"{owner.python_type().__name__}.{name} is not supported")


NONE = ConstantValue(None)


# -- lists ------------------------------------------------------------------------------
@method(ListValue, "append")
def _append(tx, lst: ListValue, value: Value) -> Value:
    lst.mutate(tx)
    lst.items.append(value)
    return NONE


@method(ListValue, "extend")
def _extend(tx, lst: ListValue, other: Value) -> Value:
    items = other.unpack(tx)
    lst.mutate(tx)
    lst.items.extend(items)
    return NONE


@method(ListValue, "insert")
def _insert(tx, lst: ListValue, index: Value, value: Value) -> Value:
    lst.mutate(tx)
    lst.items.insert(index.constant(), value)
    return NONE


@method(ListValue, "pop")
def _pop(tx, lst: ListValue, index: Value = ConstantValue(-1)) -> Value:
    lst.mutate(tx)
    return lst.items.pop(index.constant())


@method(ListValue, "clear")
def _clear(tx, lst: ListValue) -> Value:
    lst.mutate(tx)
    lst.items.clear()
    return NONE


@method(ListValue, "copy")
def _copy(tx, lst: ListValue) -> Value:
    return ListValue(list(lst.items))


@method(ListValue, "reverse")
def _reverse(tx, lst: ListValue) -> Value:
    lst.mutate(tx)
    lst.items.reverse()
    return NONE


@method(ListValue, "remove")
def _remove(tx, lst: ListValue, value: Value) -> Value:
    target = value.constant()
    for i, item in enumerate(lst.items):
        if item.is_constant() and item.constant() == target:
            lst.mutate(tx)
            del lst.items[i]
            return NONE
    raise GraphBreak("op-error", "list.remove(x): x not in list")


@method(ListValue, "sort")
def _sort(tx, lst: ListValue, key: Value = NONE, reverse: Value = ConstantValue(False)) -> Value:
    if key.constant() is not None:
        raise GraphBreak("container-method", "list.sort(key=...) is not supported")
    lst.mutate(tx)
    lst.items.sort(key=lambda v: v.constant(), reverse=reverse.constant())
    return NONE


@method(TupleValue, "count")
@method(ListValue, "count")
def _count(tx, seq, value: Value) -> Value:
    return ConstantValue(seq.constant().count(value.constant()))


@method(TupleValue, "index")
@method(ListValue, "index")
def _index(tx, seq, value: Value) -> Value:
    return ConstantValue(seq.constant().index(value.constant()))


@method(TupleValue, "_asdict")
def _asdict(tx, tup: TupleValue) -> Value:
    return DictValue(dict(zip(tup.cls._fields, tup.items)))


@method(TupleValue, "_replace")
def _replace(tx, tup: TupleValue, **changes: Value) -> Value:
    items = list(tup.items)
    for name, value in changes.items():
        items[tup.cls._fields.index(name)] = value
    return TupleValue(items, tup.cls)


# -- dicts ------------------------------------------------------------------------------
@method(DictValue, "get")
def _get(tx, d: DictValue, key: Value, default: Value = NONE) -> Value:
    return d.items.get(key.constant(), default)


@method(DictValue, "__getitem__")
def _getitem(tx, d: DictValue, key: Value) -> Value:
    return d.getitem(tx, key)


@method(DictValue, "__contains__")
def _contains(tx, d: DictValue, key: Value) -> Value:
    return ConstantValue(key.constant() in d.items)


@method(DictValue, "keys")
def _keys(tx, d: DictValue) -> Value:
    return DictViewValue(d, "keys")


@method(DictValue, "values")
def _values(tx, d: DictValue) -> Value:
    return DictViewValue(d, "values")


@method(DictValue, "items")
def _items(tx, d: DictValue) -> Value:
    return DictViewValue(d, "items")


@method(DictViewValue, "__len__")
def _view_len(tx, view: DictViewValue) -> Value:
    return ConstantValue(len(view.mapping.items))


@method(DictViewValue, "__contains__")
def _view_contains(tx, view: DictViewValue, item: Value) -> Value:
    if view.kind == "keys":
        return ConstantValue(item.constant() in view.mapping.items)
    return ConstantValue(item.constant() in view.constant())


@method(DictViewValue, "isdisjoint")
def _view_isdisjoint(tx, view: DictViewValue, other: Value) -> Value:
    return ConstantValue(view.constant().isdisjoint(other.constant()))


@method(DictValue, "update")
def _update(tx, d: DictValue, other: Value = None, **extra: Value) -> Value:
    d.mutate(tx)
    if isinstance(other, DictValue):
        d.items.update(other.items)
    elif other is not None:
        for pair in other.unpack(tx):
            k, v = pair.unpack(tx)
            d.items[k.constant()] = v
    d.items.update(extra)
    return NONE


@method(DictValue, "pop")
def _dict_pop(tx, d: DictValue, key: Value, default: Value | None = None) -> Value:
    k = key.constant()
    if k in d.items:
        d.mutate(tx)
        return d.items.pop(k)
    if default is None:
        raise GraphBreak("op-error", f"KeyError: {k!r}")
    return default


@method(DictValue, "setdefault")
def _setdefault(tx, d: DictValue, key: Value, default: Value = NONE) -> Value:
    k = key.constant()
    if k not in d.items:
        d.mutate(tx)
        d.items[k] = default
    return d.items[k]


@method(DictValue, "copy")
def _dict_copy(tx, d: DictValue) -> Value:
    return DictValue(dict(d.items), d.cls)


@method(DictValue, "clear")
def _dict_clear(tx, d: DictValue) -> Value:
    d.mutate(tx)
    d.items.clear()
    return NONE


# -- sets -------------------------------------------------------------------------------
@method(SetValue, "add")
def _set_add(tx, s: SetValue, value: Value) -> Value:
    s.mutate(tx)
    s.items[value.constant()] = value
    return NONE


@method(SetValue, "__contains__")
def _set_contains(tx, s: SetValue, value: Value) -> Value:
    return ConstantValue(value.constant() in s.items)


@method(SetValue, "discard", "remove")
def _set_discard(tx, s: SetValue, value: Value) -> Value:
    s.mutate(tx)
    s.items.pop(value.constant(), None)
    return NONE


@method(SetValue, "update")
def _set_update(tx, s: SetValue, *others: Value) -> Value:
    s.mutate(tx)
    for other in others:
        for v in other.unpack(tx):
            s.items[v.constant()] = v
    return NONE


@method(SetValue, "union", "intersection", "difference", "issubset", "issuperset", "copy")
def _set_pure(tx, s: SetValue, *others: Value) -> Value:
    raise GraphBreak("container-method", "set algebra on symbolic sets")


# -- iterators --------------------------------------------------------------------------
@method(IteratorValue, "__next__")
def _next(tx, it: IteratorValue) -> Value:
    value = it.next()
    if value is None:
        raise GraphBreak("stop-iteration", "next() on an exhausted iterator")
    return value
