"""Tensor hooks (`t.register_hook(fn)`) registered on tensors from outside the function.

A hook runs during backward, after the graph; capture only has to leave it registered
as the function would have. The registration is a side effect replayed after the graph
on the run-time tensor, and the handle it returns is a value of its own: `handle.remove()`
in the function cancels the registration (the replay registers and removes, so a handle
returned or stored is the real, removed one). A hook on a tensor made in the function
would have to run inside the compiled backward: that still breaks the graph.
"""

from __future__ import annotations

import torch
from torch.utils.hooks import RemovableHandle

from ..breaks import GraphBreak
from .base import ConstantValue, Value


def register_tensor_hook(tx, tensor: Value, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """`tensor.register_hook(hook)`; only for a tensor from outside that requires grad."""
    if tensor.source is None:
        raise GraphBreak("data-dependent-op", "a hook on a tensor made in the function runs in its backward")
    if not tensor.example.requires_grad:
        raise GraphBreak("data-dependent-op", "register_hook on a tensor that does not require grad raises")
    if kwargs or len(args) != 1:
        raise GraphBreak("unsupported-call", "Tensor.register_hook takes one hook")
    handle = HookHandleValue(tensor, args[0])
    tx.output.record_hook(handle)
    return handle


class HookHandleValue(Value):
    """The RemovableHandle of a hook registered in the function (see the module docstring)."""

    def __init__(self, tensor: Value, hook: Value) -> None:
        self.tensor = tensor
        self.hook = hook
        self.removed = False
        self.source = None

    def python_type(self) -> type:
        return RemovableHandle

    def getattr(self, tx, name: str) -> Value:
        if name == "remove":
            return HookRemoveValue(self)
        raise GraphBreak("unsupported-call", f"RemovableHandle.{name} of a hook registered in the function")

    def reconstruct(self, cg) -> str:
        return f"{cg.helper('registered_hook')}({cg.value(self.tensor)}, {cg.value(self.hook)}, {self.removed!r})"

    def __repr__(self) -> str:
        return f"HookHandleValue({self.tensor!r})"


class HookRemoveValue(Value):
    """`handle.remove` of a HookHandleValue: calling it cancels the registration."""

    def __init__(self, handle: HookHandleValue) -> None:
        self.handle = handle
        self.source = None

    def python_type(self) -> type:
        return type(RemovableHandle.remove)

    def call(self, tx, args, kwargs) -> Value:
        if args or kwargs:
            raise GraphBreak("unsupported-call", "RemovableHandle.remove takes no arguments")
        self.handle.removed = True
        return ConstantValue(None)

    def reconstruct(self, cg) -> str:
        return f"{cg.value(self.handle)}.remove"
