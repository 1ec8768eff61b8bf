"""warnings.catch_warnings() in the compiled function: a block whose filter changes cannot outlive it."""

import warnings

import pytest
import torch

import tensorjit
from conformance.harness import CountingBackend


def test_a_catch_warnings_block_with_filter_changes_is_one_graph():
    def fn(x):
        with warnings.catch_warnings(record=True) as log:
            warnings.simplefilter("ignore")
            warnings.filterwarnings("ignore", category=DeprecationWarning)
            y = x.sin()
        return y, log

    backend = CountingBackend()
    x = torch.randn(4)
    tensorjit.compile(lambda t: t * 2, backend="eager")(x)  # capture's own imports (sympy adds filters)
    filters = list(warnings.filters)
    out = tensorjit.compile(fn, backend=backend, fullgraph=True)(x)
    torch.testing.assert_close(out[0], x.sin())
    assert out[1] == [] and warnings.filters == filters
    assert backend.graph_count == 1


def test_a_catch_warnings_object_returned_is_a_new_one_each_call():
    def fn(x):
        return x.sin(), warnings.catch_warnings(record=True)

    compiled = tensorjit.compile(fn, backend="eager", fullgraph=True)
    (_, a), (_, b) = compiled(torch.ones(2)), compiled(torch.ones(2))
    assert isinstance(a, warnings.catch_warnings) and a is not b


def test_a_warning_inside_the_block_runs_the_call_eagerly_and_is_recorded():
    def fn(x):
        with warnings.catch_warnings(record=True) as log:
            warnings.simplefilter("always")
            y = x + 1
            warnings.warn("inside")
        return y, [str(w.message) for w in log]

    out = tensorjit.compile(fn, backend="eager")(torch.ones(2))
    assert out[1] == ["inside"]
    with pytest.raises(tensorjit.GraphBreakError):
        tensorjit.compile(fn, backend="eager", fullgraph=True)(torch.ones(2))


def test_filter_changes_outside_a_block_break():
    def fn(x):
        warnings.simplefilter("ignore")
        return x + 1

    with pytest.raises(tensorjit.GraphBreakError, match="outside a catch_warnings block"):
        tensorjit.compile(fn, backend="eager", fullgraph=True)(torch.ones(2))
