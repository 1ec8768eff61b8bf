"""What libraries and users mark on their functions, and what capture does with a call to one.

Takes a real callable met during capture; `marked_value` returns the symbolic value
that gives a marked callable its meaning, or None for an unmarked one. The marks are
those of `tensorjit.compiler` and the same marks torch.compiler / torch._dynamo put
on functions (attributes on the function, or torch's id sets), so a library written
for torch.compile behaves the same under tensorjit:

- allow_in_graph / nonstrict_trace: the call is one graph node, run on fake tensors;
- assume_constant_result: called at capture time, its result is a constant;
- substitute_in_graph: the traceable substitute is inlined in place of the original;
- error_on_graph_break: a break in a marked frame (or while the flag is set) is an error.

`disable` marks are checked where inlining starts (`skipfiles.check_inlinable`).
"""

from __future__ import annotations

import sys
import types
import weakref
from typing import Any, Callable

from .breaks import GraphBreak
from .values.base import CallableConstant, ConstantValue, Value
from .values.objects import ContextMethodValue
from .values.tensors import record_call

error_on_graph_break = False  # set by tensorjit.compiler.error_on_graph_break as a context manager
_strict_codes: dict = {}  # code object -> flag, for functions decorated with error_on_graph_break
_allowed: set[int] = set()  # ids of callables marked allow_in_graph / nonstrict_trace
_substitutes: dict[int, tuple[Any, Callable, bool]] = {}  # id(original) -> (original, substitute, fold)


def allow(fn: Callable) -> None:
    """Record calls of `fn` as one graph node (tensorjit.compiler.allow_in_graph)."""
    fn_id = id(fn)
    _allowed.add(fn_id)
    try:  # an id may be reused once fn is gone
        weakref.finalize(fn, _allowed.discard, fn_id)
    except TypeError:
        pass


def substitute(original: Callable, traceable: Callable, can_constant_fold_through: bool) -> None:
    if id(original) in _substitutes:
        raise ValueError(f"tensorjit: {original!r} already has a substitute in the graph")
    _substitutes[id(original)] = (original, traceable, can_constant_fold_through)


def mark_error_on_graph_break(code, flag: bool) -> None:
    _strict_codes[code] = bool(flag)


def break_is_error(code) -> bool | None:
    """What error_on_graph_break says for a break inside `code`'s frame; None: not marked."""
    return _strict_codes.get(code)


def is_allowed_in_graph(fn: Any) -> bool:
    if id(fn) in _allowed:
        return True
    rules = sys.modules.get("torch._dynamo.trace_rules")  # torch's own mark, if torch's was used
    ids = getattr(rules, "_allowed_callable_ids", None)
    try:
        return ids is not None and id(fn) in ids and getattr(fn, "__module__", "") != "torch" \
            and not (getattr(fn, "__module__", "") or "").startswith("torch.")
    except Exception:
        return False


def marked_value(obj: Any, source) -> Value | None:
    """The value of a marked callable, or None when `obj` carries no mark."""
    try:
        entry = _substitutes.get(id(obj))
    except TypeError:
        return None
    if entry is not None and entry[0] is obj:
        return SubstitutedValue(obj, source, entry[1], entry[2])
    if not isinstance(obj, (types.FunctionType, types.MethodType)):
        return InGraphValue(obj, source) if callable(obj) and not isinstance(obj, type) \
            and is_allowed_in_graph(obj) else None
    # Attributes are read from functions only: other objects may answer any name (__getattr__).
    polyfill = getattr(obj, "__torch_dynamo_polyfill__", None)
    if polyfill is not None and callable(polyfill):
        original = getattr(obj, "__torch_dynamo_original__", obj)
        fold = bool(getattr(obj, "__torch_dynamo_can_constant_fold_through__", False))
        return SubstitutedValue(original, source, polyfill, fold)
    named = (getattr(obj, "__module__", None), getattr(obj, "__name__", None))
    if named == TORCH_GRAPH_BREAK:
        return GraphBreakCallValue(obj, source)
    if named == TORCH_DYNAMO_IS_COMPILING:  # named, not imported: the product never imports torch._dynamo
        return CompilingQueryValue(obj, source)
    if getattr(obj, "_dynamo_marked_constant", False) is True:
        return ConstantResultValue(obj, source)
    if is_allowed_in_graph(obj):
        return InGraphValue(obj, source)
    return None


TORCH_GRAPH_BREAK = ("torch._dynamo.decorators", "graph_break")
TORCH_DYNAMO_IS_COMPILING = ("torch._dynamo.external_utils", "is_compiling")


class CompilingQueryValue(CallableConstant):
    """torch._dynamo.is_compiling(): True while capturing, as torch.compiler.is_compiling()."""

    def call(self, tx, args, kwargs) -> Value:
        return ConstantValue(True)


class GraphBreakCallValue(CallableConstant):
    """torch._dynamo.graph_break(): a graph break asked for by name (tensorjit's own is a builtin handler)."""

    def call(self, tx, args, kwargs) -> Value:
        message = args[0] if args else kwargs.get("msg")
        text = f": {message.constant()}" if message is not None and message.is_constant() and message.constant() \
            else ""
        raise GraphBreak("graph_break", f"call to torch._dynamo.graph_break(){text}",
                         "remove the call to keep the code in one graph")


class InGraphValue(CallableConstant):
    """A callable marked allow_in_graph: one graph node, its result computed on fake tensors."""

    def call(self, tx, args, kwargs) -> Value:
        return record_call(tx, self.fn, args, kwargs)


class ConstantResultValue(CallableConstant):
    """A callable marked assume_constant_result: run now, its result baked into the graph."""

    def call(self, tx, args, kwargs) -> Value:
        if not all(a.is_constant() for a in args) or not all(v.is_constant() for v in kwargs.values()):
            raise GraphBreak("assume-constant-result",
                             f"{_name(self.fn)} is marked assume_constant_result but got non-constant arguments",
                             "call it with Python constants, or remove the mark")
        result = self.fn(*[a.constant() for a in args], **{k: v.constant() for k, v in kwargs.items()})
        return tx.wrap_constant_object(result)


class SubstitutedValue(CallableConstant):
    """A callable with a traceable substitute (substitute_in_graph): the substitute is inlined."""

    __slots__ = ("traceable", "fold")

    def __init__(self, fn, source, traceable: Callable, fold: bool) -> None:
        super().__init__(fn, source)
        self.traceable = traceable
        self.fold = fold

    def call(self, tx, args, kwargs) -> Value:
        if self.fold and all(a.is_constant() for a in args) and all(v.is_constant() for v in kwargs.values()):
            result = self.fn(*[a.constant() for a in args], **{k: v.constant() for k, v in kwargs.items()})
            return tx.wrap_constant_object(result)
        return tx.call(tx.wrap_constant_object(self.traceable), list(args), dict(kwargs))


class ErrorOnGraphBreakValue(Value):
    """`with error_on_graph_break(flag):` inside a compiled function: the flag holds while its body is captured."""

    def __init__(self, factory: type, flag: bool) -> None:
        self.factory = factory
        self.flag = flag
        self.previous: bool | None = None

    def enter(self, tx) -> Value:
        global error_on_graph_break
        self.previous, error_on_graph_break = error_on_graph_break, self.flag
        return ConstantValue(None)

    def exit(self, tx) -> Value:
        global error_on_graph_break
        error_on_graph_break = self.previous
        return ConstantValue(None)

    def getattr(self, tx, name: str) -> Value:
        if name in ("__enter__", "__exit__"):
            return ContextMethodValue(self, "enter" if name == "__enter__" else "exit")
        raise GraphBreak("getattr", f"attribute {name!r} of error_on_graph_break")

    def reconstruct(self, cg) -> str:
        return f"{cg.constant(self.factory)}({self.flag!r})"

    def reconstruct_entered_exit(self, cg) -> str:
        # A break inside the block: the flag only matters while capturing, and capture restores it
        # itself, so the resumed code's __exit__ has nothing to undo. (The code resumed inside the
        # block is captured under the flag of the code around the compiled function.)
        return cg.constant(exit_error_on_graph_break)


def exit_error_on_graph_break(*exc) -> bool:
    """The __exit__ of an error_on_graph_break block a graph break interrupted."""
    return False


def _name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)

