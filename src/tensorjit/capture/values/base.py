"""The base of symbolic values and the values every family needs.

The interpreter keeps a `Value` for every stack slot and local. A value knows
its Python type, whether it is a compile-time constant, where it came from
(`source`, for guards and reconstruction) and how to answer the operations the
interpreter asks of it. Operations a family cannot answer raise `GraphBreak`.
"""

from __future__ import annotations

import inspect
import types
from typing import TYPE_CHECKING, Any

import torch

from ..breaks import GraphBreak
from ..sources import Source

if TYPE_CHECKING:
    from ..interpreter import Frame


def lookup_static(cls: type, name: str) -> tuple[Any, type | None]:
    """The class attribute `name` from the MRO without running descriptors."""
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass.__dict__[name], klass
    return None, None


class Value:
    source: Source | None = None

    def python_type(self) -> type:
        raise GraphBreak("unknown-type", f"type of {self!r} is not known at capture time")

    def is_constant(self) -> bool:
        return False

    def constant(self) -> Any:
        raise GraphBreak("not-constant", f"{self!r} is not a compile-time constant")

    def getattr(self, tx: "Frame", name: str) -> "Value":
        raise GraphBreak("getattr", f"attribute {name!r} of {type(self).__name__} is not supported")

    def call(self, tx: "Frame", args: list["Value"], kwargs: dict[str, "Value"]) -> "Value":
        raise GraphBreak("call", f"calling {self!r} is not supported")

    def unpack(self, tx: "Frame") -> list["Value"]:
        raise GraphBreak("iterate", f"iterating over {self!r} is not supported")

    def truth(self, tx: "Frame") -> bool:
        raise GraphBreak("truth", f"truth value of {self!r} is not known at capture time")

    def reconstruct(self, cg) -> str:
        """A Python expression that rebuilds this value at run time (see `capture.codegen`)."""
        if self.source is not None:
            return cg.source(self.source)
        raise GraphBreak("reconstruct", f"cannot rebuild {self!r} outside the graph")

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class ConstantValue(Value):
    """A value known at capture time: numbers, strings, None, dtypes, torch.Size, ranges..."""

    __slots__ = ("value", "source")

    def __init__(self, value: Any, source: Source | None = None) -> None:
        self.value = value
        self.source = source

    def python_type(self) -> type:
        return type(self.value)

    def is_constant(self) -> bool:
        return True

    def constant(self) -> Any:
        return self.value

    def truth(self, tx) -> bool:
        return bool(self.value)

    def unpack(self, tx) -> list[Value]:
        try:
            return [ConstantValue(v) for v in self.value]
        except TypeError as e:
            raise GraphBreak("iterate", f"{type(self.value).__name__} is not iterable", exception=e) from None

    def getattr(self, tx, name: str) -> Value:
        return _attribute_of_constant(tx, self, name)

    def reconstruct(self, cg) -> str:
        return cg.constant(self.value)

    def __repr__(self) -> str:
        return f"ConstantValue({self.value!r})"


def _attribute_of_constant(tx, value: ConstantValue, name: str) -> Value:
    """An attribute of a constant of an immutable builtin type (a dtype's is_floating_point, a tuple's count)."""
    obj = value.value
    if isinstance(obj, torch.dtype) or isinstance(obj, torch.device) or isinstance(
            obj, (int, float, str, bool, complex, type(None), tuple, range, slice, frozenset, bytes,
                  inspect.Signature, inspect.Parameter, types.MappingProxyType)):
        try:
            attr = getattr(obj, name)
        except AttributeError:
            raise GraphBreak("attribute-error", f"{type(obj).__name__!r} object has no attribute {name!r}")
        return tx.wrap_constant_object(attr)
    raise GraphBreak("getattr", f"attribute {name!r} of constant {type(obj).__name__}")


class CallableConstant(Value):
    """A callable known at capture time (a builtin, a torch function): a constant that can be called."""

    __slots__ = ("fn", "source")

    def __init__(self, fn: Any, source: Source | None = None) -> None:
        self.fn = fn
        self.source = source

    def python_type(self) -> type:
        return type(self.fn)

    def is_constant(self) -> bool:
        return True

    def constant(self) -> Any:
        return self.fn

    def reconstruct(self, cg) -> str:
        return cg.constant(self.fn)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({getattr(self.fn, '__qualname__', self.fn)!r})"


class NullValue(Value):
    """The NULL that CPython 3.11+ pushes beside a callable (below it up to 3.12, above on 3.13)."""

    def __repr__(self) -> str:
        return "NULL"


NULL = NullValue()
UNBOUND = NullValue()
"""What LOAD_FAST_AND_CLEAR pushes for an unbound local: a NULL that no call consumes."""


def is_constant(*values: Value) -> bool:
    return all(v.is_constant() for v in values)


DELETED = object()
"""An OutputGraph.attribute_overlay entry: the attribute was deleted in the function."""
