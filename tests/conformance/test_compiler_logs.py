"""Logs in torch's words: what users grep torch.compile's logs for matches tensorjit's.

Each test runs one program under torch.compile (with TORCH_LOGS-style logging captured
in-process) and under tensorjit (TENSORJIT_LOGS events), and compares the lines: the
recompile header, the guard-failure lines with expected and actual values and the
user's names, the recompile-limit warning, and graph breaks with explanation and hint.
"""

from __future__ import annotations

import logging
import re
import warnings

import pytest
import torch
import torch._dynamo
import torch._logging

import tensorjit
from tensorjit import logs

from .harness import REFERENCE

pytestmark = pytest.mark.skipif(REFERENCE, reason="compares tensorjit's logs with torch's in one run")


def torch_log_lines(program, calls, **flags) -> list[str]:
    """What torch.compile logs (recompiles, graph_breaks) while running `calls` through `program`."""
    records: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())
    logger = logging.getLogger("torch._dynamo")
    torch._dynamo.reset()
    torch._logging.set_logs(**flags)
    logger.addHandler(handler)
    try:
        compiled = torch.compile(program, backend="eager", dynamic=False)
        for args in calls:
            compiled(*args)
    finally:
        logger.removeHandler(handler)
        torch._logging.set_logs()
        torch._dynamo.reset()
    return "\n".join(records).split("\n")


def tensorjit_log_lines(program, calls, kind: str, **compile_kwargs) -> list[str]:
    logs.clear()
    compiled = tensorjit.compile(program, backend="eager", dynamic=False, **compile_kwargs)
    for args in calls:
        compiled(*args)
    return "\n".join(logs.recent(kind)).split("\n")


def ids_normalised(lines: list[str]) -> list[str]:
    return [re.sub(r"\b\d+/\d+:", "N/N:", line) for line in lines]


def recompile_program(x, n):
    return x * n


@pytest.mark.parametrize("second", [
    torch.ones(8),                                # size mismatch at index 0
    torch.ones(4, dtype=torch.float64),           # dtype mismatch
    torch.ones(4, requires_grad=True),            # requires_grad mismatch
    torch.ones(4, 1),                             # rank mismatch
    torch.ones(8)[::2],                           # stride mismatch
], ids=["size", "dtype", "requires_grad", "rank", "stride"])
def test_recompile_log_matches_torch(second):
    calls = [(torch.ones(4), 2), (second, 2)]
    expected = [line for line in torch_log_lines(recompile_program, calls, recompiles=True)
                if line.startswith(("Recompiling", "    triggered", "    - "))]
    actual = tensorjit_log_lines(recompile_program, calls, "recompiles")
    assert ids_normalised(actual) == ids_normalised(expected)
    assert actual[0] == f"Recompiling function recompile_program in {__file__}:" \
        f"{recompile_program.__code__.co_firstlineno}"


def test_recompile_log_names_items_and_no_internal_names():
    def helper(t):
        print("", end="")  # a graph break: the rest resumes with the call's result on the stack
        return t

    def program(x, xs):
        return torch.cat([helper(x * 2), xs[0]]) + 1
    calls = [(torch.ones(4), [torch.ones(2)]), (torch.ones(8), [torch.ones(2)]), (torch.ones(8), [torch.ones(3)])]
    lines = tensorjit_log_lines(program, calls, "recompiles")
    assert "    - 0/0: tensor 'x' size mismatch at index 0. expected 4, actual 8" in lines
    assert any("tensor 'xs[0]' size mismatch at index 0. expected 2, actual 3" in line for line in lines)
    assert not any("__tj_" in line for line in lines)


def test_recompile_limit_warning_names_the_function_and_last_reason():
    def limited(x):
        return x + 1
    logs.clear()
    compiled = tensorjit.compile(limited, backend="eager", dynamic=False, recompile_limit=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(1, 5):
            compiled(torch.ones(n))
    [warning] = [w for w in caught if "recompile_limit" in str(w.message)]
    text = str(warning.message).split("\n")
    location = f"{__file__}:{limited.__code__.co_firstlineno}"
    assert text[:3] == ["tensorjit hit config.recompile_limit (2)", f"   function: 'limited' ({location})",
                        "   last reason: 0/1: tensor 'x' size mismatch at index 0. expected 2, actual 3"]


def item_program(x):
    y = x.sum().item()
    return x + y


def branch_program(x):
    if x.sum() > 0:
        return x + 1
    return x - 1


@pytest.mark.parametrize("program, explanation, hint", [
    (item_program, "Unsupported Tensor.item() call with capture_scalar_outputs=False", "capture_scalar_outputs"),
    (branch_program, "Detected data-dependent branching", "torch.cond"),
], ids=["item", "branch"])
def test_graph_break_log_has_location_explanation_and_hint(program, explanation, hint):
    expected = torch_log_lines(program, [(torch.ones(3),)], graph_breaks=True)
    actual = tensorjit_log_lines(program, [(torch.ones(3),)], "graph_breaks")
    line = program.__code__.co_firstlineno + 1
    header = f"Graph break in user code at {__file__}:{line}"
    assert header in expected and actual[0] == header
    assert any(explanation in text for text in expected)
    assert any(text.startswith("  Explanation:") and explanation in text for text in actual)
    assert any(text.startswith("  Hint:") and hint in text for text in actual)
    assert f'  File "{__file__}", line {line}, in {program.__name__}' in actual
