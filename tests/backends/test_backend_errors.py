"""A backend that fails, returns no callable, or lacks a dependency: named, in torch.compile's words.

torch.compile (2.13) raises `BackendCompilerFailed: backend='bad' raised:\\nValueError: nope` at
the first call for a backend that raises, and `backend='nc' raised:\\nAssertionError: compiler_fn
did not return callable` for one that returns 3; we match the shape and the time of the error.
"""

import importlib.util

import pytest
import torch

import tensorjit
from tensorjit.backends import registry


def f(x):
    return torch.sin(x) + 1


def bad(gm, example_inputs):
    raise ValueError("nope")


def returns_int(gm, example_inputs):
    return 3


def test_backend_that_raises_is_named_at_the_first_call():
    compiled = tensorjit.compile(f, backend=bad)  # compile() itself succeeds, as torch.compile's does
    with pytest.raises(tensorjit.BackendCompilerFailed, match="^backend='bad' raised:\nValueError: nope$") as raised:
        compiled(torch.ones(2))
    assert isinstance(raised.value.inner_exception, ValueError)
    assert raised.value.backend_name == "bad"
    assert "This is a bug in tensorjit" not in str(raised.value)


def test_backend_returning_a_non_callable_is_named():
    compiled = tensorjit.compile(f, backend=returns_int)
    with pytest.raises(tensorjit.BackendCompilerFailed,
                       match="^backend='returns_int' raised:\nTypeError: the backend returned int 3, which is "
                             "not callable"):
        compiled(torch.ones(2))


def test_backend_failure_after_a_graph_break_is_named():
    def g(x):
        y = x * 2
        print("break")
        return y + 1
    with pytest.raises(tensorjit.BackendCompilerFailed, match="backend='bad' raised"):
        tensorjit.compile(g, backend=bad)(torch.ones(2))


def test_backend_failure_for_a_new_size_of_a_dynamic_graph_is_named():
    calls = []

    def fails_second_time(gm, example_inputs):
        calls.append(1)
        if len(calls) > 1:
            raise RuntimeError("second size")
        return gm.forward
    wrapped = registry.specialize_sizes(fails_second_time)
    compiled = tensorjit.compile(f, backend=wrapped, dynamic=True)
    torch.testing.assert_close(compiled(torch.ones(2)), f(torch.ones(2)))
    with pytest.raises(tensorjit.BackendCompilerFailed, match="backend='fails_second_time' raised:\nRuntimeError"):
        compiled(torch.ones(3))


def test_registered_backend_failure_uses_its_registered_name():
    name = "test_backend_errors_failing"
    if name not in registry._registered:
        tensorjit.register_backend(bad, name=name)
    with pytest.raises(tensorjit.BackendCompilerFailed, match=f"^backend='{name}' raised"):
        tensorjit.compile(f, backend=name)(torch.ones(2))


def test_suppress_errors_runs_eagerly_instead(recwarn):
    compiled = tensorjit.compile(f, backend=bad, options={"suppress_errors": True})
    torch.testing.assert_close(compiled(torch.ones(2)), f(torch.ones(2)))


def test_fullgraph_still_raises_backend_failure():
    with pytest.raises(tensorjit.BackendCompilerFailed):
        tensorjit.compile(f, backend=bad, fullgraph=True)(torch.ones(2))


@pytest.mark.skipif(importlib.util.find_spec("onnxruntime") is not None, reason="onnxruntime is installed")
def test_missing_onnxruntime_is_named_at_compile_time():
    with pytest.raises(tensorjit.BackendUnavailable,
                       match="backend='onnxrt' needs the 'onnxruntime' package, which is not installed. "
                             "Hint: pip install onnxruntime") as raised:
        tensorjit.compile(f, backend="onnxrt")
    assert "This is a bug" not in str(raised.value)


def test_missing_dependency_is_checked_at_lookup(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "onnxruntime" else real(name, *a))
    with pytest.raises(tensorjit.BackendUnavailable, match="pip install onnxruntime"):
        registry.lookup_backend("onnxrt")


def test_message_shape_matches_torch_compile():
    torch._dynamo.reset()
    with pytest.raises(Exception) as reference:
        torch.compile(f, backend=bad)(torch.ones(2))
    with pytest.raises(tensorjit.BackendCompilerFailed) as ours:
        tensorjit.compile(f, backend=bad)(torch.ones(2))
    assert type(reference.value).__name__ == type(ours.value).__name__ == "BackendCompilerFailed"
    assert str(ours.value).splitlines()[:2] == str(reference.value).splitlines()[:2]
