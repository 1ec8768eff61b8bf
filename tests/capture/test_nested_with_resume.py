"""Graph breaks inside nested `with` blocks: the resume function of a resume function enters its
`with` from the middle (resume.py `_bound_without_walk`), and the exit of a grad-mode block made at
a break is guarded by what it restores, not by identity (no recompile on every call)."""

import contextlib

import pytest
import torch

import tensorjit
from conformance.harness import CountingBackend


def _nested(x):
    before = torch.is_grad_enabled()
    with torch.set_grad_enabled(False):
        torch._dynamo.graph_break()
        with torch.set_grad_enabled(True):
            x = torch.mul(x, 5)
            torch._dynamo.graph_break()
            x = torch.sqrt(x)
            assert torch.is_grad_enabled()
        assert not torch.is_grad_enabled()
    assert torch.is_grad_enabled() == before
    return x


def test_two_breaks_in_nested_grad_mode_blocks_compile_two_graphs_once():
    backend = CountingBackend()
    opt = tensorjit.compile(_nested, backend=backend)
    x = torch.rand(3, 4)
    for _ in range(5):
        torch.testing.assert_close(opt(x), _nested(x))
    assert backend.graph_count == 2


@contextlib.contextmanager
def _tracking(log):
    log.append("enter")
    try:
        yield
    finally:
        log.append("exit")


def test_an_exception_after_the_inner_break_leaves_both_blocks():
    log = []

    def fn(x):
        with torch.no_grad():
            torch._dynamo.graph_break()
            with _tracking(log):
                x = x + 1
                torch._dynamo.graph_break()
                if x.sum() > -1e9:  # known only at run time
                    raise ValueError("inside")
        return x

    opt = tensorjit.compile(fn, backend="eager")
    with pytest.raises(ValueError, match="inside"):
        opt(torch.zeros(2))
    assert log == ["enter", "exit"]
    assert torch.is_grad_enabled()
