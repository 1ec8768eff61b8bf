"""set algebra methods in Python, traced on symbolic sets (the C methods end the graph).

Each returns a new set built item by item in the order CPython's would iterate
the same constants; the operators (|, &, -, ^, <=) on constant sets fold already.
"""

from __future__ import annotations

from .registry import polyfill

_PAIRS = [({1, 2, 3}, [2, 4]), ({1}, (1,)), (set(), {1}), ({1, 2}, {1, 2, 3})]


@polyfill(set.union, samples=_PAIRS + [({1}, [2], (3,)), ({1},)])
def set_union(self, *others):
    result = set(self)
    for other in others:
        for item in other:
            result.add(item)
    return result


@polyfill(set.intersection, samples=_PAIRS + [({1, 2}, [2], (2, 1))])
def set_intersection(self, *others):
    result = set(self)
    for other in others:
        kept = set()
        for item in other:
            if item in result:
                kept.add(item)
        result = kept
    return result


@polyfill(set.difference, samples=_PAIRS + [({1, 2, 3}, [2], (3,))])
def set_difference(self, *others):
    result = set(self)
    for other in others:
        for item in other:
            result.discard(item)
    return result


@polyfill(set.symmetric_difference, samples=_PAIRS)
def set_symmetric_difference(self, other):
    other = set(other)
    result = set()
    for item in self:
        if item not in other:
            result.add(item)
    for item in other:
        if item not in self:
            result.add(item)
    return result


@polyfill(set.isdisjoint, samples=_PAIRS)
def set_isdisjoint(self, other):
    for item in other:
        if item in self:
            return False
    return True


@polyfill(set.issubset, samples=_PAIRS)
def set_issubset(self, other):
    other = set(other)
    for item in self:
        if item not in other:
            return False
    return True


@polyfill(set.issuperset, samples=_PAIRS)
def set_issuperset(self, other):
    for item in other:
        if item not in self:
            return False
    return True
