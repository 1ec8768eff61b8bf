"""list.sort(key=...) (polyfills/builtins.py `list_sort`) and functools.cmp_to_key
(polyfills/functools.py): both broke. The sort keeps CPython's observable behaviour: keys computed
once in order while the list looks empty, a stable sort by < only, and ValueError with the sorted
items restored when the list changed during the sort."""

import functools

import pytest
import torch

import tensorjit


class ByRemainder:
    def __init__(self, v):
        self.v = v

    def __lt__(self, other):
        return self.v % 3 < other.v % 3


def _descending(a, b):
    return (a < b) - (a > b)


def _keys(x):
    out = []
    p = [1, 3, 2]
    p.sort(key=functools.cmp_to_key(_descending))
    out.append(list(p))
    p.sort(key=functools.cmp_to_key(_descending), reverse=True)
    out.append(list(p))
    q = [3, 4, 5, 6]
    q.sort(key=ByRemainder)  # stable: equal keys keep their order
    out.append(list(q))
    q.sort(key=ByRemainder, reverse=True)
    out.append(list(q))
    words = ["bb", "a", "cc", "d"]
    words.sort(key=len, reverse=True)
    out.append(words)
    return x + 1, out


def _empty_while_sorting(x):
    p = [1, 3, 2]
    sizes = []

    def key(v):
        sizes.append(len(p))
        return v

    p.sort(key=key)
    return x + 1, (p, sizes)


def _modified_while_sorting(x):
    p = [1, 3, 2]

    def grow(a, b):
        p.append(4)
        return (a > b) - (a < b)

    try:
        p.sort(key=functools.cmp_to_key(grow))
    except ValueError as e:
        return x + 1, (str(e), p)


def _key_raises(x):
    p = [3, 1, 2]

    def key(v):
        if v == 2:
            raise KeyError(v)
        return v

    try:
        p.sort(key=key)
    except KeyError:
        return x + 1, p


@pytest.mark.parametrize("fn", [_keys, _empty_while_sorting, _modified_while_sorting, _key_raises])
def test_sort_with_key_matches_eager(fn):
    x = torch.ones(2)
    expected, got = fn(x), tensorjit.compile(fn, backend="eager", fullgraph=True)(x)
    torch.testing.assert_close(got[0], expected[0])
    assert got[1] == expected[1]


def test_sort_of_list_from_outside_is_written_back():
    def fn(x, p):
        p.sort(key=lambda v: -v)
        return x * 2

    expected, got = [1, 3, 2], [1, 3, 2]
    fn(torch.ones(1), expected)
    tensorjit.compile(fn, backend="eager", fullgraph=True)(torch.ones(1), got)
    assert got == expected == [3, 2, 1]
