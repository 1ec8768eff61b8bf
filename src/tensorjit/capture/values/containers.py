"""Python containers whose items are symbolic values.

Lists and dicts are mutable: one `ListValue` object is shared by every stack
slot and local that refers to the same list, so mutations are seen by all of
them, as in Python. A container that came from outside the compiled function
(it has a `source`) and is mutated records that in `mutated`; the frame's
code generator writes its final contents back after the graph runs.
"""

from __future__ import annotations

import types
from typing import Any

import torch

from ..breaks import GraphBreak
from ..sources import AttrSource, ItemSource
from .base import ConstantValue, Value, lookup_static
from .container_subclasses import container_base, new_container, python_getattr, routed_attribute, subclass_attribute
from .functions import FunctionValue, MethodValue
from .method_table import call_container_method, has_operator_dunder


def _record_mutation(container, tx) -> None:
    """A list, dict or set changed: count the write, and if it came from outside the function,
    write its contents back after the graph."""
    tx.output.container_writes += 1
    if container.source is not None and not container.mutated:
        container.mutated = True
        tx.output.record_mutation(container)


def _constants(values: list[Value]) -> list[Any]:
    return [v.constant() for v in values]


class SequenceValue(Value):
    items: list[Value]

    def is_constant(self) -> bool:
        return all(v.is_constant() for v in self.items)

    def unpack(self, tx) -> list[Value]:
        return list(self.items)

    def truth(self, tx) -> bool:
        return bool(self.items)

    def getitem(self, tx, index: Value) -> Value:
        key = index.constant()
        if isinstance(key, slice):
            return self.rebuild(self.items[key])
        try:
            return self.items[key]
        except (IndexError, TypeError) as e:
            raise GraphBreak("op-error", f"{type(e).__name__}: {e}", exception=e)

    def rebuild(self, items: list[Value]) -> "SequenceValue":
        raise NotImplementedError


class TupleValue(SequenceValue):
    """A tuple, namedtuple or torch.Size of values; `cls` is the Python class."""

    def __init__(self, items: list[Value], cls: type = tuple, source=None) -> None:
        self.items = list(items)
        self.cls = cls
        self.source = source

    def python_type(self) -> type:
        return self.cls

    def constant(self) -> Any:
        values = _constants(self.items)
        if self.cls is tuple:
            return tuple(values)
        if self.cls is torch.Size:
            return torch.Size(values)
        if _subclass(self.cls):
            return new_container(self.cls, values)
        if hasattr(self.cls, "n_sequence_fields") and not _is_namedtuple(self.cls):  # a C struct sequence
            try:
                return self.cls(values)
            except TypeError:  # the interpreter version record's type makes no instances: a tuple compares and hashes alike
                return tuple(values)
        return self.cls(*values)

    def rebuild(self, items):
        plain = _is_namedtuple(self.cls) or hasattr(self.cls, "n_sequence_fields")  # their slices are tuples
        return TupleValue(items, tuple if plain else self.cls)

    def getattr(self, tx, name: str) -> Value:
        written = tx.output.attribute_overlay.get((id(self), name))  # assigned in the function
        if written is not None:
            return written
        attributes = getattr(self, "instance_attributes", None)  # a namedtuple subclass instance from outside
        if attributes is not None and name in attributes and not _class_data_descriptor(self.cls, name):
            return tx.wrap(attributes[name], AttrSource(self.source, name))
        found = subclass_instance_attribute(self, name) or _subclass_attribute(tx, self, name)
        if found is not None:
            return found
        fields = _field_names(self.cls)
        if name in fields:
            return self.items[fields.index(name)]
        if name in ("count", "index") or name == "numel" and self.cls is torch.Size:
            return ContainerMethodValue(self, name)
        if name == "_asdict" or name == "_replace":
            return ContainerMethodValue(self, name)
        return _class_attribute(tx, self, name)

    def reconstruct(self, cg) -> str:
        if self.source is not None:
            return cg.source(self.source)
        parts = ", ".join(cg.value(v) for v in self.items)
        if self.cls is tuple:
            return f"({parts},)" if self.items else "()"
        cls = cg.constant(self.cls)
        if _is_namedtuple(self.cls):
            return f"{cls}({parts})"
        if _subclass(self.cls):
            return f"{cg.helper('new_container')}({cls}, ({parts},){_attributes_text(cg, self)})" if self.items \
                else f"{cg.helper('new_container')}({cls}, (){_attributes_text(cg, self)})"
        return f"{cls}(({parts},))" if self.items else f"{cls}()"

    def __repr__(self) -> str:
        return f"TupleValue({self.items!r})"


def _class_attribute(tx, value: TupleValue, name: str) -> Value:
    """A method, property or constant of a tuple subclass (`class P(namedtuple(...))` with its own methods)."""
    attr, owner = lookup_static(value.cls, name)
    if owner not in (None, tuple, object):
        if isinstance(attr, types.FunctionType):
            return MethodValue(value, FunctionValue(attr))
        if isinstance(attr, property) and isinstance(attr.fget, types.FunctionType):
            return tx.call(FunctionValue(attr.fget), [value], {})
        if isinstance(attr, (int, float, str, bool, tuple, type(None))):
            return tx.wrap_constant_object(attr)
    if has_operator_dunder(value, name):
        return ContainerMethodValue(value, name)
    raise _attribute_break(value, name)


def _subclass(cls: type) -> bool:
    return container_base(cls) is not None


def _attributes_text(cg, value: Value) -> str:
    """The attributes written on a subclass instance made in the function, as new_container's argument."""
    attributes = getattr(value, "attributes", None)
    if not attributes:
        return ""
    return ", {" + ", ".join(f"{k!r}: {cg.value(v)}" for k, v in attributes.items()) + "}"


def subclass_instance_attribute(value: Value, name: str) -> Value | None:
    """An attribute written in the function on a subclass instance made there."""
    return (getattr(value, "attributes", None) or {}).get(name)


def _class_data_descriptor(cls: type, name: str) -> bool:
    for klass in cls.__mro__:
        if name in vars(klass):
            kind = type(vars(klass)[name])
            return hasattr(kind, "__set__") or hasattr(kind, "__delete__")
    return False


def _subclass_attribute(tx, value: Value, name: str) -> Value | None:
    """An attribute a user subclass defines in Python, found before the base's own (a subclass
    instance from outside, of dict or OrderedDict, was vetted by the builder: `instance_attributes`)."""
    from_outside = isinstance(value, DictValue) and getattr(value, "instance_attributes", None) is not None
    if not _subclass(value.python_type()) and not from_outside:
        return None
    return subclass_attribute(tx, value, name)


def written_namespace(tx, value: Value) -> DictValue | None:
    """The object's __dict__ as capture holds it, once the function wrote to it (`obj.__dict__[k] = v`)."""
    if value.source is None:
        return None
    known = tx.output.wrapped.get(AttrSource(value.source, "__dict__"))
    if known is None or not isinstance(known[1], DictValue) or not known[1].mutated:
        return None
    return known[1]


def _python_getattr(cls: type):
    return python_getattr(cls) if cls is not dict else None


def _routed_attribute(cls: type, dunder: str) -> str | None:
    return routed_attribute(cls, dunder) if cls is not dict else None


def _attribute_break(value: Value, name: str) -> GraphBreak:
    """An attribute the container's real type lacks raises AttributeError, as in Python (hasattr sees False)."""
    cls = value.python_type()
    if not hasattr(cls, name):
        error = AttributeError(f"{cls.__name__!r} object has no attribute {name!r}")
        return GraphBreak("attribute-error", str(error), exception=error)
    return GraphBreak("getattr", f"{cls.__name__} attribute {name!r}")


def _field_names(cls: type) -> tuple:
    """Field names of a namedtuple or a struct sequence (torch.return_types.max, os.stat_result)."""
    if _is_namedtuple(cls):
        return cls._fields
    return getattr(cls, "__match_args__", ()) if cls is not tuple else ()


def _is_namedtuple(cls: type) -> bool:
    return isinstance(cls, type) and issubclass(cls, tuple) and hasattr(cls, "_fields")


class ListValue(SequenceValue):
    def __init__(self, items: list[Value], source=None) -> None:
        self.items = list(items)
        self.source = source
        self.mutated = False

    def python_type(self) -> type:
        return list

    def constant(self) -> Any:
        return _constants(self.items)

    def rebuild(self, items):
        return ListValue(items)

    def getattr(self, tx, name: str) -> Value:
        if name in _LIST_METHODS:
            return ContainerMethodValue(self, name)
        if has_operator_dunder(self, name):
            return ContainerMethodValue(self, name)
        raise _attribute_break(self, name)

    def mutate(self, tx) -> None:
        _record_mutation(self, tx)

    def reconstruct(self, cg) -> str:
        if self.source is not None:
            return cg.source(self.source)
        return "[" + ", ".join(cg.value(v) for v in self.items) + "]"

    def __repr__(self) -> str:
        return f"ListValue({self.items!r})"


_LIST_METHODS = {"append", "extend", "pop", "insert", "clear", "copy", "count", "index", "remove",
                 "reverse", "sort", "__len__", "__getitem__", "__setitem__", "__delitem__"}


class DictValue(Value):
    """A dict (or OrderedDict) whose keys are compile-time constants."""

    def __init__(self, items: dict[Any, Value], cls: type = dict, source=None) -> None:
        self.items = dict(items)
        self.cls = cls
        self.source = source
        self.mutated = False

    def python_type(self) -> type:
        return self.cls

    def is_constant(self) -> bool:
        return all(v.is_constant() for v in self.items.values())

    def constant(self) -> Any:
        pairs = [(k, v.constant()) for k, v in self.items.items()]
        return new_container(self.cls, pairs) if _subclass(self.cls) else self.cls(pairs)

    def truth(self, tx) -> bool:
        return bool(self.items)

    def unpack(self, tx) -> list[Value]:
        return [ConstantValue(k) for k in self.items]

    def getitem(self, tx, key: Value) -> Value:
        k = key.constant()
        if k not in self.items:
            raise GraphBreak("op-error", f"KeyError: {k!r}", exception=KeyError(k))
        return self.items[k]

    def getattr(self, tx, name: str) -> Value:
        attributes = getattr(self, "instance_attributes", None)  # a dict subclass instance from outside
        if attributes is not None:
            if name == "__dict__":  # its namespace: writes to it are replayed, and read back below
                return tx.wrap(attributes, AttrSource(self.source, "__dict__"))
            namespace = written_namespace(tx, self)
            if not _class_data_descriptor(self.cls, name):
                if namespace is not None and name in namespace.items:
                    return namespace.items[name]
                if namespace is None and name in attributes:
                    return tx.wrap(attributes[name], AttrSource(self.source, name))
        found = subclass_instance_attribute(self, name) or _subclass_attribute(tx, self, name)
        if found is not None:
            return found
        if name in _DICT_METHODS:
            return ContainerMethodValue(self, name)
        if has_operator_dunder(self, name):
            return ContainerMethodValue(self, name)
        routed = _routed_attribute(self.cls, "__getattr__") if not hasattr(self.cls, name) else None
        if routed is not None:  # `__getattr__ = dict.get`: the item of that name
            return tx.call(ContainerMethodValue(self, routed), [ConstantValue(name)], {})
        fallback = _python_getattr(self.cls) if not hasattr(self.cls, name) else None
        if fallback is not None:  # normal lookup failed: the class's own __getattr__ answers
            return tx.call(FunctionValue(fallback), [self, ConstantValue(name)], {})
        raise _attribute_break(self, name)

    def mutate(self, tx) -> None:
        _record_mutation(self, tx)

    def reconstruct(self, cg) -> str:
        if self.source is not None:
            return cg.source(self.source)
        body = ", ".join(f"{cg.constant(k)}: {cg.value(v)}" for k, v in self.items.items())
        if self.cls is dict:
            return "{" + body + "}"
        if _subclass(self.cls):
            return f"{cg.helper('new_container')}({cg.constant(self.cls)}, {{{body}}}{_attributes_text(cg, self)})"
        return f"{cg.constant(self.cls)}({{{body}}})"

    def __repr__(self) -> str:
        return f"DictValue({self.items!r})"


_DICT_METHODS = {"__init__", "get", "items", "keys", "values", "update", "pop", "popitem", "setdefault", "copy", "clear",
                 "__contains__", "__getitem__", "__len__"}


class MappingProxyValue(DictValue):
    """types.MappingProxyType(d): a read-only view of the dict `mapping`, which it sees change.

    Its items are the dict's own (a write to the dict through another name shows through it);
    every write through the view raises as Python's does. Made in the function, or from outside
    (`source`: the proxy itself; the dict it views was wrapped through `ProxiedMappingSource`,
    so a path that reaches the same dict shares one value with it)."""

    def __init__(self, mapping: DictValue, source=None) -> None:
        self.mapping = mapping
        self.cls = types.MappingProxyType
        self.source = source
        self.mutated = False

    @property
    def items(self) -> dict:
        return self.mapping.items

    def constant(self) -> Any:
        return types.MappingProxyType(self.mapping.constant())

    def mutate(self, tx) -> None:
        error = TypeError("'mappingproxy' object does not support item assignment")
        raise GraphBreak("op-error", str(error), exception=error)

    def getattr(self, tx, name: str) -> Value:
        if name in _PROXY_METHODS:
            return ContainerMethodValue(self, name)
        error = AttributeError(f"'mappingproxy' object has no attribute {name!r}")
        raise GraphBreak("attribute-error", str(error), exception=error)

    def reconstruct(self, cg) -> str:
        if self.source is not None:
            return cg.source(self.source)
        return f"{cg.constant(types.MappingProxyType)}({cg.value(self.mapping)})"

    def __repr__(self) -> str:
        return f"MappingProxyValue({self.mapping!r})"


_PROXY_METHODS = {"get", "items", "keys", "values", "copy", "__contains__", "__getitem__", "__len__"}


class SetValue(Value):
    """A set or frozenset (`cls`) of constants, keyed by their values."""

    def __init__(self, items: list[Value], cls: type = set, exact: Any = None) -> None:
        self.cls = cls
        self.items: dict[Any, Value] = {}
        for v in items:
            self.items[set_key(v)] = v
        self.exact = exact
        """The real set this value was made from at capture time (set algebra on constants), while
        unchanged: rebuilt from its items, a set can iterate in another order than the one the
        program computed (the hash table's layout depends on how it was built)."""

    def mutate(self, tx) -> None:
        self.exact = None
        _record_mutation(self, tx)

    def python_type(self) -> type:
        return self.cls

    def is_constant(self) -> bool:
        return not _holds_tensors(self.items)

    def constant(self) -> Any:
        if _holds_tensors(self.items):
            raise GraphBreak("not-constant", "a set holding tensors is not a compile-time constant")
        return new_container(self.cls, self.items) if _subclass(self.cls) else self.cls(self.items)

    def truth(self, tx) -> bool:
        return bool(self.items)

    def unpack(self, tx) -> list[Value]:
        if _holds_tensors(self.items):
            raise GraphBreak("set-order", "iterating a set of tensors: its order is their addresses' at run time")
        return list(self.items.values())

    def getattr(self, tx, name: str) -> Value:
        found = subclass_instance_attribute(self, name) or _subclass_attribute(tx, self, name)
        if found is not None:
            return found
        if name in _SET_METHODS and hasattr(self.cls, name):  # a frozenset has no mutating methods
            return ContainerMethodValue(self, name)
        if has_operator_dunder(self, name):
            return ContainerMethodValue(self, name)
        raise _attribute_break(self, name)

    def reconstruct(self, cg) -> str:
        if self.source is not None:  # the program's own set
            return cg.source(self.source)
        if self.exact is not None and not _subclass(self.cls):  # its iteration order, exactly
            return cg.constant(self.exact) if self.cls is frozenset else f"{cg.constant(self.exact)}.copy()"
        # made anew on each call: a constant would hand every call the same (mutable) set
        items = ", ".join(cg.value(v) for v in self.items.values())
        if _subclass(self.cls):
            return f"{cg.helper('new_container')}({cg.constant(self.cls)}, [{items}]{_attributes_text(cg, self)})"
        if self.cls is frozenset:
            return f"frozenset({{{items}}})" if items else "frozenset()"
        return f"{{{items}}}" if items else "set()"


def identity_key(value: Value) -> Any:
    """The object a value stands for, as a dict or set key: its constant, or the Python function
    it wraps (functions hash and compare by identity)."""
    fn = getattr(value, "fn", None)
    return fn if isinstance(fn, types.FunctionType) and not value.is_constant() else value.constant()


class TensorKey:
    """A tensor as a set member: by identity, as Python hashes tensors (a parameter in
    nn.Module's `memo` set). Its place in a real set's iteration depends on its address, so a
    set holding one is not iterated, popped or read as a constant during capture."""

    __slots__ = ("example",)

    def __init__(self, example) -> None:
        self.example = example

    def __hash__(self) -> int:
        return id(self.example)

    def __eq__(self, other) -> bool:
        return isinstance(other, TensorKey) and other.example is self.example


KEYED_BY_IDENTITY: set[type] = set()
"""Value classes (exactly these, not subclasses) whose set members are their example's identity:
tensors.py adds TensorValue. (NumPy arrays, its subclass, are unhashable, as in Python.)"""


def set_key(value: Value) -> Any:
    """The key `value` is a member of a set under: a tensor by identity, anything else as a dict key."""
    if type(value) in KEYED_BY_IDENTITY:
        return TensorKey(value.example)
    return identity_key(value)


def _holds_tensors(items: dict) -> bool:
    return any(type(k) is TensorKey for k in items)


def member_key(value: Value) -> Any:
    """The key `value` is stored under when added to a set (unhashable: Python's TypeError)."""
    key = set_key(value)
    try:
        hash(key)
    except TypeError as error:
        raise GraphBreak("op-error", str(error), exception=error) from None
    return key


def hash_key(value: Value, coerce_sets: bool) -> Any:
    """The key `value` looks up in a dict or set (coerce_sets: in a set). A set looks up a set as
    the equal frozenset, as CPython's set does; anything else unhashable raises the TypeError
    Python raises."""
    key = set_key(value) if coerce_sets else identity_key(value)
    try:
        hash(key)
    except TypeError as error:
        if coerce_sets and isinstance(key, set):
            return frozenset(key)
        raise GraphBreak("op-error", str(error), exception=error) from None
    return key


_SET_METHODS = {"__init__", "add", "update", "discard", "remove", "pop", "clear", "copy", "union", "intersection", "difference",
                "issubset", "issuperset", "__contains__", "symmetric_difference", "isdisjoint",
                "intersection_update", "difference_update", "symmetric_difference_update"}


class SliceValue(Value):
    def __init__(self, parts: list[Value]) -> None:
        self.parts = parts

    def python_type(self) -> type:
        return slice

    def is_constant(self) -> bool:
        return all(p.is_constant() for p in self.parts)

    def constant(self) -> Any:
        return slice(*_constants(self.parts))

    def reconstruct(self, cg) -> str:
        return f"slice({', '.join(cg.value(p) for p in self.parts)})"


class DictViewValue(Value):
    """`d.keys()`, `d.values()` or `d.items()`: a live view, reading the dict's contents when used."""

    def __init__(self, mapping: DictValue, kind: str) -> None:
        self.mapping = mapping
        self.kind = kind

    def python_type(self) -> type:
        return type(getattr({}, self.kind)())

    def current(self) -> list[Value]:
        entries = self.mapping.items
        if self.kind == "keys":
            return [ConstantValue(k) for k in entries]
        if self.kind == "values":
            return list(entries.values())
        return [TupleValue([ConstantValue(k), v]) for k, v in entries.items()]

    def unpack(self, tx) -> list[Value]:
        return self.current()

    def truth(self, tx) -> bool:
        return bool(self.mapping.items)

    def is_constant(self) -> bool:
        return self.kind == "keys" or self.mapping.is_constant()

    def constant(self) -> Any:
        """A real view of the same kind over the current contents (set operations, equality)."""
        if self.kind == "keys":
            return dict.fromkeys(self.mapping.items).keys()
        return getattr({k: v.constant() for k, v in self.mapping.items.items()}, self.kind)()

    def getattr(self, tx, name: str) -> Value:
        if name in ("__len__", "__contains__", "isdisjoint"):
            return ContainerMethodValue(self, name)
        raise GraphBreak("getattr", f"dict view attribute {name!r}")

    def reconstruct(self, cg) -> str:
        return f"{cg.value(self.mapping)}.{self.kind}()"

    def __repr__(self) -> str:
        return f"DictViewValue({self.kind}, {self.mapping!r})"


class IteratorValue(Value):
    """An iterator; `position` counts items taken.

    Over a list (`over`), it reads the list as it is at each step, as Python's list
    iterator does; over a dict, set or dict view it fails, as Python does, when the
    size changed since it was made. Otherwise its items are fixed at capture time."""

    def __init__(self, items: list[Value] | None, over: Value | None = None, kind: type | None = None) -> None:
        self._items = items
        self.over = over
        self.size = _size(over) if over is not None else None
        self.position = 0
        self.kind = kind  # the class of the C iterator it stands for (zip, map...), when not a list's

    @property
    def items(self) -> list[Value]:
        over = self.over
        if over is None:
            return self._items
        if isinstance(over, ListValue):
            return over.items
        if _size(over) != self.size:
            kind = "set" if isinstance(over, SetValue) else "dictionary"
            error = RuntimeError(f"{kind} changed size during iteration")
            raise GraphBreak("op-error", str(error), exception=error)
        return over.current() if isinstance(over, DictViewValue) else over.unpack(None)

    def python_type(self) -> type:
        return self.kind or type(iter([]))

    def next(self) -> Value | None:
        items = self.items
        if self.position >= len(items):
            return None
        value = items[self.position]
        self.position += 1
        return value

    def unpack(self, tx) -> list[Value]:
        items = self.items
        rest = items[self.position:]
        self.position = len(items)
        return rest

    def getattr(self, tx, name):
        if name in ("__next__", "__iter__") or name == "__length_hint__" and self.over is not None:
            return ContainerMethodValue(self, name)
        if not hasattr(self.python_type(), name):  # C iterators have no attributes of their own
            error = AttributeError(f"'{self.python_type().__name__}' object has no attribute '{name}'")
            raise GraphBreak("attribute-error", str(error), exception=error)
        return super().getattr(tx, name)

    def length_hint(self) -> int:
        """What `__length_hint__` answers for an iterator over a list, dict, set or dict view: the
        items not yet taken (a list's length now, as its iterator reads the list at each step); 0
        for a dict or set whose size changed, which CPython's iterator reports instead of raising."""
        over = self.over
        if isinstance(over, ListValue):
            return max(len(over.items) - self.position, 0)
        return self.size - self.position if _size(over) == self.size else 0

    def reconstruct(self, cg) -> str:
        if isinstance(self.over, ListValue):  # over the same list, so it sees later appends
            return f"{cg.helper('advanced_iterator')}({cg.value(self.over)}, {self.position})"
        rest = ", ".join(cg.value(v) for v in self.items[self.position:])
        return f"iter([{rest}])"


class InputIteratorValue(IteratorValue):
    """A list, tuple or range iterator that arrived as an input: a loop's iterator reaching the
    resume function after a graph break in the loop's body.

    Items are read by how far ahead of the iterator they are (`take(k)`), and the entry is guarded
    only on the items taken and on how many are left (`guard_left`: at least one more than taken,
    or exactly as many where capture saw the end). Guarding the iterator's position instead made
    the next iteration miss the entry: a loop of N iterations compiled its resume function N times.
    The real iterator is this value's source; after the graph it is advanced by what capture took
    (`started` records that once, as a write replayed after the results are read)."""

    def __init__(self, kind: type, left: int, take, guard_left, started) -> None:
        super().__init__([])
        self.kind = kind
        self.left = left
        self._take = take
        self._guard_left = guard_left
        self._started = started
        self._taken: list[Value] = []

    def python_type(self) -> type:
        return self.kind

    @property
    def items(self) -> list[Value]:
        self._guard_left("constant", self.left)
        return [self._item(k) for k in range(self.left)]

    def _item(self, k: int) -> Value:
        while len(self._taken) <= k:
            self._taken.append(self._take(len(self._taken)))
        return self._taken[k]

    def next(self) -> Value | None:
        k = self.position
        if k >= self.left:
            self._guard_left("constant", self.left)
            return None
        self._guard_left("at_least", k + 1)
        if k == 0:
            self._started(self)
        self.position += 1
        return self._item(k)

    def unpack(self, tx) -> list[Value]:
        rest = self.items[self.position:]
        if self.position < self.left and self.position == 0:
            self._started(self)
        self.position = self.left
        return rest

    def reconstruct(self, cg) -> str:
        return cg.source(self.source)


def _size(container: Value) -> int:
    return len(container.mapping.items) if isinstance(container, DictViewValue) else len(container.items)


def each_item(tx, iterable: Value):
    """The items of `iterable` one at a time, as list.extend, set.update and dict.update read an
    iterator: each is added before the next is read, which a generator's body may observe (it may
    read the container being filled). Fixed items are read at once."""
    iterator = tx.iterate(iterable)
    if type(iterator) is IteratorValue:
        yield from iterator.unpack(tx)
        return
    while (item := iterator.next()) is not None:
        yield item


def live_iterator(container: Value) -> IteratorValue | None:
    """iter(container) for the containers whose iterators see (or refuse) later mutation."""
    if isinstance(container, (ListValue, DictValue, SetValue, DictViewValue)):
        return IteratorValue(None, over=container)
    return None


class ContainerMethodValue(Value):
    """A bound method of a symbolic container, such as `xs.append`."""

    def __init__(self, owner: Value, name: str) -> None:
        self.owner = owner
        self.name = name

    def python_type(self) -> type:
        return type([].append)

    def reconstruct(self, cg) -> str:
        return f"{cg.value(self.owner)}.{self.name}"

    def getattr(self, tx, name: str) -> Value:
        if name == "__name__":
            return ConstantValue(self.name)
        if name == "__qualname__":
            return ConstantValue(f"{self.owner.python_type().__name__}.{self.name}")
        if name == "__self__":
            return self.owner
        return super().getattr(tx, name)

    def call(self, tx, args, kwargs) -> Value:
        return call_container_method(tx, self.owner, self.name, args, kwargs)
