"""The structure of capture/: its modules import one way, from the layers below them, at module
level and inside functions alike (tools/capture_imports.py holds the table of layers and draws
the graph); an import inside a function says why it waits; per-version bytecode facts live in
one module (cpython.py)."""

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


def test_every_capture_module_has_a_layer():
    tool = _imports_tool()
    missing = []
    for path in sorted(_CAPTURE.rglob("*.py")):
        try:
            tool.layer_of(tool.module_name(path))
        except KeyError as error:
            missing.append(str(error))
    assert missing == []


def test_no_import_reaches_up_a_layer():
    """records < graph < values < output < calls < interpreter < conversion, and inside values/
    one order (base first): what a lower module needs of an upper one it is handed (the frame,
    `tx.call`, `tx.wrap_constant_object`; an argument; a table the upper module registers into),
    not imported, at module level or inside a function."""
    tool = _imports_tool()
    edges, _ = tool.graph()
    upward = [f"{e.importer} -> {e.imported} (line {e.line}{'' if e.at_module_level else ', inside a function'})"
              for e in edges if tool.reaches_up(e)]
    assert upward == []


def test_imports_inside_functions_say_why_they_wait():
    """An import inside a function is kept only where waiting saves import time, and says so
    (`# deferred: <module> costs ~N ms at import; only ... needs it`) on its line or just above."""
    tool = _imports_tool()
    unexplained = [f"{i.module}:{i.line} {i.text}" for i in tool.inside_imports() if i.reason is None]
    assert unexplained == []


def test_no_cycle_even_through_imports_inside_functions():
    tool = _imports_tool()
    edges, _ = tool.graph()
    assert tool.cycles(edges) == []


def test_module_level_imports_have_no_cycle():
    tool = _imports_tool()
    edges, _ = tool.graph()
    assert tool.cycles([e for e in edges if e.at_module_level]) == []


def test_the_tool_reads_imports_inside_functions_too():
    tool = _imports_tool()
    edges, indented = tool.graph()
    inside = tool.inside_imports()
    assert indented == len(inside) > 0
    assert any(i.module == "dynamic" and "symbolic_shapes" in i.text and i.reason for i in inside)
    upward = tool.Edge("values.containers", "values.objects", at_module_level=False, line=1)
    assert tool.reaches_up(upward) and not tool.reaches_up(tool.Edge("values.objects", "values.containers", False, 1))
    assert tool.reaches_up(tool.Edge("values.base", "interpreter", True, 1))


def test_the_container_method_table_answers_every_method_containers_offer():
    """containers.py hands out ContainerMethodValues for these names and dispatches them through
    method_table.py, which container_methods.py fills (imported by values/__init__.py): each has
    a handler for the class or a base of it, or is an operator dunder the table answers itself."""
    from tensorjit.capture.values import containers, method_table
    offered = {containers.ListValue: containers._LIST_METHODS, containers.DictValue: containers._DICT_METHODS,
               containers.SetValue: containers._SET_METHODS, containers.MappingProxyValue: containers._PROXY_METHODS}
    missing = [(cls.__name__, name) for cls, names in offered.items() for name in sorted(names)
               if not any((klass, name) in method_table._METHODS for klass in cls.__mro__)
               and name not in method_table._OPERATOR_DUNDERS]
    assert missing == []


def test_only_cpython_py_tests_the_python_version():
    """Other modules ask cpython.py (NULL_AFTER_CALLABLE, jump_variants, ...) or register
    opcode handlers with its version sets, instead of reading sys.version_info."""
    readers = sorted(str(path.relative_to(_CAPTURE)) for path in _CAPTURE.rglob("*.py")
                     if re.search(r"version_info|\bPY\s*(==|!=|>=|<=|<|>|in\b)", path.read_text()))
    assert readers == ["cpython.py"]
