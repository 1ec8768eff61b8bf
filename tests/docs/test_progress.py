"""The progress line: drawn only for slow compiles, stages add up, a summary at the end."""

import io
import re
import time

import torch

import tensorjit
from tensorjit import progress


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_a_slow_compile_draws_a_line_and_a_summary(monkeypatch):
    monkeypatch.setattr(progress, "DELAY_SECONDS", 0.05)
    stream = _Terminal()
    with progress.compiling("f (x.py:1)", "auto", stream):
        with progress.stage("autograd"):
            progress.graph_started()
            with progress.stage("codegen"):
                progress.kernels(3, 7)
                time.sleep(1.2)  # several refreshes even on a loaded machine
    text = stream.getvalue()
    assert "compiling f (x.py:1): codegen · graph 1 · kernels 3/7" in text
    assert re.search(r"compiled f \(x.py:1\) in \d+\.\d s: .*codegen 1\.\d s", text), text
    assert text.endswith("\n")


def test_quick_compiles_and_non_terminals_print_nothing(monkeypatch):
    monkeypatch.setattr(progress, "DELAY_SECONDS", 0.05)
    quiet = io.StringIO()  # not a terminal, "auto"
    with progress.compiling("f", "auto", quiet):
        time.sleep(0.4)
    terminal = _Terminal()
    with progress.compiling("g", "auto", terminal):
        pass
    assert quiet.getvalue() == "" and terminal.getvalue() == ""


def test_always_draws_on_a_pipe_and_never_draws_on_a_terminal(monkeypatch):
    monkeypatch.setattr(progress, "DELAY_SECONDS", 0.05)
    pipe, terminal = io.StringIO(), _Terminal()
    with progress.compiling("f", "always", pipe):
        time.sleep(0.4)
    with progress.compiling("g", "never", terminal):
        time.sleep(0.4)
    assert "compiled f" in pipe.getvalue() and terminal.getvalue() == ""


def test_a_compiled_call_reports_its_stages(monkeypatch, capsys):
    monkeypatch.setattr(progress, "DELAY_SECONDS", 0.0)
    stages = []
    stop = progress._Printer.stop

    def recording_stop(self, thread_id):
        job = self.active.get(thread_id)
        if job is not None:
            stages.append(set(job.seconds) | set(job.stages))
        stop(self, thread_id)

    monkeypatch.setattr(progress._Printer, "stop", recording_stop)
    compiled = tensorjit.compile(lambda x: (x.sin() * 2).sum(), options={"progress": "always"})
    compiled(torch.randn(16, requires_grad=True))
    assert "[tensorjit] compiled" in capsys.readouterr().err
    assert stages and {"capture", "autograd", "codegen"} <= stages[0]
