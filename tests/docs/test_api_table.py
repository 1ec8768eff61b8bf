"""docs/api.md's table of torch.compiler's names: one row per name of torch.compiler.__all__, each
name present in tensorjit.compiler, and every test a row names exists."""

from __future__ import annotations

import pathlib
import re

import torch.compiler

import tensorjit.compiler

ROOT = pathlib.Path(__file__).resolve().parents[2]


def table_rows(section: str) -> list[tuple[str, str]]:
    text = (ROOT / "docs" / "api.md").read_text().split(section, 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in text.splitlines():
        match = re.match(r"^\| `([^`]+)` \|.*\| ([^|]*) \|$", line)
        if match:
            rows.append((match.group(1), match.group(2).strip()))
    return rows


def defined_tests() -> set[str]:
    names = set()
    for path in (ROOT / "tests").rglob("test_*.py"):
        names |= set(re.findall(r"^def (test_\w+)", path.read_text(), re.M))
    return names


def test_every_torch_compiler_name_has_a_row_and_exists():
    # The table follows torch 2.14's list; an older torch (2.11 on the GPU machine) has fewer names.
    names = [name for name, _ in table_rows("## torch.compiler.__all__")]
    assert len(names) == len(set(names))
    assert sorted(set(torch.compiler.__all__) - set(names)) == []
    assert [name for name in names if not hasattr(tensorjit.compiler, name)] == []


def test_every_named_test_exists():
    known = defined_tests()
    for name, tests in table_rows("## torch.compiler.__all__"):
        for token in re.split(r",\s*", tests):
            token = re.sub(r"\[[^\]]*\]|\([^)]*\)", "", token).strip()
            if token in ("", "every test", "—") or token.endswith("tests"):
                continue
            pattern = "test_" + re.escape(token).replace(r"\*", ".*")
            assert any(re.fullmatch(pattern, test) for test in known), (name, token)
