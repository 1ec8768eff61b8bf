"""Structured compiler events and their printing.

Enable with `TENSORJIT_LOGS=graph_breaks,guards,recompiles,graph_code,output_code,cudagraphs` or
`tensorjit.logs.set_logs("graph_breaks,recompiles")`. Every event names the
user's file and line where it has one. Events are also kept in memory
(`recent()`) for explain() and tests.
"""

from __future__ import annotations

import sys
from typing import Any

from .config import log_settings_from_environment

KINDS = ("graph_breaks", "guards", "recompiles", "graph_code", "output_code", "compile_time", "cudagraphs")
_enabled: set[str] = set()
_events: list[tuple[str, str]] = []


def set_logs(spec: str | set[str] | None = None, **flags: bool) -> None:
    """Enable log kinds: a comma-separated string, a set, or keyword flags."""
    global _enabled
    names = set()
    if isinstance(spec, str):
        names = {s.strip() for s in spec.split(",") if s.strip()}
    elif spec:
        names = set(spec)
    names |= {k for k, v in flags.items() if v}
    unknown = names - set(KINDS) - {"all"}
    if unknown:
        raise ValueError(f"tensorjit: unknown log kind(s) {sorted(unknown)}; valid kinds are: {', '.join(KINDS)}, all")
    _enabled = set(KINDS) if "all" in names else names


def enabled(kind: str) -> bool:
    return kind in _enabled


def emit(kind: str, text: str) -> None:
    _events.append((kind, text))
    del _events[:-1000]
    if kind in _enabled:
        print(f"[tensorjit {kind}] {text}", file=sys.stderr)


def recent(kind: str | None = None) -> list[str]:
    return [t for k, t in _events if kind is None or k == kind]


def clear() -> None:
    _events.clear()


def graph_break(reason: Any) -> None:
    emit("graph_breaks", f"graph break at {reason}")


def recompile(name: str, failure: str | None) -> None:
    emit("recompiles", f"recompiling {name}: guard failed: {failure}")


def guards(name: str, compiled: Any) -> None:
    if "guards" in _enabled:
        emit("guards", f"guards of {name}:\n" + "\n".join("  " + text for text in compiled.descriptions))


def graph_code(name: str, gm: Any) -> None:
    if "graph_code" in _enabled:
        emit("graph_code", f"graph of {name}:\n{gm.code}")


def output_code(name: str, language: str, source: str) -> None:
    """The code a generator produced for one graph (C++ library, Triton kernels, wrapper)."""
    if "output_code" in _enabled:
        emit("output_code", f"{language} code of {name}:\n{source}")


try:
    set_logs(log_settings_from_environment())
except ValueError as _error:
    print(f"[tensorjit] ignoring TENSORJIT_LOGS: {_error}", file=sys.stderr)
