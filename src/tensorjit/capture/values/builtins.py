"""Python builtins and C functions seen during capture.

`BuiltinValue` wraps a builtin callable. Handlers registered with
`@builtin(fn)` give it symbolic meaning (len, isinstance, range, zip, ...);
a builtin with no handler is folded at capture time when all its arguments
are constants and it is known to be pure, and is a graph break otherwise.
"""

from __future__ import annotations

import builtins as py
import functools
import itertools
import math
import operator
import inspect
import re
import types
import typing
from typing import Any, Callable

import torch

from ..breaks import GraphBreak
from ..guards import Guard
from ..sources import AttrSource, ItemSource, SubclassesSource
from .base import CallableConstant, ConstantValue, NULL, Value
from .containers import (ContainerMethodValue, DictValue, DictViewValue, IteratorValue, ListValue, SequenceValue, SetValue,
                         SliceValue, TupleValue)
from .functions import FunctionValue, MethodValue
from .objects import BuiltinMethodOfObject, DictReadValue, ObjectValue, SuperValue, UserObjectValue, lookup_static
from .subclass_instances import empty
from .tensors import SymbolicIntValue, TensorValue, lazy_text, record_call

_HANDLERS: dict[Any, Callable] = {}

# Builtins that are safe to evaluate at capture time on constant arguments.
_PURE = {
    py.abs, py.all, py.any, py.bin, py.bool, py.callable, py.chr, py.divmod, py.float, py.format,
    py.frozenset, py.hash, py.hex, py.int, py.max, py.min, py.oct, py.ord, py.pow, py.repr, py.round,
    py.sorted, py.str, py.sum, py.tuple, py.complex, py.issubclass, py.bytes,
    math.sqrt, math.exp, math.log, math.log2, math.log10, math.pow, math.floor, math.ceil, math.fabs,
    math.isfinite, math.isinf, math.isnan, math.prod, math.gcd, math.sin, math.cos, math.tan, math.tanh,
    math.erf, math.atan, math.atan2, math.hypot, math.radians, math.degrees, math.trunc, math.copysign,
    math.isclose, math.factorial, math.comb, math.perm, math.lcm, math.fsum, math.modf, math.frexp,
    math.ldexp, math.log1p, math.expm1, math.asin, math.acos, math.sinh, math.cosh,
    torch.Size, torch.device, torch.dtype, str.join, str.format, str.upper, str.lower, str.split, str.strip,
    str.startswith, str.endswith, str.replace,
}
_PURE |= {getattr(operator, n) for n in dir(operator) if not n.startswith("_")} - {
    operator.setitem, operator.delitem, operator.iadd, operator.iand, operator.iconcat, operator.ifloordiv,
    operator.ilshift, operator.imod, operator.imul, operator.imatmul, operator.ior, operator.ipow,
    operator.irshift, operator.isub, operator.itruediv, operator.ixor, operator.attrgetter,
    operator.itemgetter, operator.methodcaller}


# Builtins with handlers that python_error may call again on constants: they have no effects.
_CHECKABLE = {py.len, py.isinstance, py.range, py.zip, py.enumerate, py.list, py.dict, py.set, py.reversed,
              py.iter, py.slice}


def has_handler(fn: Any) -> bool:
    try:
        return fn in _HANDLERS
    except TypeError:
        return False


def builtin(*fns):
    def register(handler):
        for fn in fns:
            if fn in _HANDLERS:
                raise AssertionError(f"duplicate builtin handler for {fn}")
            _HANDLERS[fn] = handler
        return handler
    return register


class BuiltinValue(CallableConstant):
    """A builtin or library callable: a registered handler gives it meaning, else it is folded or breaks."""

    def call(self, tx, args, kwargs) -> Value:
        handler = _HANDLERS.get(self.fn)
        if handler is not None:
            tx.current_builtin = self.fn
            try:
                return handler(tx, *args, **kwargs)
            except GraphBreak:
                raise
            except TypeError as error:
                if error.__traceback__.tb_next is None:  # raised binding the handler's arguments
                    raise argument_error(self.fn, args, kwargs) from None
                raise python_error(self.fn, args, kwargs, error) from error
            except Exception as error:
                raise python_error(self.fn, args, kwargs, error) from error
        if _subclasses_of_a_class(self.fn) and isinstance(self.source, AttrSource) and not args and not kwargs:
            return _subclasses(tx, self.fn.__self__, self.source.of)
        return fold(tx, self.fn, args, kwargs)

    def getattr(self, tx, name):
        try:
            found = getattr(self.fn, name)
        except AttributeError as error:  # the program's own exception: getattr(cls, name, default) catches it
            raise GraphBreak("attribute-error", str(error), exception=error) from None
        return tx.wrap_constant_object(found)


def _subclasses_of_a_class(fn) -> bool:
    return isinstance(fn, types.BuiltinMethodType) and fn.__name__ == "__subclasses__" \
        and isinstance(fn.__self__, type)


def _subclasses(tx, cls: type, source) -> Value:
    """`C.__subclasses__()` of a class read through `source`: the classes alive now, a new list,
    each read (and guarded) through its place in the run-time list, so a class defined or freed
    since recompiles, and nothing compiled holds a class alive that the program let go."""
    listed = SubclassesSource(source)
    found = type.__subclasses__(cls)
    tx.output.guard(Guard(listed, "length", len(found)))
    return ListValue([tx.wrap(c, ItemSource(listed, i)) for i, c in enumerate(found)])


_IMMUTABLE = (str, int, float, bytes, tuple, frozenset, complex, re.Pattern, re.Match)
"""Objects whose C methods compute from the object and the arguments alone: a compiled regular
expression and a match are immutable too (`pattern.search(text)` in unittest's assertRaisesRegex)."""
_CONTAINER_TYPES = (list, tuple, dict, set, frozenset)


def fold(tx, fn, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """Evaluate a pure builtin on constant arguments at capture time."""
    if isinstance(fn, types.MethodWrapperType) and fn.__name__ == "__iter__" and not args and not kwargs \
            and type(fn.__self__) in (range, str, bytes, tuple, frozenset):
        return tx.iterate(tx.wrap_constant_object(fn.__self__))  # `range(3).__iter__()` is iter(range(3))
    if _is_unbound_container_method(fn, args):
        # list.append(xs, v), set.__contains__(s, v), frozenset.__and__(p, q): the base's own method
        # (a subclass's override of the name is not what was called)
        return tx.call(ContainerMethodValue(args[0], fn.__name__), args[1:], kwargs)
    pure = fn in _PURE or isinstance(fn, (types.BuiltinMethodType, types.MethodWrapperType)) \
        and isinstance(fn.__self__, _IMMUTABLE) \
        or isinstance(fn, type) and fn in (int, float, str, bool, tuple, frozenset, slice, range, complex)
    if not pure:
        name = getattr(fn, "__qualname__", repr(fn))
        raise GraphBreak("unsupported-call", f"call to {name}, which tensorjit cannot trace",
                         "it runs eagerly; wrap it with tensorjit.disable if this is intended")
    if not all(a.is_constant() for a in args) or not all(v.is_constant() for v in kwargs.values()):
        if any(isinstance(a, TensorValue) for a in args):
            return _builtin_on_tensor(tx, fn, args, kwargs)
        if not all(a.is_constant() or isinstance(a, SymbolicIntValue) for a in [*args, *kwargs.values()]):
            raise GraphBreak("unsupported-call", f"{getattr(fn, '__qualname__', fn)} on symbolic values")
        # symbolic ints read by a pure builtin: their values are used (and guarded), as in torch
        if fn in _TEXT_MAKERS or getattr(fn, "__name__", "") in ("format", "__mod__") and isinstance(
                getattr(fn, "__self__", None), str):
            lazy = lazy_text(lambda *a: fn(*a[:len(args)], **dict(zip(kwargs, a[len(args):]))),
                             [*args, *kwargs.values()])
            if lazy is not None:  # text from sizes: guarded only if it is read
                return lazy
        symbolic = _SYMBOLIC_MATH.get(fn)
        if symbolic is not None and not kwargs:  # math.cos(x) of a symbolic number stays in the graph
            return record_call(tx, symbolic, args, {})
    try:
        result = fn(*[a.constant() for a in args], **{k: v.constant() for k, v in kwargs.items()})
    except Exception as e:
        raise GraphBreak("op-error", f"{getattr(fn, '__qualname__', fn)} raised {type(e).__name__}: {e}",
                         exception=e)
    return tx.wrap_constant_object(result)


_SYMBOLIC_MATH: dict[Callable, Callable] = {
    **{getattr(math, name): getattr(torch, f"_sym_{name}")
       for name in ("sqrt", "cos", "cosh", "sin", "sinh", "tan", "tanh", "asin", "acos", "atan", "log2")},
    math.floor: math.floor, math.ceil: math.ceil, math.trunc: math.trunc}
"""math functions with a symbolic counterpart: on a symbolic int or float they are graph nodes, as in
Dynamo (an LR scheduler's cosine of its step count), instead of specializing their argument."""


def _is_unbound_container_method(fn, args: list[Value]) -> bool:
    if not isinstance(fn, (types.MethodDescriptorType, types.WrapperDescriptorType)) or not args:
        return False
    owner = getattr(fn, "__objclass__", None)
    # a symbolic container only: an object of a subclass (from outside) has no items capture holds
    return owner in _CONTAINER_TYPES and fn.__name__ != "__new__" and issubclass(args[0].python_type(), owner) \
        and isinstance(args[0], (SequenceValue, DictValue, SetValue))


def argument_error(fn, args: list[Value], kwargs: dict[str, Value]) -> GraphBreak:
    """Arguments a handler of `fn` does not take: the program's TypeError where `fn`'s own signature
    refuses them too (`isinstance(x, T, invalid=True)`), else a call capture does not model."""
    name = getattr(fn, "__qualname__", repr(fn))
    try:
        inspect.signature(fn).bind(*args, **kwargs)
    except ValueError:  # no signature to read
        pass
    except TypeError as refused:
        error = TypeError(f"{name}(): {refused}")
        return GraphBreak("op-error", str(error), exception=error)
    return GraphBreak("unsupported-call", f"{name} called with arguments tensorjit does not model")


def python_error(fn, args: list[Value], kwargs: dict[str, Value], error: Exception) -> Exception:
    """`error`, raised by a handler of `fn`, as the exception the program sees if Python raises it too.

    A handler evaluates the builtin on values known at capture time, so `int("x")` raises
    ValueError inside it. Whether that is the program's exception or a compiler bug is
    decided by calling `fn` itself on the same constants: the same exception type means
    the program raises it, and a `try` around the call catches it in the graph."""
    values = [*args, *kwargs.values()]
    if not (fn in _PURE or fn in _CHECKABLE) or not all(v.is_constant() for v in values):
        return error  # calling it again could have an effect the program would not
    try:
        fn(*[a.constant() for a in args], **{k: v.constant() for k, v in kwargs.items()})
    except type(error) as real:
        name = getattr(fn, "__qualname__", fn)
        return GraphBreak("op-error", f"{name} raised {type(real).__name__}: {real}", exception=real)
    except Exception:
        return error
    return error


_TEXT_MAKERS = {str.format, py.format, str.__mod__}
"""Pure builtins that turn symbolic sizes into text (str() and repr() specialize at once, as in torch)."""

_TENSOR_BUILTINS = {py.abs: torch.abs, py.pow: operator.pow, py.max: None, py.min: None}


def _builtin_on_tensor(tx, fn, args, kwargs) -> Value:
    if fn in _TENSOR_BUILTINS and _TENSOR_BUILTINS[fn] is not None:
        return record_call(tx, _TENSOR_BUILTINS[fn], args, kwargs)
    if fn in (py.float, py.int, py.bool):
        raise GraphBreak("data-dependent-op", f"{fn.__name__}() of a tensor reads its value into Python")
    if fn.__module__ == "_operator":
        return record_call(tx, fn, args, kwargs)
    raise GraphBreak("unsupported-call", f"{getattr(fn, '__qualname__', fn)} on a tensor")


# -- handlers ---------------------------------------------------------------------------
@builtin(py.len)
def _len(tx, obj: Value) -> Value:
    if isinstance(obj, (ListValue, TupleValue)):
        return ConstantValue(len(obj.items))
    if isinstance(obj, (DictValue, SetValue)):
        return ConstantValue(len(obj.items))
    if isinstance(obj, DictViewValue):
        return ConstantValue(len(obj.mapping.items))
    if isinstance(obj, TensorValue):
        if obj.example.dim() == 0:
            raise GraphBreak("op-error", "len() of a 0-d tensor")
        return ConstantValue(obj.example.shape[0])
    if obj.is_constant():
        return ConstantValue(len(obj.constant()))
    if isinstance(obj, ObjectValue) and isinstance(obj.obj, (types.MappingProxyType, tuple, str, frozenset)) \
            and obj.source is None:
        return ConstantValue(len(obj.obj))  # an immutable value made at capture time (a signature's parameters)
    return tx.call_dunder(obj, "__len__", [])


_LEGACY_TENSOR_TYPE = type(torch.FloatTensor)


@builtin(py.isinstance)
def _isinstance(tx, obj: Value, classes: Value) -> Value:
    cls = classes.constant()
    kind = obj.python_type()
    if isinstance(obj, TensorValue):
        kind = type(obj.example) if not isinstance(obj.example, torch._subclasses.FakeTensor) else obj.python_type()
        if any(type(c) is _LEGACY_TENSOR_TYPE for c in (cls if isinstance(cls, tuple) else (cls,))):
            # torch.FloatTensor & co. answer by dtype and device (their metaclass's __instancecheck__),
            # which the example has as the input does (guarded)
            return ConstantValue(isinstance(obj.example, cls))
    try:
        return ConstantValue(issubclass(kind, cls))
    except TypeError as e:
        raise GraphBreak("op-error", f"isinstance: {e}")


@builtin(py.issubclass)
def _issubclass(tx, a: Value, b: Value) -> Value:
    return ConstantValue(issubclass(a.constant(), b.constant()))


@builtin(py.type)
def _type(tx, obj: Value) -> Value:
    if type(obj) is ObjectValue and obj.source is not None and not isinstance(obj.obj, type):
        # read through the object: what capture then finds on the class (or misses) is guarded there
        return tx.wrap(obj.python_type(), AttrSource(obj.source, "__class__"))
    return tx.wrap_constant_object(obj.python_type())


@builtin(py.callable)
def _callable(tx, obj: Value) -> Value:
    """As Python decides it: whether type(obj) defines __call__ (every Value has a `call` method)."""
    if obj.is_constant():
        return ConstantValue(callable(obj.constant()))
    if isinstance(obj, ObjectValue):
        return ConstantValue(callable(obj.obj))
    if isinstance(obj, (BuiltinMethodOfObject, DictReadValue)) or type(obj).__name__.endswith("MethodValue"):
        return ConstantValue(True)  # bound methods of values that have no Python type of their own
    try:
        cls = obj.python_type()
    except GraphBreak:
        raise GraphBreak("unsupported-call", f"callable() of {obj!r}, whose type is not known") from None
    return ConstantValue(lookup_static(cls, "__call__")[1] is not None)


@builtin(py.hasattr)
def _hasattr(tx, obj: Value, name: Value) -> Value:
    try:
        tx.getattr(obj, name.constant())
        return ConstantValue(True)
    except GraphBreak as e:
        if _attribute_error(e):
            return ConstantValue(False)
        raise


def _attribute_error(stop: GraphBreak) -> bool:
    """The lookup raised AttributeError: found missing, or raised by an inlined `__getattr__`."""
    return stop.reason.kind == "attribute-error" or isinstance(stop.exception, AttributeError)


@builtin(py.getattr)
def _getattr(tx, obj: Value, name: Value, default: Value | None = None) -> Value:
    try:
        return tx.getattr(obj, name.constant())
    except GraphBreak as e:
        if default is not None and _attribute_error(e):
            return default
        raise


@builtin(py.setattr)
def _setattr(tx, obj: Value, name: Value, value: Value) -> Value:
    tx.store_attribute(obj, name.constant(), value)
    return ConstantValue(None)


@builtin(py.range)
def _range(tx, *args: Value) -> Value:
    return ConstantValue(range(*[a.constant() for a in args]))


@builtin(py.iter)
def _iter(tx, obj: Value) -> Value:
    return tx.iterate(obj)


@builtin(py.next)
def _next(tx, it: Value, default: Value | None = None) -> Value:
    if isinstance(it, IteratorValue):
        value = it.next()
        if value is None:
            if default is None:
                raise GraphBreak("stop-iteration", "next() on an exhausted iterator", exception=StopIteration())
            return default
        return value
    raise GraphBreak("unsupported-call", f"next() on {it!r}")


@builtin(py.enumerate)
def _enumerate(tx, iterable: Value, start: Value = ConstantValue(0)) -> Value:
    items = tx.iterate(iterable).unpack(tx)
    first = start.constant()
    return IteratorValue([TupleValue([ConstantValue(first + i), v]) for i, v in enumerate(items)], kind=py.enumerate)


@builtin(py.zip)
def _zip(tx, *iterables: Value, strict: Value = ConstantValue(False)) -> Value:
    lists = [tx.iterate(i).unpack(tx) for i in iterables]
    if strict.constant() and len({len(x) for x in lists}) > 1:
        raise GraphBreak("op-error", "zip() arguments have different lengths")
    return IteratorValue([TupleValue(list(group)) for group in zip(*lists)], kind=py.zip)


@builtin(py.reversed)
def _reversed(tx, seq: Value) -> Value:
    if seq.is_constant() and isinstance(seq.constant(), range):
        return IteratorValue([ConstantValue(v) for v in reversed(seq.constant())])
    if isinstance(seq, IteratorValue):  # iterators (a generator, zip, map) are not reversible
        error = TypeError(f"'{seq.python_type().__name__}' object is not reversible")
        raise GraphBreak("op-error", str(error), exception=error)
    return IteratorValue(list(reversed(tx.iterate(seq).unpack(tx))))


@builtin(py.map)
def _map(tx, fn: Value, *iterables: Value) -> Value:
    lists = [tx.iterate(i).unpack(tx) for i in iterables]
    return IteratorValue([tx.call(fn, list(group), {}) for group in zip(*lists)], kind=py.map)


@builtin(py.filter)
def _filter(tx, fn: Value, iterable: Value) -> Value:
    items = tx.iterate(iterable).unpack(tx)
    if fn.is_constant() and fn.constant() is None:
        return IteratorValue([v for v in items if v.truth(tx)], kind=py.filter)
    return IteratorValue([v for v in items if tx.call(fn, [v], {}).truth(tx)], kind=py.filter)


@builtin(py.list)
def _list(tx, iterable: Value | None = None) -> Value:
    return ListValue([] if iterable is None else tx.iterate(iterable).unpack(tx))


@builtin(py.tuple)
def _tuple(tx, iterable: Value | None = None) -> Value:
    if type(iterable) is TupleValue and iterable.python_type() is tuple:
        return iterable  # CPython's tuple() hands back an exact tuple itself: it is immutable
    return TupleValue([] if iterable is None else tx.iterate(iterable).unpack(tx))


@builtin(py.set, py.frozenset)
def _set(tx, iterable: Value | None = None) -> Value:
    if tx.current_builtin is py.frozenset and isinstance(iterable, SetValue) and iterable.cls is frozenset:
        return iterable  # as tuple(): an exact frozenset is its own frozenset
    return SetValue([] if iterable is None else tx.iterate(iterable).unpack(tx), tx.current_builtin)


@builtin(py.dict)
def _dict(tx, iterable: Value | None = None, **kwargs: Value) -> Value:
    items: dict = {}
    if isinstance(iterable, DictValue):
        items.update(iterable.items)
    elif iterable is not None:
        for pair in tx.iterate(iterable).unpack(tx):
            k, v = pair.unpack(tx)
            items[k.constant()] = v
    items.update(kwargs)
    return DictValue(items)


@builtin(py.slice)
def _slice(tx, *parts: Value) -> Value:
    return SliceValue(list(parts))


@builtin(py.sum)
def _sum(tx, iterable: Value, start: Value = ConstantValue(0)) -> Value:
    items = tx.iterate(iterable).unpack(tx)
    if all(v.is_constant() for v in items) and start.is_constant():
        return ConstantValue(sum((v.constant() for v in items), start.constant()))
    total = start
    for v in items:
        total = tx.binary_op(operator.add, total, v)
    return total


@builtin(py.min, py.max)
def _min_max(tx, *args: Value, **kwargs: Value) -> Value:
    fn = py.min if tx.current_builtin is py.min else py.max
    items = tx.iterate(args[0]).unpack(tx) if len(args) == 1 else list(args)
    if all(v.is_constant() for v in items) and not kwargs:
        return ConstantValue(fn(v.constant() for v in items))
    if len(items) == 2 and not kwargs and any(isinstance(v, TensorValue) for v in items):
        if all(isinstance(v, TensorValue) for v in items):
            return record_call(tx, torch.minimum if fn is py.min else torch.maximum, items, {})
        tensor = next(v for v in items if isinstance(v, TensorValue))
        other = next(v for v in items if v is not tensor)
        kw = {"max": other} if fn is py.min else {"min": other}
        return record_call(tx, torch.clamp, [tensor], kw)
    raise GraphBreak("unsupported-call", f"{fn.__name__}() over symbolic values")


@builtin(py.any, py.all)
def _any_all(tx, iterable: Value) -> Value:
    items = tx.iterate(iterable).unpack(tx)
    truths = [v.truth(tx) for v in items]
    return ConstantValue(any(truths) if tx.current_builtin is py.any else all(truths))


@builtin(py.abs)
def _abs(tx, value: Value) -> Value:
    if isinstance(value, TensorValue):
        return record_call(tx, torch.abs, [value], {})
    return ConstantValue(abs(value.constant()))


@builtin(py.print)
def _print(tx, *args, **kwargs) -> Value:
    raise GraphBreak("print", "print() writes to stdout", "it runs eagerly between graphs")


@builtin(py.super)
def _super(tx, *args: Value) -> Value:
    if args:
        return SuperValue(args[0].constant(), args[1])
    return tx.zero_argument_super()


@builtin(py.id)
def _id(tx, obj: Value) -> Value:
    if isinstance(obj, ObjectValue):
        if obj.source is not None:  # objects are guarded by type: the answer holds for this object only
            tx.output.guard(Guard(obj.source, "id", obj.obj))
        return ConstantValue(id(obj.obj))
    if type(obj) is FunctionValue and obj.source is not None:
        # a function passed in is guarded by its code, not identity (closures are made anew):
        # its id answers for this function object only
        tx.output.guard(Guard(obj.source, "id", obj.fn))
        return ConstantValue(id(obj.fn))
    known = tx.output.wrapped.get(obj.source) if obj.source is not None else None
    if known is not None and known[1] is obj and not isinstance(obj, TensorValue):
        # a container read from outside (a global dict, a list in a closure): guarded as that object
        tx.output.guard(Guard(obj.source, "id", known[0]))
        return ConstantValue(id(known[0]))
    if isinstance(obj, SymbolicIntValue) or obj.is_constant() and type(obj.constant()) in _SHARED_WHEN_EQUAL:
        # CPython may hand out one object for equal numbers and strings (small ints, interned
        # text), or not: which ones is not decided here
        raise GraphBreak("unsupported-call", f"id() of a {obj.python_type().__name__} made during capture")
    return IdentityValue(obj)


_SHARED_WHEN_EQUAL = (int, float, complex, str, bytes)


class IdentityValue(Value):
    """`id(v)` of a value made during capture: its number is only known at run time, but two of
    them are equal exactly when they name one object (`id(p) == id(p.copy())`), which `is`
    already decides. Anything else asked of the number (arithmetic, a dict key) breaks; left
    over at a break or returned, it is `id()` of the object rebuilt there (built once, so the
    very object the other references hold)."""

    def __init__(self, of: Value) -> None:
        self.of = of

    def python_type(self) -> type:
        return int

    def reconstruct(self, cg) -> str:
        return f"{cg.constant(py.id)}({cg.value(self.of)})"

    def __repr__(self) -> str:
        return f"IdentityValue({self.of!r})"


@builtin(inspect.signature)
def _signature(tx, fn: Value, **kwargs: Value) -> Value:
    """A signature is a property of the code, known at capture time."""
    target = fn
    if isinstance(fn, MethodValue) and isinstance(fn.function, FunctionValue):
        target = fn.function
        real = getattr(fn.owner, "obj", None)
        if real is None:
            raise GraphBreak("unsupported-call", "inspect.signature of a method of an object made in capture")
        return ConstantValue(inspect.signature(types.MethodType(target.fn, real)))
    if isinstance(target, FunctionValue):
        return ConstantValue(inspect.signature(target.fn))
    raise GraphBreak("unsupported-call", f"inspect.signature of {fn!r}")


@builtin(operator.itemgetter, operator.attrgetter)
def _getter(tx, *keys: Value) -> Value:
    return GetterValue(tx.current_builtin, [k.constant() for k in keys])


class GetterValue(Value):
    """operator.itemgetter(...) / attrgetter(...) made while capturing."""

    def __init__(self, kind, keys: list) -> None:
        self.kind = kind
        self.keys = keys

    def python_type(self) -> type:
        return self.kind

    def call(self, tx, args, kwargs) -> Value:
        obj = args[0]
        if self.kind is operator.itemgetter:
            found = [tx.getitem(obj, tx.wrap_constant_object(k)) for k in self.keys]
        else:
            found = []
            for path in self.keys:
                value = obj
                for part in path.split("."):
                    value = tx.getattr(value, part)
                found.append(value)
        return found[0] if len(found) == 1 else TupleValue(found)

    def reconstruct(self, cg) -> str:
        return f"{cg.constant(self.kind)}({', '.join(cg.constant(k) for k in self.keys)})"


@builtin(typing.cast)
def _cast(tx, typ: Value, value: Value) -> Value:
    return value


@builtin(py.delattr)
def _delattr(tx, obj: Value, name: Value) -> Value:
    return tx.delete_attribute(obj, name.constant())


@builtin(py.object.__delattr__)
def _object_delattr(tx, obj: Value, name: Value) -> Value:
    return tx.delete_attribute(obj, name.constant(), custom=False)


@builtin(py.dict.__new__, py.set.__new__, py.tuple.__new__, py.frozenset.__new__)
def _container_new(tx, cls: Value, *args: Value, **kwargs: Value) -> Value:
    base = {py.dict.__new__: py.dict, py.set.__new__: py.set, py.tuple.__new__: py.tuple,
            py.frozenset.__new__: py.frozenset}[tx.current_builtin]
    if base in (py.tuple, py.frozenset) and (kwargs or len(args) > 1):
        error = TypeError(f"{base.__name__}() takes at most 1 argument" if not kwargs else
                          f"{base.__name__}() takes no keyword arguments")
        raise GraphBreak("op-error", str(error), exception=error)
    return empty(tx, base, cls.constant(), list(args))


@builtin(py.list.__new__)
def _list_new(tx, cls: Value, *args: Value, **kwargs: Value) -> Value:
    """list.__new__(list, ...): an empty list; like CPython's it ignores the arguments (list.__init__
    fills it). Subclasses of list are not modelled: they break."""
    if cls.constant() is not py.list:
        raise GraphBreak("unsupported-call", f"list.__new__ of {getattr(cls.constant(), '__name__', cls)}")
    return ListValue([])


@builtin(py.object.__setattr__)
def _object_setattr(tx, obj: Value, name: Value, value: Value) -> Value:
    tx.store_attribute(obj, name.constant(), value, custom=False)
    return ConstantValue(None)


@builtin(py.object.__new__)
def _object_new(tx, cls: Value, *args, **kwargs) -> Value:
    return UserObjectValue(cls.constant())


@builtin(functools.reduce)
def _reduce(tx, fn: Value, iterable: Value, *initial: Value) -> Value:
    items = tx.iterate(iterable).unpack(tx)
    acc = initial[0] if initial else items.pop(0)
    for v in items:
        acc = tx.call(fn, [acc, v], {})
    return acc


@builtin(math.prod)
def _prod(tx, iterable: Value, start: Value = ConstantValue(1)) -> Value:
    items = tx.iterate(iterable).unpack(tx)
    acc = start
    for v in items:
        acc = tx.binary_op(operator.mul, acc, v)
    return acc


@builtin(itertools.chain)
def _chain(tx, *iterables: Value) -> Value:
    items: list[Value] = []
    for it in iterables:
        items.extend(tx.iterate(it).unpack(tx))
    return IteratorValue(items)


@builtin(itertools.product)
def _product(tx, *iterables: Value) -> Value:
    lists = [tx.iterate(i).unpack(tx) for i in iterables]
    return IteratorValue([TupleValue(list(group)) for group in itertools.product(*lists)])


@builtin(py.sorted)
def _sorted(tx, iterable: Value, key: Value | None = None, reverse: Value = ConstantValue(False)) -> Value:
    items = tx.iterate(iterable).unpack(tx)
    if key is not None and not (key.is_constant() and key.constant() is None):
        keyed = [(tx.call(key, [v], {}).constant(), i, v) for i, v in enumerate(items)]
        keyed.sort(key=lambda t: (t[0], t[1]), reverse=reverse.constant())
        return ListValue([v for _, _, v in keyed])
    return ListValue(sorted(items, key=lambda v: v.constant(), reverse=reverse.constant()))


@builtin(py.divmod)
def _divmod(tx, a: Value, b: Value) -> Value:
    if a.is_constant() and b.is_constant():
        return tx.wrap_constant_object(divmod(a.constant(), b.constant()))
    return TupleValue([tx.binary_op(operator.floordiv, a, b), tx.binary_op(operator.mod, a, b)])


@builtin(py.round)
def _round(tx, value: Value, ndigits: Value | None = None) -> Value:
    if isinstance(value, TensorValue):
        kw = {"decimals": ndigits} if ndigits is not None else {}
        return record_call(tx, torch.round, [value], kw)
    return ConstantValue(round(value.constant(), *( [ndigits.constant()] if ndigits else [])))


def object_text(tx, value: Value, how) -> Value | None:
    """str(value) or repr(value) (`how`: py.str or py.repr) of an object whose class answers in
    Python (a Python __str__ or __repr__, inlined), made in the function or read from outside; of
    an exception made in the function, its text (C's, from the constant arguments it holds);
    None for anything else."""
    if isinstance(value, ObjectValue) and not isinstance(value.obj, type):
        if value.source is None and isinstance(value.obj, BaseException) and \
                not _python_text_method(type(value.obj), how):
            return ConstantValue(how(value.obj))
    elif not isinstance(value, UserObjectValue):
        return None
    cls = value.python_type()
    if how is py.str:
        method = lookup_static(cls, "__str__")[0]
        if isinstance(method, types.FunctionType):
            return tx.call_dunder(value, "__str__", [])
        if method is not object.__str__:
            return None
    if isinstance(lookup_static(cls, "__repr__")[0], types.FunctionType):  # object.__str__ calls repr
        return tx.call_dunder(value, "__repr__", [])
    return None


def _python_text_method(cls: type, how) -> bool:
    names = ("__str__", "__repr__") if how is py.str else ("__repr__",)
    return any(isinstance(lookup_static(cls, name)[0], types.FunctionType) for name in names)


@builtin(py.repr)
def _repr(tx, value: Value) -> Value:
    if value.is_constant():
        return ConstantValue(repr(value.constant()))
    text = object_text(tx, value, py.repr)
    if text is None:
        raise GraphBreak("unsupported-call", f"repr() of {value!r}")
    return text


@builtin(py.float, py.int, py.bool, py.str)
def _scalar_conversion(tx, value: Value | None = None, *rest: Value) -> Value:
    fn = tx.current_builtin
    if value is None:
        return ConstantValue(fn())
    if fn is py.str and not rest and (text := object_text(tx, value, py.str)) is not None:
        return text
    if isinstance(value, TensorValue):
        raise GraphBreak("data-dependent-op", f"{fn.__name__}() of a tensor reads its value into Python")
    if value.is_constant():
        return ConstantValue(fn(value.constant(), *[r.constant() for r in rest]))
    if fn is py.bool:
        return ConstantValue(value.truth(tx))
    if isinstance(value, SymbolicIntValue):
        if fn is py.int and not rest and value.python_type() is int:
            return value
        if fn is py.float and not rest:  # a symbolic float stays symbolic
            return value if value.python_type() is float else record_call(tx, torch.sym_float, [value], {})
        # str(n), float(n): Python needs the value; reading it specializes (a guard on it)
        return ConstantValue(fn(value.constant(), *[r.constant() for r in rest]))
    raise GraphBreak("unsupported-call", f"{fn.__name__}() of {value!r}")
