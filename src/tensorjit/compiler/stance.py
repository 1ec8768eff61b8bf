"""set_stance: how compiled functions behave for a while, as torch.compiler.set_stance.

Takes a stance name and options; a call sets it, and the object it returns is also
a context manager and a decorator that restore the previous stance afterwards.
The state it sets is `tensorjit.api.stance` (None while the stance is the plain
default), which every compiled function reads on each call.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable

from .. import api
from ..capture.breaks import CompilerUsageError
from ..capture.calls import register_call_handler

STANCES = ("default", "force_eager", "eager_on_recompile", "fail_on_recompile", "eager_then_compile",
           "aot_eager_then_compile")


@dataclass(frozen=True)
class Stance:
    stance: str = "default"
    skip_guard_eval_unsafe: bool = False
    force_backend: str | Callable | None = None

    def is_plain_default(self) -> bool:
        return self.stance == "default" and self.force_backend is None


def _install(new: Stance) -> Stance:
    previous = current()
    api.stance = None if new.is_plain_default() and not new.skip_guard_eval_unsafe else new
    return previous


def current() -> Stance:
    return api.stance or Stance()


class set_stance:
    """Set the compiler's stance; usable as a call, a context manager and a decorator.

    - "default": compile as usual;
    - "force_eager": ignore tensorjit.compile: every compiled function runs eagerly;
    - "eager_on_recompile": use compiled entries whose guards hold, else run eagerly;
    - "fail_on_recompile": use compiled entries whose guards hold, else raise RuntimeError;
    - "eager_then_compile" / "aot_eager_then_compile": run a function's first call eagerly (or
      through the aot_eager backend), then compile, with the sizes that changed between the calls dynamic.

    skip_guard_eval_unsafe: a function with one entry runs it without evaluating its guards (unsafe).
    force_backend (with "default" only) compiles with that backend while the stance holds.
    """

    def __init__(self, stance: str = "default", *, skip_guard_eval_unsafe: bool = False,
                 force_backend: str | Callable | None = None) -> None:
        if force_backend is not None and stance != "default":
            raise RuntimeError("non-default stance cannot have force_backend set")
        if stance not in STANCES:
            raise RuntimeError(f"invalid tensorjit.compile stance {stance!r}; valid stances are: "
                               f"{', '.join(STANCES)}")
        self.stance = Stance(stance, skip_guard_eval_unsafe, force_backend)
        self.previous = _install(self.stance)

    def __enter__(self) -> None:
        _install(self.stance)

    def __exit__(self, *exc: Any) -> None:
        _install(self.previous)

    def __call__(self, fn: Callable) -> Callable:
        _install(self.previous)  # as a decorator, the stance holds only while fn runs
        stance = self.stance

        @functools.wraps(fn)
        def with_stance(*args, **kwargs):
            previous = _install(stance)
            try:
                return fn(*args, **kwargs)
            finally:
                _install(previous)
        return with_stance


def _set_stance_in_capture(tx, args, kwargs):
    raise CompilerUsageError("attempted to set_stance in a tensorjit.compile region")


register_call_handler(set_stance, _set_stance_in_capture)
