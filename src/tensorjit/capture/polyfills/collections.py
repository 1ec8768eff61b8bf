"""collections' C types (deque, defaultdict, OrderedDict) and Counter as symbolic containers.

A container made inside the compiled function is a symbolic value like a list
or dict, so its items can be tensors and its methods are traced; one that
outlives the graph is rebuilt as the real type (`reconstruct`). Each kind is a
subclass of the list or dict value with its own methods registered beside it.
"""

from __future__ import annotations

import collections
import operator
from typing import Any

from ..breaks import GraphBreak
from ..values.base import ConstantValue, Value
from ..values.builtins import BuiltinValue
from ..values.container_subclasses import MADE_BY_KIND, subclass_attribute
from ..values.containers import ContainerMethodValue, DictValue, ListValue, TupleValue, each_item
from ..values.method_table import method
from .registry import capture_rule

NONE = ConstantValue(None)


def _dict_body(cg, items: dict) -> str:
    return "{" + ", ".join(f"{cg.constant(k)}: {v.reconstruct(cg)}" for k, v in items.items()) + "}"


def _initial_items(tx, args: list[Value], kwargs: dict[str, Value]) -> dict:
    return tx.call(BuiltinValue(dict), args, kwargs).items if args or kwargs else {}


# -- OrderedDict ----------------------------------------------------------------------------
class OrderedDictValue(DictValue):
    """An OrderedDict made during capture: a dict with move_to_end and popitem(last=)."""

    EXTRA = {"move_to_end", "popitem", "fromkeys"}

    def __init__(self, items: dict, source=None, cls: type = collections.OrderedDict) -> None:
        super().__init__(items, cls, source)  # cls: a subclass made in the function

    def getattr(self, tx, name: str) -> Value:
        if name in self.EXTRA and not subclass_attribute(tx, self, name):
            return ContainerMethodValue(self, name)
        return super().getattr(tx, name)


MADE_BY_KIND[collections.OrderedDict] = lambda cls: OrderedDictValue({}, cls=cls)


@capture_rule(collections.OrderedDict)
def _ordered_dict(tx, *args: Value, **kwargs: Value) -> Value:
    return OrderedDictValue(_initial_items(tx, list(args), kwargs))


@method(OrderedDictValue, "move_to_end")
def _move_to_end(tx, d: OrderedDictValue, key: Value, last: Value = ConstantValue(True)) -> Value:
    k = key.constant()
    if k not in d.items:
        raise GraphBreak("op-error", f"KeyError: {k!r}", exception=KeyError(k))
    d.mutate(tx)
    value = d.items.pop(k)
    d.items = {k: value, **d.items} if not last.constant() else {**d.items, k: value}
    return NONE


@method(OrderedDictValue, "popitem")
def _popitem(tx, d: OrderedDictValue, last: Value = ConstantValue(True)) -> Value:
    if not d.items:
        raise GraphBreak("op-error", "KeyError: dictionary is empty", exception=KeyError("dictionary is empty"))
    d.mutate(tx)
    k = next(reversed(d.items)) if last.constant() else next(iter(d.items))
    return TupleValue([ConstantValue(k), d.items.pop(k)])


@method(OrderedDictValue, "copy")
def _ordered_copy(tx, d: OrderedDictValue) -> Value:
    if d.cls is not collections.OrderedDict:  # a subclass's copy() calls the subclass itself
        raise GraphBreak("container-method", f"{d.cls.__name__}.copy() of an OrderedDict subclass")
    return OrderedDictValue(dict(d.items))


# -- defaultdict ----------------------------------------------------------------------------
class DefaultDictValue(DictValue):
    """A defaultdict made during capture: a missing key read with [] calls the factory and stores its result."""

    def __init__(self, factory: Value, items: dict) -> None:
        super().__init__(items, collections.defaultdict)
        self.factory = factory

    def getitem(self, tx, key: Value) -> Value:
        k = key.constant()
        if k not in self.items:
            if self.factory.is_constant() and self.factory.constant() is None:
                raise GraphBreak("op-error", f"KeyError: {k!r}", exception=KeyError(k))
            value = tx.call(self.factory, [], {})
            self.mutate(tx)
            self.items[k] = value
        return self.items[k]

    def getattr(self, tx, name: str) -> Value:
        if name == "default_factory":
            return self.factory
        return super().getattr(tx, name)

    def constant(self) -> Any:
        return collections.defaultdict(self.factory.constant(), {k: v.constant() for k, v in self.items.items()})

    def reconstruct(self, cg) -> str:
        return f"{cg.constant(collections.defaultdict)}({self.factory.reconstruct(cg)}, {_dict_body(cg, self.items)})"


@capture_rule(collections.defaultdict)
def _defaultdict(tx, factory: Value = NONE, *args: Value, **kwargs: Value) -> Value:
    return DefaultDictValue(factory, _initial_items(tx, list(args), kwargs))


@method(DefaultDictValue, "copy")
def _defaultdict_copy(tx, d: DefaultDictValue) -> Value:
    return DefaultDictValue(d.factory, dict(d.items))


# -- Counter --------------------------------------------------------------------------------
class CounterValue(DictValue):
    """A Counter made during capture: counts are plain values, a missing key reads 0 without storing it."""

    EXTRA = {"most_common", "total", "elements", "subtract"}

    def __init__(self, items: dict) -> None:
        super().__init__(items, collections.Counter)

    def getitem(self, tx, key: Value) -> Value:
        return self.items.get(key.constant(), ConstantValue(0))

    def is_constant(self) -> bool:
        return False  # Counter arithmetic has its own rule (counter_binary); folding would leave a plain object

    def constant(self) -> Any:
        return collections.Counter({k: v.constant() for k, v in self.items.items()})

    def getattr(self, tx, name: str) -> Value:
        return ContainerMethodValue(self, name) if name in self.EXTRA else super().getattr(tx, name)

    def reconstruct(self, cg) -> str:
        return f"{cg.constant(collections.Counter)}({_dict_body(cg, self.items)})"


def _count_into(tx, counter: CounterValue, source: Value | None, kwargs: dict, sign: int) -> None:
    if source is None:
        pairs = []
    elif isinstance(source, DictValue):
        pairs = list(source.items.items())
    else:
        pairs = [(item.constant(), ConstantValue(1)) for item in tx.iterate(source).unpack(tx)]
    pairs += list(kwargs.items())
    for key, amount in pairs:
        amount = amount if sign > 0 else tx.binary_op(operator.mul, amount, ConstantValue(-1))
        current = counter.items.get(key, ConstantValue(0))
        counter.items[key] = tx.binary_op(operator.add, current, amount)


@capture_rule(collections.Counter)
def _counter(tx, source: Value | None = None, **kwargs: Value) -> Value:
    counter = CounterValue({})
    _count_into(tx, counter, source, kwargs, 1)
    return counter


def counter_binary(op, a: Value, b: Value) -> Value | None:
    """`c + d`, `c - d`, `c | d`, `c & d` on Counters of constant counts, as Counter computes them."""
    if not (isinstance(a, CounterValue) and isinstance(b, CounterValue)) or \
            op not in (operator.add, operator.sub, operator.or_, operator.and_):
        return None
    if not all(v.is_constant() for v in [*a.items.values(), *b.items.values()]):
        return None
    result = op(a.constant(), b.constant())
    return CounterValue({k: ConstantValue(v) for k, v in result.items()})


@method(CounterValue, "update")
def _counter_update(tx, c: CounterValue, source: Value | None = None, **kwargs: Value) -> Value:
    c.mutate(tx)
    _count_into(tx, c, source, kwargs, 1)
    return NONE


@method(CounterValue, "subtract")
def _counter_subtract(tx, c: CounterValue, source: Value | None = None, **kwargs: Value) -> Value:
    c.mutate(tx)
    _count_into(tx, c, source, kwargs, -1)
    return NONE


@method(CounterValue, "most_common")
def _most_common(tx, c: CounterValue, n: Value = NONE) -> Value:
    ranked = sorted(c.items.items(), key=lambda pair: pair[1].constant(), reverse=True)  # stable, as Counter's
    if n.constant() is not None:
        ranked = ranked[:max(n.constant(), 0)]
    return ListValue([TupleValue([ConstantValue(k), v]) for k, v in ranked])


@method(CounterValue, "total")
def _total(tx, c: CounterValue) -> Value:
    return ConstantValue(sum(v.constant() for v in c.items.values()))


@method(CounterValue, "copy")
def _counter_copy(tx, c: CounterValue) -> Value:
    return CounterValue(dict(c.items))


# -- deque ----------------------------------------------------------------------------------
class DequeValue(ListValue):
    """A deque made during capture: a list with maxlen and the operations at its left end."""

    EXTRA = {"appendleft", "popleft", "extendleft", "rotate", "maxlen"}

    def __init__(self, items: list[Value], maxlen: int | None) -> None:
        super().__init__(items[len(items) - maxlen:] if maxlen is not None else items)
        self.maxlen = maxlen

    def python_type(self) -> type:
        return collections.deque

    def constant(self) -> Any:
        return collections.deque([v.constant() for v in self.items], self.maxlen)

    def rebuild(self, items):
        return DequeValue(items, self.maxlen)

    def getattr(self, tx, name: str) -> Value:
        if name == "maxlen":
            return ConstantValue(self.maxlen)
        return ContainerMethodValue(self, name) if name in self.EXTRA else super().getattr(tx, name)

    def getitem(self, tx, index: Value) -> Value:
        if isinstance(index.constant(), slice):
            raise GraphBreak("op-error", "TypeError: sequence index must be integer, not 'slice'",
                             exception=TypeError("sequence index must be integer, not 'slice'"))
        return super().getitem(tx, index)

    def trim(self, from_left: bool) -> None:
        if self.maxlen is not None and len(self.items) > self.maxlen:
            extra = len(self.items) - self.maxlen
            self.items = self.items[extra:] if from_left else self.items[:self.maxlen]

    def reconstruct(self, cg) -> str:
        body = "[" + ", ".join(v.reconstruct(cg) for v in self.items) + "]"
        return f"{cg.constant(collections.deque)}({body}, {cg.constant(self.maxlen)})"


@capture_rule(collections.deque)
def _deque(tx, iterable: Value | None = None, maxlen: Value = NONE) -> Value:
    items = tx.iterate(iterable).unpack(tx) if iterable is not None else []
    return DequeValue(items, maxlen.constant())


@method(DequeValue, "append")
def _deque_append(tx, q: DequeValue, value: Value) -> Value:
    q.items.append(value)
    q.trim(from_left=True)
    return NONE


@method(DequeValue, "appendleft")
def _deque_appendleft(tx, q: DequeValue, value: Value) -> Value:
    q.items.insert(0, value)
    q.trim(from_left=False)
    return NONE


@method(DequeValue, "extend")
def _deque_extend(tx, q: DequeValue, other: Value) -> Value:
    for value in each_item(tx, other):
        _deque_append(tx, q, value)
    return NONE


@method(DequeValue, "extendleft")
def _deque_extendleft(tx, q: DequeValue, other: Value) -> Value:
    for value in each_item(tx, other):
        _deque_appendleft(tx, q, value)
    return NONE


def _deque_take(left: bool):
    def take(tx, q: DequeValue) -> Value:
        if not q.items:
            raise GraphBreak("op-error", "IndexError: pop from an empty deque",
                             exception=IndexError("pop from an empty deque"))
        return q.items.pop(0 if left else -1)
    return take


method(DequeValue, "pop")(_deque_take(left=False))
method(DequeValue, "popleft")(_deque_take(left=True))


@method(DequeValue, "rotate")
def _deque_rotate(tx, q: DequeValue, steps: Value = ConstantValue(1)) -> Value:
    if q.items:
        n = steps.constant() % len(q.items)
        q.items = q.items[-n:] + q.items[:-n] if n else q.items
    return NONE


@method(DequeValue, "copy")
def _deque_copy(tx, q: DequeValue) -> Value:
    return DequeValue(list(q.items), q.maxlen)


# -- namedtuple -----------------------------------------------------------------------------
def _constant_arguments(args, kwargs) -> bool:
    return all(a.is_constant() for a in args) and all(v.is_constant() for v in kwargs.values())


@capture_rule(collections.namedtuple, applies=_constant_arguments)
def _namedtuple(tx, *args: Value, **kwargs: Value) -> Value:
    """Make the class now: its fields are constants, and namedtuple itself runs exec, which capture cannot trace.

    The class is made once per capture, so calls of the compiled code share it where eager makes one per call;
    its name, fields, defaults and module (the calling function's, as namedtuple finds it) are the same."""
    options = {k: v.constant() for k, v in kwargs.items()}
    options.setdefault("module", tx.globals.get("__name__"))
    cls = collections.namedtuple(*[a.constant() for a in args], **options)
    return tx.wrap_constant_object(cls)
