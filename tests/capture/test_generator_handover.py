"""Generators leaving the compiled function half-read, and graph breaks inside generator bodies."""

import torch

import tensorjit
from conformance.harness import CountingBackend


def _whoo(t):
    yield t + 1
    yield t + 2
    yield t + 3


def _once(t):
    yield t + 1


def _main(t):
    yield from _whoo(t)
    yield t + 4


def test_a_started_generator_returned_is_rebuilt_and_advanced():
    def advanced(t):
        gen = _whoo(t)
        next(gen)
        return gen, t.sin()

    def exhausted(t):
        gen = _once(t)
        next(gen)
        return gen

    def delegating(t):
        gen = _main(t)
        next(gen)
        next(gen)
        return gen

    t = torch.tensor([1.0])
    backend = CountingBackend()
    gen, y = tensorjit.compile(advanced, backend=backend, fullgraph=True)(t)
    assert list(gen) == [t + 2, t + 3] and backend.graph_count == 1
    torch.testing.assert_close(y, t.sin())
    gen = tensorjit.compile(exhausted, backend="eager", fullgraph=True)(t)
    assert next(gen, "end") == "end"
    gen = tensorjit.compile(delegating, backend="eager", fullgraph=True)(t)
    assert list(gen) == [t + 3, t + 4]


LOG = []


def _logs(t):
    LOG.append("first")
    yield t + 1
    LOG.append("second")
    yield t + 2


def test_a_started_generator_with_effects_is_not_replayed():
    def fn(t):
        gen = _logs(t)
        next(gen)
        return gen

    t = torch.tensor([1.0])
    LOG.clear()
    gen = tensorjit.compile(fn, backend="eager")(t)
    assert LOG == ["first"]
    assert list(gen) == [t + 2] and LOG == ["first", "second"]


def _breaking(t):
    yield 1
    print("inside the generator")  # a graph break in the generator's body
    yield 2


def test_a_break_in_the_body_of_a_generator_the_function_made_runs_the_call_eagerly():
    """The generator's suspended frame exists only in capture, so no resume function can carry
    it past the break: the call runs eagerly (as Dynamo skips such a frame), not a graph after
    a replay of the generator's body."""
    def fn(t):
        gen = _breaking(t)
        s = next(gen)
        s += next(gen)
        return t.cos() + s

    t = torch.tensor([1.0])
    backend = CountingBackend()
    compiled = tensorjit.compile(fn, backend=backend)
    for _ in range(2):
        torch.testing.assert_close(compiled(t), fn(t))
    assert backend.graph_count == 0
    assert tensorjit.explain(fn)(t).graph_break_count == 1  # the reason stays visible


def _sin_then_cos(x):
    yield x.sin()
    print("inside the generator")
    yield x.cos()


def _read_both(x):
    gen = _sin_then_cos(x)
    return next(gen), next(gen)


def test_a_generator_made_by_an_inlined_call_breaks_at_that_call():
    """Made by `_read_both`, not by the compiled function: the compiled function breaks at the
    call as at any break inside an inlined call, and `_read_both`, compiled in its turn, made
    the generator itself and runs eagerly: one graph, the sum after the call."""
    def fn(t):
        sin, cos = _read_both(t)
        return sin + cos

    t = torch.tensor([1.0])
    backend = CountingBackend()
    torch.testing.assert_close(tensorjit.compile(fn, backend=backend)(t), fn(t))
    assert backend.graph_count == 1


def test_a_break_in_a_function_mapped_by_a_polyfill_still_compiles_around_it():
    """map() is a C iterator to the program (its polyfill's generator stands for it): a break in
    the mapped function is an ordinary break, the graphs around it kept."""
    def noisy(v):
        print("mapped")
        return v * 2

    def fn(t):
        u = t.sin()
        return list(map(noisy, [u, t])), t.cos()

    t = torch.tensor([1.0])
    backend = CountingBackend()
    got = tensorjit.compile(fn, backend=backend)(t)
    torch.testing.assert_close(got, fn(t))
    assert backend.graph_count >= 1
