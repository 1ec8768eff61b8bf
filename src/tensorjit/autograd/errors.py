"""Structured errors of the autograd stage.

`AutogradUnsupported` is raised while compiling when a graph uses something the
autograd stage does not handle; `aot_compile` catches it and runs the graph
eagerly instead, so the caller never sees a wrong answer.
"""

from __future__ import annotations


class AutogradUnsupported(Exception):
    """A graph the autograd stage refuses, with why and what to do instead."""

    def __init__(self, kind: str, explanation: str, hint: str = "") -> None:
        self.kind = kind
        self.explanation = explanation
        self.hint = hint
        message = f"[{kind}] {explanation}"
        if hint:
            message += f" (hint: {hint})"
        super().__init__(message)
