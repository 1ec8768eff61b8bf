"""torch._check and its kin on a condition known False at capture (values/torch_calls.py
`_constant_check`): the break carries the exception eager raises, its message from the
message callable, so the program's own `except` catches it and the fullgraph error names it."""

import pytest
import torch

import tensorjit


def test_the_fullgraph_error_carries_the_checks_message():
    @tensorjit.compile(backend="eager", fullgraph=True)
    def f(x):
        torch._check(x.shape[0] > 3, lambda: "Shape is not greater than 3")
        return x + 1

    with pytest.raises(RuntimeError, match="Shape is not greater than 3"):
        f(torch.randn(3))


def test_the_program_catches_the_checks_own_exception():
    @tensorjit.compile(backend="eager", fullgraph=True)
    def f(x):
        try:
            torch._check_value(x.shape[0] > 3, lambda: f"got {x.shape[0]}")
        except ValueError as error:
            return x - 1, str(error)
        return x + 1, ""

    out, text = f(torch.zeros(3))
    torch.testing.assert_close(out, torch.full((3,), -1.0))
    assert text == "got 3"
