"""Builtins in Python for the calls capture's own handlers do not cover.

min/max with key= or default=, dict.fromkeys, and the lazy builtins where
laziness shows: zip, enumerate, any and all over an input that runs code when
read (a generator, an endless iterator), map and filter calling a Python
function (it may have side effects, which must interleave with the consumer's).
Calls the handlers in values/builtins.py answer (min of constants, zip of
lists) never get here: each entry declines them.
"""

from __future__ import annotations

import builtins

from ..values.builtins import BuiltinValue
from ..values.containers import DictViewValue, IteratorValue, SequenceValue
from .iterators import has_lazy_input
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


def _calls_python(args, kwargs) -> bool:
    """map/filter: an input read lazily, or a function that is not a builtin (it may have effects)."""
    return has_lazy_input(args, kwargs) or (bool(args) and type(args[0]) is not BuiltinValue and
                                            not (args[0].is_constant() and args[0].constant() is None))


@polyfill(builtins.zip, applies=has_lazy_input,
          samples=[([1, 2], "abc"), (), Sample([1, 2], "ab", strict=True), Sample([1], strict=True)])
def zip_(*iterables, strict=False):
    return _zip([iter(iterable) for iterable in iterables], strict)  # iter() at once, as C's zip


def _zip(iterators, strict):
    marker = []
    while iterators:
        group = []
        for index, iterator in enumerate(iterators):
            item = next(iterator, marker)
            if item is marker:
                if strict:
                    _strict_end(iterators, index, marker)
                return
            group.append(item)
        yield tuple(group)


def _strict_end(iterators, index, marker):
    """zip(strict=True) when iterator `index` ended: every other one must end there too."""
    if index:
        plural = " " if index == 1 else "s 1-"
        raise ValueError(f"zip() argument {index + 1} is shorter than argument{plural}{index}")
    for other in range(1, len(iterators)):
        if next(iterators[other], marker) is not marker:
            plural = " " if other == 1 else "s 1-"
            raise ValueError(f"zip() argument {other + 1} is longer than argument{plural}{other}")


@polyfill(builtins.enumerate, applies=has_lazy_input, samples=[("abc",), ("ab", 5)])
def enumerate_(iterable, start=0):
    return _enumerate(iter(iterable), start)


def _enumerate(iterator, start):
    index = start
    for item in iterator:
        yield index, item
        index += 1


@polyfill(builtins.map, applies=_calls_python, samples=[(abs, [-1, 2]), (pow, [1, 2], [3, 4, 5])])
def map_(function, *iterables):
    return _map(function, zip_(*iterables))


def _map(function, groups):
    for args in groups:
        yield function(*args)


@polyfill(builtins.filter, applies=_calls_python, samples=[(None, [0, 1, 2, 0]), (abs, [0, -1, 2])])
def filter_(function, iterable):
    return _filter(function, iter(iterable))


def _filter(function, iterator):
    for item in iterator:
        if (item if function is None else function(item)):
            yield item


@polyfill(builtins.any, applies=has_lazy_input, samples=[([0, 1],), ([],), ([0, 0],)])
def any_(iterable):
    for item in iterable:
        if item:
            return True
    return False


@polyfill(builtins.all, applies=has_lazy_input, samples=[([1, 0],), ([],), ([1, 2],)])
def all_(iterable):
    for item in iterable:
        if not item:
            return False
    return True


def _symbolic_items(args, kwargs) -> bool:
    """Whether sorted() gets items that are not all constants (the handler sorts constants only)."""
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


def _sorts_with_key(args, kwargs) -> bool:
    """Whether list.sort gets a key function (the handler sorts constants by their own order only)."""
    key = kwargs.get("key")
    return key is not None and not (key.is_constant() and key.constant() is None)


@polyfill(list.sort, applies=_sorts_with_key,
          samples=[Sample([3, -1, 2], key=abs), Sample(["bb", "a", "cc"], key=len, reverse=True),
                   Sample([1, 2], key=None), Sample([1, "a"], key=str)])
def list_sort(self, *, key=None, reverse=False):
    """list.sort with a key, as CPython's: the keys are computed once, in order, while the list
    looks empty (a key reading it sees no items); then a stable sort comparing with < only. A list
    changed meanwhile gets its sorted items back and the sort raises ValueError; one whose key or
    comparison raises gets its items back as they were."""
    items = self[:]
    self.clear()
    try:
        ordered = sorted_(items, key=key, reverse=reverse)
    except BaseException:
        self[:] = items
        raise
    modified = len(self) != 0
    self[:] = ordered
    if modified:
        raise ValueError("list modified during sort")


@polyfill(dict.fromkeys, samples=[("abc",), ([1, 2], 0), ([],)])
def dict_fromkeys(iterable, value=None):
    result = {}
    for key in iterable:
        result[key] = value
    return result
