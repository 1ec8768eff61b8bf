"""The polyfill table: what capture runs in place of a C-implemented callable.

CPython implements much of the standard library in C (itertools, collections'
deque and defaultdict, dict.fromkeys, ...). Capture cannot look inside C code,
so without help every such call ends the graph. Each entry here names a C
callable (the target) and says what to do instead:

- `@polyfill(target)` beside a Python function: capture inlines that function
  as if the user had written it. The function must behave exactly like the
  target; `samples` are argument tuples on which tests/capture/test_polyfills.py
  checks that it does.
- `@capture_rule(target)` beside a function `(tx, *args, **kwargs) -> Value`:
  capture calls it directly, for targets whose result is a symbolic value
  of its own kind (a deque, an endless iterator) rather than plain Python.

Either kind may take `applies(args, kwargs) -> bool` to decline a call, which
then takes the ordinary path (a handler, constant folding or a graph break).
A polyfill written as a generator runs lazily as C's iterator does (see
capture/generators.py): it reads its inputs only as far as its consumer reads it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from ..generators import GeneratorValue
from ..values.base import Value
from ..values.builtins import BuiltinValue
from ..values.containers import ContainerMethodValue
from ..values.functions import FunctionValue, MethodValue
from ..values.objects import ObjectValue

_TABLE: dict[Any, "Polyfill"] = {}
_FAMILIES: list[Callable[[Any], "Polyfill | None"]] = []
"""Families too large to list entry by entry (NumPy's functions): `target -> Polyfill or None`."""


@dataclasses.dataclass
class Polyfill:
    target: Any
    implementation: Callable
    inlined: bool                      # a Python function to inline, else a capture rule
    samples: list = dataclasses.field(default_factory=list)
    applies: Callable | None = None


class Sample:
    """Arguments to call both a polyfill and its target with, in the completeness test."""

    def __init__(self, *args, **kwargs) -> None:
        self.args = args
        self.kwargs = kwargs


def samples_of(entry: "Polyfill") -> list[Sample]:
    return [s if isinstance(s, Sample) else Sample(*s) for s in entry.samples]


def _register(entry: Polyfill) -> None:
    if entry.target in _TABLE:
        raise AssertionError(f"two polyfills for {entry.target!r}")
    _TABLE[entry.target] = entry


def polyfill(target: Any, samples: list | None = None, applies: Callable | None = None):
    """Register the decorated Python function as target's implementation, inlined by capture.

    samples: argument tuples (or `Sample(*args, **kwargs)`) the completeness test calls both with."""
    def register(fn: Callable) -> Callable:
        _register(Polyfill(target, fn, True, list(samples or []), applies))
        return fn
    return register


def capture_rule(target: Any, applies: Callable | None = None):
    """Register the decorated `(tx, *args, **kwargs) -> Value` as what capture does for a call of target."""
    def register(fn: Callable) -> Callable:
        _register(Polyfill(target, fn, False, [], applies))
        return fn
    return register


def family(resolve: Callable[[Any], "Polyfill | None"]) -> Callable:
    """Register `resolve(target) -> Polyfill | None`, asked for targets the table does not list."""
    _FAMILIES.append(resolve)
    return resolve


def entries() -> list[Polyfill]:
    return list(_TABLE.values())


def find(fn: Value, args: list[Value], kwargs: dict[str, Value]) -> Polyfill | None:
    """The polyfill for a call of `fn`, when fn is a callable known at capture time that has one."""
    if type(fn) is MethodValue and type(fn.function) in (BuiltinValue, ObjectValue):
        # a C function bound to an object read from outside (`np.random.randn`, a method of
        # numpy's global RandomState): the unbound function's polyfill, given the object first
        return find(fn.function, [fn.owner, *args], kwargs)
    if type(fn) is BuiltinValue:
        target = fn.fn
    elif type(fn) is ObjectValue:
        target = fn.obj
    elif type(fn) is FunctionValue:  # a library function capture cannot trace (namedtuple runs exec)
        target = fn.fn
    elif type(fn) is ContainerMethodValue:  # `s.union(t)` on a symbolic set: the C method set.union
        target = getattr(fn.owner.python_type(), fn.name, None)
    else:
        return None
    try:
        entry = _TABLE.get(target)
    except TypeError:  # unhashable objects have no polyfill
        return None
    if entry is None:
        entry = next((e for e in (resolve(target) for resolve in _FAMILIES) if e is not None), None)
    if entry is None or (entry.applies is not None and not entry.applies(args, kwargs)):
        return None
    return entry


def call(tx, entry: Polyfill, fn: Value, args: list[Value], kwargs: dict[str, Value]) -> Value:
    if type(fn) in (ContainerMethodValue, MethodValue):
        args = [fn.owner, *args]
    if not entry.inlined:
        return entry.implementation(tx, *args, **kwargs)
    result = tx.inline_function(FunctionValue(entry.implementation), args, kwargs)
    if isinstance(result, GeneratorValue) and isinstance(entry.target, type):
        result.presented_type = entry.target  # type(zip(...)) is zip
    return result
