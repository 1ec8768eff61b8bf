"""itertools in Python, for capture to trace (the C originals end the graph).

Each function yields exactly the items of its C original in the same order and
consumes its inputs as far as the original does (islice and takewhile stop
pulling as soon as they are done), at the same time: what the C constructor does
at once (iter() of the inputs, product and combinations reading their pools) the
polyfill does before it returns its generator, the rest as items are asked for.
count, cycle and repeat live in iterators.py.
"""

from __future__ import annotations

import itertools
import operator

from .registry import Sample, polyfill

_NUMBERS = [1, 2, 3, 4, 5]


@polyfill(itertools.chain, samples=[([1, 2], (3,), "ab"), ()])
def chain(*iterables):
    for iterable in iterables:
        for item in iterable:
            yield item


@polyfill(itertools.chain.from_iterable, samples=[([[1, 2], (3,), "ab"],), ([],)])
def chain_from_iterable(iterables):
    for iterable in iterables:
        for item in iterable:
            yield item


@polyfill(itertools.islice, samples=[(range(10), 3), (range(10), 2, 8, 3), (range(10), 1, None),
                                     (range(4), 0, 9, 2), (range(10), 5, 2)])
def islice(iterable, *bounds):
    start, stop, step = (0, bounds[0], 1) if len(bounds) == 1 else (list(bounds) + [None])[:3]
    start = 0 if start is None else start
    step = 1 if step is None else step
    if start < 0 or (stop is not None and stop < 0) or step <= 0:
        raise ValueError("Indices for islice() must be None or an int in range")
    return _islice(iter(iterable), start, stop, step)


def _islice(iterator, start, stop, step):
    if stop is not None and stop <= 0:
        return
    index = 0
    wanted = start
    for item in iterator:
        if index == wanted:
            yield item
            wanted += step
        index += 1
        if stop is not None and index >= stop:
            return


@polyfill(itertools.zip_longest, samples=[([1, 2, 3], "ab"), ([1], [2, 3], []),
                                         Sample([1], "abc", fillvalue=0)])
def zip_longest(*iterables, fillvalue=None):
    return _zip_longest([iter(iterable) for iterable in iterables], fillvalue)


def _zip_longest(iterators, fillvalue):
    marker = []
    while iterators:
        group = []
        active = 0
        for iterator in iterators:
            item = next(iterator, marker)
            if item is marker:
                group.append(fillvalue)
            else:
                active += 1
                group.append(item)
        if active == 0:
            return
        yield tuple(group)


@polyfill(itertools.product, samples=[([1, 2], "ab"), (range(2),), (), Sample("ab", repeat=2)])
def product(*iterables, repeat=1):
    return _product([tuple(iterable) for iterable in iterables] * repeat)


def _product(pools):
    results = [()]
    for pool in pools:
        results = [partial + (item,) for partial in results for item in pool]
    for result in results:
        yield result


@polyfill(itertools.combinations, samples=[(_NUMBERS, 2), ("abcd", 3), ([1, 2], 3), ([1, 2], 0)])
def combinations(iterable, r):
    return _combinations(tuple(iterable), r)


def _combinations(pool, r):
    n = len(pool)
    if r > n:
        return
    indices = list(range(r))
    while True:
        yield tuple([pool[i] for i in indices])
        position = r - 1
        while position >= 0 and indices[position] == position + n - r:
            position -= 1
        if position < 0:
            return
        indices[position] += 1
        for later in range(position + 1, r):
            indices[later] = indices[later - 1] + 1


@polyfill(itertools.combinations_with_replacement, samples=[([1, 2, 3], 2), ("ab", 3)])
def combinations_with_replacement(iterable, r):
    return _combinations_with_replacement(tuple(iterable), r)


def _combinations_with_replacement(pool, r):
    n = len(pool)
    for indices in product(range(n), repeat=r):
        if list(indices) == sorted(indices):
            yield tuple([pool[i] for i in indices])


@polyfill(itertools.permutations, samples=[([1, 2, 3],), ("abcd", 2), ([1], 2)])
def permutations(iterable, r=None):
    pool = tuple(iterable)
    return _permutations(pool, len(pool) if r is None else r)


def _permutations(pool, r):
    n = len(pool)
    for indices in product(range(n), repeat=r):
        if len(set(indices)) == r:
            yield tuple([pool[i] for i in indices])


@polyfill(itertools.accumulate, samples=[(_NUMBERS,), (_NUMBERS, operator.mul), ([],), ([2, 3], None),
                                            Sample([1, 2], initial=10), Sample([], initial=0)])
def accumulate(iterable, func=None, *, initial=None):
    return _accumulate(iter(iterable), func, initial)


def _accumulate(iterator, func, initial):
    total = initial
    if initial is None:
        marker = []
        total = next(iterator, marker)
        if total is marker:
            return
    yield total
    for item in iterator:
        total = total + item if func is None else func(total, item)
        yield total


@polyfill(itertools.pairwise, samples=[(_NUMBERS,), ([1],), ("abc",)])
def pairwise(iterable):
    return _pairwise(iter(iterable))


def _pairwise(iterator):
    marker = []
    previous = next(iterator, marker)
    if previous is marker:
        return
    for item in iterator:
        yield previous, item
        previous = item


@polyfill(itertools.starmap, samples=[(operator.mul, [(1, 2), (3, 4)]), (max, [(1, 5, 2)])])
def starmap(function, iterable):
    return _starmap(function, iter(iterable))


def _starmap(function, iterator):
    for args in iterator:
        yield function(*args)


@polyfill(itertools.takewhile, samples=[(bool, [1, 2, 0, 3]), (bool, [])])
def takewhile(predicate, iterable):
    return _takewhile(predicate, iter(iterable))


def _takewhile(predicate, iterator):
    for item in iterator:
        if not predicate(item):
            return
        yield item


@polyfill(itertools.dropwhile, samples=[(bool, [1, 2, 0, 3]), (bool, [])])
def dropwhile(predicate, iterable):
    return _dropwhile(predicate, iter(iterable))


def _dropwhile(predicate, iterator):
    for item in iterator:
        if not predicate(item):
            yield item
            break
    for item in iterator:
        yield item


@polyfill(itertools.filterfalse, samples=[(bool, [1, 0, 2, 0]), (None, [1, 0, 2])])
def filterfalse(predicate, iterable):
    return _filterfalse(predicate, iter(iterable))


def _filterfalse(predicate, iterator):
    for item in iterator:
        if not (bool(item) if predicate is None else predicate(item)):
            yield item


@polyfill(itertools.compress, samples=[("abcd", [1, 0, 1]), ([1, 2], [0, 0, 1])])
def compress(data, selectors):
    return _compress(iter(data), iter(selectors))


def _compress(data, selectors):
    for item, selected in zip(data, selectors):
        if selected:
            yield item


@polyfill(itertools.tee, samples=[([1, 2, 3],), ([1, 2], 3), ([], 0)])
def tee(iterable, n=2):
    """Lazy, as the C tee: an item is read from the input when the first copy asks for it and kept
    until every copy has taken it."""
    if n < 0:
        raise ValueError("n must be >= 0")
    iterator = iter(iterable)
    queues = [[] for _ in range(n)]
    return tuple([_tee_copy(iterator, queues, queue) for queue in queues])


def _tee_copy(iterator, queues, queue):
    marker = []
    while True:
        if not queue:
            item = next(iterator, marker)
            if item is marker:
                return
            for other in queues:
                other.append(item)
        yield queue.pop(0)
