"""Graph breaks inside calls, on every CPython capture supports.

The stack at a break holds the calls still being built: their callables and the NULLs of
the call convention (before the callable up to 3.12, after it on 3.13, where
CALL_FUNCTION_EX ignores the slot). The entry code must rebuild each one so that the call
it belongs to still calls the right function with the right arguments. Also: the 3.13
instructions that capture must model exactly (superinstructions, SET_FUNCTION_ATTRIBUTE,
CONVERT_VALUE/FORMAT_*, TO_BOOL before a jump on a tensor).
"""

import sys
import zlib

import pytest
import torch

import tensorjit
from tensorjit.capture.opcodes import CALL_ADAPTER
from conformance.harness import CountingBackend


def untraceable(x):
    """A C function capture cannot see into: the call that reaches it runs in Python."""
    return float(zlib.adler32(str(x.shape).encode()) % 7) + 1.0


def combine(a, b=1.0, *, scale=1.0):
    return (a + b) * scale


def check(fn, *args, graphs=None):
    backend = CountingBackend()
    compiled = tensorjit.compile(fn, backend=backend)
    for _ in range(2):  # the second call runs the cached entry and resume functions
        torch.testing.assert_close(compiled(*args), fn(*args))
    if graphs is not None:
        assert backend.graph_count == graphs
    return compiled


def test_break_inside_the_arguments_of_a_keyword_call():
    def fn(x):
        y = x.sin()
        return combine(y, b=untraceable(y), scale=2.0) + 1

    check(fn, torch.randn(4), graphs=2)


def test_break_inside_the_arguments_of_a_method_call():
    def fn(x):
        y = x.cos()
        return y.mul(untraceable(y)).add(1)

    check(fn, torch.randn(3), graphs=2)


def test_break_inside_the_arguments_of_a_star_call():
    def fn(x, rest):
        y = x.exp()
        return combine(*(y, untraceable(y)), **rest) - 1

    check(fn, torch.randn(5), {"scale": 3.0}, graphs=2)


def test_break_at_a_star_call_runs_the_callee_with_its_arguments():
    def fn(x):
        y = x.relu()
        return untraceable(*(y,)) * y

    check(fn, torch.randn(2, 3), graphs=2)


@pytest.mark.skipif(sys.version_info < (3, 13), reason="up to 3.12 the slot holds CALL_ADAPTER, whose count "
                    "grows by one per call (a module function, never freed: left as it was)")
def test_star_call_break_releases_the_stand_in_for_the_null():
    """3.13's CALL_FUNCTION_EX drops its second slot without releasing it: what the entry
    code puts there must not gain a reference per call."""
    def fn(x):
        y = x * 2
        return untraceable(*(y,)) + y  # the break is the star call itself: it runs in Python

    compiled = check(fn, torch.randn(3))
    x = torch.randn(3)
    compiled(x)
    before = sys.getrefcount(CALL_ADAPTER)
    for _ in range(50):
        compiled(x)
    assert sys.getrefcount(CALL_ADAPTER) - before < 5


def test_break_on_a_tensor_condition_both_ways():
    def fn(x):
        if x.sum() > 0:
            return x + 1
        return x - 1

    def negated(x):
        if not x.sum() > 0:
            return x * 3
        return x

    def truth(x):
        t = x.sum() > 0
        if t:
            return x + 10
        return x - 10

    for f in (fn, negated, truth):
        compiled = tensorjit.compile(f, backend=CountingBackend())
        for x in (torch.ones(3), -torch.ones(3), torch.ones(3), -torch.ones(3)):
            torch.testing.assert_close(compiled(x), f(x))


def test_break_at_not_of_a_tensor():
    def fn(x):
        flag = not (x.sum() > 0)
        return x * 2 if flag else x / 2

    compiled = tensorjit.compile(fn, backend=CountingBackend())
    for x in (torch.ones(3), -torch.ones(3)):
        torch.testing.assert_close(compiled(x), fn(x))


def test_locals_swapped_and_closures_with_defaults_in_one_graph():
    def fn(x, y):
        x, y = y, x  # STORE_FAST_STORE_FAST on 3.13
        scale = 3

        def inner(t, shift=1.0, *, power=2):
            return (t * scale + shift) ** power

        fast = lambda t, k=2.0: t * k  # noqa: E731
        return inner(x) + inner(y, 0.5, power=1) + fast(x) + sum(v * 2 for v in (x, y))

    compiled = tensorjit.compile(fn, backend=CountingBackend(), fullgraph=True)
    a, b = torch.randn(3), torch.randn(3)
    torch.testing.assert_close(compiled(a, b), fn(a, b))


def test_formatted_strings_fold_at_capture():
    def fn(x, name):
        label = f"{name!r:>8}|{x.shape[0]:03d}|{name}|{name!s}"
        return x * len(label)

    compiled = tensorjit.compile(fn, backend=CountingBackend(), fullgraph=True)
    x = torch.randn(4)
    torch.testing.assert_close(compiled(x, "abc"), fn(x, "abc"))


def test_super_method_call_in_one_graph():
    class Base(torch.nn.Module):
        def forward(self, x):
            return x + 1

    class Child(Base):
        def forward(self, x):
            return super().forward(x) * 2

    model = Child()
    compiled = tensorjit.compile(model.forward, backend=CountingBackend(), fullgraph=True)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), model(x))


def test_break_in_a_loop_continues_after_the_loop():
    def fn(x, n):
        total = x
        for k in range(n):
            total = total + untraceable(total) * k
        return total.sum() * 2

    check(fn, torch.randn(3), 3)


def breaking_helper(t, s):
    return t * untraceable(t) + s


def test_callee_of_a_resumed_pending_call_is_compiled_too():
    """A resume function receives a pending call's NULL as CALL_ADAPTER; when it then breaks
    at that call, the function being called (not the adapter) is compiled at the break."""
    def fn(x):
        y = x.sin()
        return breaking_helper(y, untraceable(y)) * 2

    backend = CountingBackend()
    compiled = tensorjit.compile(fn, backend=backend)
    x = torch.randn(4)
    torch.testing.assert_close(compiled(x), fn(x))
    # x.sin(); the compiled helper after its own break; the final multiplication
    assert backend.graph_count == 3
