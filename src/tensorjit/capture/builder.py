"""Turning real Python objects into symbolic values, installing guards as it goes.

`wrap(tx, obj, source)` is called whenever capture reads a value from outside
the function (an argument, a global, a closure cell, an attribute). What it
guards is what capture assumed: the type and identity of objects, the value of
numbers and strings, the metadata of tensors, the length of containers.
"""

from __future__ import annotations

import collections
import contextlib
import enum
import os
import functools
import gc
import types
import typing
from typing import Any

import torch

from . import cpython
from .codegen import GradExit
from .flex_attention import flex_attention_value
from .guards import Guard
from .higher_order import higher_order_value
from .loops import loop_value
from .markers import marked_value
from .polyfills.functools import wrap_partial
from .sources import (AttrSource, ItemAheadSource, ItemSource, ItemsLeftSource, ProxiedMappingSource, Source,
                      item_ahead, items_left)
from .values.base import ConstantValue, Value
from .values.builtins import BuiltinValue, has_handler
from .values.container_subclasses import neutral_dunder
from .values.containers import DictValue, InputIteratorValue, ListValue, MappingProxyValue, SetValue, TupleValue
from .values.numpy import constant_array, is_ndarray, is_numpy_constant, viewable, wrap_ndarray
from .values.functions import FunctionValue, MethodValue, is_torch_operation
from .values.objects import EnvironValue, NNModuleValue, ObjectValue
from .values.tensors import SymbolicIntValue, TensorValue
from .values.torch_calls import TorchFunctionValue

_CONSTANT_TYPES = (int, float, bool, str, type(None), bytes, complex, torch.dtype, torch.device,
                   range, slice, type(Ellipsis), enum.Enum, torch.memory_format, torch.layout)


def wrap(tx, obj: Any, source: Source | None) -> Value:
    """The symbolic value of `obj`, read through `source`; one value per source per capture."""
    if source is None:
        return wrap_constant_object(tx, obj)
    known = tx.output.wrapped.get(source)
    if known is not None and known[0] is obj:
        return known[1]
    if _shared_container(obj):
        # One value per mutable container, whichever path reached it: its mutations must
        # accumulate in one place. The guard keeps the two paths pointing at one object.
        seen = tx.output.wrapped_by_id.get(id(obj))
        if seen is not None:
            tx.output.guard(Guard(source, "same", other=seen[2]))
            return seen[1]
        if any(container is obj for container in tx.output.wrapping.values()):
            # a container that holds itself: its symbolic value would hold itself too; an opaque
            # object, identity-guarded, whose every use is left to Python
            tx.output.guard(Guard(source, "id", obj))
            return ObjectValue(obj, source)
    value = _wrap_new(tx, obj, source)
    tx.output.wrapped[source] = (obj, value)
    if _shared_container(obj):
        tx.output.wrapped_by_id[id(obj)] = (obj, value, source)
    return value


def _wrap_new(tx, obj: Any, source: Source) -> Value:
    guard = tx.output.guard
    if isinstance(obj, torch.Tensor):
        node, fake = tx.output.add_input(obj, source)
        return TensorValue(node, fake, source, type(obj))
    policy = tx.output.policy
    if tx.output.shape_env is not None and policy is not None and type(obj) in (int, float) \
            and policy.int_symbolic(source, obj, _owner(tx, source)):
        node = tx.output.add_int_input(obj, source)
        value = SymbolicIntValue(node, node.meta["example_value"])
        value.source = source  # rebuilt from the argument itself, not from the graph's outputs
        return value
    if isinstance(obj, _CONSTANT_TYPES) or isinstance(obj, torch.Size) or is_numpy_constant(obj):
        guard(Guard(source, "constant", obj))
        return ConstantValue(obj, source)
    if is_ndarray(obj):
        array = wrap_ndarray(tx, obj, source)
        if array is not None:
            return array
    if isinstance(obj, (list, tuple)) and type(obj) in (list, tuple, torch.Size) or _is_namedtuple(obj) \
            or _is_struct_sequence(obj):
        guard(Guard(source, "type", type(obj)))
        guard(Guard(source, "length", len(obj)))
        with _items_of(tx, source, obj):
            items = [wrap(tx, v, ItemSource(source, i)) for i, v in enumerate(obj)]
        if isinstance(obj, list):
            return ListValue(items, source)
        value = TupleValue(items, type(obj), source)
        if getattr(obj, "__dict__", None) is not None:  # a namedtuple subclass's instance attributes
            guard(Guard(AttrSource(source, "__dict__"), "keys", tuple(obj.__dict__)))
            value.instance_attributes = obj.__dict__
        return value
    if (type(obj) in (dict, collections.OrderedDict) or _plain_dict_subclass(obj)) \
            and not any(isinstance(k, torch.Tensor) for k in obj):
        guard(Guard(source, "type", type(obj)))
        if type(obj) not in (dict, collections.OrderedDict):  # a subclass instance: its own attribute names
            guard(Guard(AttrSource(source, "__dict__"), "keys", tuple(obj.__dict__)))
        guard(Guard(source, "keys", tuple(obj.keys())))
        with _items_of(tx, source, obj):
            items = {k: wrap(tx, v, ItemSource(source, k)) for k, v in obj.items()}
        value = DictValue(items, type(obj), source)
        if type(obj) not in (dict, collections.OrderedDict):
            value.instance_attributes = obj.__dict__
        return value
    if type(obj) in (set, frozenset) and all(type(v) in _SET_ITEM_TYPES for v in obj):
        # A set of plain constants, functions and classes (names to skip, ids seen, ops to
        # treat specially): its contents are guarded (functions and classes by identity), and
        # a set changed in the function is written back like a list or dict.
        guard(Guard(source, "type", type(obj)))
        guard(Guard(source, "set_items", tuple(obj)))
        value = SetValue([ConstantValue(v) if type(v) in _PLAIN_SET_ITEMS else wrap_constant_object(tx, v)
                          for v in obj], type(obj))
        value.source = source
        value.mutated = False
        return value
    if type(obj) is types.MappingProxyType:
        return _wrap_mapping_proxy(tx, obj, source)
    if isinstance(obj, torch.nn.Module):
        # By type, as other objects: every attribute, parameter and hook table capture reads is
        # guarded where it is read, so a module of the same class built anew on each call (in
        # forward, or reaching a resume function after a break) reuses the entry.
        guard(Guard(source, "type", type(obj)))
        return NNModuleValue(obj, source)
    if obj is os.environ:
        return EnvironValue(source)
    if type(obj) in _SEQUENCE_ITERATORS:
        return _wrap_iterator(tx, obj, source)
    if type(obj) is functools.partial:  # guarded by what it holds: an equal partial swapped in is the same
        return wrap_partial(tx, obj, source)
    if isinstance(obj, types.MethodType):
        owner = wrap(tx, obj.__self__, AttrSource(source, "__self__"))
        return MethodValue(owner, wrap(tx, obj.__func__, AttrSource(source, "__func__")), source)
    if isinstance(obj, types.BuiltinMethodType) and type(getattr(obj, "__self__", None)) in (list, dict):
        # `xs.append` loaded before a graph break: a method of the (guarded) container
        owner = wrap(tx, obj.__self__, AttrSource(source, "__self__"))
        return owner.getattr(tx, obj.__name__)
    if isinstance(obj, types.FunctionType) and obj.__closure__:
        _guard_closure(tx, obj, source)
    elif isinstance(obj, types.BuiltinMethodType) and isinstance(getattr(obj, "__self__", None), type):
        # A C classmethod read from its class is bound anew at every read (`torch._C._FunctionBase.apply`,
        # which is what a custom autograd.Function's `apply` is from torch 2.14): guarded by its class
        # and name, not its identity.
        guard(Guard(AttrSource(source, "__self__"), "id", obj.__self__))
        guard(Guard(AttrSource(source, "__name__"), "constant", obj.__name__))
    else:
        guard(Guard(source, "id", obj) if _identity_guarded(obj) else Guard(source, "type", type(obj)))
    return _wrap_callable_or_object(tx, obj, source)


def _wrap_mapping_proxy(tx, obj: types.MappingProxyType, source: Source) -> Value:
    """A mappingproxy from outside: a read-only view of the dict it refers to, which is wrapped
    (and guarded) as any dict is, one value with any other path that reaches it."""
    tx.output.guard(Guard(source, "type", types.MappingProxyType))
    referents = gc.get_referents(obj)
    mapping = wrap(tx, referents[0], ProxiedMappingSource(source)) if len(referents) == 1 else None
    if type(mapping) is not DictValue:
        return ObjectValue(obj, source)
    return MappingProxyValue(mapping, source)


def _shared_container(obj: Any) -> bool:
    return type(obj) in (list, dict, collections.OrderedDict) or isinstance(obj, dict) and _plain_dict_subclass(obj)


def _plain_dict_subclass(obj: Any) -> bool:
    """An instance of a Python subclass of dict or OrderedDict that changes none of their behaviour
    (no dunder methods; methods, properties and constants of its own are found through the class):
    read as the dict it is (`"key" in d`, `d[k]`, `d.items()`), its own attributes read through it
    (their names guarded)."""
    cls = type(obj)
    if not isinstance(obj, dict) or type(cls) is not type or getattr(obj, "__dict__", None) is None \
            or "__slots__" in vars(cls) or not all(type(k) is str for k in obj.__dict__):
        return False
    base = collections.OrderedDict if isinstance(obj, collections.OrderedDict) else dict
    for klass in cls.__mro__[:cls.__mro__.index(base)]:
        if klass.__module__ in ("builtins", "collections"):  # defaultdict, Counter: behaviour of their own
            return False
        if any(n.startswith("__") and n.endswith("__") and n not in _NEUTRAL_CLASS_NAMES
               and not neutral_dunder(klass, n, base) for n in vars(klass)):
            return False
    return True


_NEUTRAL_CLASS_NAMES = {"__module__", "__qualname__", "__doc__", "__dict__", "__weakref__", "__annotations__", "__init__",
                        "__firstlineno__", "__static_attributes__", "__orig_bases__", "__parameters__"}


def _owner(tx, source: Source):
    base = source.base()
    if base is None:
        return None
    if base in tx.output.wrapping:  # an item of a list or dict being wrapped now
        return tx.output.wrapping[base]
    return tx.output.wrapped.get(base, (None,))[0]


@contextlib.contextmanager
def _items_of(tx, source: Source, container):
    """While `container`'s items are wrapped, it is their owner (`_owner`): an LR in an optimizer's
    `param_groups[0]` dict is an item of a plain dict, which automatic dynamic follows."""
    tx.output.wrapping[source] = container
    try:
        yield
    finally:
        del tx.output.wrapping[source]


def _guard_closure(tx, fn: types.FunctionType, source: Source) -> None:
    """A closure is made anew on each call of the function that defines it (a lambda made
    before a graph break reaches the resume function as a new object every time): guard
    what inlining reads, its code, globals and the shape of its defaults, not its identity.
    The contents of its cells and defaults are guarded where they are read."""
    guard = tx.output.guard
    guard(Guard(source, "type", types.FunctionType))
    guard(Guard(AttrSource(source, "__code__"), "id", fn.__code__))
    guard(Guard(AttrSource(source, "__globals__"), "id", fn.__globals__))
    for name in ("__defaults__", "__kwdefaults__"):
        value = getattr(fn, name)
        if value is None:
            guard(Guard(AttrSource(source, name), "constant", None))
        else:
            guard(Guard(AttrSource(source, name), "length", len(value)))
    if fn.__kwdefaults__:
        guard(Guard(AttrSource(source, "__kwdefaults__"), "keys", tuple(fn.__kwdefaults__)))


_SEQUENCE_ITERATORS = {type(iter([])), type(iter(())), type(iter(range(0)))}


_PLAIN_SET_ITEMS = (int, str, bool, float, complex, bytes, type(None))
_SET_ITEM_TYPES = _PLAIN_SET_ITEMS + (types.FunctionType, types.BuiltinFunctionType, type)


def _wrap_iterator(tx, obj: Any, source: Source) -> Value:
    """An iterator over a list, tuple or range, read without advancing it (through __reduce__):
    capture takes items ahead of where it is, and generated code advances it by as many."""
    tx.output.guard(Guard(source, "type", type(obj)))

    def take(ahead: int) -> Value:
        return wrap(tx, item_ahead(obj, ahead), ItemAheadSource(source, ahead))

    def guard_left(kind: str, count: int) -> None:
        tx.output.guard(Guard(ItemsLeftSource(source), kind, count))

    def started(iterator: Value) -> None:
        tx.output.record_iterator_advance(iterator)

    iterator = InputIteratorValue(type(obj), items_left(obj), take, guard_left, started)
    iterator.source = source
    return iterator


def _identity_guarded(obj: Any) -> bool:
    if isinstance(obj, GradExit):  # made anew at each break; a call of it guards what it restores
        return False
    return isinstance(obj, (type, types.FunctionType, types.ModuleType, types.BuiltinFunctionType,
                            types.MethodDescriptorType, types.WrapperDescriptorType, functools.partial)) \
        or callable(obj) and not hasattr(obj, "__dict__")


def _wrap_callable_or_object(tx, obj: Any, source: Source | None) -> Value:
    if obj is cpython.CALL_ADAPTER:  # a NULL stack slot that a resume function received
        return ObjectValue(obj, source)
    marked = marked_value(obj, source)  # allow_in_graph, assume_constant_result, substitute_in_graph
    if marked is not None:
        return marked
    # torch.cond, checkpoint; while_loop, scan, map; flex_attention
    higher_order = higher_order_value(obj, source) or loop_value(obj, source) or flex_attention_value(obj, source)
    if higher_order is not None:
        return higher_order
    if has_handler(obj):  # builtins and library callables with a symbolic meaning (len, itertools.chain, ...)
        return BuiltinValue(obj, source)
    if isinstance(obj, types.FunctionType) and not is_torch_operation(obj):
        return FunctionValue(obj, source)
    if is_torch_operation(obj):
        return TorchFunctionValue(obj, source)
    if isinstance(obj, (types.BuiltinFunctionType, types.MethodDescriptorType, types.WrapperDescriptorType,
                        types.BuiltinMethodType, types.ClassMethodDescriptorType, types.MethodWrapperType)):
        return BuiltinValue(obj, source)
    if isinstance(obj, type) and obj in _BUILTIN_TYPES:
        return BuiltinValue(obj, source)
    return ObjectValue(obj, source)


_BUILTIN_TYPES = {int, float, bool, str, list, tuple, dict, set, frozenset, range, slice, zip, enumerate,
                  reversed, map, filter, type, super, object, complex, bytes, iter, len}


def _is_namedtuple(obj: Any) -> bool:
    """A namedtuple read as the tuple it is: one whose class overrides none of the sequence
    protocol (a Python `__getitem__` would answer `t[0]`, and the item sources that read its
    fields, differently: such an instance is an object, its fields read as attributes)."""
    cls = type(obj)
    if not isinstance(obj, tuple) or not hasattr(cls, "_fields"):
        return False
    own = cls.__mro__[:cls.__mro__.index(tuple)]
    return not any(name in vars(klass) for klass in own for name in _SEQUENCE_PROTOCOL)


_SEQUENCE_PROTOCOL = ("__getitem__", "__iter__", "__len__", "__contains__", "__reversed__")


def _is_struct_sequence(obj: Any) -> bool:
    """A C struct sequence read from outside whose fields are all items (the interpreter's version,
    torch.return_types.max): read as the tuple it is, its fields by name through the items. Ones
    with fields beyond the items (os.stat_result, time.struct_time) stay objects."""
    cls = type(obj)
    return cls.__mro__[1:] == (tuple, object) and isinstance(getattr(cls, "n_sequence_fields", None), int) \
        and getattr(cls, "n_fields", None) == cls.n_sequence_fields and getattr(cls, "n_unnamed_fields", 0) == 0


def wrap_constant_object(tx, obj: Any) -> Value:
    """A value made or found during capture that needs no guard: its source was already guarded."""
    if isinstance(obj, torch.Tensor):
        return tx.constant_tensor(obj)
    if isinstance(obj, _CONSTANT_TYPES) or isinstance(obj, torch.Size) or is_numpy_constant(obj):
        return ConstantValue(obj)
    if is_ndarray(obj) and viewable(obj):
        return constant_array(tx, obj)
    if type(obj) in (list, tuple) or _is_namedtuple(obj):
        items = [wrap_constant_object(tx, v) for v in obj]
        return ListValue(items) if isinstance(obj, list) else TupleValue(items, type(obj))
    if type(obj) in (dict, collections.OrderedDict):
        return DictValue({k: wrap_constant_object(tx, v) for k, v in obj.items()}, type(obj))
    if type(obj) in (set, frozenset):
        return SetValue([wrap_constant_object(tx, v) for v in obj], type(obj), exact=obj)
    if isinstance(obj, torch.nn.Module):
        return NNModuleValue(obj, None)
    if obj is os.environ:
        return EnvironValue(None)
    if isinstance(obj, types.MethodType):
        return MethodValue(wrap_constant_object(tx, obj.__self__), wrap_constant_object(tx, obj.__func__))
    return _wrap_callable_or_object(tx, obj, None)
