"""The public API is typed for users' type checkers: py.typed ships, compile keeps the callable's type."""

import importlib.resources
import importlib.util
import subprocess
import sys
import typing

import pytest

import tensorjit


def test_package_declares_inline_types():
    assert importlib.resources.files("tensorjit").joinpath("py.typed").is_file()


def test_compile_has_overloads_for_direct_and_decorator_use():
    overloads = typing.get_overloads(tensorjit.api.compile)
    assert len(overloads) == 2
    hints = [typing.get_type_hints(o) for o in overloads]
    assert all("return" in h for h in hints)


@pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="mypy not installed for this Python")
def test_mypy_sees_the_compiled_function_s_signature(tmp_path):
    program = tmp_path / "user.py"
    program.write_text("import tensorjit\n"
                       "def f(x: int) -> int:\n    return x\n"
                       "reveal_type(tensorjit.compile(f))\n"
                       "reveal_type(tensorjit.compile(backend='eager')(f))\n")
    result = subprocess.run([sys.executable, "-m", "mypy", "--follow-imports=silent", str(program)],
                            capture_output=True, text=True, timeout=300)
    assert result.stdout.count('Revealed type is "def (x: int) -> int"') == 2, result.stdout
