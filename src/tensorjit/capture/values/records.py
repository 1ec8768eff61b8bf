"""Output records: dataclasses that are also dicts, as model libraries return them.

Hugging Face's `ModelOutput` (and classes built the same way) is a dataclass deriving
from OrderedDict whose items are the fields that are not None, and whose integer
index reads `to_tuple()`. Following its `__init__`/`__post_init__` symbolically would
reach pytree registration and dataclass introspection; `RecordValue` gives the same
behaviour directly. A class qualifies when it is a dataclass and a dict deriving from a
class named `ModelOutput` with `to_tuple`: the protocol this value implements (string keys
read items, integer keys read `to_tuple()`). Other dict dataclasses are followed as code.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..breaks import GraphBreak
from .base import ConstantValue, Value
from .containers import ListValue, TupleValue
from .tensors import TensorValue


def is_record_class(cls: type) -> bool:
    return isinstance(cls, type) and issubclass(cls, dict) and dataclasses.is_dataclass(cls) \
        and callable(getattr(cls, "to_tuple", None)) and any(k.__name__ == "ModelOutput" for k in cls.__mro__)


class RecordValue(Value):
    def __init__(self, cls: type, fields: dict[str, Value]) -> None:
        self.cls = cls
        self.fields = fields
        self.source = None

    @staticmethod
    def create(tx, cls: type, args: list[Value], kwargs: dict[str, Value]) -> "RecordValue":
        names = [f.name for f in dataclasses.fields(cls) if f.init]
        values: dict[str, Value] = {}
        for name, value in zip(names, args):
            values[name] = value
        for name, value in kwargs.items():
            if name not in names or name in values:
                raise GraphBreak("bad-call", f"{cls.__name__}() got an unexpected argument {name!r}")
            values[name] = value
        for f in dataclasses.fields(cls):
            if f.name not in values:
                if f.default is not dataclasses.MISSING:
                    values[f.name] = tx.wrap_constant_object(f.default)
                elif f.default_factory is not dataclasses.MISSING:
                    raise GraphBreak("record", f"{cls.__name__}.{f.name} has a default factory")
                else:
                    raise GraphBreak("bad-call", f"{cls.__name__}() missing argument {f.name!r}")
        record = RecordValue(cls, values)
        first = values[names[0]] if names else None
        others_none = all(_is_none(values[n]) for n in names[1:])
        if first is not None and others_none and not _is_none(first) and not isinstance(first, TensorValue):
            # __post_init__ would try to read key/value pairs out of the first field
            raise GraphBreak("record", f"{cls.__name__} built from one non-tensor field")
        return record

    def python_type(self) -> type:
        return self.cls

    def items(self) -> list[tuple[str, Value]]:
        return [(k, v) for k, v in self.fields.items() if not _is_none(v)]

    def getattr(self, tx, name: str) -> Value:
        if name in self.fields:
            return self.fields[name]
        if name in ("to_tuple", "keys", "values", "items", "get", "__getitem__", "__contains__", "__len__"):
            return RecordMethodValue(self, name)
        raise GraphBreak("attribute-error", f"{self.cls.__name__} has no attribute {name!r}",
                         exception=AttributeError(name))

    def getitem(self, tx, index: Value) -> Value:
        key = index.constant()
        if isinstance(key, str):
            for k, v in self.items():
                if k == key:
                    return v
            raise GraphBreak("op-error", f"KeyError: {key!r}", exception=KeyError(key))
        values = [v for _, v in self.items()]
        if isinstance(key, slice):
            return TupleValue(values[key])
        try:
            return values[key]
        except IndexError as e:
            raise GraphBreak("op-error", f"IndexError: {e}", exception=e)

    def setattr(self, tx, name: str, value: Value) -> None:
        if name not in self.fields:
            raise GraphBreak("record", f"setting {name!r}, not a field of {self.cls.__name__}")
        self.fields[name] = value

    def unpack(self, tx) -> list[Value]:
        return [ConstantValue(k) for k, _ in self.items()]

    def truth(self, tx) -> bool:
        return bool(self.items())

    def reconstruct(self, cg) -> str:
        arguments = ", ".join(f"{k}={cg.value(v)}" for k, v in self.fields.items())
        return f"{cg.constant(self.cls)}({arguments})"

    def __repr__(self) -> str:
        return f"RecordValue({self.cls.__name__})"


class RecordMethodValue(Value):
    def __init__(self, record: RecordValue, name: str) -> None:
        self.record = record
        self.name = name

    def call(self, tx, args, kwargs) -> Value:
        record, name = self.record, self.name
        if name == "to_tuple":
            return TupleValue([v for _, v in record.items()])
        if name == "keys":
            return ListValue([ConstantValue(k) for k, _ in record.items()])
        if name == "values":
            return ListValue([v for _, v in record.items()])
        if name == "items":
            return ListValue([TupleValue([ConstantValue(k), v]) for k, v in record.items()])
        if name == "__getitem__":
            return record.getitem(tx, args[0])
        if name == "__len__":
            return ConstantValue(len(record.items()))
        key = args[0].constant()
        present = dict(record.items())
        if name == "__contains__":
            return ConstantValue(key in present)
        return present.get(key, args[1] if len(args) > 1 else ConstantValue(None))  # get


def _is_none(value: Value) -> bool:
    return value.is_constant() and value.constant() is None
