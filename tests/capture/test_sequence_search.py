"""list/tuple .index and .count as CPython answers them: bounds, identity then equality, ValueError."""

import collections

import pytest
import torch

import tensorjit


def _compiled(fn):
    return tensorjit.compile(fn, backend="eager", fullgraph=True)


@pytest.mark.parametrize("bounds", [(), (2,), (0, 3), (-2,), (1, -1)])
@pytest.mark.parametrize("kind", [list, tuple, torch.Size, collections.deque])
def test_index_with_bounds(kind, bounds):
    def fn(t):
        xs = kind([1, 2, 3, 4])
        return t + xs.index(3, *bounds)

    torch.testing.assert_close(_compiled(fn)(torch.zeros(1)), fn(torch.zeros(1)))


class Named:
    def __init__(self, name):
        self.name = name

    def __eq__(self, other):
        return isinstance(other, Named) and other.name == self.name


def test_index_and_count_over_items_that_are_not_constants():
    # the item itself first (no comparison of tensors), then __eq__ of user objects
    def fn(t):
        a, b = t + 1, t + 2
        xs = [a, b, a]
        people = [Named("x"), Named("y"), Named("x")]
        return xs.index(a) + (a, b).index(b, 1) + people.count(Named("x")) + people.index(Named("y")) + t

    torch.testing.assert_close(_compiled(fn)(torch.zeros(2)), fn(torch.zeros(2)))


def test_index_of_a_missing_item_raises_python_s_error_in_the_function():
    def fn(t, xs):
        try:
            xs.index(7)
        except ValueError as e:
            return t + 1, str(e)
        return t, ""

    args = (torch.zeros(1), [1, 2, 2])
    assert _compiled(fn)(*args)[1] == fn(*args)[1]
