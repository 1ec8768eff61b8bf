"""Graph inputs that share memory, when the graph writes to one of them.

A captured graph treats each placeholder as its own tensor; backends that
functionalize (aot_eager, inductor) compute every read from the values at
entry. That is eager's answer only if no input the graph writes to shares
memory with another input: with `a.add_(1); return b * 2 + a` and `b` a view
of `a`'s buffer, eager reads the updated `b`.

`WriteWatch` sees every ATen op capture runs on fake tensors and notes the
storages written (schema arguments marked `(a!)`), so mutation is found
whatever Python spelled it (`add_`, `out=`, `x[i] = v`, `batch_norm` updating
running statistics). `check_aliasing` then, for a graph that writes to inputs,
either adds one guard (the written inputs share storage with no other input,
as at capture) or, when they did share storage at capture (overlapping views,
a parameter and a view of it), reports that the call must run eagerly.
The same tensor passed twice is not aliasing here: it is one placeholder.
"""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .guards import Guard, storages_unshared


class WriteWatch(TorchDispatchMode):
    """A dispatch mode, entered inside the fake mode, that notes the storages ops write to."""

    def __init__(self) -> None:
        super().__init__()
        self.written: set[int] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        schema = func._schema
        if schema.is_mutable:
            for argument, value in _bound(schema, args, kwargs):
                if argument.alias_info is not None and argument.alias_info.is_write:
                    for tensor in value if isinstance(value, (list, tuple)) else (value,):
                        if isinstance(tensor, torch.Tensor):
                            self.written.add(storage_key(tensor))
        return func(*args, **kwargs)


def _bound(schema, args, kwargs):
    for i, argument in enumerate(schema.arguments):
        if i < len(args):
            yield argument, args[i]
        elif argument.name in kwargs:
            yield argument, kwargs[argument.name]


def storage_key(tensor: torch.Tensor) -> int:
    """The identity of `tensor`'s storage (fake tensors have storages too, shared by their views)."""
    return tensor.untyped_storage()._cdata


def check_aliasing(output) -> str | None:
    """Guard the graph's written inputs against aliasing; the reason to run eagerly when they alias now."""
    inputs = [gi for gi in output.inputs if isinstance(gi.example, torch.Tensor)]
    written = [gi for gi in inputs if storage_key(gi.node.meta["example_value"]) in output.writes.written]
    if not written:
        return None
    sources = (tuple(gi.source for gi in written), tuple(gi.source for gi in inputs))
    examples = (tuple(gi.example for gi in written), tuple(gi.example for gi in inputs))
    unshared = storages_unshared(*examples)
    output.guard(Guard(None, "aliasing", (sources, unshared)))
    if unshared:
        return None
    names = ", ".join(str(gi.source) for gi in written)
    return (f"inputs the graph writes to ({names}) share memory with other inputs; "
            "the graph cannot express that aliasing, so calls like this one run eagerly")
