"""functools.partial made in the function, with the attributes of the C type.

functools.reduce has a handler in values/builtins.py. A partial built during
capture reads .func, .args and .keywords like the real one, and a partial of a
partial flattens into one, as CPython's constructor does.
"""

from __future__ import annotations

import functools

from ..breaks import GraphBreak
from ..guards import Guard
from ..sources import AttrSource
from ..values.base import Value
from ..values.containers import DictValue, TupleValue
from ..values.functions import FunctionValue
from ..values.objects import PartialValue
from .registry import capture_rule


class CapturedPartialValue(PartialValue):
    """A functools.partial made during capture or read from outside, with its attributes readable."""

    source = None

    def reconstruct(self, cg) -> str:
        return cg.source(self.source) if self.source is not None else super().reconstruct(cg)

    def getattr(self, tx, name: str) -> Value:
        if name == "func":
            return self.func
        if name == "args":
            return TupleValue(list(self.args))
        if name == "keywords":
            return DictValue(dict(self.kwargs))
        if name == "__call__":
            return self
        raise GraphBreak("attribute-error", f"'functools.partial' object has no attribute {name!r}",
                         exception=AttributeError(name))


def wrap_partial(tx, obj: functools.partial, source) -> Value:
    """A partial from outside: its function, arguments and keywords are read (and guarded) through the source."""
    tx.output.guard(Guard(source, "type", functools.partial))
    args = tx.wrap(obj.args, AttrSource(source, "args"))
    keywords = tx.wrap(obj.keywords, AttrSource(source, "keywords"))
    value = CapturedPartialValue(tx.wrap(obj.func, AttrSource(source, "func")), list(args.items), dict(keywords.items))
    value.source = source
    return value


@capture_rule(functools.partial)
def _partial(tx, func: Value, *args: Value, **kwargs: Value) -> Value:
    if type(func) is CapturedPartialValue:  # partial(partial(f, a), b) is partial(f, a, b)
        return CapturedPartialValue(func.func, [*func.args, *args], {**func.kwargs, **kwargs})
    return CapturedPartialValue(func, list(args), dict(kwargs))


class ComparisonKey:
    """What the key of functools.cmp_to_key wraps an item in: ordered by the comparison function,
    as CPython's C `functools.KeyWrapper` is (unhashable, `obj` the item)."""

    __hash__ = None

    def __init__(self, obj, compare):
        self.obj = obj
        self.compare = compare

    def __lt__(self, other):
        return self.compare(self.obj, other.obj) < 0

    def __gt__(self, other):
        return self.compare(self.obj, other.obj) > 0

    def __le__(self, other):
        return self.compare(self.obj, other.obj) <= 0

    def __ge__(self, other):
        return self.compare(self.obj, other.obj) >= 0

    def __eq__(self, other):
        return self.compare(self.obj, other.obj) == 0


def comparison_key(compare):
    def key(obj):
        return ComparisonKey(obj, compare)
    return key


@capture_rule(functools.cmp_to_key)
def _cmp_to_key(tx, compare: Value) -> Value:
    """functools.cmp_to_key(compare): a key function made in Python and inlined (the C one's key
    objects are opaque to capture; these compare through `compare` the same way)."""
    return tx.call(FunctionValue(comparison_key), [compare], {})
