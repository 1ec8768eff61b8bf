"""Marks users and libraries put on their functions, as torch.compiler's and torch._dynamo's.

Each takes a function (or, for graph_break, nothing) and returns the function marked;
what capture does with a marked function is in `capture/markers.py`. Outside a
compiled function every marked function behaves exactly as it did before.
"""

from __future__ import annotations

import functools
import inspect
import types
from typing import Any, Callable

import torch

from .. import api
from ..capture import markers as capture_markers
from ..capture.breaks import GraphBreak
from ..capture.calls import register_call_handler
from ..capture.values.builtins import builtin
from ..capture.values.functions import COMPILING_QUERIES

disable = api.disable


def is_compiling() -> bool:
    """True while tensorjit (or torch.compile) captures the calling code; False when it runs eagerly."""
    return False


def is_dynamo_compiling() -> bool:
    """As is_compiling: True only while the capture stage traces the calling code."""
    return False


def is_exporting() -> bool:
    """tensorjit has no export; nothing is ever being exported."""
    return False


COMPILING_QUERIES.update((is_compiling, is_dynamo_compiling))


def graph_break(msg: str = "") -> None:
    """Force a graph break here; outside capture it does nothing."""


@builtin(graph_break)
def _graph_break_in_capture(tx, msg=None):
    text = f": {msg.constant()}" if msg is not None and msg.is_constant() and msg.constant() else ""
    raise GraphBreak("graph_break", f"call to tensorjit.compiler.graph_break(){text}",
                     "remove the call to keep the code in one graph")


class error_on_graph_break:
    """Make graph breaks errors (True) or graph breaks again (False) for a region.

    As a context manager it holds while the region is captured; as a decorator it marks
    the function, and the innermost marked frame around a break decides. fullgraph=True
    cannot be undone by error_on_graph_break(False)."""

    def __init__(self, error_on_graph_break: bool) -> None:
        self.flag = bool(error_on_graph_break)
        self.previous = capture_markers.error_on_graph_break

    def __enter__(self) -> None:
        self.previous = capture_markers.error_on_graph_break
        capture_markers.error_on_graph_break = self.flag

    def __exit__(self, *exc: Any) -> None:
        capture_markers.error_on_graph_break = self.previous

    def __call__(self, fn: Callable) -> Callable:
        target = fn.__func__ if isinstance(fn, types.MethodType) else fn
        code = getattr(target, "__code__", None)
        if code is None:
            raise TypeError(f"error_on_graph_break decorates Python functions, not {type(fn).__name__}")
        capture_markers.mark_error_on_graph_break(code, self.flag)
        return fn


@builtin(capture_markers.exit_error_on_graph_break)
def _exit_in_capture(tx, *exc):
    return tx.wrap_constant_object(False)


register_call_handler(error_on_graph_break, lambda tx, args, kwargs: capture_markers.ErrorOnGraphBreakValue(
    error_on_graph_break, (args[0] if args else kwargs["error_on_graph_break"]).constant()))


def allow_in_graph(fn):
    """Put calls of `fn` in the graph as one node instead of tracing into it (fn runs on fake tensors)."""
    if isinstance(fn, (list, tuple)):
        return [allow_in_graph(f) for f in fn]
    if not callable(fn):
        raise AssertionError("allow_in_graph expects a callable")
    capture_markers.allow(fn)
    return fn


def nonstrict_trace(traceable_fn: Callable) -> Callable:
    """A function whose calls are one graph node, traced on fake tensors rather than by capture."""
    if not callable(traceable_fn):
        raise AssertionError("nonstrict_trace expects a callable")

    @functools.wraps(traceable_fn)
    def wrapped(*args, **kwargs):
        return traceable_fn(*args, **kwargs)
    capture_markers.allow(wrapped)
    return wrapped


def assume_constant_result(fn):
    """Capture calls `fn` once and uses its result as a constant (no guard re-checks it)."""
    fn._dynamo_marked_constant = True  # the attribute torch's mark sets, so either mark is honoured
    return fn


def substitute_in_graph(original_fn: Callable, *, can_constant_fold_through: bool = False,
                        skip_signature_check: bool = False) -> Callable[[Callable], Callable]:
    """Register a traceable Python function that capture inlines in place of `original_fn`.

    The returned function calls `original_fn` when run eagerly."""
    def register(traceable_fn: Callable) -> Callable:
        if not skip_signature_check:
            _check_same_signature(original_fn, traceable_fn)

        @functools.wraps(traceable_fn)
        def wrapped(*args, **kwargs):
            return original_fn(*args, **kwargs)
        capture_markers.substitute(original_fn, traceable_fn, can_constant_fold_through)
        capture_markers.substitute(wrapped, traceable_fn, can_constant_fold_through)
        return wrapped
    return register


def _check_same_signature(original_fn: Callable, traceable_fn: Callable) -> None:
    try:
        original = inspect.signature(original_fn)
    except (TypeError, ValueError):
        return  # a C function without a text signature: nothing to compare
    traceable = inspect.signature(traceable_fn)
    if [(p.name, p.kind) for p in original.parameters.values()] != \
            [(p.name, p.kind) for p in traceable.parameters.values()]:
        raise TypeError(f"Signature mismatch between {original_fn} and {traceable_fn}: "
                        f"{original} != {traceable}")


def nested_compile_region(fn: Callable | None = None, *, options: Any = None, max_reuse_entries: int = 8,
                          reuse_hash_fn: Callable | None = None):
    """Mark a region called repeatedly (a transformer layer); usable bare or with options.

    Its calls are captured inline, like any function: correct, without the reuse of one
    compiled region across call sites that torch's invoke_subgraph gives."""
    def mark(target: Callable) -> Callable:
        try:
            target._tensorjit_nested_compile_region = True
        except AttributeError:
            pass
        return target
    return mark if fn is None else mark(fn)


def wrap_numpy(fn: Callable) -> Callable:
    """Turn a function of NumPy arrays into a function of tensors (run eagerly under tensorjit)."""
    from torch.utils import _pytree as pytree
    import numpy

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        args, kwargs = pytree.tree_map_only(torch.Tensor, lambda t: t.detach().cpu().numpy(), (args, kwargs))
        result = fn(*args, **kwargs)
        return pytree.tree_map_only(numpy.ndarray, torch.from_numpy, result)
    return wrapped
