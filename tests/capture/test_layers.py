"""The structure of capture/: its modules import one way, from the layers below them
(tools/capture_imports.py draws the graph), and per-version bytecode facts live in one
module (cpython.py)."""

import importlib.util
import pathlib
import re
import sys

import tensorjit

_CAPTURE = pathlib.Path(tensorjit.__file__).parent / "capture"
_TOOL = pathlib.Path(__file__).resolve().parents[2] / "tools" / "capture_imports.py"


def _imports_tool():
    spec = importlib.util.spec_from_file_location("capture_imports", _TOOL)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_no_module_imports_an_upper_layer_at_module_level():
    """values/ below calls below the interpreter below conversion: what a lower layer needs of
    an upper one it reaches through the frame it is given (tx.call, tx.getitem, tx.call_module,
    tx.child_frame), not through an import."""
    tool = _imports_tool()
    edges, _ = tool.graph()
    upward = [f"{e.importer} -> {e.imported} (line {e.line})" for e in edges
              if e.at_module_level and tool.layer_of(e.imported) > tool.layer_of(e.importer)]
    assert upward == []


def test_module_level_imports_have_no_cycle():
    tool = _imports_tool()
    edges, _ = tool.graph()
    assert tool.cycles([e for e in edges if e.at_module_level]) == []


def test_the_tool_reads_imports_inside_functions_too():
    tool = _imports_tool()
    edges, indented = tool.graph()
    assert any(e.importer == "interpreter" and e.imported == "opcodes" and not e.at_module_level for e in edges)
    assert indented > 0


def test_only_cpython_py_tests_the_python_version():
    """Other modules ask cpython.py (NULL_AFTER_CALLABLE, jump_variants, ...) or register
    opcode handlers with its version sets, instead of reading sys.version_info."""
    readers = sorted(str(path.relative_to(_CAPTURE)) for path in _CAPTURE.rglob("*.py")
                     if re.search(r"version_info|\bPY\s*(==|!=|>=|<=|<|>|in\b)", path.read_text()))
    assert readers == ["cpython.py"]
