"""The table of symbolic container methods: (value class, method name) -> handler.

It sits below the container values so that `ContainerMethodValue.call` (containers.py) and
the constructors of container subclasses dispatch through it without importing the modules
that fill it: container_methods.py (list, tuple, dict, set and iterator methods) and
polyfills/collections.py (OrderedDict, defaultdict, Counter) register with `@method(cls, *names)`.
values/__init__.py imports container_methods.py, so the table is full whenever a container
value exists (tests/capture/test_layers.py checks it).
"""

from __future__ import annotations

import operator
from typing import Callable

from ..breaks import GraphBreak
from .base import ConstantValue, Value

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
            tx.current_method = name
            try:
                return fn(tx, owner, *args, **kwargs)
            except GraphBreak:
                raise
            except Exception as error:
                raise _python_error(owner, name, args, kwargs, error) from error
    if name in _OPERATOR_DUNDERS:
        return _call_operator_dunder(tx, owner, name, args, kwargs)
    raise GraphBreak("container-method", f"{owner.python_type().__name__}.{name} is not supported")


def _python_error(owner: Value, name: str, args: list[Value], kwargs: dict[str, Value], error: Exception):
    """`error` of a method handler as the program's exception, when the real method on a copy of the
    same constants raises it too (`p.append()`: a TypeError; `p.pop(7)`: an IndexError)."""
    values = [owner, *args, *kwargs.values()]
    if not all(v.is_constant() for v in values):
        return error
    try:
        getattr(owner.constant(), name)(*[a.constant() for a in args], **{k: v.constant() for k, v in kwargs.items()})
    except type(error) as real:
        return GraphBreak("op-error", f"{type(real).__name__}: {real}", exception=real)
    except Exception:
        return error
    return error


def has_operator_dunder(owner: Value, name: str) -> bool:
    """`p.__eq__`, `lst.__iadd__`: a dunder the container's real type has, read as an attribute."""
    return name in _OPERATOR_DUNDERS and hasattr(owner.python_type(), name)


# The operator each dunder implements; called as a method it takes exactly these arguments.
_OPERATOR_DUNDERS: dict[str, tuple[Callable, int]] = {
    **{f"__{name}__": (getattr(operator, f"{name}_" if name in ("and", "or") else name), 1) for name in (
        "add", "iadd", "mul", "imul", "eq", "ne", "lt", "le", "gt", "ge", "and", "or", "xor", "sub",
        "iand", "ior", "ixor", "isub", "getitem", "contains")},
    "__rmul__": (lambda a, b: operator.mul(b, a), 1),
    "__len__": (len, 0),
    "__iter__": (iter, 0),
}
_COMPARISONS = {"__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__"}
_KINDS = (list, tuple, dict, (set, frozenset))


def _call_operator_dunder(tx, owner: Value, name: str, args: list[Value], kwargs: dict[str, Value]) -> Value:
    op, arity = _OPERATOR_DUNDERS[name]
    if kwargs or len(args) != arity:
        error = TypeError(f"{name}() takes exactly {arity} argument{'s' if arity != 1 else ''} ({len(args)} given)")
        raise GraphBreak("op-error", str(error), exception=error)
    if name in _COMPARISONS and not _same_kind(owner.python_type(), args[0].python_type()):
        return ConstantValue(NotImplemented)  # the reflected operation decides, as in CPython
    if name == "__rmul__":
        return tx.binary_op(operator.mul, args[0], owner)
    if name == "__getitem__":
        return owner.getitem(tx, args[0])
    if arity == 0:
        return tx.call(tx.wrap_constant_object(op), [owner], {})
    return tx.binary_op(op, owner, args[0])


def _same_kind(a: type, b: type) -> bool:
    return any(issubclass(a, kind) and issubclass(b, kind) for kind in _KINDS)
