"""Generators run lazily during capture, as in Python: a body runs only as far as it is read.

Each test runs a program eagerly and compiled from the same starting state and compares the
outputs and the side effects (an outer list the generator body appends to, a tensor it mutates).
Where a test says fullgraph=True, capture must also keep the whole program in one graph.
"""

import itertools

import pytest
import torch

import tensorjit
from conformance.harness import CountingBackend


def same(program, *args, fullgraph=False, graphs=None):
    """Run program(log, *args) eagerly and compiled; outputs and logs must agree."""
    eager_log, compiled_log = [], []
    expected = program(eager_log, *[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
    backend = CountingBackend()
    compiled = tensorjit.compile(program, backend=backend, fullgraph=fullgraph)
    actual = compiled(compiled_log, *[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
    torch.testing.assert_close(actual, expected)
    assert _plain(compiled_log) == _plain(eager_log)
    if graphs is not None:
        assert backend.graph_count == graphs
    return actual


def _plain(log):
    return [v.tolist() if isinstance(v, torch.Tensor) else v for v in log]


def counted(log, n):
    for i in range(n):
        log.append(("made", i))
        yield i


def test_a_loop_that_breaks_runs_only_the_items_read():
    def program(log, x):
        for v in counted(log, 4):
            x = x + v
            if v == 1:
                break
        return x

    same(program, torch.zeros(2), fullgraph=True, graphs=1)


def test_next_once_runs_the_body_to_the_first_yield():
    def program(log, x):
        g = counted(log, 3)
        return x + next(g)

    same(program, torch.ones(2), fullgraph=True)


def test_effects_interleave_with_the_consumer():
    def program(log, x):
        for v in counted(log, 3):
            log.append(("used", v))
            x = x * 2 + v
        return x

    same(program, torch.ones(2), fullgraph=True, graphs=1)


def test_a_generator_mutating_a_tensor_interleaves_with_the_consumer():
    def program(log, x):
        t = torch.zeros(2)

        def bump():
            for _ in range(3):
                t.add_(1)
                yield t.sum()

        total = []
        for s in bump():
            total.append(s)
            t.mul_(2)
        return torch.stack(total), t

    same(program, torch.zeros(2), fullgraph=True, graphs=1)


def test_the_body_reads_state_when_resumed():
    def program(log, x):
        state = [1]

        def reader():
            while True:
                yield state[0]

        g = reader()
        first = next(g)
        state[0] = 5
        return x + first + next(g)

    same(program, torch.zeros(2), fullgraph=True)


def test_islice_and_zip_read_only_what_they_need():
    def program(log, x):
        a = list(itertools.islice(counted(log, 5), 2))
        b = list(zip([10, 20], counted(log, 5)))
        c = list(zip(counted(log, 5), [10]))
        return x + sum(a) + len(b) + len(c)

    same(program, torch.zeros(2), fullgraph=True)


def test_any_and_all_stop_early():
    def program(log, x):
        found = any(v > 0 for v in counted(log, 5))
        every = all(v < 1 for v in counted(log, 5))
        return x + found + every

    same(program, torch.zeros(2))


def test_builtin_map_filter_enumerate_call_the_function_lazily():
    def program(log, x):
        def noisy(v):
            log.append(("called", v))
            return v + 1

        first = next(map(noisy, [1, 2, 3]))
        kept = next(filter(noisy, [0, 5, 6]))
        index, value = next(enumerate(counted(log, 3)))
        return x + first + kept + index + value

    same(program, torch.zeros(2), fullgraph=True)


def test_yield_from_delegates_lazily_and_passes_the_return_value():
    def program(log, x):
        def inner():
            log.append("inner start")
            yield 1
            log.append("inner middle")
            yield 2
            return 10

        def outer():
            result = yield from inner()
            log.append(("returned", result))
            yield result

        g = outer()
        first = next(g)
        log.append("between")
        return x + first + sum(g)

    same(program, torch.zeros(2), fullgraph=True)


def test_generator_expression_is_lazy():
    def program(log, x):
        def noisy(v):
            log.append(v)
            return v

        g = (noisy(v) for v in range(5))
        first = next(g)
        log.append("after first")
        second = next(g)
        return x + first + second

    same(program, torch.zeros(2), fullgraph=True)


def test_send_reaches_the_yield_expression():
    def program(log, x):
        def accumulator():
            total = 0
            while True:
                value = yield total
                log.append(value)
                total += value

        g = accumulator()
        next(g)
        g.send(2)
        return x + g.send(3)

    same(program, torch.zeros(2), fullgraph=True)


def test_finally_runs_when_the_generator_finishes():
    def program(log, x):
        def guarded():
            try:
                yield 1
                yield 2
            finally:
                log.append("cleanup")

        for v in guarded():
            x = x + v
        log.append("after")
        return x

    same(program, torch.zeros(2), fullgraph=True)


def test_an_abandoned_generator_inside_try_finally_cleans_up_where_eager_does():
    def program(log, x):
        def guarded():
            try:
                yield 1
                yield 2
            finally:
                log.append("cleanup")

        for v in guarded():
            x = x + v
            break
        log.append("after")
        return x

    same(program, torch.zeros(2))


def test_close_runs_the_finally_block():
    def program(log, x):
        def guarded():
            try:
                yield 1
                yield 2
            finally:
                log.append("cleanup")

        g = guarded()
        x = x + next(g)
        g.close()
        log.append("after")
        return x

    same(program, torch.zeros(2))


def test_a_generator_returned_unstarted_runs_after_the_call():
    def program(log, x):
        return x + 1, counted(log, 2)

    log = []
    y, g = tensorjit.compile(program)(log, torch.zeros(2))
    assert log == []
    assert list(g) == [0, 1] and log == [("made", 0), ("made", 1)]


def test_a_generator_returned_half_read_gives_the_rest():
    def program(log, x):
        g = counted(log, 3)
        return x + next(g), g

    compiled_log, eager_log = [], []
    y, g = tensorjit.compile(program)(compiled_log, torch.zeros(2))
    rest = list(g)
    y_eager, g_eager = program(eager_log, torch.zeros(2))
    assert rest == list(g_eager) and compiled_log == eager_log
    torch.testing.assert_close(y, y_eager)


def test_a_graph_break_inside_the_body_gives_eager_results():
    def program(log, x):
        def noisy():
            for i in range(3):
                log.append(i)
                print("break", i)
                yield x * i

        total = x
        for v in noisy():
            total = total + v
            if len(log) == 2:
                break
        return total

    same(program, torch.ones(2))


def test_stop_iteration_in_the_body_is_a_runtime_error():
    def program(log, x):
        def bad():
            yield 1
            next(iter([]))

        try:
            for v in bad():
                x = x + v
        except RuntimeError as e:
            log.append(type(e.__cause__).__name__)
        return x

    same(program, torch.zeros(2), fullgraph=True)


def test_an_exception_from_the_body_reaches_the_consumer():
    def program(log, x):
        def failing():
            yield 1
            raise ValueError("bad")

        g = failing()
        try:
            for v in g:
                x = x + v
        except ValueError:
            log.append("caught")
        log.append(list(g))  # a finished generator yields nothing more
        return x

    same(program, torch.zeros(2), fullgraph=True)


def test_a_generator_consumed_by_the_list_constructor_and_unpacking():
    def program(log, x):
        a, b = counted(log, 2)
        items = list(counted(log, 3))
        first, *rest = counted(log, 3)
        return x + a + b + sum(items) + first + len(rest)

    same(program, torch.zeros(2), fullgraph=True, graphs=1)


@pytest.mark.parametrize("consumer", [sorted, tuple, set, sum, min, max])
def test_whole_consumers(consumer):
    def program(log, x):
        return x + len(str(consumer(counted(log, 3))))

    same(program, torch.zeros(2), fullgraph=True)


def test_a_graph_break_in_the_consumer_keeps_the_graphs_before_the_loop():
    """The generator is suspended at the break and cannot be rebuilt: the graph ends where it was
    first resumed instead (unstarted, it is made again by calling its function)."""
    modules = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU(), torch.nn.Linear(2, 2))

    def program(log, x):
        x = x * 3
        for p in modules.parameters():
            x = x + p.sum()
            print("a graph break")
            log.append(len(log))
        return x

    backend = CountingBackend()
    log = []
    out = tensorjit.compile(program, backend=backend)(log, torch.ones(2))
    torch.testing.assert_close(out, program([], torch.ones(2)))
    assert log == [0, 1, 2, 3] and backend.graph_count >= 1


def test_a_user_generator_read_across_a_graph_break():
    def program(log, x):
        for v in counted(log, 3):
            log.append(("used", v))
            print("a graph break")
            x = x * 2 + v
        return x

    same(program, torch.ones(2))


def test_extend_and_update_add_each_item_before_reading_the_next():
    """CPython's list.extend (and set/dict update, deque.extend) add each item of an iterator as
    it is read: a generator expression reading the container sees the items added so far."""
    import collections

    def program(log, x):
        y = [1]
        y.extend(y[-1] + z for z in range(3))
        q = collections.deque([1])
        q.extendleft(q[0] + z for z in range(3))
        s = {0}
        s.update(len(s) + z for z in range(3))
        d = {0: 0}
        d.update((len(d) + z, z) for z in range(3))
        return x + 1, y, list(q), sorted(s), d

    same(program, torch.zeros(2), fullgraph=True)


def test_unpacking_reads_one_item_more_than_it_needs():
    def program(log, x):
        def endless():
            i = 0
            while True:
                log.append(i)
                yield i
                i += 1

        try:
            a, b = endless()  # Python reads a third item, then raises ValueError
        except ValueError:
            a, b = -1, -1
        return x + a + b

    same(program, torch.zeros(2), fullgraph=True)


class Source:
    def __init__(self, log):
        self.log = log

    def __iter__(self):
        self.log.append("iter")
        return iter([1, 2, 3])


def test_iterators_made_by_c_functions_take_their_inputs_when_made():
    """C's map, zip, islice... call iter() on their inputs at once, and product/combinations read
    them whole at once; tee reads lazily, as C's tee does; reversed() refuses an iterator."""
    def program(log, x):
        m = map(abs, Source(log))
        log.append("made")
        p = itertools.product(counted(log, 2), [0])
        log.append("product made")
        first, second = itertools.tee(counted(log, 3))
        log.append(next(first))
        log.append(next(second))
        caught = False
        try:
            reversed(counted(log, 2))
        except TypeError:
            caught = True
        return x + next(m) + len(list(p)), caught

    same(program, torch.zeros(2), fullgraph=True)
