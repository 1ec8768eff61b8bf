"""The structure of capture/: per-version bytecode facts in one module (cpython.py)."""

import pathlib
import re

import tensorjit

_CAPTURE = pathlib.Path(tensorjit.__file__).parent / "capture"


def test_only_cpython_py_tests_the_python_version():
    """Other modules ask cpython.py (NULL_AFTER_CALLABLE, jump_variants, ...) or register
    opcode handlers with its version sets, instead of reading sys.version_info."""
    readers = sorted(str(path.relative_to(_CAPTURE)) for path in _CAPTURE.rglob("*.py")
                     if re.search(r"version_info|\bPY\s*(==|!=|>=|<=|<|>|in\b)", path.read_text()))
    assert readers == ["cpython.py"]
