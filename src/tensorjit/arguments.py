"""Checks of `tensorjit.compile`'s arguments, made when compile() is called.

Each wrong value raises an error that names the argument, what was given, and
the valid values (as torch.compile does for unknown modes and options). Options
are checked against `Config`'s declared types (`config.check_options`), backends
by `backends.registry.lookup_backend`.
"""

from __future__ import annotations

from typing import Any

from .config import MODES, check_options


def check_compile_arguments(model: Any, fullgraph: Any, dynamic: Any, mode: Any, options: Any,
                            disable: Any) -> None:
    if model is not None and not callable(model):
        raise TypeError(f"tensorjit.compile: model must be a function, method, nn.Module or callable object, "
                        f"got {_shown(model)}")
    _check_flag("fullgraph", fullgraph)
    _check_flag("disable", disable)
    if not (dynamic is None or isinstance(dynamic, bool)):
        raise TypeError(f"tensorjit.compile: dynamic must be None, True or False, got {_shown(dynamic)}")
    if mode is not None and (not isinstance(mode, str) or mode not in MODES):
        raise ValueError(f"tensorjit.compile: unknown mode {_shown(mode)}; valid modes are: {', '.join(MODES)}")
    if options is not None:
        check_options(options)
    if mode is not None and options:
        raise ValueError("tensorjit.compile: give either mode or options, not both (as torch.compile)")


def _check_flag(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"tensorjit.compile: {name} must be True or False, got {_shown(value)}")


def _shown(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:77] + '...' if len(text) > 80 else text}"


def check_disable_arguments(fn: Any, recursive: Any) -> None:
    if fn is not None and not callable(fn):
        raise TypeError(f"tensorjit.disable: fn must be a function, method, nn.Module or callable object, "
                        f"got {_shown(fn)}")
    if not isinstance(recursive, bool):
        raise TypeError(f"tensorjit.disable: recursive must be True or False, got {_shown(recursive)}")
