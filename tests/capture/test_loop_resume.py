"""A graph break inside a Python loop: the resume function serves every iteration.

The loop's iterator reaches the resume function as an input; guarding its position made each
iteration miss the entry (a loop of N iterations compiled N times). Capture now reads items
ahead of the iterator and guards only what it took and how many are left."""

import torch

import tensorjit
from conformance.harness import CountingBackend


def _break():
    torch._dynamo.graph_break()


def over_list(x, items):
    for t in items:
        x = x + t
        _break()
        x = x * 2
    return x


def over_range(x, n):
    for i in range(n):
        x = x + 1
        _break()
        x = x * 2
    return x


def over_range_using_index(x, n):
    for i in range(n):
        x = x + i
        _break()
        x = x * 2 - i
    return x


def over_tuple_of_objects(x, items):
    total = 0
    for item in items:
        total = total + item["k"]
        _break()
        x = x + item["t"]
    return x, total


def _graphs_for(fn, *args):
    backend = CountingBackend()
    compiled = tensorjit.compile(fn, backend=backend)
    torch.testing.assert_close(compiled(*args), fn(*args))
    return backend.graph_count


def test_the_resume_function_of_a_loop_over_a_list_compiles_once():
    x = torch.randn(3)
    short = _graphs_for(over_list, x, [torch.randn(3) for _ in range(3)])
    long = _graphs_for(over_list, x, [torch.randn(3) for _ in range(20)])
    assert long == short <= 3


def test_the_resume_function_of_a_loop_over_a_range_compiles_a_bounded_number_of_times():
    x = torch.randn(3)
    assert _graphs_for(over_range, x, 20) == _graphs_for(over_range, x, 4) <= 4

def test_a_loop_index_read_after_the_break_stays_correct():
    # `i` reaches the resume function as a local, and a resume function's ints stay specialized
    # (symbolic, int-only code after a break would become graphs): each iteration is an entry,
    # up to the recompile limit, after which the resume function runs eagerly.
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _graphs_for(over_range_using_index, torch.randn(3), 12)


def test_items_read_ahead_of_the_iterator_are_the_right_ones():
    x = torch.randn(3)
    items = tuple({"k": k, "t": torch.full((3,), float(k))} for k in range(7))
    out, total = tensorjit.compile(over_tuple_of_objects, backend=CountingBackend())(x, items)
    ref, ref_total = over_tuple_of_objects(x, items)
    torch.testing.assert_close(out, ref)
    assert total == ref_total == 21


def test_the_iterator_is_advanced_by_what_capture_took():
    def take_two(it):
        return next(it) + next(it)

    xs = [torch.randn(2) for _ in range(5)]
    it = iter(xs)
    next(it)
    compiled = tensorjit.compile(take_two, backend=CountingBackend())
    torch.testing.assert_close(compiled(it), xs[1] + xs[2])
    assert next(it) is xs[3]
    torch.testing.assert_close(compiled(iter(xs)), xs[0] + xs[1])


def test_an_item_returned_after_the_break_is_the_one_taken():
    def last_before_break(x, items):
        for t in items:
            y = t * 2
            _break()
            if t.sum() > 100:
                break
        return y, t

    items = [torch.randn(2) for _ in range(6)]
    compiled = tensorjit.compile(last_before_break, backend=CountingBackend())
    y, t = compiled(torch.randn(2), items)
    assert t is items[-1]
    torch.testing.assert_close(y, items[-1] * 2)
