"""Every polyfill behaves like the C callable it stands in for, on its registered samples.

Capture inlines these Python functions in place of the C originals, so any
difference here would be a compiled program answering differently from eager.
"""

import collections.abc
import types

import pytest
import torch

import tensorjit

from tensorjit.capture import polyfills
from tensorjit.capture.polyfills.registry import samples_of

INLINED = [entry for entry in polyfills.entries() if entry.inlined]


def _observe(fn, sample):
    """What a caller sees: the value (iterators drained, callables probed) or the exception type."""
    try:
        result = fn(*sample.args, **sample.kwargs)
    except Exception as e:  # the same exception type is the same behaviour
        return ("raised", type(e))
    return _settle(result)


def _settle(result):
    if isinstance(result, (collections.abc.Iterator, types.GeneratorType)):
        return ("items", [_settle(item) for item in result])
    if isinstance(result, tuple):
        return tuple(_settle(item) for item in result)
    if callable(result) and not isinstance(result, type):
        return ("called", _observe(result, polyfills.registry.Sample("a,b")))
    return result


@pytest.mark.parametrize("entry", INLINED, ids=lambda e: getattr(e.target, "__qualname__", repr(e.target)))
def test_polyfill_matches_its_original(entry):
    assert entry.samples, f"polyfill for {entry.target!r} registers no samples"
    for sample in samples_of(entry):
        expected = _observe(entry.target, sample)
        got = _observe(entry.implementation, sample)
        assert got == expected, f"{entry.target!r}{sample.args} {sample.kwargs}: {got} != {expected}"


def test_every_family_registers():
    modules = {entry.implementation.__module__.rsplit(".", 1)[-1] for entry in polyfills.entries()}
    assert {"itertools", "builtins", "operator", "iterators"} <= modules


def test_early_stopping_polyfill_reads_a_user_generator_as_far_as_python_does():
    """isdisjoint stops at the first common item; the generator's body runs only that far."""
    seen = []

    def numbers():
        seen.append(1)
        yield 1
        seen.append(2)
        yield 2

    def fn(x):
        return x + {1, 4}.isdisjoint(numbers())

    out = tensorjit.compile(fn, fullgraph=True)(torch.zeros(2))
    assert seen == [1]
    seen.clear()
    torch.testing.assert_close(out, fn(torch.zeros(2)))
    assert seen == [1]
