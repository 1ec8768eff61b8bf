"""Every Python snippet of the README runs, and says what the README claims it says."""

import contextlib
import io
import pathlib
import re

import torch

import tensorjit

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def _snippets() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_has_snippets():
    assert _snippets(), "the README lost its example"


def test_every_readme_snippet_runs_and_explain_reports_its_graph():
    for snippet in _snippets():
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(snippet, str(README), "exec"), {"__name__": "readme"})
        assert "Graph Count: 0" not in printed.getvalue(), printed.getvalue()


def test_explain_of_an_already_compiled_function_captures_the_original():
    @tensorjit.compile(backend="eager", fullgraph=True)
    def f(x):
        return x.sin() + 1

    f(torch.randn(3))
    assert tensorjit.explain(f)(torch.randn(3)).graph_count == 1
    module = tensorjit.compile(torch.nn.Linear(3, 3), backend="eager")
    module(torch.randn(2, 3))
    assert tensorjit.explain(module)(torch.randn(2, 3)).graph_count == 1
