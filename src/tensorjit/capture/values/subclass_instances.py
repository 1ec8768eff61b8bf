"""Instances of user subclasses of dict, set, frozenset and tuple made in the function.

`cls(*args)` runs the base's __new__ (or a Python __new__, inlined) and then __init__;
`base.__new__(cls)` makes the empty container; a dict subclass's `__getitem__`,
`__setitem__` and `__delitem__` written in Python are found for the subscripts that call
them. What a subclass defines is read through container_subclasses.py, below the
container values; this module builds on them.
"""

from __future__ import annotations

import types

from ..breaks import GraphBreak
from .base import Value, lookup_static
from .container_subclasses import _BASES, _SUBSCRIPT_DUNDERS, MADE_BY_KIND, container_base
from .containers import DictValue, SetValue, TupleValue
from .functions import FunctionValue
from .method_table import call_container_method


def _empty_dict(cls: type) -> Value:
    kind = next((k for k in cls.__mro__ if k in MADE_BY_KIND), None)
    return MADE_BY_KIND[kind](cls) if kind is not None else DictValue({}, cls)


def subscript_method(value: Value, name: str):
    """The Python `name` (a subscript dunder) of a dict subclass instance made in the function, or None."""
    if not isinstance(value, DictValue) or value.cls is dict or name not in _SUBSCRIPT_DUNDERS:
        return None
    method, owner = lookup_static(value.cls, name)
    return method if isinstance(method, types.FunctionType) and owner not in _BASES else None


def instantiate(tx, cls: type, base: type, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """`cls(*args, **kwargs)`: the base's __new__ (which fills immutable ones), then __init__."""
    new = lookup_static(cls, "__new__")[0]
    if isinstance(new, staticmethod) and isinstance(new.__func__, types.FunctionType):
        # a Python __new__ (which calls the base's: `empty`), then __init__ when it made a `cls`
        instance = tx.call(FunctionValue(new.__func__), [tx.wrap_constant_object(cls), *args], kwargs)
        made = instance.python_type()
        if isinstance(made, type) and issubclass(made, cls):
            _initialize(tx, cls, base, instance, args, kwargs)
        return instance
    if base in (tuple, frozenset):
        if kwargs or len(args) > 1:
            raise GraphBreak("unsupported-call", f"{cls.__name__}() with arguments besides one iterable")
        items = tx.iterate(args[0]).unpack(tx) if args else []
        instance = TupleValue(items, cls) if base is tuple else SetValue(items, cls)
    else:
        instance = _empty_dict(cls) if base is dict else SetValue([], cls)
    _initialize(tx, cls, base, instance, args, kwargs)
    return instance


def _initialize(tx, cls: type, base: type, instance: Value, args, kwargs) -> None:
    init = lookup_static(cls, "__init__")[0]
    if isinstance(init, types.FunctionType):
        tx.call(FunctionValue(init), [instance, *args], kwargs)
    elif base in (dict, set):
        call_container_method(tx, instance, "__init__", list(args), dict(kwargs))


def empty(tx, base: type, cls: type, args: list[Value]) -> Value:
    """`base.__new__(cls, ...)` for a builtin container `base` and `cls` itself or a plain subclass:
    dict and set come out empty (their __init__ fills them), tuple and frozenset hold the iterable."""
    if cls is not base and container_base(cls) is not base:
        raise GraphBreak("unsupported-call", f"{base.__name__}.__new__ of {cls.__name__}")
    if base in (tuple, frozenset):
        if cls is base and args and type(args[0]) in (TupleValue, SetValue) and args[0].python_type() is base:
            return args[0]  # immutable: CPython hands back an exact tuple or frozenset itself
        items = tx.iterate(args[0]).unpack(tx) if args else []
        return TupleValue(items, cls) if base is tuple else SetValue(items, cls)
    return _empty_dict(cls) if base is dict else SetValue([], cls)
