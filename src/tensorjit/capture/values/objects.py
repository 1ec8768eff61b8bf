"""Python objects: existing ones read through sources, new ones made while capturing.

`ObjectValue` stands for a real object that exists before the call (a module,
a class, a configuration object) and is read at capture time, each read
guarded through its source. `UserObjectValue` is an instance created inside the
compiled function, with symbolic attributes. Cells, `super()` and the context
managers that switch torch's global state live here too.
"""

from __future__ import annotations

import abc
import collections
import contextlib
import functools
import inspect
import os
import types
import weakref
from typing import Any

import torch

from ..breaks import GraphBreak
from ..guards import Guard
from ..sources import AttrSource, EnvironSource, ItemSource
from .base import DELETED, ConstantValue, NULL, Value, lookup_static
from .containers import ContainerMethodValue, DictValue, ListValue, SetValue, TupleValue, written_namespace
from .functions import FunctionValue, MethodValue


def python_getattr(cls: type):
    """The class's `__getattr__` where it is a Python function (nn.Module's excepted: modules read
    their tables through NNModuleValue), else None."""
    fallback = lookup_static(cls, "__getattr__")[0]
    if isinstance(fallback, types.FunctionType) and fallback is not torch.nn.Module.__getattr__:
        return fallback
    return None


class ObjectValue(Value):
    """A pre-existing Python object, identified by its source."""

    def __init__(self, obj: Any, source=None) -> None:
        self.obj = obj
        self.source = source

    def python_type(self) -> type:
        return type(self.obj)

    def is_constant(self) -> bool:
        return isinstance(self.obj, (type, types.ModuleType, types.BuiltinFunctionType))

    def constant(self) -> Any:
        return self.obj

    def truth(self, tx) -> bool:
        cls = type(self.obj)
        if lookup_static(cls, "__bool__")[0] is None and lookup_static(cls, "__len__")[0] is None:
            return True
        return tx.call_dunder(self, "__bool__" if lookup_static(cls, "__bool__")[0] else "__len__", []).truth(tx)

    def attribute_source(self, name: str):
        return AttrSource(self.source, name) if self.source is not None else None

    def getattr(self, tx, name: str, overlay: bool = True) -> Value:
        written = tx.output.attribute_overlay.get((id(self.obj), name)) if overlay else None
        if written is DELETED:
            error = AttributeError(f"{type(self.obj).__name__!r} object has no attribute {name!r}")
            raise GraphBreak("attribute-error", str(error), exception=error)
        if written is not None:
            return written
        obj = self.obj
        if isinstance(obj, type):
            return self._class_attribute(tx, obj, name)
        if name == "with_traceback" and isinstance(obj, BaseException) and self.source is None:
            return WithTracebackValue(self)
        static, owner = lookup_static(type(obj), name)
        namespace = written_namespace(tx, self)
        if namespace is not None and name in namespace.items and not _data_descriptor(static):
            return namespace.items[name]  # written through obj.__dict__ in the function
        if isinstance(static, property) and static.fget is not None:
            return tx.call(FunctionValue(static.fget, _class_member_source(self, owner, name, ".fget")), [self], {})
        getter = _python_data_getter(static)
        if getter is not None:  # a data descriptor written in Python: its __get__ inlined, reading what
            # capture holds of the object (writes made in the function included), not the stale real one
            return tx.call(FunctionValue(getter, None), [tx.wrap_constant_object(static), self,
                                                          tx.wrap_constant_object(type(obj))], {})
        if isinstance(static, types.FunctionType):
            if name not in getattr(obj, "__dict__", {}):
                return MethodValue(self, FunctionValue(static, _class_member_source(self, owner, name)))
        if isinstance(static, (staticmethod, classmethod)):
            return tx.wrap(getattr(obj, name), self.attribute_source(name))
        fallback = python_getattr(type(obj))
        if fallback is not None and static is None and name not in getattr(obj, "__dict__", {}) and \
                not isinstance(obj, torch.nn.Module):
            # lookup fails, so Python calls the class's __getattr__: inlined, not run for real
            # (it may have effects); guarded on the name staying out of the instance __dict__
            if self.source is not None:
                tx.output.guard(Guard(AttrSource(self.source, "__dict__"), "absent_key", name))
            return tx.call(FunctionValue(fallback, None), [self, ConstantValue(name)], {})
        try:
            value = getattr(obj, name)
        except AttributeError as e:
            self._guard_missing(tx, name)
            raise GraphBreak("attribute-error", f"{type(obj).__name__!s} object has no attribute {name!r}",
                             exception=e)
        return tx.wrap(value, self.attribute_source(name))

    def _guard_missing(self, tx, name: str) -> None:
        """The answer `hasattr(obj, name) is False` holds while the attribute stays missing (set later, it recompiles)."""
        if self.source is not None:
            tx.output.guard(Guard(self.source, "missing_attribute", name))

    def _class_attribute(self, tx, cls: type, name: str) -> Value:
        static, owner = lookup_static(cls, name)
        if isinstance(static, classmethod):
            return MethodValue(self, FunctionValue(static.__func__, None))
        try:
            value = getattr(cls, name)
        except AttributeError as e:
            self._guard_missing(tx, name)
            raise GraphBreak("attribute-error", f"type object {cls.__name__!r} has no attribute {name!r}",
                             exception=e)
        return tx.wrap(value, self.attribute_source(name))

    def call(self, tx, args, kwargs) -> Value:
        return tx.call_object(self, args, kwargs)

    def reconstruct(self, cg) -> str:
        if self.source is not None:
            return cg.source(self.source)
        return cg.constant(self.obj)

    def __repr__(self) -> str:
        return f"ObjectValue({type(self.obj).__name__})"


def _class_member_source(value: ObjectValue, owner, name, suffix=""):
    if value.source is None or owner is None:
        return None
    return AttrSource(AttrSource(value.source, "__class__"), name) if not suffix else None


def _python_data_getter(attribute) -> types.FunctionType | None:
    """The Python `__get__` of a data descriptor (a class with `__set__` or `__delete__` too), or None."""
    kind = type(attribute)
    getter = lookup_static(kind, "__get__")[0] if kind is not type else None
    if isinstance(getter, types.FunctionType) and _data_descriptor(attribute):
        return getter
    return None


def _data_descriptor(attribute) -> bool:
    """Whether the class attribute answers reads before the instance __dict__: a data descriptor
    (`__set__` or `__delete__`) with a `__get__`; one without `__get__` leaves reads to the dict."""
    kind = type(attribute)
    return hasattr(kind, "__get__") and (hasattr(kind, "__set__") or hasattr(kind, "__delete__"))


def made_exception(value: Value) -> bool:
    """An exception object made during capture (a class with a Python __init__, see calls._instantiate):
    attribute writes on it are recorded like those on an object from outside."""
    return isinstance(value, ObjectValue) and value.source is None and getattr(value, "made", False)


class NNModuleValue(ObjectValue):
    """An nn.Module read through a source: its parameters and buffers become graph inputs."""

    def getattr(self, tx, name: str) -> Value:
        module = self.obj
        # Python's order: a class attribute (method, property, plain value) or an instance
        # __dict__ entry is found by ordinary lookup; the parameter, buffer and submodule
        # tables only through nn.Module.__getattr__, when that lookup fails. A submodule
        # assigned under the name of a method is therefore shadowed by the method.
        on_class = lookup_static(type(module), name)[1] is not None
        key = (id(module), name)
        overlay = tx.output.attribute_overlay.get(key)
        if overlay is not None and not (on_class and key in tx.output.module_table_writes):
            return overlay
        if on_class or name in module.__dict__:
            return super().getattr(tx, name, overlay=False)
        for table in ("_parameters", "_buffers", "_modules"):
            entries = module.__dict__.get(table)
            if entries is not None and name in entries:
                source = ItemSource(AttrSource(self.source, table), name) if self.source else None
                return tx.wrap(entries[name], source)
        return super().getattr(tx, name)

    def call(self, tx, args, kwargs) -> Value:
        return tx.call_module(self, args, kwargs)

    def __repr__(self) -> str:
        return f"NNModuleValue({type(self.obj).__name__})"


class MadeModuleValue(NNModuleValue):
    """A torch.nn module without parameters, buffers or submodules (nn.ReLU(), nn.Upsample(scale_factor=2))
    constructed in the function from constant arguments: built once at capture time, so its forward is
    inlined like any module's. Such a module holds only its configuration, which the arguments fix; where
    it leaves the function it is a fresh copy, as each call of the function made a new one."""

    def reconstruct(self, cg) -> str:
        return f"{cg.helper('fresh_module')}({cg.constant(self.obj)})"

    def __repr__(self) -> str:
        return f"MadeModuleValue({type(self.obj).__name__})"


class UserObjectValue(Value):
    """An instance of a user class created inside the compiled function."""

    def __init__(self, cls: type) -> None:
        self.cls = cls
        self.attributes: dict[str, Value] = {}
        self.source = None

    def python_type(self) -> type:
        return self.cls

    def getattr(self, tx, name: str) -> Value:
        if name in self.attributes:
            return self.attributes[name]
        if name == "__class__":
            return tx.wrap_constant_object(self.cls)
        if name == "__dict__" and "__dict__" not in self.attributes:
            return self.namespace()
        static, owner = lookup_static(self.cls, name)
        if isinstance(static, types.FunctionType):
            return MethodValue(self, FunctionValue(static, None))
        if isinstance(static, property) and static.fget is not None:
            return tx.call(FunctionValue(static.fget), [self], {})
        if isinstance(static, types.MemberDescriptorType):  # a __slots__ entry not yet set
            error = AttributeError(f"'{self.cls.__name__}' object has no attribute '{name}'")
            raise GraphBreak("attribute-error", str(error), exception=error)
        if static is not None and not hasattr(static, "__get__"):
            return tx.wrap_constant_object(static)
        if name == "__dataclass_fields__" or static is not None:
            return tx.wrap_constant_object(getattr(self.cls, name))
        fallback = python_getattr(self.cls)
        if fallback is not None:  # lookup failed: Python calls the class's __getattr__
            return tx.call(FunctionValue(fallback, None), [self, ConstantValue(name)], {})
        raise GraphBreak("attribute-error", f"{self.cls.__name__!r} object has no attribute {name!r}")

    def namespace(self) -> DictValue:
        """The instance `__dict__`: a dict value over the very attributes table, so a write through
        either is seen by the other."""
        if getattr(self, "_namespace", None) is None:
            self._namespace = DictValue({})
            self._namespace.items = self.attributes
        return self._namespace

    def setattr(self, tx, name: str, value: Value) -> None:
        if name == "__class__":  # obj.__class__ = Other: the object's type changes, its attributes stay
            new = value.constant() if value.is_constant() else None
            plain = isinstance(new, type) and new.__new__ is object.__new__ and \
                type(new) in (type, abc.ABCMeta) and "__slots__" not in vars(new)
            if not plain:
                raise GraphBreak("store-attr", "assigning __class__ a class capture does not model")
            self.cls = new
            return
        self.attributes[name] = value

    def delattr(self, tx, name: str) -> None:
        if name not in self.attributes:
            error = AttributeError(f"{self.cls.__name__!r} object has no attribute {name!r}")
            raise GraphBreak("attribute-error", str(error), exception=error)
        del self.attributes[name]

    def truth(self, tx) -> bool:
        for name in ("__bool__", "__len__"):  # Python's order: __bool__, else __len__ != 0
            if lookup_static(self.cls, name)[0] is not None:
                answer = tx.call_dunder(self, name, [])
                if not answer.is_constant():
                    raise GraphBreak("truth", f"{self.cls.__name__}.{name} answered a value known only at run time")
                return bool(answer.constant())
        return True

    def reconstruct(self, cg) -> str:
        attrs = "{" + ", ".join(f"{k!r}: {cg.value(v)}" for k, v in self.attributes.items()) + "}"
        return f"{cg.helper('new_object')}({cg.constant(self.cls)}, {attrs})"

    def __repr__(self) -> str:
        return f"UserObjectValue({self.cls.__name__})"


class WeakRefValue(Value):
    """`weakref.ref(obj)` of an object from outside, made at capture: CPython hands out one plain
    reference per object, so the real one stands for the run-time one while the object is the
    same (its identity is guarded where this is made). Calling it answers the object itself."""

    def __init__(self, ref: weakref.ReferenceType, referent: Value) -> None:
        self.ref = ref
        self.referent = referent

    def python_type(self) -> type:
        return weakref.ReferenceType

    def is_constant(self) -> bool:
        return True

    def constant(self) -> Any:
        return self.ref

    def call(self, tx, args, kwargs) -> Value:
        if args or kwargs:
            raise GraphBreak("bad-call", "a weak reference is called with no arguments")
        return self.referent

    def reconstruct(self, cg) -> str:
        return f"{cg.constant(weakref.ref)}({self.referent.reconstruct(cg)})"


class SuperValue(Value):
    """`super(cls, obj)`: attribute lookup starts after `cls` in obj's MRO."""

    def __init__(self, cls: type, obj: Value) -> None:
        self.cls = cls
        self.obj = obj

    def getattr(self, tx, name: str) -> Value:
        owner = self.obj.constant() if self.obj.is_constant() else None
        # super(C, cls) in a classmethod or __new__: the class's own MRO, not its metaclass's
        mro = owner.__mro__ if isinstance(owner, type) and issubclass(owner, self.cls) else self.obj.python_type().__mro__
        if self.cls not in mro:
            error = TypeError("super(type, obj): obj must be an instance or subtype of type")
            raise GraphBreak("op-error", str(error), exception=error)
        for klass in mro[mro.index(self.cls) + 1:]:
            if name in klass.__dict__:
                attr = klass.__dict__[name]
                if isinstance(attr, types.FunctionType):
                    return MethodValue(self.obj, FunctionValue(attr, None))
                if isinstance(attr, classmethod):  # bound to the class: obj's, or obj itself in a classmethod
                    bound = self.obj if isinstance(owner, type) and issubclass(owner, self.cls) else \
                        tx.wrap_constant_object(self.obj.python_type())
                    return MethodValue(bound, FunctionValue(attr.__func__, None))
                if isinstance(attr, property):
                    return tx.call(FunctionValue(attr.fget, None), [self.obj], {})
                if isinstance(attr, staticmethod):
                    return FunctionValue(attr.__func__, None)
                if callable(attr) and klass is object or made_exception(self.obj) and name == "__init__":
                    return BuiltinMethodOfObject(self.obj, attr, name)
                if klass is dict and name in _DICT_READS and isinstance(self.obj, ObjectValue) \
                        and self.obj.source is not None:
                    return DictReadValue(self.obj, name)
                if klass in (dict, set, frozenset, tuple, collections.OrderedDict) and \
                        isinstance(self.obj, (DictValue, SetValue, TupleValue)):
                    return ContainerMethodValue(self.obj, name)  # the base's own method, not the subclass's
                if hasattr(attr, "__get__") and not isinstance(attr, type):
                    if isinstance(self.obj, ObjectValue):  # a C method of a builtin base, bound to the object
                        return tx.wrap_constant_object(attr.__get__(self.obj.obj, type(self.obj.obj)))
                    raise GraphBreak("super", f"super().{name} of a {klass.__name__} base")
                return tx.wrap_constant_object(attr)
        raise GraphBreak("attribute-error", f"'super' object has no attribute {name!r}")

    def reconstruct(self, cg) -> str:
        return f"super({cg.constant(self.cls)}, {cg.value(self.obj)})"


_DICT_READS = {"get", "__getitem__", "__contains__"}


class DictReadValue(Value):
    """`super().get(key)` and friends on a dict subclass read through a source: guarded reads."""

    def __init__(self, owner: "ObjectValue", name: str) -> None:
        self.owner = owner
        self.name = name

    def call(self, tx, args, kwargs) -> Value:
        real: dict = self.owner.obj
        tx.output.guard(Guard(self.owner.source, "keys", tuple(real.keys())))
        key = args[0].constant()
        if self.name == "__contains__":
            return ConstantValue(key in real)
        if key in real:
            return tx.wrap(dict.__getitem__(real, key), ItemSource(self.owner.source, key))
        if self.name == "get":
            return args[1] if len(args) > 1 else ConstantValue(None)
        raise GraphBreak("op-error", f"KeyError: {key!r}", exception=KeyError(key))


class EnvironValue(Value):
    """os.environ: each variable read is guarded on its own, not the whole environment."""

    def __init__(self, source) -> None:
        self.source = source

    def python_type(self) -> type:
        return type(os.environ)

    def read(self, tx, key: str) -> Value:
        value = os.environ.get(key)
        tx.output.guard(Guard(EnvironSource(key), "constant", value))
        return ConstantValue(value)

    def getattr(self, tx, name: str) -> Value:
        if name in ("get", "__getitem__", "__contains__"):
            return EnvironMethodValue(self, name)
        raise GraphBreak("environ", f"os.environ.{name}")


class EnvironMethodValue(Value):
    def __init__(self, environ: EnvironValue, name: str) -> None:
        self.environ = environ
        self.name = name

    def call(self, tx, args, kwargs) -> Value:
        key = args[0].constant()
        value = self.environ.read(tx, key)
        if self.name == "__contains__":
            return ConstantValue(value.constant() is not None)
        if value.constant() is None:
            if self.name == "get":
                return args[1] if len(args) > 1 else ConstantValue(None)
            raise GraphBreak("op-error", f"KeyError: {key!r}", exception=KeyError(key))
        return value


def is_not_implemented(value: Value) -> bool:
    """Is value NotImplemented (what a binary dunder answers to pass the operation on)?"""
    return (value.is_constant() and value.constant() is NotImplemented) or \
        (isinstance(value, ObjectValue) and value.obj is NotImplemented)


class BuiltinMethodOfObject(Value):
    """A C-level method such as object.__init__ reached through super()."""

    def __init__(self, obj: Value, method: Any, name: str) -> None:
        self.obj = obj
        self.method = method
        self.name = name

    def call(self, tx, args, kwargs) -> Value:
        if self.name == "__init__" and made_exception(self.obj):  # BaseException.__init__ sets .args
            if kwargs or not all(a.is_constant() for a in args):
                raise GraphBreak("unsupported-call", "an exception's args that are not constants")
            self.method(self.obj.obj, *[a.constant() for a in args])
            return ConstantValue(None)
        if self.name in ("__init__",):
            return ConstantValue(None)
        if self.name == "__new__":  # super().__new__(cls) reaching object's
            return tx.call(tx.wrap_constant_object(object.__new__), list(args), kwargs)
        if self.name == "__setattr__" and isinstance(self.obj, (UserObjectValue, ObjectValue)):
            return tx.store_attribute(self.obj, args[0].constant(), args[1], custom=False)
        if self.name == "__delattr__" and isinstance(self.obj, (UserObjectValue, ObjectValue)):
            return tx.delete_attribute(self.obj, args[0].constant(), custom=False)
        if self.name == "__eq__" and len(args) == 1:  # object's: identity, else NotImplemented
            return ConstantValue(True) if args[0] is self.obj else tx.wrap_constant_object(NotImplemented)
        if self.name == "__ne__" and len(args) == 1:  # object's: the negation of type(self).__eq__
            equal = tx.call_dunder(self.obj, "__eq__", args)
            return equal if is_not_implemented(equal) else ConstantValue(not equal.truth(tx))
        raise GraphBreak("call", f"object.{self.name} through super()")


class WithTracebackValue(Value):
    """`e.with_traceback(None)` of an exception raised during capture (unittest's assertRaises calls it):
    the exception itself. Its traceback could only hold capture's frames, never the program's."""

    def __init__(self, exception: ObjectValue) -> None:
        self.exception = exception

    def call(self, tx, args, kwargs) -> Value:
        if len(args) != 1 or kwargs or not (args[0].is_constant() and args[0].constant() is None):
            raise GraphBreak("call", "with_traceback() with a traceback")
        self.exception.obj.__traceback__ = None
        return self.exception


class GradModeValue(Value):
    """torch.no_grad(), torch.enable_grad(), torch.set_grad_enabled(b), torch.inference_mode(b)."""

    def __init__(self, enabled: bool, kind: str = "grad") -> None:
        self.enabled = enabled
        self.kind = kind
        self.previous: bool | None = None

    def python_type(self) -> type:
        return {"grad": torch.set_grad_enabled, "inference": torch.inference_mode}[self.kind]

    def enter(self, tx) -> Value:
        if self.kind == "inference":
            self.previous = torch.is_inference_mode_enabled()
            if self.enabled != self.previous:
                raise GraphBreak("inference-mode", "entering torch.inference_mode inside a compiled function",
                                 "call the compiled function under inference_mode instead")
            return ConstantValue(None)
        self.previous = torch.is_grad_enabled()
        tx.set_grad_enabled(self.enabled)
        return ConstantValue(None)

    def exit(self, tx) -> Value:
        if self.kind == "grad":
            tx.set_grad_enabled(self.previous)
        return ConstantValue(None)

    def getattr(self, tx, name: str) -> Value:
        if name == "__enter__":
            return ContextMethodValue(self, "enter")
        if name == "__exit__":
            return ContextMethodValue(self, "exit")
        raise GraphBreak("getattr", f"attribute {name!r} of a grad-mode context")

    def call(self, tx, args, kwargs) -> Value:
        """`@torch.no_grad()` used as a decorator inside the compiled function."""
        if self.kind != "grad" or len(args) != 1 or kwargs:
            raise GraphBreak("call", "an inference_mode context (or a call with other arguments) used as a "
                             "decorator inside a compiled function")
        if self.previous is not None and torch.is_grad_enabled() != self.previous:
            tx.set_grad_enabled(self.previous)  # set_grad_enabled(b) took effect when made; decorating undoes it
        return GradModeFunctionValue(self.enabled, args[0])

    def reconstruct(self, cg) -> str:
        if self.kind == "inference":
            return f"{cg.constant(torch.inference_mode)}({self.enabled!r})"
        return f"{cg.constant(_GradModeFactory)}({self.enabled!r})"

    def reconstruct_entered_exit(self, cg) -> str:
        return f"{cg.helper('enter_grad_mode')}({self.enabled!r}, {self.previous!r})"


class GradModeFunctionValue(Value):
    """A function decorated with a grad-mode context: each call runs it under that mode."""

    def __init__(self, enabled: bool, fn: Value) -> None:
        self.enabled = enabled
        self.fn = fn

    def python_type(self) -> type:
        return types.FunctionType

    def call(self, tx, args, kwargs) -> Value:
        mode = GradModeValue(self.enabled)
        mode.enter(tx)
        try:
            result = tx.call(self.fn, list(args), dict(kwargs))
        except GraphBreak:
            mode.exit(tx)  # an exception the program may catch leaves the function: the mode is restored
            raise
        mode.exit(tx)
        return result

    def reconstruct(self, cg) -> str:
        factory = torch.enable_grad if self.enabled else torch.no_grad
        return f"{cg.constant(factory)}()({cg.value(self.fn)})"


class _GradModeFactory:
    """A grad-mode context rebuilt at a graph break before its `with` was entered."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled

    def __enter__(self):
        self.previous = torch.is_grad_enabled()
        torch._C._set_grad_enabled(self.enabled)

    def __exit__(self, *exc):
        torch._C._set_grad_enabled(self.previous)
        return False


class ContextMethodValue(Value):
    def __init__(self, ctx: GradModeValue, which: str) -> None:
        self.ctx = ctx
        self.which = which

    def call(self, tx, args, kwargs) -> Value:
        return self.ctx.enter(tx) if self.which == "enter" else self.ctx.exit(tx)

    def reconstruct(self, cg) -> str:
        if self.which == "exit":
            return self.ctx.reconstruct_entered_exit(cg)
        raise GraphBreak("reconstruct", "a context manager's __enter__")


class GlobalContextValue(Value):
    """torch.autocast(...) or torch.inference_mode(...): entered and exited by graph nodes.

    The context is also entered for real while capturing, so that fake tensors get
    the dtypes and flags it implies; a capture that ends inside it (a graph break) exits it
    for real then (`Capture.open_contexts`), so that the state does not leak into what runs next."""

    def __init__(self, enter_fn, exit_fn, arguments: tuple) -> None:
        self.enter_fn = enter_fn
        self.exit_fn = exit_fn
        self.arguments = arguments
        self.node = None
        self.real = None

    def enter(self, tx) -> Value:
        self.node = tx.output.create_node("call_function", self.enter_fn, self.arguments, {}, None)
        self.real = self.enter_fn(*self.arguments)
        tx.capture.open_contexts.append(self)
        return ConstantValue(None)

    def exit(self, tx) -> Value:
        tx.output.create_node("call_function", self.exit_fn, (self.node,), {}, None)
        self.exit_real()
        tx.capture.open_contexts.remove(self)
        return ConstantValue(None)

    def exit_real(self) -> None:
        self.exit_fn(self.real)

    getattr = GradModeValue.getattr

    def reconstruct_entered_exit(self, cg) -> str:
        raise GraphBreak("reconstruct", "a graph break inside an autocast or inference_mode block")


class NullContextValue(Value):
    """A context manager with no effect on the graph (profiler ranges, contextlib.nullcontext)."""

    def __init__(self, result: Value | None = None) -> None:
        self.result = result or ConstantValue(None)

    def enter(self, tx) -> Value:
        return self.result

    def exit(self, tx) -> Value:
        return ConstantValue(None)

    getattr = GradModeValue.getattr

    def reconstruct(self, cg) -> str:
        return f"{cg.constant(contextlib.nullcontext)}({cg.value(self.result)})"

    def reconstruct_entered_exit(self, cg) -> str:
        return cg.null_exit()


class PartialValue(Value):
    """functools.partial(func, *args, **kwargs) made while capturing."""

    def __init__(self, func: Value, args: list[Value], kwargs: dict[str, Value]) -> None:
        self.func = func
        self.args = args
        self.kwargs = kwargs

    def python_type(self) -> type:
        return functools.partial

    def call(self, tx, args, kwargs) -> Value:
        return tx.call(self.func, [*self.args, *args], {**self.kwargs, **kwargs})

    def reconstruct(self, cg) -> str:
        parts = [cg.value(self.func)] + [cg.value(a) for a in self.args] + \
            [f"{k}={cg.value(v)}" for k, v in self.kwargs.items()]
        return f"{cg.constant(functools.partial)}({', '.join(parts)})"


NOT_PLAIN = object()
"""`plain_object`'s answer for a value that stands for no Python object known at capture."""


def plain_object(value: Value) -> Any:
    """The Python object a value known at capture stands for: a constant, an object wrapped as it
    is, a list or tuple of those (typing forms subscripted, type unions); else NOT_PLAIN."""
    if type(value) is ObjectValue:
        return value.obj
    if type(value) is ListValue or type(value) is TupleValue and value.cls is tuple:
        items = [plain_object(item) for item in value.items]
        if any(item is NOT_PLAIN for item in items):
            return NOT_PLAIN
        return items if type(value) is ListValue else tuple(items)
    if value.is_constant():
        return value.constant()
    return NOT_PLAIN


def type_form(obj: Any) -> bool:
    """A type, a generic alias, a union, None or a typing form: what `X | Y` of annotations joins."""
    return obj is None or isinstance(obj, (type, types.GenericAlias, types.UnionType)) or \
        type(obj).__module__ == "typing"

