"""Builtins in Python for the calls capture's own handlers do not cover.

min/max with key= or default=, zip over an endless iterator, enumerate and map
over one, and dict.fromkeys. Calls the handlers in values/builtins.py answer
(min of constants, zip of lists) never get here: each entry declines them.
"""

from __future__ import annotations

import builtins

from .iterators import has_endless
from .registry import Sample, polyfill



def _has_keywords(args, kwargs) -> bool:
    return bool(kwargs)


def _extreme(items, key, rest, name, smaller):
    if not items:
        if "default" in rest:
            return rest["default"]
        raise ValueError(f"{name}() iterable argument is empty")
    best = items[0]
    best_key = best if key is None else key(best)
    for item in items[1:]:
        item_key = item if key is None else key(item)
        if (item_key < best_key) if smaller else (item_key > best_key):
            best, best_key = item, item_key
    return best


@polyfill(builtins.min, applies=_has_keywords, samples=[Sample([3, 1, 2], key=lambda v: -v), Sample([], default=7),
                                                                   Sample("abc", "xy", key=len), Sample([])])
def min_(*args, key=None, **rest):
    items = list(args[0]) if len(args) == 1 else list(args)
    return _extreme(items, key, rest, "min", True)


@polyfill(builtins.max, applies=_has_keywords, samples=[Sample([3, 1, 2], key=lambda v: -v), Sample([], default=7),
                                                                   Sample("abc", "xy", key=len), Sample([1, 2], default=0)])
def max_(*args, key=None, **rest):
    items = list(args[0]) if len(args) == 1 else list(args)
    return _extreme(items, key, rest, "max", False)


@polyfill(builtins.zip, applies=has_endless, samples=[([1, 2], "abc"), ()], stops_early=True)
def zip_(*iterables):
    iterators = [iter(iterable) for iterable in iterables]
    marker = []
    while iterators:
        group = []
        for iterator in iterators:
            item = next(iterator, marker)
            if item is marker:
                return
            group.append(item)
        yield tuple(group)


@polyfill(builtins.enumerate, applies=has_endless, samples=[("abc",), ("ab", 5)])
def enumerate_(iterable, start=0):
    index = start
    for item in iterable:
        yield index, item
        index += 1


@polyfill(builtins.map, applies=has_endless, samples=[(abs, [-1, 2]), (pow, [1, 2], [3, 4, 5])])
def map_(function, *iterables):
    for args in zip_(*iterables):
        yield function(*args)


def _symbolic_items(args, kwargs) -> bool:
    """Whether sorted() gets items that are not all constants (the handler sorts constants only)."""
    from ..values.containers import DictViewValue, IteratorValue, SequenceValue
    if not args:
        return False
    items = args[0]
    if isinstance(items, IteratorValue) and type(items) is IteratorValue:
        return not all(v.is_constant() for v in items.items[items.position:])
    return isinstance(items, (SequenceValue, DictViewValue)) and not items.is_constant()


@polyfill(builtins.sorted, applies=_symbolic_items,
          samples=[([3, 1, 2],), ([(2, "b"), (1, "z"), (2, "a")],), Sample([3, 1, 2], reverse=True),
                   Sample(["bb", "a", "cc", "d"], key=len), Sample(["bb", "a", "cc", "d"], key=len, reverse=True),
                   ([],)])
def sorted_(iterable, *, key=None, reverse=False):
    """A stable insertion sort that compares with < only, as list.sort does."""
    items = list(iterable)
    if reverse:
        items.reverse()  # list.sort keeps equal items in order when reversing by sorting the reversal
    keys = [item if key is None else key(item) for item in items]
    order = []
    for index in range(len(items)):
        position = len(order)
        while position > 0 and keys[index] < keys[order[position - 1]]:
            position -= 1
        order.insert(position, index)
    result = [items[i] for i in order]
    if reverse:
        result.reverse()
    return result


@polyfill(dict.fromkeys, samples=[("abc",), ([1, 2], 0), ([],)])
def dict_fromkeys(iterable, value=None):
    result = {}
    for key in iterable:
        result[key] = value
    return result
