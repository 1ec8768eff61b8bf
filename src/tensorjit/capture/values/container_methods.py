"""Methods of symbolic lists, tuples, dicts, sets and iterators.

Each method is a small function registered under (container class, name) in
method_table.py, through which `call_container_method` dispatches. Mutating
methods call `owner.mutate(tx)` first so that a container from outside the
function is written back after the graph runs.
"""

from __future__ import annotations

import operator

from ..breaks import GraphBreak
from .base import ConstantValue, Value
from .containers import (DictValue, DictViewValue, IteratorValue, ListValue, MappingProxyValue, SetValue, TupleValue,
                         each_item, hash_key, member_key)
from .method_table import method
from .tensors import TensorValue

NONE = ConstantValue(None)


# -- lists ------------------------------------------------------------------------------
@method(ListValue, "append")
def _append(tx, lst: ListValue, value: Value) -> Value:
    lst.mutate(tx)
    lst.items.append(value)
    return NONE


@method(ListValue, "extend")
def _extend(tx, lst: ListValue, other: Value) -> Value:
    items = other.unpack(tx) if isinstance(other, (ListValue, TupleValue)) else each_item(tx, other)
    lst.mutate(tx)
    for item in items:
        lst.items.append(item)
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


def _equal(tx, item: Value, value: Value, what: str) -> bool:
    """CPython's test of a list or tuple item against x: `item is x`, or `item == x` (its __eq__ first)."""
    if item is value:
        return True
    if item.is_constant() and value.is_constant():
        return item.constant() == value.constant()
    if isinstance(item, TensorValue) or isinstance(value, TensorValue):
        raise GraphBreak("data-dependent-op", f"{what} comparing a tensor reads its values")
    return tx.binary_op(operator.eq, item, value).truth(tx)


@method(ListValue, "remove")
def _remove(tx, lst: ListValue, value: Value) -> Value:
    for i, item in enumerate(lst.items):
        if _equal(tx, item, value, "list.remove"):
            lst.mutate(tx)
            del lst.items[i]
            return NONE
    error = ValueError("list.remove(x): x not in list")
    raise GraphBreak("op-error", str(error), exception=error)


def _list_error(op, size: int, key, *value) -> None:
    """Raise, as the program's exception, what `op` raises on a list of `size` items (an index out
    of range, a float index, a non-iterable or wrongly sized value for a slice), before the
    symbolic list is touched."""
    probe = list(range(size))
    try:
        op(probe, key, *value)
    except Exception as error:
        raise GraphBreak("op-error", f"{type(error).__name__}: {error}", exception=error) from None


@method(ListValue, "__setitem__")
def _list_setitem(tx, lst: ListValue, index: Value, value: Value) -> Value:
    key = index.constant()
    if isinstance(key, slice):
        if value.is_constant() and not isinstance(value.constant(), (list, tuple, str, range, dict, set, frozenset)):
            _list_error(operator.setitem, len(lst.items), key, value.constant())  # not iterable: TypeError
        items = tx.iterate(value).unpack(tx)
        _list_error(operator.setitem, len(lst.items), key, [None] * len(items))  # extended slice sizes
        lst.mutate(tx)
        lst.items[key] = items
    else:
        _list_error(operator.setitem, len(lst.items), key, None)
        lst.mutate(tx)
        lst.items[key] = value
    return NONE


@method(ListValue, "__delitem__")
def _list_delitem(tx, lst: ListValue, index: Value) -> Value:
    key = index.constant()
    _list_error(operator.delitem, len(lst.items), key)
    lst.mutate(tx)
    del lst.items[key]
    return NONE


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
    kind = seq.python_type().__name__
    return ConstantValue(sum(_equal(tx, item, value, f"{kind}.count") for item in list(seq.items)))


@method(TupleValue, "index")
@method(ListValue, "index")
def _index(tx, seq, value: Value, start: Value = ConstantValue(0), stop: Value = ConstantValue(None)) -> Value:
    """The first position in items[start:stop] (bounds as slice() reads them) whose item is, or equals, x."""
    items = list(seq.items)
    kind = seq.python_type().__name__
    for i in range(len(items))[slice(start.constant(), stop.constant())]:
        if _equal(tx, items[i], value, f"{kind}.index"):
            return ConstantValue(i)
    if not value.is_constant() or kind not in ("list", "tuple"):
        raise GraphBreak("container-method", f"{kind}.index raising ValueError for {value!r}")
    try:  # CPython's own message, which varies by version ("7 is not in list" on 3.11)
        (list if kind == "list" else tuple)().index(value.constant())
    except ValueError as error:
        raise GraphBreak("op-error", str(error), exception=error) from None
    raise AssertionError("index() of an empty sequence returned")


@method(TupleValue, "numel")
def _numel(tx, size: TupleValue) -> Value:
    """torch.Size.numel(): the product of the sizes (symbolic ones multiply in the graph)."""
    product: Value = ConstantValue(1)
    for item in size.items:
        product = tx.binary_op(operator.mul, product, item)
    return product


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


@method(DictValue, "__setitem__")
def _setitem(tx, d: DictValue, key: Value, value: Value) -> Value:
    """dict.__setitem__ itself (`super().__setitem__(k, v)` in a subclass that overrides it)."""
    k = hash_key(key, False)
    d.mutate(tx)
    d.items[k] = value
    return ConstantValue(None)


@method(DictValue, "__delitem__")
def _delitem(tx, d: DictValue, key: Value) -> Value:
    k = hash_key(key, False)
    if k not in d.items:
        error = KeyError(k)
        raise GraphBreak("op-error", f"KeyError: {k!r}", exception=error)
    d.mutate(tx)
    del d.items[k]
    return ConstantValue(None)


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
        for pair in each_item(tx, other):
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
        raise GraphBreak("op-error", f"KeyError: {k!r}", exception=KeyError(k))
    return default


@method(DictValue, "popitem")
def _popitem(tx, d: DictValue) -> Value:
    if not d.items:
        error = KeyError("popitem(): dictionary is empty")
        raise GraphBreak("op-error", str(error), exception=error)
    d.mutate(tx)
    key, value = d.items.popitem()
    return TupleValue([ConstantValue(key), value])


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


@method(MappingProxyValue, "copy")
def _proxy_copy(tx, proxy: MappingProxyValue) -> Value:
    return DictValue(dict(proxy.items), proxy.mapping.cls)  # the viewed dict's own copy


@method(DictValue, "clear")
def _dict_clear(tx, d: DictValue) -> Value:
    d.mutate(tx)
    d.items.clear()
    return NONE


@method(DictValue, "__init__")
def _dict_init(tx, d: DictValue, *args: Value, **kwargs: Value) -> Value:
    """dict.__init__(d, ...) of a subclass instance: the items dict(...) would hold, added."""
    made = tx.call(tx.wrap_constant_object(dict), list(args), kwargs)
    d.mutate(tx)
    d.items.update(made.items)
    return NONE


# -- sets -------------------------------------------------------------------------------
@method(SetValue, "__init__")
def _set_init(tx, s: SetValue, *args: Value) -> Value:
    if issubclass(s.cls, frozenset):
        return NONE  # object.__init__: a frozenset's items come from __new__
    items = tx.iterate(args[0]).unpack(tx) if args else []
    s.mutate(tx)
    s.items.clear()
    for v in items:
        s.items[member_key(v)] = v
    return NONE


@method(SetValue, "add")
def _set_add(tx, s: SetValue, value: Value) -> Value:
    s.mutate(tx)
    s.items[member_key(value)] = value
    return NONE


@method(SetValue, "__contains__")
def _set_contains(tx, s: SetValue, value: Value) -> Value:
    return ConstantValue(hash_key(value, True) in s.items)


@method(SetValue, "discard")
def _set_discard(tx, s: SetValue, value: Value) -> Value:
    key = hash_key(value, True)
    s.mutate(tx)
    s.items.pop(key, None)
    return NONE


@method(SetValue, "remove")
def _set_remove(tx, s: SetValue, value: Value) -> Value:
    key = hash_key(value, True)
    if key not in s.items:
        raise GraphBreak("op-error", f"KeyError: {key!r}", exception=KeyError(key))
    s.mutate(tx)
    del s.items[key]
    return NONE


@method(SetValue, "pop")
def _set_pop(tx, s: SetValue) -> Value:
    if not s.items:
        raise GraphBreak("op-error", "pop from an empty set", exception=KeyError("pop from an empty set"))
    s.mutate(tx)
    return s.items.pop(next(iter(s.constant())))  # the element CPython's set would give first


@method(SetValue, "clear")
def _set_clear(tx, s: SetValue) -> Value:
    s.mutate(tx)
    s.items.clear()
    return NONE


@method(SetValue, "copy")
def _set_copy(tx, s: SetValue) -> Value:
    if s.cls is frozenset:  # immutable: CPython's frozenset.copy hands back the set itself
        return s
    return SetValue(list(s.items.values()), frozenset if issubclass(s.cls, frozenset) else set)  # the base type


@method(SetValue, "intersection_update", "difference_update", "symmetric_difference_update")
def _set_in_place(tx, s: SetValue, *others: Value) -> Value:
    """The real set operation on the keys; the values kept are those of `s`, then of the others."""
    others_items = [other.unpack(tx) for other in others]
    values = {v.constant(): v for items in reversed(others_items) for v in items}
    values.update(s.items)
    keys = s.constant()
    getattr(keys, tx.current_method)(*[{v.constant() for v in items} for items in others_items])
    s.mutate(tx)
    s.items = {k: values[k] for k in _ordered(s.items, keys)}
    return NONE


def _ordered(old: dict, keys: set) -> list:
    return [k for k in old if k in keys] + [k for k in keys if k not in old]


@method(SetValue, "update")
def _set_update(tx, s: SetValue, *others: Value) -> Value:
    s.mutate(tx)
    for other in others:
        for v in each_item(tx, other):
            s.items[member_key(v)] = v
    return NONE


@method(SetValue, "union", "intersection", "difference", "symmetric_difference", "issubset", "issuperset",
        "isdisjoint")
def _set_algebra(tx, s: SetValue, *others: Value) -> Value:
    """The real method on the keys (a set's items are constants): the result has the base type, as in CPython."""
    keys = [[v.constant() for v in tx.iterate(other).unpack(tx)] for other in others]
    base = frozenset if issubclass(s.cls, frozenset) else set
    return tx.wrap_constant_object(getattr(base, tx.current_method)(base(s.items), *keys))


# -- iterators --------------------------------------------------------------------------
@method(IteratorValue, "__iter__")
def _iterator_iter(tx, it: IteratorValue) -> Value:
    return it
@method(IteratorValue, "__length_hint__")
def _length_hint(tx, it: IteratorValue) -> Value:
    if it.over is None:  # zip, map, enumerate... have no __length_hint__; a tuple's iterator is not modelled
        raise GraphBreak("container-method", "__length_hint__ of this iterator is not supported")
    return ConstantValue(it.length_hint())


@method(IteratorValue, "__next__")
def _next(tx, it: IteratorValue) -> Value:
    value = it.next()
    if value is None:
        raise GraphBreak("stop-iteration", "next() on an exhausted iterator", exception=StopIteration())
    return value
