"""Structured compiler events and their printing.

Enable with `TENSORJIT_LOGS=graph_breaks,guards,recompiles,graph_code,output_code,fusion,cudagraphs,cache,autotuning` or
`tensorjit.logs.set_logs("graph_breaks,recompiles")`. Every event names the
user's file and line where it has one. Events are also kept in memory
(`recent()`) for explain() and tests.
"""

from __future__ import annotations

import sys
from typing import Any

from .config import log_settings_from_environment

KINDS = ("graph_breaks", "guards", "recompiles", "graph_code", "output_code", "compile_time", "fusion",
         "cudagraphs", "cache", "autotuning")
_enabled: set[str] = set()
_kept: set[str] = set()
"""Kinds recorded in `recent()` even when not printed, for a report (`keep`)."""
_events: list[tuple[str, str]] = []


def set_logs(spec: str | set[str] | None = None, **flags: bool) -> None:
    """Enable log kinds: a comma-separated string, a set, or keyword flags."""
    global _enabled
    valid = f"valid kinds are: {', '.join(KINDS)}, all"
    names = set()
    if isinstance(spec, str):
        names = {s.strip() for s in spec.split(",") if s.strip()}
    elif isinstance(spec, (set, frozenset, list, tuple)) and all(isinstance(name, str) for name in spec):
        names = set(spec)
    elif spec is not None:
        raise TypeError(f"tensorjit: set_logs takes a comma-separated string or a set of log kinds, got "
                        f"{type(spec).__name__} {spec!r:.80}; {valid}")
    wrong = {name: value for name, value in flags.items() if not isinstance(value, bool)}
    if wrong:  # as torch._logging.set_logs: "Expected bool to enable artifact graph_breaks, received 5"
        name, value = next(iter(wrong.items()))
        raise TypeError(f"tensorjit: set_logs({name}=...) must be True or False, got {type(value).__name__} {value!r:.80}")
    names |= {k for k, v in flags.items() if v}
    unknown = names - set(KINDS) - {"all"}
    if unknown:
        raise ValueError(f"tensorjit: unknown log kind(s) {sorted(unknown)}; {valid}")
    _enabled = set(KINDS) if "all" in names else names


def enabled(kind: str) -> bool:
    return kind in _enabled


def keep(kind: str) -> None:
    """Record events of `kind` for `recent()` even while they are not printed."""
    _kept.add(kind)


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
    """A graph break, worded as torch's graph_breaks log: where, what, why, and what to do."""
    stack = getattr(reason, "user_stack", None) or []
    where = f"{stack[-1].filename}:{stack[-1].lineno}" if stack else "<unknown>"
    lines = [f"Graph break in user code at {where}", f"Graph Break Reason: {getattr(reason, 'kind', reason)}",
             f"  Explanation: {getattr(reason, 'explanation', reason)}"]
    if getattr(reason, "hint", ""):
        lines.append(f"  Hint: {reason.hint}")
    if stack:
        lines += ["", "User code traceback:"]
        lines += [f'  File "{loc.filename}", line {loc.lineno}, in {loc.function}' for loc in stack]
    emit("graph_breaks", "\n".join(lines))


def recompile(name: str, location: str, failures: list[tuple[str, str]]) -> None:
    """A recompile, worded as torch's recompiles log; failures: (entry id, first failing guard), newest first."""
    lines = [f"Recompiling function {name} in {location}", "    triggered by the following guard failure(s):"]
    lines += [f"    - {entry}: {failure}" for entry, failure in failures]
    emit("recompiles", "\n".join(lines))


def recompile_limit_text(name: str, location: str, limit: int, last: tuple[str, str]) -> str:
    """The warning when a function reaches its recompile limit and runs eagerly from then on."""
    return (f"tensorjit hit config.recompile_limit ({limit})\n"
            f"   function: '{name}' ({location})\n"
            f"   last reason: {last[0]}: {last[1]}\n"
            f"It now runs eagerly. To log all recompilation reasons, use TENSORJIT_LOGS=\"recompiles\"; "
            f"to allow more entries, pass tensorjit.compile(..., recompile_limit=N) "
            f"(or set tensorjit.config.config.cache_size_limit).")


def guards(name: str, compiled: Any) -> None:
    if "guards" in _enabled:
        emit("guards", f"guards of {name}:\n" + "\n".join("  " + text for text in compiled.descriptions))


def graph_code(name: str, gm: Any) -> None:
    if "graph_code" in _enabled:
        emit("graph_code", f"graph of {name}:\n{gm.code}")


def output_code(name: str, language: str, source: str) -> None:
    """The code a generator produced for one graph (C++ library, Triton kernels, wrapper)."""
    if "output_code" in _enabled or "output_code" in _kept:
        emit("output_code", f"{language} code of {name}:\n{source}")


try:
    set_logs(log_settings_from_environment())
except ValueError as _error:
    print(f"[tensorjit] ignoring TENSORJIT_LOGS: {_error}", file=sys.stderr)
