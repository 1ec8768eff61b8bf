"""Calls and operators over symbolic values: inlining, object calls, binary operators.

`inline_function` binds arguments to a function's parameters and runs its
code in a child frame. `call_object` gives meaning to calling a real object
(a class, a context manager factory, a callable instance). `binary_op` is the
one entry point for arithmetic and comparisons, whatever the operand kinds.
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import functools
import inspect
import operator
import types
import weakref
from typing import Callable

import torch

from .breaks import GraphBreak
from .codegen import GradExit, NullExit
from .guards import Guard
from .markers import break_is_error
from .polyfills.plain_operators import plain_binary
from .values.base import ConstantValue, NULL, Value
from .values.builtins import IdentityValue
from .contextmanagers import HELPER_CODE, ContextManagerFactoryValue, GeneratorContextValue
from .generators import GeneratorValue
from .skipfiles import check_inlinable
from .sources import AttrSource, ReferentSource
from .values.container_subclasses import container_base
from .values.containers import (DictValue, IteratorValue, ListValue, MappingProxyValue, SequenceValue, TupleValue, SetValue,
                               hash_key)
from .values.functions import FunctionValue, MethodValue, NestedFunctionValue
from .values.torch_calls import TorchFunctionValue
from .values.objects import (NOT_PLAIN, GlobalContextValue, GradModeValue, MadeModuleValue, NNModuleValue,
                             NullContextValue, ObjectValue, PartialValue, UserObjectValue, WeakRefValue, is_not_implemented,
                             lookup_static, plain_object, type_form)
from .values.records import RecordValue, is_record_class
from .values.subclass_instances import instantiate as instantiate_container
from .values.tensors import SymbolicIntValue, TensorValue, record_call

CO_VARARGS, CO_VARKEYWORDS, CO_GENERATOR = 0x04, 0x08, 0x20
CO_COROUTINE, CO_ITERABLE_COROUTINE, CO_ASYNC_GENERATOR = 0x80, 0x100, 0x200


def bind_arguments(code: types.CodeType, defaults: list[Value], kwdefaults: dict[str, Value],
                   args: list[Value], kwargs: dict[str, Value]) -> dict[str, Value]:
    """Map call arguments to parameter names exactly as CPython would."""
    names = code.co_varnames
    npos, nkw = code.co_argcount, code.co_kwonlyargcount
    posonly = code.co_posonlyargcount
    bound: dict[str, Value] = {}
    for name, value in zip(names[:npos], args):
        bound[name] = value
    extra = args[npos:]
    index = npos + nkw
    if code.co_flags & CO_VARARGS:
        bound[names[index]] = TupleValue(list(extra))
        index += 1
    elif extra:
        raise _bad_call(f"{code.co_name}() takes {npos} positional arguments but {len(args)} were given")
    varkw: dict[str, Value] = {}
    for key, value in kwargs.items():
        if key in names[posonly:npos + nkw] and key not in bound:
            bound[key] = value
        elif code.co_flags & CO_VARKEYWORDS:
            varkw[key] = value
        else:
            raise _bad_call(f"{code.co_name}() got an unexpected keyword argument {key!r}")
    if code.co_flags & CO_VARKEYWORDS:
        bound[names[index]] = DictValue(varkw)
    first_default = npos - len(defaults)
    for i, name in enumerate(names[:npos]):
        if name not in bound:
            if i < first_default:
                raise _bad_call(f"{code.co_name}() missing required argument {name!r}")
            bound[name] = defaults[i - first_default]
    for name in names[npos:npos + nkw]:
        if name not in bound:
            if name not in kwdefaults:
                raise _bad_call(f"{code.co_name}() missing keyword-only argument {name!r}")
            bound[name] = kwdefaults[name]
    return bound


def _bad_call(message: str) -> GraphBreak:
    """Arguments that do not fit the signature: Python raises TypeError, which the program may catch."""
    return GraphBreak("bad-call", message, exception=TypeError(message))


def inline_function(tx, fn: Value, args: list[Value], kwargs: dict[str, Value]) -> Value:
    if fn.code is HELPER_CODE:  # calling a @contextlib.contextmanager function
        return GeneratorContextValue(fn, list(args), dict(kwargs))
    if getattr(fn, "fn", None) is contextlib.contextmanager and len(args) == 1 and not kwargs:
        return ContextManagerFactoryValue(args[0])  # the decorator applied inside the function
    fn = check_inlinable(fn)
    code: types.CodeType = fn.code
    if code.co_flags & (CO_COROUTINE | CO_ITERABLE_COROUTINE | CO_ASYNC_GENERATOR):
        raise GraphBreak("async", f"{code.co_name} is a coroutine")
    if tx.depth >= tx.config.inline_depth_limit:
        raise GraphBreak("recursion", f"inlining deeper than {tx.config.inline_depth_limit} calls")
    frame = tx.child_frame(fn, args, kwargs)
    if code.co_flags & CO_GENERATOR:  # runs lazily, as far as the program reads it
        frame.is_generator = True
        generator = GeneratorValue(frame, fn, list(args), dict(kwargs))
        generator.made_by_root = tx.is_root
        return generator
    try:
        return frame.run()
    except GraphBreak as e:
        if e.is_error is None:  # the innermost frame marked with error_on_graph_break decides
            e.is_error = break_is_error(code)
        raise


def call_object(tx, value: ObjectValue, args: list[Value], kwargs: dict[str, Value]) -> Value:
    obj = value.obj
    handler = _call_handler(obj)
    if handler is not None:
        tx.current_builtin = obj
        return handler(tx, args, kwargs)
    if isinstance(obj, NullExit):  # the exit of a profiler range or nullcontext entered before a break
        return ConstantValue(False)
    if isinstance(obj, GradExit):  # the exit of a grad-mode block entered at a graph break
        if value.source is not None:
            tx.output.guard(Guard(AttrSource(value.source, "previous"), "constant", obj.previous))
        return tx.set_grad_enabled(obj.previous)
    if isinstance(obj, functools.partial):
        fn = tx.getattr(value, "func")
        stored = [tx.wrap_constant_object(a) for a in obj.args]
        merged = {k: tx.wrap_constant_object(v) for k, v in obj.keywords.items()}
        merged.update(kwargs)
        return tx.call(fn, [*stored, *args], merged)
    if isinstance(obj, type):
        return _instantiate(tx, value, obj, args, kwargs)
    if type(obj) is weakref.ReferenceType and not args and not kwargs:
        return _referent(tx, value)
    inline = _python_original(obj)
    if inline is not None:
        source = AttrSource(value.source, INLINE_ATTRIBUTE) if value.source is not None else None
        return tx.call(tx.wrap(inline, source) if source is not None else FunctionValue(inline), args, kwargs)
    call = lookup_static(type(obj), "__call__")[0]
    if isinstance(call, types.FunctionType):
        return tx.call(FunctionValue(call), [value, *args], kwargs)
    raise GraphBreak("unsupported-call", f"calling {type(obj).__name__} object, which tensorjit cannot trace")


INLINE_ATTRIBUTE = "_torchdynamo_inline"
"""Where torch.jit.script and torch.jit.trace keep the Python function they compiled, for a
compiler to trace in their place (their call runs TorchScript, opaque to capture, whatever
Python `__call__` wraps it: torch's test utilities put one on ScriptFunction)."""


def _python_original(obj) -> types.FunctionType | None:
    try:
        inline = inspect.getattr_static(obj, INLINE_ATTRIBUTE, None)
    except Exception:  # noqa: BLE001 - an object whose attribute lookup fails has none
        return None
    return inline if isinstance(inline, types.FunctionType) else None


def _call_handler(obj) -> Callable | None:
    """The handler registered for calls of `obj`; None for an unhashable object (it has none)."""
    try:
        return _GRAD_MODES.get(obj)
    except TypeError:
        return None


def _referent(tx, value: ObjectValue) -> Value:
    """`ref()`: the object a weak reference points to, read (and guarded) through the reference."""
    if value.source is None:
        return tx.wrap_constant_object(value.obj())
    return tx.wrap(value.obj(), ReferentSource(value.source))


def _no_grad(tx, args, kwargs):
    return GradModeValue(False).call(tx, args, kwargs) if args else GradModeValue(False)  # torch.no_grad(f)


def _enable_grad(tx, args, kwargs):
    return GradModeValue(True).call(tx, args, kwargs) if args else GradModeValue(True)


def _set_grad_enabled(tx, args, kwargs):
    mode = (args[0] if args else kwargs["mode"]).constant()
    ctx = GradModeValue(mode)
    ctx.previous = torch.is_grad_enabled()
    tx.set_grad_enabled(mode)  # takes effect at construction, as in eager
    ctx.enter = lambda tx: ConstantValue(None)
    return ctx


def _inference_mode(tx, args, kwargs):
    mode = (args[0] if args else kwargs.get("mode", ConstantValue(True))).constant()
    grad_mode = torch.autograd.grad_mode
    return GlobalContextValue(grad_mode._enter_inference_mode, grad_mode._exit_inference_mode, (mode,))


def _autocast(tx, args, kwargs):
    bound = inspect.signature(torch.autocast.__init__).bind(None, *[a.constant() for a in args],
                                                            **{k: v.constant() for k, v in kwargs.items()})
    bound.apply_defaults()
    values = list(bound.arguments.values())[1:]
    amp = torch.amp.autocast_mode
    return GlobalContextValue(amp._enter_autocast, amp._exit_autocast, tuple(values))


def _cpu_autocast(tx, args, kwargs):
    return _autocast(tx, [ConstantValue("cpu"), *args], kwargs)


def _cuda_autocast(tx, args, kwargs):
    return _autocast(tx, [ConstantValue("cuda"), *args], kwargs)


def _null_context(tx, args, kwargs):
    return NullContextValue(args[0] if args and tx.current_builtin is contextlib.nullcontext else None)


def _partial(tx, args, kwargs):
    return PartialValue(args[0], list(args[1:]), dict(kwargs))


_GRAD_MODES = {torch.no_grad: _no_grad, torch.enable_grad: _enable_grad,
               torch.set_grad_enabled: _set_grad_enabled, torch.inference_mode: _inference_mode,
               torch.autocast: _autocast, torch.amp.autocast: _autocast, torch.cpu.amp.autocast: _cpu_autocast,
               torch.cuda.amp.autocast: _cuda_autocast, functools.partial: _partial,
               torch.autograd.profiler.record_function: _null_context, contextlib.nullcontext: _null_context}


def _struct_sequence(cls: type) -> bool:
    """torch's struct sequences (torch.return_types.*): tuples of named fields, made from one sequence."""
    return cls.__module__ == "torch.return_types" and issubclass(cls, tuple) and hasattr(cls, "n_sequence_fields")


def register_call_handler(obj, handler: Callable) -> None:
    """Give calls of `obj` (a class or function met as an object) a meaning: handler(tx, args, kwargs) -> Value."""
    if obj in _GRAD_MODES:
        raise AssertionError(f"duplicate call handler for {obj}")
    _GRAD_MODES[obj] = handler


def _instantiate(tx, value: ObjectValue, cls: type, args, kwargs) -> Value:
    if issubclass(cls, tuple) and hasattr(cls, "_fields"):
        names = cls._fields
        items = list(args)
        for name in names[len(items):]:
            if name in kwargs:
                items.append(kwargs[name])
            elif name in cls._field_defaults:
                items.append(tx.wrap_constant_object(cls._field_defaults[name]))
            else:
                raise GraphBreak("bad-call", f"{cls.__name__}() missing argument {name!r}")
        return TupleValue(items, cls)
    if is_record_class(cls):
        return RecordValue.create(tx, cls, list(args), dict(kwargs))
    if cls is types.MappingProxyType:
        if len(args) != 1 or kwargs or type(args[0]) is not DictValue:
            raise GraphBreak("unsupported-call", "types.MappingProxyType() of something other than a dict")
        return MappingProxyValue(args[0])
    if cls in (torch.Size,):
        return TupleValue(args[0].unpack(tx) if args else [], torch.Size)
    if _struct_sequence(cls) and len(args) == 1 and not kwargs:  # torch.return_types.max((values, indices))
        items = tx.iterate(args[0]).unpack(tx)
        if len(items) != cls.n_sequence_fields:
            raise GraphBreak("bad-call", f"{cls.__name__}() of {len(items)} items")
        return TupleValue(items, cls)
    if issubclass(cls, BaseException) and all(a.is_constant() for a in args) and not kwargs:
        if not isinstance(lookup_static(cls, "__init__")[0], types.FunctionType):
            return ObjectValue(cls(*[a.constant() for a in args]), None)
    if _python_init_exception(cls, args):
        return _made_exception(tx, cls, args, kwargs)
    if issubclass(cls, (torch.nn.Module, torch.Tensor, BaseException)) or cls.__module__.startswith("torch") \
            and not _plain_python_class(cls):
        if all(a.is_constant() for a in args) and all(v.is_constant() for v in kwargs.values()) \
                and cls in (torch.device, torch.dtype, torch.finfo, torch.iinfo):
            return tx.wrap_constant_object(cls(*[a.constant() for a in args]))
        made = _stateless_module(tx, cls, args, kwargs) if issubclass(cls, torch.nn.Module) else None
        if type(cls) is type(torch.FloatTensor) and len(args) == 1 and not kwargs \
                and isinstance(args[0], (ListValue, TupleValue)):  # torch.LongTensor([..]): torch.tensor's copy
            made = TorchFunctionValue(torch.tensor).call(tx, args, {
                "dtype": ConstantValue(cls.dtype), "device": ConstantValue("cuda" if cls.is_cuda else "cpu")})
        if made is not None:
            return made
        raise GraphBreak("unsupported-call", f"creating a {cls.__name__} inside a compiled function")
    base = container_base(cls)
    if base is not None:
        return instantiate_container(tx, cls, base, args, kwargs)
    if cls is weakref.ReferenceType and len(args) == 1 and not kwargs:
        return _weak_reference(tx, args[0])
    new = lookup_static(cls, "__new__")[0]
    if type(cls) in (type, abc.ABCMeta) and isinstance(new, staticmethod) and \
            isinstance(new.__func__, types.FunctionType):
        return _python_new(tx, cls, new.__func__, args, kwargs)
    if cls.__new__ is not object.__new__ or type(cls) not in (type, abc.ABCMeta):
        raise GraphBreak("unsupported-call", f"creating a {cls.__name__} (custom __new__ or metaclass)")
    instance = UserObjectValue(cls)
    init = lookup_static(cls, "__init__")[0]
    if isinstance(init, types.FunctionType):
        tx.call(FunctionValue(init), [instance, *args], kwargs)
    elif args or kwargs:
        raise GraphBreak("unsupported-call", f"{cls.__name__}.__init__ is not a Python function")
    return instance


def _python_new(tx, cls: type, new: types.FunctionType, args, kwargs) -> Value:
    """`cls(*args, **kwargs)` where the class defines `__new__` in Python: it is inlined (its
    `object.__new__(cls)` or `super().__new__(cls)` makes the instance); `__init__` then runs on
    what it returned only where that is an instance of `cls`, the `__init__` of its own class."""
    instance = tx.call(FunctionValue(new), [tx.wrap_constant_object(cls), *args], kwargs)
    made = instance.python_type()
    if not (isinstance(made, type) and issubclass(made, cls)):
        return instance
    init = lookup_static(made, "__init__")[0]
    if isinstance(init, types.FunctionType):
        tx.call(FunctionValue(init), [instance, *args], kwargs)
    elif init is not object.__init__:
        raise GraphBreak("unsupported-call", f"{made.__name__}.__init__ is not a Python function")
    return instance


def _stateless_module(tx, cls: type, args: list[Value], kwargs: dict[str, Value]) -> Value | None:
    """`cls(*args, **kwargs)` of a torch.nn module class as a MadeModuleValue, where the module
    qualifies (constant arguments; no parameters, buffers or submodules once built); else None."""
    if not cls.__module__.startswith("torch.nn.") or \
            not all(v.is_constant() for v in [*args, *kwargs.values()]):
        return None
    try:
        module = cls(*[a.constant() for a in args], **{k: v.constant() for k, v in kwargs.items()})
    except Exception:  # eager raises it: the break runs the call there
        return None
    if module._parameters or module._buffers or module._modules:
        return None
    tx.output.keep_alive.append(module)
    return MadeModuleValue(module, None)


def _python_init_exception(cls: type, args) -> bool:
    """An exception class whose __init__ is Python (storing fields, calling super().__init__), made
    the C way otherwise (BaseException.__new__), with constant positional arguments."""
    return issubclass(cls, BaseException) and type(cls) is type \
        and lookup_static(cls, "__new__")[1].__module__ == "builtins" and isinstance(lookup_static(cls, "__init__")[0], types.FunctionType) and all(a.is_constant() for a in args)


def _made_exception(tx, cls: type, args, kwargs) -> Value:
    """The exception object itself, made now (its args set from the positional arguments, as
    BaseException.__new__ does); its Python __init__ inlined, writes to it replayed after the graph."""
    instance = ObjectValue(BaseException.__new__(cls, *[a.constant() for a in args]), None)
    instance.made = True
    tx.call(FunctionValue(lookup_static(cls, "__init__")[0]), [instance, *args], kwargs)
    return instance


def _weak_reference(tx, value: Value) -> Value:
    """`weakref.ref(obj)` of an object from outside (guarded as that very object) or a constant;
    one made in the function has no run-time object yet to refer to."""
    known = tx.output.wrapped.get(value.source) if value.source is not None else None
    if known is not None and known[1] is value and not isinstance(value, TensorValue):
        obj = known[0]
        tx.output.guard(Guard(value.source, "id", obj))
    elif value.is_constant():
        obj = value.constant()
    else:
        raise GraphBreak("unsupported-call", "a weak reference to a value made during capture")
    try:
        return WeakRefValue(weakref.ref(obj), value)
    except TypeError as error:  # not weakly referenceable (an int, a tuple): the program's TypeError
        raise GraphBreak("op-error", str(error), exception=error) from None


def _plain_python_class(cls: type) -> bool:
    """A class torch writes in Python like user code (lr_scheduler's `_enable_get_lr_call`,
    utils._ordered_set.OrderedSet with its __slots__): made as user classes are. Classes from
    torch._C, with a custom __new__ or metaclass stay refused."""
    return cls.__new__ is object.__new__ and type(cls) in (type, abc.ABCMeta) \
        and isinstance(lookup_static(cls, "__init__")[0], types.FunctionType) \
        and all(base.__module__ != "torch._C" for base in cls.__mro__[:-1])


# -- operators ----------------------------------------------------------------------------
_REFLECTED = {operator.add: "__radd__", operator.sub: "__rsub__", operator.mul: "__rmul__",
              operator.truediv: "__rtruediv__", operator.floordiv: "__rfloordiv__",
              operator.mod: "__rmod__", operator.pow: "__rpow__", operator.matmul: "__rmatmul__"}
_INPLACE = {operator.iadd: operator.add, operator.isub: operator.sub, operator.imul: operator.mul,
            operator.itruediv: operator.truediv, operator.ifloordiv: operator.floordiv,
            operator.imod: operator.mod, operator.ipow: operator.pow, operator.imatmul: operator.matmul,
            operator.iand: operator.and_, operator.ior: operator.or_, operator.ixor: operator.xor,
            operator.ilshift: operator.lshift, operator.irshift: operator.rshift}


def binary_op(tx, op: Callable, a: Value, b: Value) -> Value:
    if op is operator.contains and not isinstance(a, TensorValue) and not isinstance(a, SymbolicIntValue):
        return _contains(tx, a, b)  # a tensor item: the container's own __contains__ decides
    if isinstance(a, TensorValue) or isinstance(b, TensorValue):
        return _tensor_binary(tx, op, a, b)
    if isinstance(a, SymbolicIntValue) or isinstance(b, SymbolicIntValue):
        if op in (operator.is_, operator.is_not, operator.contains):
            return binary_op(tx, op, tx.wrap_constant_object(a.constant()), tx.wrap_constant_object(b.constant()))
        if not all(isinstance(v, SymbolicIntValue) or v.is_constant() for v in (a, b)):
            return _dunder_binary(tx, op, a, b)
        return record_call(tx, _INPLACE.get(op, op), [a, b], {})
    if op in (operator.is_, operator.is_not):
        return _identity(tx, op, a, b)
    if isinstance(a, IdentityValue) or isinstance(b, IdentityValue):
        return _compare_identities(tx, op, a, b)
    if op is operator.contains:
        return _contains(tx, a, b)
    if op in (operator.imul, operator.ior, operator.iand, operator.ixor, operator.isub) and \
            (isinstance(a, (ListValue, DictValue)) or isinstance(a, SetValue) and not issubclass(a.cls, frozenset)):
        in_place = _in_place(tx, op, a, b)
        if in_place is not None:
            return in_place
    if op is operator.or_ and type_form(left := plain_object(a)) and type_form(right := plain_object(b)) \
            and left is not NOT_PLAIN and right is not NOT_PLAIN:
        return tx.wrap_constant_object(left | right)  # `torch.Tensor | None` in an annotation: pure
    if a.is_constant() and b.is_constant() and not isinstance(a, ListValue) and not isinstance(b, ListValue):
        try:
            return tx.wrap_constant_object(op(a.constant(), b.constant()))
        except Exception as e:
            raise GraphBreak("op-error", f"{op.__name__} raised {type(e).__name__}: {e}", exception=e)
    base = _INPLACE.get(op, op)
    if isinstance(a, ListValue) and op is operator.iadd:  # list.__iadd__ extends by any iterable
        items = tx.iterate(b).unpack(tx)
        a.mutate(tx)
        a.items.extend(items)
        return a
    if isinstance(a, SequenceValue) and base is operator.add and isinstance(b, (SequenceValue, DictValue, SetValue)):
        kind = list if isinstance(a, ListValue) else tuple
        if not issubclass(b.python_type(), kind):
            error = TypeError(f'can only concatenate {kind.__name__} (not "{b.python_type().__name__}") '
                              f'to {kind.__name__}')
            raise GraphBreak("op-error", str(error), exception=error)
        return a.rebuild(a.items + b.items) if type(a) is type(b) or isinstance(a, ListValue) else \
            TupleValue(a.items + b.items)
    if isinstance(a, SequenceValue) and base is operator.mul and b.is_constant():
        count = b.constant()
        if not isinstance(count, int):
            error = TypeError(f"can't multiply sequence by non-int of type '{type(count).__name__}'")
            raise GraphBreak("op-error", str(error), exception=error)
        return a.rebuild(a.items * count)
    plain = plain_binary(tx, op, a, b, _same_object)
    if plain is not None:
        return plain
    if op in (operator.eq, operator.ne) and type(a) is not type(b) and not _has_dunder(a, b):
        return ConstantValue((op is operator.ne))
    return _dunder_binary(tx, op, a, b)


def _has_dunder(a: Value, b: Value) -> bool:
    return isinstance(a, (ObjectValue, UserObjectValue)) or isinstance(b, (ObjectValue, UserObjectValue))


def _tensor_binary(tx, op, a: Value, b: Value) -> Value:
    if op in (operator.is_, operator.is_not):
        return _identity(tx, op, a, b)
    if op is operator.contains:
        raise GraphBreak("data-dependent-op", "`in` on a tensor depends on its values")
    if op in _INPLACE and not isinstance(a, TensorValue):
        op = _INPLACE[op]  # `n += t` with a Python number n: no in-place update exists, as in Python
    return record_call(tx, op, [a, b], {})


def _identity(tx, op, a: Value, b: Value) -> Value:
    same = _same_object(a, b)
    if isinstance(a, ObjectValue) and isinstance(b, (ObjectValue, WeakRefValue)) or \
            isinstance(a, WeakRefValue) and isinstance(b, ObjectValue):
        for value in (a, b):  # objects are guarded by type: the answer holds for these objects only
            if isinstance(value, ObjectValue) and value.source is not None:
                tx.output.guard(Guard(value.source, "id", value.obj))
    return ConstantValue(same if op is operator.is_ else not same)


def _compare_identities(tx, op, a: Value, b: Value) -> Value:
    """`id(a) == id(b)` (or !=) for values made in the function: equal for one object; unequal for
    two only while both live, since a freed object's address is reused (`id([]) == id([])`)."""
    if op in (operator.eq, operator.ne) and isinstance(a, IdentityValue) and isinstance(b, IdentityValue):
        same = _same_object(a.of, b.of)
        if same or _still_held(tx, [a.of, b.of]):
            return ConstantValue(same if op is operator.eq else not same)
    raise GraphBreak("unsupported-operation", f"{getattr(op, '__name__', op)} on the id() of a value made "
                                              "during capture (its number is known only at run time)")


def _still_held(tx, values: list[Value]) -> bool:
    """Whether every one of `values` is held by a local, a stack slot or a cell of the frames being
    captured, directly or inside containers there (then it lived through both id() calls)."""
    wanted = {id(v): v for v in values}
    seen: set[int] = set()
    pending: list = []
    frame = tx
    while frame is not None:
        pending += [*frame.locals.values(), *frame.stack, *frame.cells.values()]
        frame = frame.parent
    while pending and wanted:
        value = pending.pop()
        if id(value) in seen:
            continue
        seen.add(id(value))
        wanted.pop(id(value), None)
        if isinstance(value, (SequenceValue, SetValue)):
            pending += list(value.items.values()) if isinstance(value, SetValue) else list(value.items)
        elif isinstance(value, DictValue):
            pending += list(value.items.values())
        elif isinstance(getattr(value, "contents", None), Value):  # a cell made in the function
            pending.append(value.contents)
    return not wanted


def _same_object(a: Value, b: Value) -> bool:
    if a is b:
        return True
    if isinstance(a, TensorValue) and isinstance(b, TensorValue):
        return a.example is b.example
    if a.is_constant() and b.is_constant():
        return a.constant() is b.constant()
    if isinstance(a, ObjectValue) and isinstance(b, ObjectValue):
        return a.obj is b.obj
    if isinstance(a, WeakRefValue) or isinstance(b, WeakRefValue):  # the real reference, made at capture
        return any(isinstance(v, WeakRefValue) and isinstance(w, (ObjectValue, WeakRefValue)) and
                   v.ref is (w.obj if isinstance(w, ObjectValue) else w.ref) for v, w in ((a, b), (b, a)))
    if isinstance(a, (FunctionValue, ObjectValue)) and isinstance(b, (FunctionValue, ObjectValue)):
        # one function read two ways (`partial.func` and the global it names): compare what they wrap
        return getattr(a, "fn", getattr(a, "obj", a)) is getattr(b, "fn", getattr(b, "obj", b))
    return False


def _in_place(tx, op, a: Value, b: Value) -> Value | None:
    """`xs *= n`, `s |= t` (and &=, ^=, -=): the list or set itself changes, as every reference to it
    sees; None where Python would not do it in place (the operator's ordinary path decides)."""
    if isinstance(a, ListValue):
        if op is not operator.imul or not b.is_constant() or not isinstance(b.constant(), int):
            return None
        a.mutate(tx)
        a.items *= b.constant()
        return a
    if isinstance(a, DictValue):
        if op is not operator.ior:
            return None
        tx.call(tx.getattr(a, "update"), [b], {})  # dict |= takes what dict.update takes
        return a
    if not isinstance(b, SetValue):
        return None
    keys = op(set(a.items), set(b.items))
    values = {**b.items, **a.items}
    a.mutate(tx)
    a.items = {k: values[k] for k in [*a.items, *b.items] if k in keys}
    return a


def _contains(tx, container: Value, item: Value) -> Value:
    # operator.contains(container, item): `item in container`
    if isinstance(container, DictValue):
        return ConstantValue(hash_key(item, False) in container.items)
    if isinstance(container, SetValue):
        return ConstantValue(hash_key(item, True) in container.items)
    if isinstance(container, SequenceValue):
        return _contains_item(container.items, item)
    if isinstance(container, IteratorValue):  # reads up to the first match, as Python does
        return _contains_lazily(container, item)
    if container.is_constant() and item.is_constant():
        return ConstantValue(item.constant() in container.constant())
    if isinstance(container, (ObjectValue, UserObjectValue, NNModuleValue)):
        if lookup_static(container.python_type(), "__contains__")[0] is None and \
                lookup_static(container.python_type(), "__iter__")[0] is not None:
            return _contains_lazily(tx.iterate(container), item)  # Python's fallback: iterate
        return tx.call_dunder(container, "__contains__", [item])
    if isinstance(item, TensorValue):
        raise GraphBreak("data-dependent-op", "`in` on a tensor depends on its values")
    raise GraphBreak("unsupported-operation", f"`in` on {container!r}")


def _contains_lazily(iterator: IteratorValue, item: Value) -> Value:
    while (v := iterator.next()) is not None:
        if _contains_item([v], item).constant():
            return ConstantValue(True)
    return ConstantValue(False)


def _contains_item(items: list[Value], item: Value) -> Value:
    """Python's `in` over items: identity first, then ==."""
    for v in items:
        if _same_object(v, item) or (v.is_constant() and item.is_constant() and v.constant() == item.constant()):
            return ConstantValue(True)
        if isinstance(v, TensorValue) or isinstance(item, TensorValue):
            raise GraphBreak("data-dependent-op", "`in` comparing tensors depends on their values")
    return ConstantValue(False)


_DUNDERS = {operator.add: "__add__", operator.sub: "__sub__", operator.mul: "__mul__",
            operator.truediv: "__truediv__", operator.floordiv: "__floordiv__", operator.mod: "__mod__",
            operator.pow: "__pow__", operator.matmul: "__matmul__", operator.eq: "__eq__",
            operator.ne: "__ne__", operator.lt: "__lt__", operator.le: "__le__", operator.gt: "__gt__",
            operator.ge: "__ge__", operator.getitem: "__getitem__", operator.and_: "__and__",
            operator.or_: "__or__", operator.xor: "__xor__", operator.lshift: "__lshift__",
            operator.rshift: "__rshift__"}
_REFLECTED_COMPARISONS = {operator.eq: "__eq__", operator.ne: "__ne__", operator.lt: "__gt__",
                          operator.le: "__ge__", operator.gt: "__lt__", operator.ge: "__le__"}
_REFLECTED_BITS = {operator.and_: "__rand__", operator.or_: "__ror__", operator.xor: "__rxor__",
                   operator.lshift: "__rlshift__", operator.rshift: "__rrshift__"}


def _dunder_binary(tx, op, a: Value, b: Value) -> Value:
    """Python's order for `a op b` through Python dunders: for `a op= b` first a.__iop__(b); then
    a.__op__(b); then b.__rop__(a); each answering NotImplemented passes to the next."""
    base = _INPLACE.get(op, op)
    name = _DUNDERS.get(base)
    attempts = []
    if op in _INPLACE and name:
        attempts.append((a, "__i" + name[2:], b))
    if name:
        attempts.append((a, name, b))
    reflected = _REFLECTED.get(base) or _REFLECTED_BITS.get(base) or _REFLECTED_COMPARISONS.get(base)
    if reflected:
        attempts.append((b, reflected, a))
    asked_all = True  # every method there was is Python's and answered NotImplemented
    for obj, dunder, other in attempts:
        method = lookup_static(obj.python_type(), dunder)[0]
        if method is None:
            continue
        if not isinstance(method, types.FunctionType):
            # A C method of a builtin type answers NotImplemented for an object of a Python class;
            # any other C method might not, so no TypeError can be claimed.
            asked_all = asked_all and obj.python_type() in _BUILTIN_OPERANDS and _python_class_instance(other)
            continue
        result = tx.call_dunder(obj, dunder, [other])
        if not is_not_implemented(result):
            return result
    if asked_all and attempts and base in (operator.eq, operator.ne):  # Python's last resort: identity
        return ConstantValue((a is b) == (base is operator.eq))
    message = f"{getattr(op, '__name__', op)} on {a.python_type().__name__} and {b.python_type().__name__}"
    symbol = _SYMBOLS.get(base)
    if asked_all and symbol is not None and attempts:  # Python raises TypeError, which the program may catch
        error = TypeError(f"unsupported operand type(s) for {symbol}{'=' if op in _INPLACE else ''}: "
                          f"'{a.python_type().__name__}' and '{b.python_type().__name__}'")
        raise GraphBreak("op-error", str(error), exception=error)
    symbol = _ORDER_SYMBOLS.get(base)
    if asked_all and symbol is not None and attempts:  # `a <= b` with neither side answering
        error = TypeError(f"'{symbol}' not supported between instances of '{a.python_type().__name__}' and "
                          f"'{b.python_type().__name__}'")
        raise GraphBreak("op-error", str(error), exception=error)
    raise GraphBreak("unsupported-operation", message)


def _python_class_instance(value: Value) -> bool:
    """An instance of a class defined in Python (made in the function or passed in), for which
    the C methods of builtin types answer NotImplemented."""
    if isinstance(value, UserObjectValue):
        return True
    return isinstance(value, ObjectValue) and not isinstance(value.obj, type) and \
        all(k is object or k.__flags__ & _HEAP_TYPE for k in type(value.obj).__mro__)  # no builtin base


_HEAP_TYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class made by a class statement

_ORDER_SYMBOLS = {operator.lt: "<", operator.le: "<=", operator.gt: ">", operator.ge: ">="}

_BUILTIN_OPERANDS = {int, float, complex, bool, str, bytes, type(None), tuple, list, dict, set, frozenset}
_SYMBOLS = {operator.add: "+", operator.sub: "-", operator.mul: "*", operator.truediv: "/", operator.floordiv: "//",
            operator.mod: "%", operator.pow: "** or pow()", operator.matmul: "@", operator.and_: "&",
            operator.or_: "|", operator.xor: "^", operator.lshift: "<<", operator.rshift: ">>"}
