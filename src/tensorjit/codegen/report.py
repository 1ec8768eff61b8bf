"""Counters and timings others can print.

Takes records from the lowering and the compilers; `fallback_report()` and
`timing_report()` return readable text.
"""

from __future__ import annotations

import time
from collections import Counter
from contextlib import contextmanager

FALLBACKS: Counter = Counter()   # ATen target name -> times it ran as an Extern
FALLBACK_REASONS: dict[str, str] = {}
TIMINGS: list[tuple[str, str, float]] = []  # (graph name, stage, seconds)


def record_fallback(target, reason: str) -> None:
    name = str(target)
    FALLBACKS[name] += 1
    FALLBACK_REASONS.setdefault(name, reason)


@contextmanager
def timed(graph: str, stage: str):
    start = time.perf_counter()
    try:
        yield
    finally:
        TIMINGS.append((graph, stage, time.perf_counter() - start))


def fallback_report() -> str:
    lines = [f"{count:5d}  {name}  ({FALLBACK_REASONS[name]})" for name, count in FALLBACKS.most_common()]
    return "ATen fallbacks (externs):\n" + ("\n".join(lines) if lines else "  none")


def timing_report() -> str:
    totals: Counter = Counter()
    for _, stage, seconds in TIMINGS:
        totals[stage] += seconds
    return "codegen cold-compile time by stage:\n" + "\n".join(
        f"  {stage:12s} {seconds:8.3f} s" for stage, seconds in totals.items())


def reset() -> None:
    FALLBACKS.clear()
    FALLBACK_REASONS.clear()
    TIMINGS.clear()
