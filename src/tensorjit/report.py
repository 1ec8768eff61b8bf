"""One self-contained HTML page saying what tensorjit did in this process.

`tensorjit.report(path)` writes it now (and `tensorjit.report()` with no argument, called
once before compiling, also keeps the generated code for it); `TENSORJIT_REPORT=dir` writes
`dir/tensorjit-report-<pid>.html` when the process exits. The page is for users,
not compiler developers: for each compiled function, its graphs as readable code,
its graph breaks (the user's file:line, the reason, the fix), its guards in words,
every recompile with the guard that failed, the generated kernels, and the time
spent compiling each graph. It needs no network and no script: plain HTML with
collapsible sections, so it opens offline in any browser.

It reads what the compiled functions keep (`api.all_compiled`) and the log
events (`logs.recent`), nothing else; while a report is requested, generated
code is kept in the events even when `output_code` is not printed.
"""

from __future__ import annotations

import atexit
import datetime
import html
import os
import sys
from typing import Any, Iterable

import torch

from . import logs
from .config import report_directory_from_environment

_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 72em; color: #1d1d1f; }
h1 { font-size: 1.6em; } h2 { font-size: 1.25em; margin-top: 2em; border-bottom: 1px solid #ccc; }
details { margin: .4em 0 .4em 1em; } summary { cursor: pointer; font-weight: 600; }
pre { background: #f5f5f7; padding: .7em; overflow-x: auto; font-size: 12.5px; white-space: pre-wrap; }
table { border-collapse: collapse; } td, th { border: 1px solid #ddd; padding: .25em .6em; text-align: left; }
.break { color: #a0302a; } .hint { color: #2a6a30; } .muted { color: #666; }
"""


def report(path: str | os.PathLike | None = None) -> str:
    """Write the report of everything compiled so far in this process; return its path.

    `path` may be a file or a directory (the file is then named after the process);
    None uses $TENSORJIT_REPORT or the current directory."""
    target = os.fspath(path) if path is not None else (report_directory_from_environment() or ".")
    if os.path.isdir(target) or not target.endswith(".html"):
        os.makedirs(target, exist_ok=True)
        target = os.path.join(target, f"tensorjit-report-{os.getpid()}.html")
    with open(target, "w", encoding="utf-8") as file:
        file.write(render())
    return target


def render() -> str:
    """The report as one HTML string."""
    from .api import all_compiled

    functions = [f for f in all_compiled() if f.origin is None]
    functions.sort(key=lambda f: (f.fn.__code__.co_filename, f.fn.__code__.co_firstlineno))
    body = [f"<h1>tensorjit report</h1><p class=muted>{_environment()}</p>", _summary(functions)]
    body += [_function_section(f) for f in functions]
    body.append(_event_section("Recompiles", logs.recent("recompiles")))
    body.append(_event_section("Generated code", logs.recent("output_code"), collapsed=True))
    return ("<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>tensorjit report</title>"
            f"<style>{_STYLE}</style></head><body>{''.join(body)}</body></html>")


def _environment() -> str:
    now = datetime.datetime.now().isoformat(timespec="seconds")
    from . import __version__
    return _escape(f"{now} · tensorjit {__version__} · torch {torch.__version__} · "
                   f"Python {sys.version.split()[0]} · {' '.join(sys.argv) or '<interactive>'}")


def _summary(functions: list) -> str:
    rows = []
    for function in functions:
        entries = list(function.all_entries())
        graphs = [g for _, e in entries for g in e.graphs]
        breaks = sum(e.break_reason is not None for _, e in entries)
        seconds = sum(g.compile_seconds for g in graphs)
        capture = sum(e.capture_seconds for _, e in entries)
        rows.append(f"<tr><td><a href='#{_anchor(function)}'>{_escape(function.fn.__qualname__)}</a></td>"
                    f"<td>{_escape(_where(function))}</td><td>{len(graphs)}</td><td>{breaks}</td>"
                    f"<td>{len(function.failures)}</td><td>{capture:.2f} s</td><td>{seconds:.2f} s</td></tr>")
    head = ("<tr><th>function</th><th>defined at</th><th>graphs</th><th>graph breaks</th>"
            "<th>recompiles</th><th>capture time</th><th>backend compile time</th></tr>")
    return f"<h2>Summary</h2><table>{head}{''.join(rows)}</table>" if rows else \
        "<h2>Summary</h2><p>Nothing was compiled in this process.</p>"


def _function_section(function) -> str:
    parts = [f"<h2 id='{_anchor(function)}'>{_escape(function.fn.__qualname__)} "
             f"<span class=muted>{_escape(_where(function))}</span></h2>"]
    if function.eager_fallback:
        parts.append("<p class=break>Runs eagerly now (recompile limit reached, or capture refused).</p>")
    for number, (owner, entry) in enumerate(function.all_entries()):
        label = "entry" if owner is function else f"resume function {_escape(owner.fn.__name__)}"
        parts.append(f"<details open><summary>{label} {number} <span class=muted>(captured in "
                     f"{entry.capture_seconds:.3f} s)</span></summary>{_entry(entry)}</details>")
    if function.failures:
        items = "".join(f"<li>{_escape(failure)}</li>" for failure in function.failures)
        parts.append(f"<details><summary>recompiled {len(function.failures)} time(s): failed guards</summary>"
                     f"<ol>{items}</ol></details>")
    return "".join(parts)


def _entry(entry) -> str:
    parts = []
    reason = entry.break_reason
    if reason is not None:
        where = "".join(f"<div>{_escape(str(loc))}</div>" for loc in reason.user_stack) or "<div>unknown</div>"
        hint = f"<div class=hint>fix: {_escape(reason.hint)}</div>" if reason.hint else ""
        parts.append(f"<div class=break><b>graph break</b>: {_escape(reason.reason)}{where}</div>{hint}")
    for index, graph in enumerate(entry.graphs):
        parts.append(f"<details><summary>graph {index}: {graph.op_count} ops, inputs "
                     f"{_escape(str(graph.input_shapes))}, compiled in {graph.compile_seconds:.3f} s</summary>"
                     f"<pre>{_escape(graph.graph_module.code.strip())}</pre></details>")
    guards = entry.guards.descriptions
    parts.append(f"<details><summary>{len(guards)} guards (the entry is reused while all hold)</summary>"
                 f"<pre>{_escape(chr(10).join(guards))}</pre></details>")
    return "".join(parts)


def _event_section(title: str, events: Iterable[str], collapsed: bool = False) -> str:
    events = list(events)
    if not events:
        return f"<h2>{title}</h2><p class=muted>none</p>"
    blocks = "".join(f"<pre>{_escape(text)}</pre>" for text in events)
    return f"<h2>{title}</h2>" + (f"<details><summary>{len(events)} item(s)</summary>{blocks}</details>"
                                   if collapsed else blocks)


def _where(function) -> str:
    code = function.fn.__code__
    return f"{code.co_filename}:{code.co_firstlineno}"


def _anchor(function) -> str:
    return f"f{id(function):x}"


def _escape(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _write_at_exit() -> None:
    try:
        path = report()
        print(f"[tensorjit] report written to {path}", file=sys.stderr)
    except Exception as error:  # a report must never turn a clean exit into a failure
        print(f"[tensorjit] could not write the report: {error}", file=sys.stderr)


if report_directory_from_environment():
    logs.keep("output_code")
    atexit.register(_write_at_exit)
