"""Structured refusals of the capture stage.

`GraphBreak` is raised inside the interpreter when an operation cannot enter
the graph; the frame converter catches it, compiles what was captured so far
and runs the operation in ordinary Python. Under `fullgraph=True` it reaches
the user as `GraphBreakError`. `CaptureError` wraps a compiler bug so that it
still names the user's file and line.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class UserLocation:
    filename: str
    lineno: int
    function: str

    def __str__(self) -> str:
        return f"{self.filename}:{self.lineno} in {self.function}"


@dataclass
class BreakReason:
    """Why and where a graph ended early; what `explain` and the logs show."""

    kind: str
    explanation: str
    hint: str = ""
    user_stack: list[UserLocation] = field(default_factory=list)

    @property
    def reason(self) -> str:
        return f"{self.kind}: {self.explanation}"

    def __str__(self) -> str:
        where = str(self.user_stack[-1]) if self.user_stack else "<unknown>"
        text = f"{where}: {self.reason}"
        return f"{text} (hint: {self.hint})" if self.hint else text


class GraphBreak(Exception):
    """An operation that cannot be captured; raised by interpreter handlers.

    `exception` is set when the operation raises a Python exception that capture
    knows exactly (a KeyError, an explicit `raise`): a `try` block around it can
    then be followed symbolically. `root_step` is the root frame's step where it
    was first raised."""

    def __init__(self, kind: str, explanation: str, hint: str = "",
                 exception: BaseException | None = None) -> None:
        super().__init__(f"{kind}: {explanation}")
        self.reason = BreakReason(kind, explanation, hint)
        self.exception = exception
        self.root_step: int | None = None
        self.is_error: bool | None = None  # error_on_graph_break of the innermost marked frame
        self.breaking_generator = None
        """Where the body of a generator the compiled function made broke (a frame that exists
        only in capture, which no resume function can continue): that call runs eagerly."""


class GraphBreakError(RuntimeError):
    """A graph break under fullgraph=True or error_on_graph_break(True)."""

    def __init__(self, reason: BreakReason, under: str = "fullgraph=True") -> None:
        callers = "".join(f"\n  called from {loc}" for loc in reversed(reason.user_stack[:-1]))
        super().__init__(f"graph break under {under} at {reason}{callers}")
        self.reason = reason


class CaptureError(RuntimeError):
    """An internal error of the capture stage, reported at the user's source line."""

    def __init__(self, location: UserLocation | None, cause: BaseException) -> None:
        where = str(location) if location else "<unknown location>"
        super().__init__(
            f"tensorjit internal error while capturing {where}: {type(cause).__name__}: {cause}\n"
            "This is a bug in tensorjit. Set tensorjit.config.config.suppress_errors = True "
            "to run such code eagerly instead."
        )
        self.location = location


class CompilerUsageError(RuntimeError):
    """A compiler API used where it must not be (set_stance inside a compiled function): raised as is."""
