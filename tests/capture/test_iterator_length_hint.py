"""`it.__length_hint__()` of an iterator over a list, dict, set or dict view (values/containers.py
`IteratorValue.length_hint`): the items not yet taken, as CPython's iterators answer, under
fullgraph (it used to break as an unsupported attribute)."""

import pytest
import torch

import tensorjit


def _hints(x):
    hints = []
    for obj in ({1, 2, 3}, {1: "a", 2: "b"}, {1: "a"}.values(), [5, 6, 7, 8], {"k": 1}.items()):
        it = iter(obj)
        hints.append(it.__length_hint__())
        next(it)
        hints.append(it.__length_hint__())
    hints.append(iter(set()).__length_hint__())
    return x + 1, hints


def _after_mutation(x):
    xs = [1, 2]
    it = iter(xs)
    next(it)
    xs.append(3)  # a list iterator reads the list at each step: two left now
    d = {1: 2}
    grown = iter(d)
    d[3] = 4  # CPython's dict iterator answers 0 once the size changed
    return x * 2, it.__length_hint__(), grown.__length_hint__()


@pytest.mark.parametrize("fn", [_hints, _after_mutation])
def test_length_hint_matches_eager(fn):
    x = torch.ones(3)
    compiled = tensorjit.compile(fn, backend="eager", fullgraph=True)
    expected, got = fn(x), compiled(x)
    torch.testing.assert_close(got[0], expected[0])
    assert got[1:] == expected[1:]


def test_length_hint_of_zip_still_breaks():
    def fn(x):
        return x + 1, hasattr(zip([1], [2]), "__length_hint__")

    x = torch.ones(2)
    assert tensorjit.compile(fn, backend="eager")(x)[1] is False


def test_iterator_types_of_builtins():
    def fn(x):
        made = zip([1], [2]), map(abs, [1]), enumerate([1]), filter(None, [1])
        return x + 1, [type(it) for it in made], [hasattr(it, "__length_hint__") for it in made]

    x = torch.ones(2)
    assert tensorjit.compile(fn, backend="eager", fullgraph=True)(x)[1:] == fn(x)[1:]
