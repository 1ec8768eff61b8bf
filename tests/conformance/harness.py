"""The conformance harness: one API surface over tensorjit or torch.compile.

Takes: the environment variable TENSORJIT_TEST_REFERENCE. Set to "torch", the
names below map to torch.compile and torch._dynamo (the reference we must
match); otherwise they map to tensorjit's public API.

Returns (exports): `compile`, `disable`, `explain`, `reset`, `list_backends`,
`register_backend`, `GraphBreakError`, `REFERENCE`, `AVAILABLE`, `compiler`
(torch.compiler or tensorjit.compiler) with `graph_break`, `error_on_graph_break`,
`nonstrict_trace` (torch._dynamo's or tensorjit.compiler's); the
`CountingBackend`; `check(fn, *args, ...)`, which runs a program eagerly and
compiled on separate deep copies of its inputs and compares everything a
user could observe; and small helpers for locations and markers.

Tests import only from here, so the same test runs against both compilers.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import os
import re
from typing import Any, Callable

import pytest
import torch
import torch.utils._pytree as pytree

REFERENCE = os.environ.get("TENSORJIT_TEST_REFERENCE", "").strip().lower() == "torch"


def _missing(name: str) -> Callable[..., Any]:
    def missing(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"tensorjit.{name} does not exist yet")

    return missing


if REFERENCE:
    import torch._dynamo

    compile = torch.compile
    disable = torch.compiler.disable
    explain = torch._dynamo.explain
    reset = torch._dynamo.reset
    list_backends = torch._dynamo.list_backends
    # .item() under fullgraph raises UserError in recent torch, other breaks Unsupported
    GraphBreakError: Any = (torch._dynamo.exc.Unsupported, torch._dynamo.exc.UserError)

    def register_backend(fn: Callable | None = None, name: str | None = None) -> Any:
        return torch._dynamo.register_backend(fn, name=name)

    def set_cache_size_limit(limit: int) -> int:
        """Set the per-code-object recompile limit; return the old value."""
        old = torch._dynamo.config.recompile_limit
        torch._dynamo.config.recompile_limit = limit
        return old

    compiler = torch.compiler
    # torch._dynamo's marks a torch.compile user reaches for; tensorjit keeps them in tensorjit.compiler
    graph_break = torch._dynamo.graph_break
    error_on_graph_break = torch._dynamo.error_on_graph_break
    nonstrict_trace = torch._dynamo.nonstrict_trace

    AVAILABLE = True
    COMPILER_NAME = "torch.compile"
else:
    import tensorjit

    AVAILABLE = hasattr(tensorjit, "compile")
    compile = getattr(tensorjit, "compile", _missing("compile"))
    disable = getattr(tensorjit, "disable", _missing("disable"))
    explain = getattr(tensorjit, "explain", _missing("explain"))
    reset = getattr(tensorjit, "reset", lambda: None)
    list_backends = getattr(tensorjit, "list_backends", _missing("list_backends"))
    register_backend = getattr(tensorjit, "register_backend", _missing("register_backend"))

    class _NoGraphBreakError(RuntimeError):
        """Stands in until tensorjit.GraphBreakError exists; never raised."""

    GraphBreakError = getattr(tensorjit, "GraphBreakError", _NoGraphBreakError)
    compiler = getattr(tensorjit, "compiler", None)
    graph_break = getattr(compiler, "graph_break", _missing("compiler.graph_break"))
    error_on_graph_break = getattr(compiler, "error_on_graph_break", _missing("compiler.error_on_graph_break"))
    nonstrict_trace = getattr(compiler, "nonstrict_trace", _missing("compiler.nonstrict_trace"))

    def set_cache_size_limit(limit: int) -> int:
        from tensorjit.config import config

        old = config.cache_size_limit
        config.cache_size_limit = limit
        return old

    COMPILER_NAME = "tensorjit.compile"


def xfail_on_reference(reason: str) -> pytest.MarkDecorator:
    """An expectation a correct compiler must meet that torch.compile itself misses."""
    return pytest.mark.xfail(REFERENCE, reason=f"torch.compile: {reason}", strict=False)


_BACKEND_PROBES: dict[str, bool] = {}


def backend_available(name: str) -> bool:
    """Whether a named backend can run; used to skip, not fail, aot_eager/inductor tests.

    Probes once per name by compiling x + 1. Only a missing module or a backend
    that says it is unavailable counts as absent; any other error is a real
    failure and is left for the test itself to report.
    """
    if REFERENCE:
        return True
    if name not in _BACKEND_PROBES:
        _BACKEND_PROBES[name] = _probe_backend(name)
    return _BACKEND_PROBES[name]


def _probe_backend(name: str) -> bool:
    try:
        compile(lambda x: x + 1, backend=name)(torch.ones(1))
    except ImportError:
        return False
    except Exception as error:
        text = f"{error} {error.__cause__ or ''}".lower()
        return not ("unavailable" in text or "no module named" in text or "not implemented" in text)
    finally:
        reset()
    return True


def require_backend(name: str) -> None:
    if not backend_available(name):
        pytest.skip(f"backend {name!r} is not available in {COMPILER_NAME}")


class CountingBackend:
    """A backend that records every graph and its example inputs and runs gm.forward."""

    def __init__(self) -> None:
        self.graphs: list[torch.fx.GraphModule] = []
        self.example_inputs: list[list[Any]] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable:
        self.graphs.append(gm)
        self.example_inputs.append(list(example_inputs))
        return gm.forward

    @property
    def graph_count(self) -> int:
        return len(self.graphs)

    def op_count(self, index: int = -1) -> int:
        """call_function/call_method/call_module nodes in one recorded graph."""
        graph = self.graphs[index].graph
        return sum(node.op.startswith("call_") for node in graph.nodes)

    def targets(self, index: int = -1) -> list[Any]:
        return [node.target for node in self.graphs[index].graph.nodes if node.op.startswith("call_")]

    def clear(self) -> None:
        self.graphs.clear()
        self.example_inputs.clear()


# --------------------------------------------------------------------------
# comparison


def assert_same(expected: Any, actual: Any, path: str = "output", *, rtol: float | None = None,
                atol: float | None = None, seen: set[int] | None = None) -> None:
    """Recursively assert that two observable values are equal (tensors closely)."""
    seen = set() if seen is None else seen
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), f"{path}: expected a tensor, got {type(actual).__name__}"
        _assert_tensor(expected, actual, path, rtol=rtol, atol=atol)
        return
    if id(expected) in seen:
        return
    if isinstance(expected, (list, tuple, dict, torch.nn.Module)) or hasattr(expected, "__dict__"):
        seen.add(id(expected))
    kw = dict(rtol=rtol, atol=atol, seen=seen)
    if isinstance(expected, torch.nn.Module):
        assert type(expected) is type(actual), f"{path}: {type(expected)} != {type(actual)}"
        _assert_module(expected, actual, path, **kw)
    elif isinstance(expected, (list, tuple)):
        assert type(expected) is type(actual), f"{path}: {type(expected)} != {type(actual)}"
        assert len(expected) == len(actual), f"{path}: length {len(expected)} != {len(actual)}"
        for index, (e, a) in enumerate(zip(expected, actual)):
            assert_same(e, a, f"{path}[{index}]", **kw)
    elif isinstance(expected, dict):
        assert type(expected) is type(actual), f"{path}: {type(expected)} != {type(actual)}"
        assert list(expected) == list(actual), f"{path}: keys {list(expected)} != {list(actual)}"
        for key in expected:
            assert_same(expected[key], actual[key], f"{path}[{key!r}]", **kw)
    elif isinstance(expected, (int, float, bool, str, bytes, type(None), complex, torch.dtype,
                               torch.device, torch.Size, set, frozenset, range, slice)):
        assert type(expected) is type(actual), f"{path}: {type(expected)} != {type(actual)}"
        if isinstance(expected, float) and expected != expected:
            assert actual != actual, f"{path}: expected nan, got {actual!r}"
        else:
            assert expected == actual, f"{path}: {expected!r} != {actual!r}"
    elif hasattr(expected, "__dict__") and not callable(expected):
        assert type(expected) is type(actual), f"{path}: {type(expected)} != {type(actual)}"
        assert_same(_public_vars(expected), _public_vars(actual), f"{path}.__dict__", **kw)
    else:
        assert expected == actual, f"{path}: {expected!r} != {actual!r}"


def _public_vars(obj: Any) -> dict[str, Any]:
    return {k: v for k, v in vars(obj).items() if not k.startswith("_")}


def _assert_tensor(expected: torch.Tensor, actual: torch.Tensor, path: str, *, rtol, atol) -> None:
    assert expected.shape == actual.shape, f"{path}: shape {tuple(expected.shape)} != {tuple(actual.shape)}"
    assert expected.dtype == actual.dtype, f"{path}: dtype {expected.dtype} != {actual.dtype}"
    assert expected.device == actual.device, f"{path}: device {expected.device} != {actual.device}"
    assert expected.requires_grad == actual.requires_grad, (
        f"{path}: requires_grad {expected.requires_grad} != {actual.requires_grad}")
    torch.testing.assert_close(actual.detach(), expected.detach(), rtol=rtol, atol=atol,
                               equal_nan=True, msg=lambda m: f"{path}: {m}")


def _assert_module(expected: torch.nn.Module, actual: torch.nn.Module, path: str, **kw: Any) -> None:
    assert expected.training == actual.training, f"{path}.training differs"
    e_params, a_params = dict(expected.named_parameters()), dict(actual.named_parameters())
    assert list(e_params) == list(a_params), f"{path}: parameter names differ"
    for name in e_params:
        assert_same(e_params[name], a_params[name], f"{path}.{name}", **kw)
        assert_same(e_params[name].grad, a_params[name].grad, f"{path}.{name}.grad", **kw)
    e_buffers, a_buffers = dict(expected.named_buffers()), dict(actual.named_buffers())
    assert list(e_buffers) == list(a_buffers), f"{path}: buffer names differ"
    for name in e_buffers:
        assert_same(e_buffers[name], a_buffers[name], f"{path}.{name}", **kw)
    for name, e_child in expected.named_children():
        assert_same(e_child, getattr(actual, name), f"{path}.{name}", **kw)
    plain = lambda m: {k: v for k, v in _public_vars(m).items() if not isinstance(v, torch.Tensor)}
    assert_same(plain(expected), plain(actual), f"{path}.__dict__", **kw)


# --------------------------------------------------------------------------
# check


@dataclasses.dataclass
class SideEffects:
    """How a test exposes Python state outside the arguments (globals, closures)."""

    reset: Callable[[], None]
    observe: Callable[[], Any]


def _cotangent_loss(outputs: Any) -> torch.Tensor | None:
    """A deterministic scalar from every differentiable output tensor."""
    total = None
    for leaf in pytree.tree_leaves(outputs):
        if isinstance(leaf, torch.Tensor) and leaf.requires_grad and leaf.is_floating_point():
            weight = torch.linspace(0.5, 1.5, leaf.numel(), dtype=leaf.dtype).reshape(leaf.shape)
            term = (leaf * weight).sum()
            total = term if total is None else total + term
    return total


def _grad_leaves(args: Any) -> list[torch.Tensor]:
    leaves = []
    for leaf in pytree.tree_leaves(args):
        if isinstance(leaf, torch.Tensor) and leaf.is_leaf and leaf.requires_grad:
            leaves.append(leaf)
        elif isinstance(leaf, torch.nn.Module):
            leaves.extend(p for p in leaf.parameters() if p.requires_grad)
    return leaves


DEFAULT_BACKEND = "eager"
"""The backend `check` uses when a test names none; test_with_inductor.py sets "inductor"."""


def check(fn: Callable, *args: Any, backend: Any = None, calls: int = 2, grad: bool = False,
          graphs: int | None = None, side_effects: SideEffects | None = None,
          compile_kwargs: dict[str, Any] | None = None, rtol: float | None = None,
          atol: float | None = None, **kwargs: Any) -> CountingBackend | None:
    """Run `fn` eagerly and compiled, `calls` times each, on separate copies; compare all.

    Compared after every call: outputs (pytree; tensors closely, with dtype, shape,
    device and requires_grad; other values exactly), the arguments afterwards
    (mutations of tensors, lists, dicts, objects, modules), `side_effects.observe()`
    and, with grad=True, the gradients of every leaf tensor argument and module
    parameter after backward of a fixed weighted sum of the outputs. If `fn` is an
    nn.Module it is deep-copied for each side and its state compared too. With
    `graphs`, a CountingBackend replaces `backend` and the total number of graphs
    compiled over all calls must equal it. Returns the CountingBackend (or None).
    """
    counter = CountingBackend() if graphs is not None else None
    chosen_backend = counter if counter is not None else (DEFAULT_BACKEND if backend is None else backend)
    eager_fn = copy.deepcopy(fn) if isinstance(fn, torch.nn.Module) else fn
    compiled_target = copy.deepcopy(fn) if isinstance(fn, torch.nn.Module) else fn
    compiled_fn = compile(compiled_target, backend=chosen_backend, **(compile_kwargs or {}))
    tolerances = dict(rtol=rtol, atol=atol)
    for call in range(calls):
        eager_args, eager_kwargs = copy.deepcopy((args, kwargs))
        compiled_args, compiled_kwargs = copy.deepcopy((args, kwargs))
        eager_out, eager_seen = _run(eager_fn, eager_args, eager_kwargs, grad, side_effects)
        compiled_out, compiled_seen = _run(compiled_fn, compiled_args, compiled_kwargs, grad, side_effects)
        where = f"call {call}"
        assert_same(eager_out, compiled_out, f"{where}: output", **tolerances)
        assert_same(eager_args, compiled_args, f"{where}: args after call", **tolerances)
        assert_same(eager_kwargs, compiled_kwargs, f"{where}: kwargs after call", **tolerances)
        assert_same(eager_seen, compiled_seen, f"{where}: side effects", **tolerances)
        if grad:
            eager_grads = [leaf.grad for leaf in _grad_leaves((eager_args, eager_kwargs))]
            compiled_grads = [leaf.grad for leaf in _grad_leaves((compiled_args, compiled_kwargs))]
            assert_same(eager_grads, compiled_grads, f"{where}: input gradients", **tolerances)
        if isinstance(fn, torch.nn.Module):
            assert_same(eager_fn, compiled_target, f"{where}: module state", **tolerances)
    if counter is not None:
        assert counter.graph_count == graphs, (
            f"expected {graphs} graph(s) over {calls} call(s), {COMPILER_NAME} compiled {counter.graph_count}")
    return counter


def _run(fn: Callable, args: tuple, kwargs: dict, grad: bool, side_effects: SideEffects | None):
    if side_effects is not None:
        side_effects.reset()
    out = fn(*args, **kwargs)
    if grad:
        loss = _cotangent_loss(out)
        assert loss is not None, "grad=True but no output requires grad"
        loss.backward()
    seen = side_effects.observe() if side_effects is not None else None
    return out, copy.deepcopy(seen)


# --------------------------------------------------------------------------
# locations in messages and explain() output


def line_of(fn: Callable, marker: str) -> int:
    """The absolute line number of the first source line of `fn` containing `marker`."""
    lines, start = inspect.getsourcelines(fn)
    for offset, text in enumerate(lines):
        if marker in text:
            return start + offset
    raise AssertionError(f"marker {marker!r} not in the source of {fn.__name__}")


def mentions_location(text: str, filename: str, line: int) -> bool:
    """Whether `text` names filename:line, as `file.py:12` or `File "file.py", line 12`."""
    base = re.escape(os.path.basename(filename))
    patterns = [rf"{base}:{line}\b", rf"{base}\"?,? line {line}\b", rf"file [^\n]*{base},? line {line}\b"]
    return any(re.search(pattern, text, re.IGNORECASE) for pattern in patterns)


def break_locations(reason: Any) -> list[str]:
    """The user locations of one explain() break reason, each as 'path:line'."""
    stack = getattr(reason, "user_stack", None)
    if stack is None:
        if hasattr(reason, "filename") and hasattr(reason, "lineno"):
            return [f"{reason.filename}:{reason.lineno}"]
        return []
    if isinstance(stack, str):
        return [stack]
    locations = []
    for frame in stack:
        if hasattr(frame, "filename") and hasattr(frame, "lineno"):
            locations.append(f"{frame.filename}:{frame.lineno}")
        else:
            locations.append(str(frame))
    return locations


def explain_mentions(explanation: Any, filename: str, line: int) -> bool:
    """Whether any break reason in an explain() result points at filename:line."""
    for reason in explanation.break_reasons:
        for location in break_locations(reason):
            if mentions_location(location, filename, line):
                return True
    return False
