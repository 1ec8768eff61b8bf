"""Instances of user subclasses of dict, set, frozenset and tuple made inside the compiled function.

Such an instance is the symbolic container of its builtin base (`DictValue`, `SetValue`,
`TupleValue`) with `cls` set to the subclass: items, iteration, `len`, `in` and the builtin
methods behave as the base's, and an attribute the subclass defines in Python (a method, a
property, a class constant) is found first, as Python's lookup finds it. `super().add(v)` or
`set.add(self, v)` inside such a method reaches the base's implementation.

This module holds what the subclass defines (whether it is a plain subclass, its Python
attributes) and sits below containers.py, which asks it; subclass_instances.py, above the
containers, makes the instances (`cls(...)`, `base.__new__(cls)`).

A dict subclass's `__getitem__`, `__setitem__` and `__delitem__` written in Python are inlined
where Python calls them (subscripts; dict's C methods bypass them). Subclasses that change the
base's behaviour through other dunder methods (`__iter__`, `__eq__`, a `__getattr__` ...) or a
metaclass are not modelled: creating one is still a graph break. Attribute dunders that are
dict's own methods (`__getattr__ = dict.get`: `ROUTED_ATTRIBUTES`) are: attribute access is item access. `__init__` in Python is inlined; the base's own `__init__` fills the items.
"""

from __future__ import annotations

import abc
import collections
import types
from typing import Any, Callable

from ..breaks import GraphBreak
from .base import Value, lookup_static
from .functions import FunctionValue, MethodValue

_BASES = (dict, set, frozenset, tuple)

# Class attributes a plain subclass has without changing how the base behaves.
_NEUTRAL_DUNDERS = {
    "__module__", "__qualname__", "__doc__", "__dict__", "__weakref__", "__init__", "__annotations__",
    "__firstlineno__", "__static_attributes__", "__orig_bases__", "__parameters__", "__slots__", "__classcell__",
    "__new__",  # makes the instance (inlined by `instantiate`), changes none of its behaviour
}


ROUTED_ATTRIBUTES = {
    "__getattr__": ("get", "__getitem__"), "__setattr__": ("__setitem__",), "__delattr__": ("__delitem__",),
}
"""A dict subclass whose attribute dunders are dict's own methods (`__getattr__ = dict.get`,
`__setattr__ = dict.__setitem__`: attribute access as item access) is still a dict to capture:
an attribute that normal lookup does not find is the item of that name."""


def python_getattr(cls: type) -> types.FunctionType | None:
    """The subclass's `__getattr__` written in Python, or None."""
    method, owner = lookup_static(cls, "__getattr__")
    return method if isinstance(method, types.FunctionType) and owner not in _BASES else None


def routed_attribute(cls: type, dunder: str) -> str | None:
    """The dict method `cls`'s `dunder` is (see ROUTED_ATTRIBUTES), or None."""
    method = lookup_static(cls, dunder)[0]
    return next((name for name in ROUTED_ATTRIBUTES.get(dunder, ()) if method is getattr(dict, name)), None)


def neutral_dunder(klass: type, name: str, base: type) -> bool:
    """Whether the class attribute `name` of `klass` keeps `base`'s behaviour: a routed one (see
    above), or a `__getattr__` written in Python (inlined where normal lookup fails)."""
    if base is not dict or name not in ROUTED_ATTRIBUTES:
        return False
    value = vars(klass)[name]
    return any(value is getattr(dict, method) for method in ROUTED_ATTRIBUTES[name]) or \
        name == "__getattr__" and isinstance(value, types.FunctionType)


MADE_BY_KIND: dict[type, Callable[[type], Value]] = {}
"""The empty symbolic value of an instance of a subclass of a modelled container type other
than the builtin base (collections.OrderedDict: polyfills/collections.py registers it), by that
type: its own methods (move_to_end) come with the value."""

_MODELLED_KINDS = (collections.OrderedDict,)
"""Types between a subclass and its builtin base whose behaviour a symbolic value models."""


def container_base(cls: type) -> type | None:
    """The builtin container `cls` derives from, when it is a plain subclass of one defined in Python."""
    if not isinstance(cls, type) or cls in _BASES or type(cls) not in (type, abc.ABCMeta):
        return None
    base = next((b for b in cls.__mro__ if b in _BASES), None)
    if base is None or getattr(cls, "_fields", None) is not None:  # namedtuples have their own value
        return None
    neutral = _NEUTRAL_DUNDERS | (_SUBSCRIPT_DUNDERS if base is dict else set())
    for klass in cls.__mro__[:cls.__mro__.index(base)]:
        if klass in _MODELLED_KINDS and klass in MADE_BY_KIND:
            continue  # its behaviour is its value's (OrderedDictValue)
        if klass.__module__ in ("builtins", "collections"):  # defaultdict, Counter: C behaviour
            return None
        if any(n.startswith("__") and n.endswith("__") and n not in neutral and not neutral_dunder(klass, n, base)
               for n in vars(klass)):
            return None
        if any(n in _SUBSCRIPT_DUNDERS and not isinstance(v, types.FunctionType) for n, v in vars(klass).items()):
            return None
    return base


_SUBSCRIPT_DUNDERS = {"__getitem__", "__setitem__", "__delitem__"}
"""Dunders of a dict subclass that only `d[k]`, `d[k] = v` and `del d[k]` call (dict's own C methods,
update() and the constructor among them, do not): written in Python, they are inlined there."""


def new_container(cls: type, items, attributes=None) -> Any:
    """An instance of the subclass `cls` holding `items` (and `attributes`, written in the function),
    made without running its Python __new__ or __init__."""
    base = next(b for b in cls.__mro__ if b in _BASES)
    if base in (tuple, frozenset):
        obj = base.__new__(cls, items)
    else:
        obj = base.__new__(cls)
    if attributes:
        obj.__dict__.update(attributes)
    if base in (tuple, frozenset):
        return obj
    if isinstance(obj, collections.OrderedDict):  # its C bookkeeping of the order, not dict's
        for key, value in dict(items).items():
            collections.OrderedDict.__setitem__(obj, key, value)
    elif base is dict:
        dict.update(obj, items)
    else:
        set.update(obj, items)
    return obj


def subclass_attribute(tx, value: Value, name: str) -> Value | None:
    """The attribute `name` as the subclass defines it in Python, or None where the base answers."""
    cls = value.python_type()
    attr, owner = lookup_static(cls, name)
    if owner is None or owner in _BASES or owner is object or owner.__module__ in ("builtins", "collections"):
        return None
    if isinstance(attr, types.FunctionType):
        return MethodValue(value, FunctionValue(attr))
    if isinstance(attr, property) and isinstance(attr.fget, types.FunctionType):
        return tx.call(FunctionValue(attr.fget), [value], {})
    if isinstance(attr, classmethod):
        return MethodValue(tx.wrap_constant_object(cls), FunctionValue(attr.__func__))
    if isinstance(attr, staticmethod):
        return FunctionValue(attr.__func__)
    if not hasattr(attr, "__get__"):
        return tx.wrap_constant_object(attr)
    raise GraphBreak("getattr", f"{cls.__name__}.{name} is a {type(attr).__name__}")
