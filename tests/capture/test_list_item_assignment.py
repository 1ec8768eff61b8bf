"""Item assignment and deletion on lists (values/container_methods.py `_list_setitem`,
`_list_delitem`), by subscript or by `p.__setitem__`/`p.__delitem__`: CPython's exceptions reach
the program (an index out of range was an internal error: the IndexError escaped capture), and
the dunders are methods of a list made in the function (they broke as unknown attributes)."""

import pytest
import torch

import tensorjit

_CASES = [
    lambda p: p.__setitem__(10, 1),
    lambda p: p.__delitem__(1.5),
    lambda p: p.__setitem__(slice(1, 3), 1),
    lambda p: p.__setitem__(slice(1, 5, 2), [1]),
    lambda p: p.__delitem__(slice(1, 1, 0)),
]


def _subscript_out_of_range(x):
    p = [1, 2, 3]
    try:
        p[10] = 1
    except IndexError as e:
        return x + 1, str(e)


def _delete_out_of_range(x):
    p = [1, 2, 3]
    try:
        del p[-4]
    except IndexError as e:
        return x + 1, str(e)


def _dunders(x):
    out = []
    for case in _CASES:
        p = [1, 2, 3, 4, 5]
        try:
            case(p)
        except (IndexError, TypeError, ValueError) as e:
            out.append((type(e).__name__, str(e)))
    p = [1, 2, 3, 4]
    p.__setitem__(slice(1, 3), ["x", "y", "z"])
    p.__delitem__(0)
    p[-1] = 9
    del p[:1]
    out.append(p)
    return x + 1, out


@pytest.mark.parametrize("fn", [_subscript_out_of_range, _delete_out_of_range, _dunders])
def test_list_item_assignment_matches_eager(fn):
    x = torch.ones(2)
    expected, got = fn(x), tensorjit.compile(fn, backend="eager", fullgraph=True)(x)
    torch.testing.assert_close(got[0], expected[0])
    assert got[1] == expected[1]


def test_list_from_outside_is_written_back():
    def fn(x, p):
        p[0] = x.sum()
        del p[1]
        p.__setitem__(slice(1, 2), [5, 6])
        return x * 2

    x = torch.ones(2)
    expected, got = [0, 1, 2, 3], [0, 1, 2, 3]
    fn(x, expected)
    tensorjit.compile(fn, backend="eager", fullgraph=True)(x, got)
    assert got == expected


def test_list_new_makes_an_empty_list():
    def fn(x):
        made = list.__new__(list)
        made.append(1)
        return x + 1, made, list.__new__(list, [1, 2], extra="ignored")

    x = torch.ones(2)
    assert tensorjit.compile(fn, backend="eager", fullgraph=True)(x)[1:] == fn(x)[1:] == ([1], [])
