"""Callables: user functions to inline, torch operations to record, bound methods.

Which callables are recorded as one graph node rather than inlined is decided
by `is_torch_operation`: C functions of torch, and the Python functions of
torch's functional namespaces (torch.nn.functional, torch.functional, ...).
Everything else written in Python is inlined, so the graph sees through user
code, nn.Module forwards and library helpers alike.
"""

from __future__ import annotations

import types
from typing import Any

import torch

from ..breaks import GraphBreak
from ..sources import AttrSource, DefaultSource
from .base import ConstantValue, Value
from .cells import RealCellValue

_TORCH_PYTHON_NAMESPACES = (
    "torch.nn.functional", "torch.functional", "torch._tensor", "torch.random",
    "torch.special", "torch.linalg", "torch.fft", "torch._refs", "torch._decomp",
    # not torch.nn.modules.utils: _pair, _ntuple (which returns a function) are plain Python, inlined
)
# Torch functions with Python-visible effects or global reads: never recorded or folded.
_TORCH_EFFECTFUL = {
    torch.manual_seed, torch.seed, torch.set_default_dtype, torch.set_default_device,
    torch.set_num_threads, torch.save, torch.load, torch.use_deterministic_algorithms,
    torch.set_printoptions, torch.cuda.synchronize, torch.set_rng_state,
    torch._C._push_on_torch_dispatch_stack, torch._C._pop_torch_dispatch_stack,
    torch._C._push_on_torch_function_stack, torch._C._pop_torch_function_stack,
}
# Torch functions that only read state or metadata: evaluated at capture time.
_TORCH_QUERIES = {
    torch.is_tensor, torch.is_floating_point, torch.is_complex, torch.is_grad_enabled,
    torch.is_inference_mode_enabled, torch.get_default_dtype, torch.numel,
    torch.is_autocast_enabled, torch.cuda.is_available, torch.is_storage,
    torch.cuda.device_count, torch.promote_types, torch.result_type, torch.can_cast,
    torch.finfo, torch.iinfo, torch.broadcast_shapes, torch.jit.is_scripting, torch.jit.is_tracing,
    torch._C._get_tracing_state, torch.overrides.has_torch_function,
    torch.overrides.has_torch_function_unary, torch.overrides.has_torch_function_variadic,
    torch.are_deterministic_algorithms_enabled,
    # Mode-stack queries answer for the user's program, not for capture's own fake-tensor mode.
    torch._C._len_torch_dispatch_stack, torch._C._get_dispatch_stack_at, torch._C._get_dispatch_mode,
    torch._C._is_torch_function_mode_enabled, torch._C._len_torch_function_stack,
}


# Libraries ask these to take compiler-friendly paths; inside capture the answer is True.
COMPILING_QUERIES = {torch.compiler.is_compiling, torch.compiler.is_dynamo_compiling}
if hasattr(torch._utils, "is_compiling"):  # deprecated, and it warns: answered without running it
    COMPILING_QUERIES.add(torch._utils.is_compiling)


def is_torch_operation(fn: Any) -> bool:
    try:
        if fn in _TORCH_EFFECTFUL:
            return False
        if fn in COMPILING_QUERIES:
            return True
    except TypeError:  # unhashable objects are not torch functions
        return False
    module = getattr(fn, "__module__", None) or ""
    if isinstance(fn, (types.BuiltinFunctionType, types.BuiltinMethodType)):
        if module.startswith("torch"):
            return True
        owner = getattr(fn, "__self__", None)
        name = getattr(owner, "__name__", "") if owner is not None else ""
        return isinstance(name, str) and name.startswith("torch")  # an object's __getattr__ may answer anything
    if isinstance(fn, (types.MethodDescriptorType, types.WrapperDescriptorType,
                       types.GetSetDescriptorType)):
        return getattr(fn, "__objclass__", None) in (torch._C.TensorBase, torch.Tensor)
    if isinstance(fn, types.FunctionType):
        return module in _TORCH_PYTHON_NAMESPACES or (module == "torch" and fn.__name__ != "compile")
    return isinstance(fn, torch._ops.OpOverloadPacket) or isinstance(fn, torch._ops.OpOverload)


class FunctionValue(Value):
    """A Python function that is inlined when called."""

    def __init__(self, fn: types.FunctionType, source=None) -> None:
        self.fn = fn
        self.source = source

    def python_type(self) -> type:
        return types.FunctionType

    def call(self, tx, args, kwargs) -> Value:
        return tx.inline_function(self, args, kwargs)

    # What inlining needs, uniform with NestedFunctionValue:
    @property
    def code(self) -> types.CodeType:
        return self.fn.__code__

    @property
    def globals(self) -> dict:
        return self.fn.__globals__

    def defaults(self, tx) -> list[Value]:
        values = self.fn.__defaults__ or ()
        return [tx.wrap(v, DefaultSource(self.source, i) if self.source else None) for i, v in enumerate(values)]

    def kwdefaults(self, tx) -> dict[str, Value]:
        values = self.fn.__kwdefaults__ or {}
        return {k: tx.wrap(v, DefaultSource(self.source, 0, k) if self.source else None) for k, v in values.items()}

    def closure_cells(self, tx) -> list:
        cells = self.fn.__closure__ or ()
        return [RealCellValue(cell, self.source, i) for i, cell in enumerate(cells)]

    def getattr(self, tx, name: str) -> Value:
        if name in ("__name__", "__qualname__", "__module__", "__doc__"):
            if self.source is not None:  # guarded: a closure is guarded by its code, not its identity
                return tx.wrap(getattr(self.fn, name), AttrSource(self.source, name))
            return ConstantValue(getattr(self.fn, name))
        if name in ("__code__", "__defaults__", "__kwdefaults__", "__globals__", "__closure__", "__wrapped__",
                    "__annotations__", "__dict__", "__type_params__"):
            if not hasattr(self.fn, name):
                raise GraphBreak("attribute-error", f"function has no attribute {name!r}",
                                 exception=AttributeError(name))
            return tx.wrap(getattr(self.fn, name), AttrSource(self.source, name) if self.source else None)
        if name in self.fn.__dict__:
            return tx.wrap(self.fn.__dict__[name], AttrSource(self.source, name) if self.source else None)
        if name == "__get__":
            return BindingValue(self)
        raise GraphBreak("getattr", f"function attribute {name!r}")

    def reconstruct(self, cg) -> str:
        if self.source is None:  # a function object capture found (a classmethod's __func__): itself
            return cg.constant(self.fn)
        return super().reconstruct(cg)

    def __repr__(self) -> str:
        return f"FunctionValue({self.fn.__qualname__})"


class BindingValue(Value):
    """`function.__get__`: called with an instance, the method bound to it (lr_scheduler binds
    optimizer.step this way); with None, the function itself."""

    def __init__(self, function: Value) -> None:
        self.function = function

    def call(self, tx, args, kwargs) -> Value:
        if kwargs or not 1 <= len(args) <= 2:
            raise GraphBreak("call", "function.__get__ takes an instance and an optional owner")
        instance = args[0]
        if instance.is_constant() and instance.constant() is None:
            return self.function
        return MethodValue(instance, self.function)


# Attributes every function has, which functools.update_wrapper may write.
_FUNCTION_SLOTS = ("__module__", "__doc__", "__annotations__", "__type_params__", "__wrapped__")


class NestedFunctionValue(Value):
    """A function created while capturing (MAKE_FUNCTION): a closure, lambda or genexpr."""

    def __init__(self, code: types.CodeType, globals_: dict, name: str, defaults: list[Value],
                 kwdefaults: dict[str, Value], cells: list, qualname: str) -> None:
        self.code = code
        self.globals = globals_
        self.name = name
        self.qualname = qualname
        self._defaults = defaults
        self._kwdefaults = kwdefaults
        self._cells = cells
        self.source = None
        self.written: dict[str, Value] = {}  # __module__, __doc__, __wrapped__... set in the function
        self.namespace = None  # its __dict__ (a DictValue), once read or written

    def python_type(self) -> type:
        return types.FunctionType

    def setattr(self, tx, name: str, value: Value) -> None:
        """What functools.update_wrapper (and user code) writes on a function made in the function."""
        if name in ("__name__", "__qualname__"):
            if not (value.is_constant() and isinstance(value.constant(), str)):
                error = TypeError(f"{name} must be set to a string object")
                raise GraphBreak("op-error", str(error), exception=error)
            setattr(self, "name" if name == "__name__" else "qualname", value.constant())
        elif name in _FUNCTION_SLOTS:
            self.written[name] = value
        elif name == "__dict__" or hasattr(types.FunctionType, name):  # __defaults__, __code__: what calls read
            raise GraphBreak("store-attr", f"setting {name} of a nested function")
        else:
            self._namespace(tx).items[name] = value

    def _namespace(self, tx):
        if self.namespace is None:  # an empty dict, made by the frame (containers sit above this module)
            self.namespace = tx.wrap_constant_object({})
        return self.namespace

    def defaults(self, tx) -> list[Value]:
        return list(self._defaults)

    def kwdefaults(self, tx) -> dict[str, Value]:
        return dict(self._kwdefaults)

    def closure_cells(self, tx) -> list:
        return list(self._cells)

    def call(self, tx, args, kwargs) -> Value:
        return tx.inline_function(self, args, kwargs)

    def getattr(self, tx, name: str) -> Value:
        if name in ("__name__", "__qualname__"):
            return ConstantValue(self.name if name == "__name__" else self.qualname)
        if name in self.written:
            return self.written[name]
        if name == "__module__":
            return ConstantValue(self.globals.get("__name__"))
        if name == "__doc__":  # what MAKE_FUNCTION gives a function of this code: a function made so tells
            cells = tuple(types.CellType() for _ in self.code.co_freevars) or None
            return ConstantValue(types.FunctionType(self.code, {}, closure=cells).__doc__)
        if name == "__annotations__":  # none given to MAKE_FUNCTION: an empty dict, made once
            self.written[name] = tx.wrap_constant_object({})
            return self.written[name]
        if name == "__type_params__" and hasattr(types.FunctionType, name):  # 3.12+: none without PEP 695
            return ConstantValue(())
        if name == "__dict__":
            return self._namespace(tx)
        if self.namespace is not None and name in self.namespace.items:
            return self.namespace.items[name]
        if name not in _FUNCTION_SLOTS and not hasattr(types.FunctionType, name):
            error = AttributeError(f"'function' object has no attribute {name!r}")
            raise GraphBreak("attribute-error", str(error), exception=error)
        raise GraphBreak("getattr", f"attribute {name!r} of a nested function")

    def reconstruct(self, cg) -> str:
        # Built in the order the call evaluates them: a value shared by two is made where it comes first.
        defaults = "(" + "".join(cg.value(d) + ", " for d in self._defaults) + ")"
        kwdefaults = "{" + ", ".join(f"{k!r}: {cg.value(v)}" for k, v in self._kwdefaults.items()) + "}"
        cells = "(" + "".join(cg.cell(c) + ", " for c in self._cells) + ")"
        attributes = dict(self.written)
        if self.qualname != self.code.co_qualname:
            attributes["__qualname__"] = ConstantValue(self.qualname)
        if self.namespace is not None:
            attributes.update(self.namespace.items)
        written = "{" + ", ".join(f"{k!r}: {cg.value(v)}" for k, v in attributes.items()) + "}"
        return (f"{cg.helper('make_function')}({cg.constant(self.code)}, {cg.constant(self.globals)}, "
                f"{self.name!r}, {defaults}, {kwdefaults}, {cells}, {written})")

    def __repr__(self) -> str:
        return f"NestedFunctionValue({self.qualname})"


class MethodValue(Value):
    """A bound method: `function` called with `owner` first."""

    def __init__(self, owner: Value, function: Value, source=None) -> None:
        self.owner = owner
        self.function = function
        self.source = source

    def python_type(self) -> type:
        return types.MethodType

    def call(self, tx, args, kwargs) -> Value:
        return self.function.call(tx, [self.owner, *args], kwargs)

    def getattr(self, tx, name: str) -> Value:
        if name == "__self__":
            return self.owner
        if name == "__func__":
            return self.function
        return self.function.getattr(tx, name)

    def reconstruct(self, cg) -> str:
        if self.source is not None:
            return cg.source(self.source)
        return f"{cg.helper('MethodType')}({cg.value(self.function)}, {cg.value(self.owner)})"

    def __repr__(self) -> str:
        return f"MethodValue({self.function!r} of {self.owner!r})"
