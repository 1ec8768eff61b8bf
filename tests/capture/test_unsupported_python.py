"""On a CPython version capture was not built for, compiled functions run eagerly (3.13
crashed the interpreter in graph-break code before this check)."""

import warnings

import pytest
import torch

import tensorjit
from tensorjit import api


def test_unsupported_python_runs_eagerly_with_one_warning(monkeypatch):
    monkeypatch.setattr(api, "SUPPORTED_PYTHONS", ((2, 7),))
    monkeypatch.setattr(api, "_warned_unsupported_python", [])
    calls = []

    def backend(gm, example_inputs):
        calls.append(gm)
        return gm.forward

    def fn(x):
        y = x.sin()
        if y.sum() > 0:  # a graph break, where the crash was
            return y * 2
        return y - 1

    compiled = tensorjit.compile(fn, backend=backend)
    other = tensorjit.compile(lambda x: x + 1, backend=backend)
    x = torch.randn(5)
    with pytest.warns(RuntimeWarning, match="runs eagerly"):
        torch.testing.assert_close(compiled(x), fn(x))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one warning per process, not per function
        torch.testing.assert_close(other(x), x + 1)
        torch.testing.assert_close(compiled(-x), fn(-x))
    assert calls == [], "nothing was captured"


def test_unsupported_python_with_fullgraph_is_an_error(monkeypatch):
    monkeypatch.setattr(api, "SUPPORTED_PYTHONS", ((2, 7),))
    with pytest.raises(RuntimeError, match="capture supports CPython 2.7"):
        tensorjit.compile(lambda x: x + 1, fullgraph=True)(torch.ones(2))
