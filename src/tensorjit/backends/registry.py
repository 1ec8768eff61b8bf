"""Backends by name: `eager`, `aot_eager`, `inductor`, `cudagraphs`, `onnxrt`, and user ones.

A backend is any callable `(gm: torch.fx.GraphModule, example_inputs) -> callable`,
exactly torch.compile's contract. Built-in backends are imported when first
looked up, so importing tensorjit stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Callable

import torch

Backend = Callable

_BUILTIN = {
    "eager": ("tensorjit.backends.eager", "eager"),
    "aot_eager": ("tensorjit.backends.aot_eager", "aot_eager"),
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
        key = name or f.__name__
        if key in _registered or key in _BUILTIN:
            raise ValueError(f"tensorjit: a backend named {key!r} is already registered")
        _registered[key] = f
        return f
    return register(fn) if fn is not None else register


def is_dynamic(gm) -> bool:
    """Whether capture gave this graph symbolic sizes (int inputs, tensors with SymInt sizes)."""
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            value = node.meta.get("example_value")
            if isinstance(value, torch.SymInt) or isinstance(value, torch.Tensor) and any(
                    isinstance(s, torch.SymInt) for s in value.shape):
                return True
    return False


def specialize_sizes(backend: Backend) -> Backend:
    """Run a backend that compiles for static shapes on a graph captured with dynamic ones.

    Capture happens once; the backend compiles the same graph once per distinct set
    of concrete sizes, when a call first brings them."""
    def compile_graph(gm, example_inputs, **options):
        if not is_dynamic(gm):
            return backend(gm, example_inputs, **options)
        compiled: dict[tuple, Callable] = {}

        def run(*args):
            key = tuple(tuple(a.shape) if isinstance(a, torch.Tensor) else a for a in args)
            fn = compiled.get(key)
            if fn is None:
                fn = compiled[key] = backend(gm, list(args), **options)
            return fn(*args)
        return run
    compile_graph.__name__ = getattr(backend, "__name__", "backend")
    return compile_graph


def list_backends() -> list[str]:
    return sorted(set(_BUILTIN) | set(_registered))


def lookup_backend(backend: str | Backend) -> Backend:
    if callable(backend):
        return backend
    if not isinstance(backend, str):
        raise TypeError(f"tensorjit: backend must be a name or a callable, got {type(backend).__name__}")
    if backend in _registered:
        return _registered[backend]
    if backend in _BUILTIN:
        module, attr = _BUILTIN[backend]
        try:
            found = getattr(importlib.import_module(module), attr)
        except ImportError as e:
            raise RuntimeError(f"tensorjit: backend {backend!r} is unavailable: {e}") from e
        return found if backend == "eager" else specialize_sizes(found)
    raise ValueError(f"tensorjit: unknown backend {backend!r}; valid backends are: {', '.join(list_backends())}")
