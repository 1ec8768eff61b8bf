"""`MyFunction.apply(...)` of a custom torch.autograd.Function: one graph node, not a graph break.

Takes a call whose callee is `apply` bound to a subclass of torch.autograd.Function;
returns the node's value. The node calls `MyFunction.apply` itself, so the backends see
what eager runs: the eager backend calls it, and the autograd stage (`autograd/joint.py`)
traces it under make_fx, where the forward's ops enter the forward graph and the user's
backward, run by autograd.grad during that trace, enters the joint graph's backward.

Before the node is recorded, forward and backward are both run on fake tensors at capture
time. A Function whose forward cannot run there (data-dependent Python, `.item()`,
non-tensor arguments capture cannot pass) or whose backward cannot (the gradient of each
differentiable output with respect to each input that requires grad) is a graph break at
its call with the reason logged, and runs eagerly.

Limits (as torch's allow_in_graph): the forward and backward are opaque Python to capture,
so globals they read are not guarded, and Python side effects other than on `ctx` happen
when the node is traced, not on every call of a compiled graph.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
import torch.utils._pytree as pytree

from .breaks import GraphBreak
from .values.base import CallableConstant, Value
from .values.functions import FunctionValue, MethodValue
from .values.objects import ObjectValue
from .values.tensors import TensorValue, record_call

# `Function.apply` as the class stores it: up to torch 2.13 a classmethod of Python code (so
# `MyFunction.apply` is a bound method of that function), from torch 2.14 a classmethod of C code
# on `torch._C._FunctionBase` (so `MyFunction.apply` is a builtin bound to the class).
_APPLY_DESCRIPTOR = torch.autograd.Function.__dict__["apply"]
_APPLY = getattr(_APPLY_DESCRIPTOR, "__func__", None)


def applied_function(fn: Value) -> type | None:
    """The Function subclass whose `apply` `fn` is, or None."""
    if _APPLY is not None:
        if not isinstance(fn, MethodValue) or not isinstance(fn.function, FunctionValue) or fn.function.fn is not _APPLY:
            return None
        owner = fn.owner
        cls = owner.obj if isinstance(owner, ObjectValue) else None
    else:
        bound = fn.constant() if isinstance(fn, CallableConstant) else None
        cls = getattr(bound, "__self__", None)
        if not isinstance(cls, type) or inspect.getattr_static(cls, "apply", None) is not _APPLY_DESCRIPTOR:
            return None
    if isinstance(cls, type) and issubclass(cls, torch.autograd.Function):
        return cls
    return None


def call_apply(tx, cls: type, args: list[Value], kwargs: dict[str, Value]) -> Value:
    name = cls.__qualname__
    if kwargs:
        raise GraphBreak("autograd-function", f"{name}.apply takes no keyword arguments")
    if _overrides(cls, "vmap") or _overrides(cls, "jvp"):
        raise GraphBreak("autograd-function", f"{name} defines vmap or jvp, which capture does not trace",
                         "it runs eagerly")
    result = record_call(tx, Applier(cls), args, {})
    fakes = [a.example if isinstance(a, TensorValue) else _constant(a) for a in args]
    if torch.is_grad_enabled():
        _check_backward(tx, cls, fakes)
    return result


class Applier:
    """The graph node's target: calls `cls.apply`. A plain object, so that torch.fx names it as a
    global of the generated code (the bound `apply` would be looked up in torch.autograd.function);
    its `autograd_function` attribute tells the autograd stage to trace it under plain autograd."""

    def __init__(self, cls: type) -> None:
        self.autograd_function = cls  # the autograd stage looks for this attribute
        self.__name__ = f"{cls.__name__}_apply"
        self.__qualname__ = f"{cls.__qualname__}.apply"

    def __call__(self, *args):
        return self.autograd_function.apply(*args)

    def __repr__(self) -> str:
        return f"<{self.__qualname__}>"


def _overrides(cls: type, name: str) -> bool:
    method = getattr(cls, name, None)
    base = getattr(torch.autograd.Function, name, None)
    return method is not None and getattr(method, "__func__", method) is not getattr(base, "__func__", base)


def _constant(value: Value) -> Any:
    return value.constant() if value.is_constant() else None


def _check_backward(tx, cls: type, fakes: list) -> None:
    """Run forward then backward on fresh fake leaves: a backward that cannot run on fake tensors
    (data-dependent, or raising) would fail when the autograd stage traces it."""
    leaves = [f.detach().requires_grad_(f.requires_grad) if isinstance(f, torch.Tensor) else f for f in fakes]
    wanted = [leaf for leaf in leaves if isinstance(leaf, torch.Tensor) and leaf.requires_grad]
    if not wanted:
        return
    try:
        with tx.output.fake_mode, torch.enable_grad():
            outputs = [o for o in pytree.tree_leaves(cls.apply(*leaves))
                       if isinstance(o, torch.Tensor) and o.requires_grad]
            if outputs:
                torch.autograd.grad(outputs, wanted, [torch.ones_like(o) for o in outputs], allow_unused=True)
    except GraphBreak:
        raise
    except Exception as error:
        raise GraphBreak("autograd-function",
                         f"the backward of {cls.__qualname__} cannot be traced: {type(error).__name__}: {error}",
                         "it runs eagerly; make the backward run on fake tensors (no .item(), no data-dependent "
                         "Python) to keep it in the graph") from None
