"""torch.nn modules without state constructed in the function from constant arguments (values/objects.py
MadeModuleValue): called in one graph, and a fresh copy where one leaves the function."""

import pytest
import torch

import tensorjit
from conformance.harness import CountingBackend


def test_a_stateless_module_made_in_the_function_is_captured():
    def fn(x):
        up = torch.nn.Upsample(scale_factor=2, mode="nearest")
        act = torch.nn.ReLU()
        return act(up(x)), act

    backend = CountingBackend()
    opt = tensorjit.compile(fn, backend=backend, fullgraph=True)
    x = torch.randn(1, 2, 3, 3)
    out, first = opt(x)
    _, second = opt(x)
    torch.testing.assert_close(out, fn(x)[0])
    assert isinstance(first, torch.nn.ReLU) and first is not second  # each call made its own
    assert backend.graph_count == 1


def test_a_module_with_parameters_made_in_the_function_still_breaks():
    def fn(x):
        return torch.nn.LayerNorm(3)(x)

    with pytest.raises(tensorjit.GraphBreakError):
        tensorjit.compile(fn, backend="eager", fullgraph=True)(torch.randn(2, 3))
    x = torch.randn(2, 3)
    torch.testing.assert_close(tensorjit.compile(fn, backend="eager")(x), fn(x))
