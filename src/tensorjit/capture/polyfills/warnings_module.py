"""`warnings.catch_warnings()` used in `with` inside the compiled function.

The warnings module is not traced (skipfiles): its state is the process's. A `catch_warnings`
block saves the filters at entry and restores them at exit, so what the block does to them
(`simplefilter`, `filterwarnings`, `resetwarnings`) cannot outlive it. The graph itself emits no
Python warnings when it runs, so inside such a block those calls change nothing visible: they
are no-ops, and `record=True` gives a new empty list. Anything that would emit a warning in
the block (`warnings.warn`) is a graph break, and a block that a graph break interrupts cannot be
handed over (it is entered only in the capture), so that call runs eagerly, the block with it.
Outside a block, the filter functions change global state: graph breaks, as before.
"""

from __future__ import annotations

import warnings

from ..breaks import GraphBreak
from ..values.base import ConstantValue, Value
from ..values.containers import ListValue
from .registry import capture_rule


class CatchWarningsValue(Value):
    """A `warnings.catch_warnings(...)` made in the function: entered at most once."""

    def __init__(self, record: bool, kwargs: dict) -> None:
        self.record = record
        self.kwargs = kwargs
        self.state = "new"  # new -> entered -> exited

    def python_type(self) -> type:
        return warnings.catch_warnings

    def getattr(self, tx, name: str) -> Value:
        if name in ("__enter__", "__exit__"):
            return CatchWarningsMethod(self, name)
        raise GraphBreak("getattr", f"attribute {name!r} of warnings.catch_warnings")

    def reconstruct(self, cg) -> str:
        if self.state == "entered":
            raise GraphBreak("reconstruct", "a warnings.catch_warnings block left open at a graph break")
        arguments = ", ".join(f"{k}={cg.constant(v)}" for k, v in {"record": self.record, **self.kwargs}.items())
        return f"{cg.constant(warnings.catch_warnings)}({arguments})"


class CatchWarningsMethod(Value):
    def __init__(self, context: CatchWarningsValue, name: str) -> None:
        self.context = context
        self.name = name

    def call(self, tx, args, kwargs) -> Value:
        context = self.context
        if self.name == "__enter__":
            if context.state != "new":
                error = RuntimeError(f"Cannot enter {context.python_type().__name__} twice")
                raise GraphBreak("op-error", str(error), exception=error)
            context.state = "entered"
            tx.capture.warning_blocks = open_blocks(tx) + 1
            return ListValue([]) if context.record else ConstantValue(None)
        if context.state != "entered":
            error = RuntimeError(f"Cannot exit {context.python_type().__name__} without entering first")
            raise GraphBreak("op-error", str(error), exception=error)
        context.state = "exited"
        tx.capture.warning_blocks = open_blocks(tx) - 1
        return ConstantValue(False)  # exceptions leaving the block go on

    def reconstruct(self, cg) -> str:
        raise GraphBreak("reconstruct", f"{self.name} of a warnings.catch_warnings block inside it")


def open_blocks(tx) -> int:
    return getattr(tx.capture, "warning_blocks", 0)


def _known_arguments(args, kwargs) -> bool:
    return all(v.is_constant() for v in [*args, *kwargs.values()])


@capture_rule(warnings.catch_warnings, applies=lambda args, kwargs: not args and _known_arguments(args, kwargs))
def _catch_warnings(tx, **kwargs: Value) -> Value:
    options = {k: v.constant() for k, v in kwargs.items()}
    record = bool(options.pop("record", False))
    unknown = set(options) - {"module", "action", "category", "lineno", "append"}
    if unknown:
        error = TypeError(f"catch_warnings() got an unexpected keyword argument {sorted(unknown)[0]!r}")
        raise GraphBreak("op-error", str(error), exception=error)
    if options.get("module") is not None or options.get("action") is not None:
        raise GraphBreak("warnings", "catch_warnings(module=..., action=...) changes filters on entry")
    return CatchWarningsValue(record, options)


def _inside_block(tx) -> bool:
    return open_blocks(tx) > 0


def _filter_change(tx, *args: Value, **kwargs: Value) -> Value:
    if not _inside_block(tx):
        raise GraphBreak("warnings", "changing the warnings filters outside a catch_warnings block",
                         "it runs in Python")
    if not _known_arguments(args, kwargs):
        raise GraphBreak("warnings", "warnings filter arguments not known at capture time")
    return ConstantValue(None)  # undone at the block's exit, and the graph warns nothing in between


for _target in (warnings.simplefilter, warnings.filterwarnings, warnings.resetwarnings):
    capture_rule(_target)(_filter_change)
