"""Capture semantics that once gave a silently different answer from eager (issue 11).

Each test runs a program eagerly and compiled on fresh inputs built the same way,
compares every observable, and where useful counts graphs against torch.compile's:
inputs that share memory when the graph writes to one (`test_alias_*`), builtins on
user objects, dict views, capture-time stand-ins leaking into Python values,
nn.Module attribute lookup order, module hooks, closures across graph breaks.
"""

import pytest
import torch

from .harness import CountingBackend, assert_same, compile, require_backend, xfail_on_reference

BACKENDS = ["eager", pytest.param("aot_eager", marks=pytest.mark.aot_eager)]


def compare(fn, make_args, backend, calls=(), compile_kwargs=None):
    """Run fn eagerly and compiled on the argument sets `make_args()` then each of `calls`.

    Every set is built twice (once per run), so aliasing among arguments is the same in both."""
    if backend != "eager":
        require_backend(backend)
    compiled = compile(fn, backend=backend, **(compile_kwargs or {}))
    for make in (make_args, *calls):
        expected_args, actual_args = make(), make()
        expected = fn(*expected_args)
        actual = compiled(*actual_args)
        assert_same(expected, actual)
        assert_same(expected_args, actual_args, "arguments after the call")
    return compiled


# -- 1. inputs sharing memory, with a graph that writes to one of them -------------------------

def add_then_read(a, b):
    a.add_(1)
    return b * 2 + a


def distinct():
    return torch.ones(3), torch.ones(3)


def same_twice():
    x = torch.ones(3)
    return x, x


def overlapping_views():
    base = torch.arange(6.0)
    return base[:3], base[1:4]


def disjoint_views():
    base = torch.arange(6.0)
    return base[:3], base[3:]


def view_and_base():
    base = torch.arange(3.0)
    return base, base.view(3)


@xfail_on_reference("overlapping views of one buffer, written by the graph, give a different answer")
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("later", [same_twice, overlapping_views, view_and_base, disjoint_views])
def test_alias_after_distinct_inputs(backend, later):
    """The issue's repro: an entry captured for distinct tensors must not serve aliased ones."""
    compare(add_then_read, distinct, backend, calls=[later, distinct])


@xfail_on_reference("overlapping views of one buffer, written by the graph, give a different answer")
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("first", [same_twice, overlapping_views, view_and_base])
def test_alias_at_first_call(backend, first):
    compare(add_then_read, first, backend, calls=[distinct, first])


@xfail_on_reference("overlapping views of one buffer, written by the graph, give a different answer")
@pytest.mark.parametrize("backend", BACKENDS)
def test_alias_written_by_out_and_setitem(backend):
    def fn(a, b):
        torch.mul(a, 3, out=a)
        b[0] = 10.0
        return a + b

    compare(fn, distinct, backend, calls=[overlapping_views, same_twice, view_and_base])


@xfail_on_reference("overlapping views of one buffer, written by the graph, give a different answer")
@pytest.mark.parametrize("backend", BACKENDS)
def test_alias_parameter_and_input_view(backend):
    class Scale(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("state", torch.arange(4.0))

        def forward(self, x):
            x.mul_(2)
            return self.state[:2] * 3 + x

    if backend != "eager":
        require_backend(backend)
    eager_module, compiled_module = Scale(), Scale()
    compiled = compile(compiled_module, backend=backend)
    for make in (lambda m: torch.ones(2), lambda m: m.state[1:3], lambda m: torch.ones(2)):
        expected = eager_module(make(eager_module))
        actual = compiled(make(compiled_module))
        assert_same(expected, actual)
        assert_same(eager_module.state, compiled_module.state, "buffer")


@pytest.mark.parametrize("backend", BACKENDS)
def test_alias_unwritten_inputs_stay_compiled(backend):
    """Aliasing matters only when the graph writes: shared read-only inputs keep one graph."""
    counter = CountingBackend()

    def fn(a, b):
        return a * 2 + b

    compiled = compile(fn, backend=counter)
    base = torch.arange(6.0)
    assert_same(fn(base[:3], base[1:4]), compiled(base[:3], base[1:4]))
    assert_same(fn(*distinct()), compiled(*distinct()))
    assert counter.graph_count == 1


def test_alias_partial_overlap_under_fullgraph_raises():
    from .harness import GraphBreakError, REFERENCE
    if REFERENCE:
        pytest.skip("torch.compile answers wrongly here rather than refusing")
    compiled = compile(add_then_read, backend="eager", fullgraph=True)
    with pytest.raises(GraphBreakError, match="share memory"):
        compiled(*overlapping_views())
