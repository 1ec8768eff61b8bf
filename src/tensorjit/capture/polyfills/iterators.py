"""Endless iterators (itertools.count, cycle, repeat without times) as symbolic values.

Capture runs a generator to its end when it is called, which an endless one
never reaches. These iterators instead make each item when it is asked for;
consumers that take items one at a time (for loops with a break, next(),
islice, zip with a finite partner) work, and asking for all items is a graph break.
"""

from __future__ import annotations

import itertools
import operator
from typing import Callable

from ..breaks import GraphBreak
from ..generators import GeneratorValue
from ..values.base import ConstantValue, Value
from ..values.containers import IteratorValue, TupleValue
from .registry import capture_rule


class EndlessIteratorValue(IteratorValue):
    """Item i is `produce(i)`; `rebuild(cg, position)` is code for the iterator from `position` on."""

    def __init__(self, kind: type, produce: Callable[[int], Value], rebuild: Callable[[object, int], str]) -> None:
        super().__init__([])
        self.kind = kind
        self.produce = produce
        self.rebuild = rebuild

    def python_type(self) -> type:
        return self.kind

    def next(self) -> Value:
        value = self.produce(self.position)
        self.position += 1
        return value

    def unpack(self, tx) -> list[Value]:
        raise GraphBreak("endless-iterator", f"taking every item of an endless {self.kind.__name__} iterator")

    def reconstruct(self, cg) -> str:
        return self.rebuild(cg, self.position)

    def __repr__(self) -> str:
        return f"EndlessIteratorValue({self.kind.__name__})"


def _all_constant(args, kwargs) -> bool:
    return all(a.is_constant() for a in args) and all(v.is_constant() for v in kwargs.values())


@capture_rule(itertools.count, applies=_all_constant)
def _count(tx, start: Value = ConstantValue(0), step: Value = ConstantValue(1)) -> Value:
    first, stride = start.constant(), step.constant()
    return EndlessIteratorValue(
        itertools.count, lambda i: ConstantValue(first + i * stride),
        lambda cg, i: f"{cg.constant(itertools.count)}({cg.constant(first + i * stride)}, {cg.constant(stride)})")


@capture_rule(itertools.cycle)
def _cycle(tx, iterable: Value) -> Value:
    items = tx.iterate(iterable).unpack(tx)
    if not items:
        return IteratorValue([])

    def rebuild(cg, i: int) -> str:
        turned = items[i % len(items):] + items[:i % len(items)]
        return f"{cg.constant(itertools.cycle)}([{', '.join(v.reconstruct(cg) for v in turned)}])"
    return EndlessIteratorValue(itertools.cycle, lambda i: items[i % len(items)], rebuild)


@capture_rule(itertools.repeat)
def _repeat(tx, value: Value, times: Value | None = None) -> Value:
    if times is not None:
        return IteratorValue([value] * max(times.constant(), 0))
    return EndlessIteratorValue(itertools.repeat, lambda i: value,
                                lambda cg, i: f"{cg.constant(itertools.repeat)}({value.reconstruct(cg)})")


def runs_code(value: Value) -> bool:
    """Is value an iterator whose next() runs code (a generator made during capture) or that never
    ends? The eager handlers read every item at once, which such an iterator only allows lazily."""
    return isinstance(value, (EndlessIteratorValue, GeneratorValue))


def has_lazy_input(args, kwargs) -> bool:
    """Whether a call (zip, enumerate, chain) gets an input that must be read lazily (`runs_code`)."""
    return any(runs_code(a) for a in args)


# -- groupby --------------------------------------------------------------------------------
class GroupbyValue(IteratorValue):
    """itertools.groupby over items known at capture time: (key, group iterator) pairs.

    As in CPython, moving the outer iterator on (to its next group or to its end)
    empties the group it returned last, so a group read after that is empty."""

    def __init__(self, pairs: list[Value], groups: list[IteratorValue], key: Value | None) -> None:
        super().__init__(pairs)
        self.groups = groups
        self.key = key

    def python_type(self) -> type:
        return itertools.groupby

    def _invalidate_last(self) -> None:
        if self.position > 0:
            last = self.groups[self.position - 1]
            last.position = len(last.items)

    def next(self) -> Value | None:
        self._invalidate_last()
        return super().next()

    def unpack(self, tx) -> list[Value]:
        self._invalidate_last()
        rest = super().unpack(tx)
        for group in self.groups:
            group.position = len(group.items)
        return rest

    def reconstruct(self, cg) -> str:
        items = [v for group in self.groups[self.position:] for v in group.items]
        key = self.key.reconstruct(cg) if self.key is not None else "None"
        return f"{cg.constant(itertools.groupby)}([{', '.join(v.reconstruct(cg) for v in items)}], {key})"


def _reads_fixed_items(args, kwargs) -> bool:
    """The rule reads every item at once: only for inputs whose reading runs no code. (It also
    calls a Python key on every item at once, where C's groupby calls it as it advances: the
    same answer unless the key has effects; see docs/correctness/capture-breadth-2.md.)"""
    return not any(runs_code(a) for a in args)


@capture_rule(itertools.groupby, applies=_reads_fixed_items)
def _groupby(tx, iterable: Value, key: Value | None = None) -> Value:
    if key is not None and key.is_constant() and key.constant() is None:
        key = None
    pairs, groups = [], []
    current = None
    for item in tx.iterate(iterable).unpack(tx):
        item_key = item if key is None else tx.call(key, [item], {})
        if current is None or not tx.binary_op(operator.eq, current, item_key).truth(tx):
            groups.append(IteratorValue([]))
            pairs.append(TupleValue([item_key, groups[-1]]))
            current = item_key
        groups[-1].items.append(item)
    return GroupbyValue(pairs, groups, key)
