"""The HTML report: what it says, that it is self-contained, and that a real browser renders it."""

import os
import re
import shutil
import subprocess

import pytest
import torch

import tensorjit
from tensorjit import report as report_module


def _program(x, y):
    x = x.sin()
    if x.sum() > 0:  # a data-dependent branch: a graph break
        return x + y
    return x - y


@pytest.fixture
def written(tmp_path):
    tensorjit.reset()
    # (a cold capture: a warm-started entry carries no graph code, and whether this process
    # cached _program already depends on which tests ran before in it)
    compiled = tensorjit.compile(_program, backend="eager", options={"warm_start": False})
    compiled(torch.ones(8), torch.ones(8))
    compiled(torch.ones(9), torch.ones(9))  # a new size: a recompile
    return tensorjit.report(tmp_path)


def test_report_names_graphs_breaks_guards_and_recompiles(written):
    page = open(written, encoding="utf-8").read()
    assert "_program" in page
    assert "graph break" in page and "test_report.py:" in page
    assert "torch.sin" in page or "sin" in page          # the graph's code
    assert "guards" in page and "recompiled 1 time" in page


def test_report_needs_no_network(written):
    page = open(written, encoding="utf-8").read()
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)
    assert "<script" not in page


def test_report_path_may_be_a_file(tmp_path):
    target = tmp_path / "mine.html"
    assert tensorjit.report(target) == str(target) and target.exists()


def _browser() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


@pytest.mark.skipif(_browser() is None, reason="no headless browser installed")
def test_report_renders_in_a_headless_browser(written, tmp_path):
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run",
             f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([_browser(), *flags, "--dump-dom", f"file://{os.path.abspath(written)}"],
                         capture_output=True, text=True, timeout=120).stdout
    assert "<h1>tensorjit report</h1>" in dom
    assert "_program" in dom and "graph break" in dom


def test_compile_time_log_splits_capture_and_backend(capsys):
    tensorjit.logs.set_logs("compile_time")
    try:
        tensorjit.compile(lambda x: x.cos() * 2, backend="eager")(torch.ones(3))
    finally:
        tensorjit.logs.set_logs("")
    err = capsys.readouterr().err
    assert re.search(r"\[tensorjit compile_time\] \S*<lambda> \(.*test_report.py:\d+\): "
                     r"capture \d+\.\d+ s, backend \d+\.\d+ s \(1 graph\(s\)\)", err), err
