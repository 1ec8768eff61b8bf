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
