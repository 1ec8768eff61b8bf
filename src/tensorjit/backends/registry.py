"""Backends by name: `eager`, `aot_eager`, `aot_eager_decomp_partition`, `inductor`, `cudagraphs`, `onnxrt`, and user ones.

A backend is any callable `(gm: torch.fx.GraphModule, example_inputs) -> callable`,
exactly torch.compile's contract. Built-in backends are imported when first
looked up, so importing tensorjit stays cheap.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Callable

import torch

from ..runtime.persist import SavedGraphModule, set_reduce

Backend = Callable

_BUILTIN = {
    "eager": ("tensorjit.backends.eager", "eager"),
    "aot_eager": ("tensorjit.backends.aot_eager", "aot_eager"),
    "aot_eager_decomp_partition": ("tensorjit.backends.aot_eager", "aot_eager_decomp_partition"),
    "inductor": ("tensorjit.backends.inductor", "inductor"),
    "cudagraphs": ("tensorjit.backends.cudagraphs", "cudagraphs"),
    "onnxrt": ("tensorjit.backends.onnxrt", "onnxrt"),
}
_registered: dict[str, Backend] = {}
DEFAULT_BACKEND = "inductor"
_default: str | Backend = DEFAULT_BACKEND


def set_default_backend(backend: str | Backend | None) -> None:
    """The backend `tensorjit.compile` uses when given none; None restores "inductor"."""
    global _default
    if backend is not None and not callable(backend):
        if not isinstance(backend, str):
            raise TypeError(f"tensorjit: backend must be a name or a callable, got {type(backend).__name__}")
        if backend not in _BUILTIN and backend not in _registered:
            raise ValueError(f"tensorjit: unknown backend {backend!r}; valid backends are: "
                             f"{', '.join(list_backends())}")
    _default = DEFAULT_BACKEND if backend is None else backend


def get_default_backend() -> str | Backend:
    return _default


def register_backend(fn: Backend | None = None, name: str | None = None):
    """Register `fn` under `name` (default: its __name__); usable as a decorator."""
    def register(f: Backend) -> Backend:
        if not callable(f):
            raise TypeError(f"tensorjit.register_backend: the backend must be a callable (gm, example_inputs) -> "
                            f"callable, got {type(f).__name__} {f!r:.80}")
        key = name if name is not None else getattr(f, "__name__", None)
        if not isinstance(key, str) or not key:
            raise TypeError(f"tensorjit.register_backend: name must be a non-empty str, got {key!r:.80}")
        if key in _registered or key in _BUILTIN:
            raise ValueError(f"tensorjit: a backend named {key!r} is already registered")
        _registered[key] = f
        return f
    return register(fn) if fn is not None else register


def is_dynamic(gm) -> bool:
    """Whether capture gave this graph symbolic sizes or numbers (int and float inputs, tensors with SymInt sizes)."""
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            value = node.meta.get("example_value")
            if isinstance(value, (torch.SymInt, torch.SymFloat)) or isinstance(value, torch.Tensor) and any(
                    isinstance(s, torch.SymInt) for s in value.shape):
                return True
    return False


def specialize_sizes(backend: Backend) -> Backend:
    """Run a backend that compiles for static shapes on a graph captured with dynamic ones.

    Capture happens once; the backend compiles the same graph once per distinct set
    of concrete sizes, when a call first brings them."""
    name = getattr(backend, "__name__", "backend")

    def compile_graph(gm, example_inputs, **options):
        from .float_inputs import as_tensors, lift, with_float_arguments
        lifted = lift(gm)  # float inputs (an LR) as 0-d tensors: one compile serves every value
        if lifted is not None:
            graph, positions = lifted
            return with_float_arguments(compile_graph(graph, as_tensors(example_inputs, positions), **options),
                                        positions)
        if not is_dynamic(gm):
            return backend(gm, example_inputs, **options)
        return size_specializer(backend, name, gm, options, {})
    compile_graph.__name__ = name
    return compile_graph


def size_specializer(backend: Backend, name: str, gm, options: dict, compiled: dict[tuple, Callable]) -> Callable:
    """Runs `gm` through `backend`'s compilation for each set of concrete sizes, kept in `compiled`."""
    def run(*args):
        key = tuple(tuple(a.shape) if isinstance(a, torch.Tensor) else a for a in args)
        fn = compiled.get(key)
        if fn is None:
            graph = gm.get() if isinstance(gm, SavedGraphModule) else gm
            if float_variants(compiled, key) >= FLOAT_VARIANTS:
                return run_as_captured(graph, name, args)
            fn = compiled[key] = call_backend(lambda g, inputs: backend(g, inputs, **options), name, graph,
                                              list(args))
        return fn(*args)
    # The warm-start cache saves the sizes compiled so far with it (and the graph, for new sizes).
    return set_reduce(run, size_specializer, backend, name, SavedGraphModule.of(gm), options, compiled)


FLOAT_VARIANTS = 8
"""How many values of a graph's float inputs (an LR a scheduler changes) a static backend compiles
for at one set of sizes; later values run the captured graph as it is (eagerly, no code generation)."""


def float_variants(compiled: dict[tuple, Callable], key: tuple) -> int:
    """How many keys in `compiled` differ from `key` in float inputs only."""
    def sizes(k):
        return tuple(None if type(a) is float else a for a in k)
    own = sizes(key)
    return sum(1 for k in compiled if sizes(k) == own)


def run_as_captured(graph, name: str, args: tuple):
    from .. import logs
    if not getattr(graph, "_tensorjit_float_fallback_logged", False):
        graph._tensorjit_float_fallback_logged = True
        logs.emit("recompiles", f"{name}: a float input took more than {FLOAT_VARIANTS} values; new values run "
                                f"the captured graph eagerly (a tensor holding the value compiles once)")
    return graph(*args)


def list_backends() -> list[str]:
    return sorted(set(_BUILTIN) | set(_registered))


def lookup_backend(backend: str | Backend) -> Backend:
    """The backend named `backend` (or `backend` itself when callable); raises, listing the valid
    names, for an unknown one, and BackendUnavailable, naming what to install, for a missing dependency."""
    if callable(backend):
        return backend
    if not isinstance(backend, str):
        raise TypeError(f"tensorjit.compile: backend must be a name or a callable, got {type(backend).__name__} "
                        f"{backend!r:.80}; valid backends are: {', '.join(list_backends())}")
    if backend in _registered:
        return _registered[backend]
    if backend in _BUILTIN:
        _check_requirements(backend)
        module, attr = _BUILTIN[backend]
        try:
            found = getattr(importlib.import_module(module), attr)
        except ImportError as e:
            raise BackendUnavailable(f"tensorjit: backend {backend!r} is unavailable: {e}") from e
        return found if backend == "eager" else specialize_sizes(found)
    raise ValueError(f"tensorjit: unknown backend {backend!r}; valid backends are: {', '.join(list_backends())}")


class BackendUnavailable(RuntimeError):
    """A built-in backend whose optional dependency is not installed (raised by compile())."""


REQUIREMENTS: dict[str, tuple[tuple[str, str], ...]] = {
    "onnxrt": (("onnxruntime", "pip install onnxruntime (or onnxruntime-gpu for the CUDA execution provider)"),),
}
"""Built-in backends' optional dependencies: (module, how to install it), checked when the backend is looked up."""


def _check_requirements(backend: str) -> None:
    for module, install in REQUIREMENTS.get(backend, ()):
        if importlib.util.find_spec(module) is None:
            raise BackendUnavailable(
                f"tensorjit.compile: backend={backend!r} needs the {module!r} package, which is not installed. "
                f"Hint: {install}.")


class BackendCompilerFailed(RuntimeError):
    """A backend raised, or returned something that is not callable, when given a graph.

    Raised at the call that captured the graph (as torch.compile raises its
    BackendCompilerFailed), with the message shape torch uses:
    "backend='name' raised:\nErrorType: message"."""

    def __init__(self, backend_name: str, inner_exception: BaseException) -> None:
        self.backend_name = backend_name
        self.inner_exception = inner_exception
        super().__init__(f"backend={backend_name!r} raised:\n{type(inner_exception).__name__}: {inner_exception}")


def call_backend(backend: Backend, backend_name: str, gm, example_inputs) -> Callable:
    """`backend(gm, example_inputs)`, with its failure (or a result that is not callable) as BackendCompilerFailed."""
    try:
        compiled = backend(gm, example_inputs)
    except BackendCompilerFailed:
        raise
    except Exception as error:
        raise BackendCompilerFailed(backend_name, error) from error
    if not callable(compiled):
        error = TypeError(f"the backend returned {type(compiled).__name__} {compiled!r:.80}, which is not callable "
                          f"(a backend takes (gm, example_inputs) and returns the callable to run, e.g. gm.forward)")
        raise BackendCompilerFailed(backend_name, error)
    return compiled
