"""Dimension marks (mark_dynamic, maybe_mark_dynamic, mark_static, mark_unbacked) against torch.compile.

Each program runs under torch.compile and under tensorjit in one process, on the same
inputs, marked with torch._dynamo's functions (as libraries mark them) and with
tensorjit.compiler's: the graph counts, the results and the errors raised must agree.
"""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
from torch._dynamo.decorators import mark_unbacked as torch_mark_unbacked
from torch.fx.experimental.symbolic_shapes import ConstraintViolationError

import tensorjit
import tensorjit.compiler as tjc

from .harness import REFERENCE, CountingBackend

pytestmark = pytest.mark.skipif(REFERENCE, reason="compares tensorjit with torch.compile in one run")

MARKERS = {
    "mark_dynamic": (torch._dynamo.mark_dynamic, tjc.mark_dynamic),
    "maybe_mark_dynamic": (torch._dynamo.maybe_mark_dynamic, tjc.maybe_mark_dynamic),
    "mark_static": (torch._dynamo.mark_static, tjc.mark_static),
    "mark_unbacked": (torch_mark_unbacked, tjc.mark_unbacked),
}


def run_both(program, sizes, marker: str, dynamic=None, **mark_kwargs):
    """(graphs, outcomes) under torch.compile; then under tensorjit with torch's marker and with tensorjit's."""
    torch_mark, tensorjit_mark = MARKERS[marker]
    expected = _run(program, sizes, torch_mark, False, dynamic, mark_kwargs)
    return expected, [_run(program, sizes, mark, True, dynamic, mark_kwargs) for mark in (torch_mark, tensorjit_mark)]


def _run(program, sizes, mark, use_tensorjit, dynamic, mark_kwargs):
    counter = CountingBackend()
    (tensorjit.reset if use_tensorjit else torch._dynamo.reset)()
    compile_fn = tensorjit.compile if use_tensorjit else torch.compile
    compiled = compile_fn(program, backend=counter, dynamic=dynamic)
    outcomes = []
    for size in sizes:
        torch.manual_seed(size)
        x = torch.randn(size, 3)
        mark(x, 0, **mark_kwargs)
        try:
            actual = compiled(x)
        except ConstraintViolationError as error:
            outcomes.append(("ConstraintViolationError", str(error).split("\n")[0]))
            continue
        torch.testing.assert_close(actual, program(x))
        outcomes.append("ok")
    return counter.graph_count, outcomes


def uses_size(x):
    return x * 2 + x.shape[0]


def branches_on_size(x):
    if x.shape[0] > 5:
        return x + 1
    return x - 1


def specializes(x):
    return x.view(4, 3) * 2


CASES = [
    # marker, program, sizes, dynamic, mark kwargs
    ("mark_dynamic", uses_size, (4, 5, 6), None, {}),
    ("mark_dynamic", uses_size, (4, 5, 6), False, {}),
    ("mark_dynamic", uses_size, (1, 5, 6), None, {}),  # size 1 still specializes
    ("mark_dynamic", branches_on_size, (4, 5, 6, 7), None, {}),
    ("mark_dynamic", uses_size, (4, 5, 6, 20), None, {"min": 2, "max": 10}),  # 20 is out of range: an error
    ("mark_dynamic", specializes, (4,), None, {}),  # the promise broken: an error
    ("maybe_mark_dynamic", uses_size, (4, 5, 6), None, {}),
    ("maybe_mark_dynamic", uses_size, (4, 5, 6), False, {}),
    ("maybe_mark_dynamic", branches_on_size, (4, 5, 6, 7), None, {}),
    ("maybe_mark_dynamic", specializes, (4,), None, {}),  # no promise: specialized without error
    ("mark_static", uses_size, (4, 5, 6), True, {}),
    ("mark_unbacked", uses_size, (4, 1, 0, 6), None, {}),  # no 0/1 specialization: one graph
    ("mark_unbacked", uses_size, (4, 1, 0, 6), False, {}),
    ("mark_unbacked", branches_on_size, (4, 1, 6), None, {}),  # a branch on it breaks the graph
]


@pytest.mark.parametrize("marker, program, sizes, dynamic, mark_kwargs", CASES,
                         ids=[f"{c[0]}-{c[1].__name__}-{c[3]}-{i}" for i, c in enumerate(CASES)])
def test_marks_give_torch_compile_graph_counts_and_errors(marker, program, sizes, dynamic, mark_kwargs):
    expected, actual = run_both(program, sizes, marker, dynamic, **mark_kwargs)
    for result in actual:  # tensorjit with torch's marker, then with tensorjit.compiler's
        assert result == expected


def test_tensorjit_marks_are_torch_marks():
    """A tensor marked with tensorjit.compiler means the same to torch.compile."""
    counter = CountingBackend()
    torch._dynamo.reset()
    compiled = torch.compile(uses_size, backend=counter)
    for size in (4, 5, 6):
        x = torch.randn(size, 3)
        tjc.mark_dynamic(x, 0)
        compiled(x)
    assert counter.graph_count == 1


def test_mark_static_on_a_module_class_returns_it():
    class Block(torch.nn.Module):
        pass

    assert tjc.mark_static(Block) is Block and Block._dynamo_marked_static
    with pytest.raises(TypeError):
        tjc.mark_static(3)


def test_marks_without_the_newer_marking_flag_are_honoured():
    # torch 2.11's mark_dynamic records the dimension but sets no `_has_dynamo_dim_marking`
    # (newer torch does): tensorjit compiled 2 graphs there where torch compiles 1
    def old_mark_dynamic(x, dim):
        x._dynamo_dynamic_indices = {dim}

    assert _run(uses_size, (4, 5, 6), old_mark_dynamic, True, None, {}) == (1, ["ok", "ok", "ok"])
