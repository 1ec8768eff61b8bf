"""A live progress line for long compiles, and where their time went.

A compile that takes longer than `DELAY_SECONDS` shows one line on stderr,
rewritten in place while it runs:

    [tensorjit] compiling forward (model.py:12): codegen · graph 2 · kernels 14/40 · 3.1 s

and, when it ends, a summary with the time per stage:

    [tensorjit] compiled forward (model.py:12) in 4.2 s: capture 0.8 s, autograd 0.9 s, codegen 2.5 s

Short compiles print nothing. By default (`Config.progress == "auto"`) the line
appears only when stderr is a terminal; "always" forces it (logs, CI), "never"
silences it.

The stages nest (`stage("autograd")` around the whole ahead-of-time step,
`stage("codegen")` inside it for each graph); time goes to the innermost open
stage, so the summary adds up to the wall time. State is per thread: a compile
on one thread never writes into another's line.
"""

from __future__ import annotations

import collections
import contextlib
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Iterator, TextIO

DELAY_SECONDS = 2.0
"""A compile shorter than this prints nothing."""
REFRESH_SECONDS = 0.25


@dataclass
class Job:
    """One compile in progress: its name, open stages and the time each took."""

    name: str
    started: float = field(default_factory=time.perf_counter)
    stages: list[str] = field(default_factory=lambda: ["capture"])
    seconds: dict[str, float] = field(default_factory=dict)
    stage_started: float = field(default_factory=time.perf_counter)
    graphs: int = 0
    kernels: tuple[int, int] | None = None
    shown: bool = False

    def switch(self, stages: list[str]) -> None:
        """Close the time of the innermost stage and make `stages` the open ones."""
        now = time.perf_counter()
        innermost = self.stages[-1]
        self.seconds[innermost] = self.seconds.get(innermost, 0.0) + now - self.stage_started
        self.stage_started = now
        self.stages = stages

    def line(self) -> str:
        parts = [f"compiling {self.name}: {self.stages[-1]}"]
        if self.graphs:
            parts.append(f"graph {self.graphs}")
        if self.kernels:
            parts.append(f"kernels {self.kernels[0]}/{self.kernels[1]}")
        parts.append(f"{time.perf_counter() - self.started:.1f} s")
        return " · ".join(parts)

    def summary(self) -> str:
        stages = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in self.seconds.items() if seconds >= 0.05)
        return f"compiled {self.name} in {time.perf_counter() - self.started:.1f} s: {stages}"


class _Printer:
    """The background thread that draws the line of whichever compile is slow."""

    def __init__(self) -> None:
        self.active: dict[int, Job] = {}
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None
        self.stream: TextIO = sys.stderr

    def start(self, thread_id: int, job: Job, stream: TextIO) -> None:
        with self.lock:
            self.active[thread_id] = job
            self.stream = stream
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._loop, name="tensorjit-progress", daemon=True)
                self.thread.start()

    def stop(self, thread_id: int) -> None:
        with self.lock:
            job = self.active.pop(thread_id, None)
            if job is not None and job.shown:
                job.switch(job.stages)
                self._write("\r\033[K[tensorjit] " + job.summary() + "\n")

    def _loop(self) -> None:
        while True:
            time.sleep(REFRESH_SECONDS)
            with self.lock:
                if not self.active:
                    self.thread = None
                    return
                job = next(iter(self.active.values()))
                if time.perf_counter() - job.started >= DELAY_SECONDS:
                    job.shown = True
                    self._write("\r\033[K[tensorjit] " + job.line())

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # a closed stream: the line is a courtesy, never an error
            pass


_printer = _Printer()
_local = threading.local()


def _current() -> Job | None:
    return getattr(_local, "job", None)


def wanted(setting: str, stream: TextIO) -> bool:
    """Whether a progress line is drawn for `Config.progress == setting` on `stream`."""
    if setting == "always":
        return True
    if setting == "never":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


stage_counts: collections.Counter = collections.Counter()
"""How often each stage began in this process ("capture", "autograd", "codegen", ...), drawn or not:
how tests see that a warm start compiled nothing."""


@contextlib.contextmanager
def compiling(name: str, setting: str = "auto", stream: TextIO | None = None) -> Iterator[Job | None]:
    """Around one compile (capture and everything it triggers). Nested calls join the outer one."""
    stage_counts["capture"] += 1
    stream = stream or sys.stderr
    if _current() is not None or not wanted(setting, stream):
        yield _current()
        return
    job = Job(name)
    _local.job = job
    _printer.start(threading.get_ident(), job, stream)
    try:
        yield job
    finally:
        _local.job = None
        _printer.stop(threading.get_ident())


@contextlib.contextmanager
def stage(name: str) -> Iterator[None]:
    """Time spent inside goes to `name` (the innermost open stage wins)."""
    stage_counts[name] += 1
    job = _current()
    if job is None:
        yield
        return
    outer = list(job.stages)
    job.switch(outer + [name])
    try:
        yield
    finally:
        job.switch(outer)


def graph_started() -> None:
    """The code generator took the next graph (the line counts them)."""
    job = _current()
    if job is not None:
        job.graphs += 1
        job.kernels = None


def kernels(done: int, total: int) -> None:
    """Kernels compiled so far of the current graph."""
    job = _current()
    if job is not None:
        job.kernels = (done, total)
