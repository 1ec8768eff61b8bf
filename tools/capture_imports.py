"""The import graph of src/tensorjit/capture: which module imports which, at module level and
inside functions, its import cycles, and the layers it should keep to.

Takes: nothing (reads the source beside it). Returns: prints a markdown report (counts, cycles,
the table of module-level edges per layer, the imports inside functions with their reasons) that
docs/architecture.md quotes; `graph()`, `inside_imports()`, `reaches_up()` and `LAYERS` serve
tests/capture/test_layers.py.

    python tools/capture_imports.py
"""

from __future__ import annotations

import ast
import pathlib
from dataclasses import dataclass

CAPTURE = pathlib.Path(__file__).resolve().parent.parent / "src" / "tensorjit" / "capture"

LAYERS = (
    ("records", ("breaks", "sources", "guard_kinds", "native_guards", "guards", "cpython")),
    ("graph", ("aliasing", "subgraphs", "dynamic")),
    ("values", ("values.base", "values.lazy", "values.cells", "values.functions", "values.method_table",
                "values.container_subclasses", "values.containers", "values.hooks", "values.tensors",
                "values.container_methods", "values.subclass_instances", "values.objects", "values.torch_calls",
                "values.records", "values.numpy", "values.builtins", "values")),
    ("output", ("output", "codegen")),
    ("calls", ("skipfiles", "builder", "markers", "higher_order", "loops", "flex_attention", "regions", "autograd_function",
               "calls", "attributes", "module_call", "contextmanagers", "generators", "polyfills.*")),
    ("interpreter", ("capture_state", "opcodes", "interpreter")),
    ("conversion", ("resume", "convert", "guard_filter", "__init__")),
)
"""capture/'s layers, bottom first. A module imports (at module level or inside a function) only
from its own layer and those below it; in the ORDERED layers only from the members listed before
it (values/ in one order, base first; opcodes before the interpreter that runs them). What a
lower layer needs of an upper one it is handed: the frame (`tx.call`, `tx.wrap_constant_object`),
the code generator (`cg`), an argument (hooks.py gets TensorValue), or a table the upper module
registers into (method_table.py, containers.KEYED_BY_IDENTITY)."""

ORDERED = frozenset({"values", "interpreter"})

DEFERRAL = "# deferred:"
"""What the comment on (or just above) an import inside a function starts with: why the import
waits for the call, with the import time it saves (`python -X importtime`)."""


@dataclass(frozen=True)
class Edge:
    importer: str
    imported: str
    at_module_level: bool
    line: int


def module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(CAPTURE).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, pathlib.Path]:
    return {module_name(path): path for path in sorted(CAPTURE.rglob("*.py"))}


def _package_of(name: str, path: pathlib.Path) -> list[str]:
    parts = name.split(".") if name != "__init__" else []
    return parts if path.name == "__init__.py" else parts[:-1]


def _targets(node: ast.ImportFrom, package: list[str], modules: dict) -> list[str]:
    """The capture modules `from ...x import a, b` reads (a and b where they are submodules)."""
    if node.level == 0:
        prefix = "tensorjit.capture"
        if not (node.module or "").startswith(prefix):
            return []
        base = [p for p in node.module[len(prefix):].split(".") if p]
    else:
        if node.level - 1 > len(package):
            return []  # above capture/
        base = package[:len(package) - (node.level - 1)] + (node.module.split(".") if node.module else [])
    found = []
    for alias in node.names:
        submodule = ".".join(base + [alias.name])
        if submodule in modules:
            found.append(submodule)
        elif ".".join(base) in modules:
            found.append(".".join(base))
        elif not base:
            found.append("__init__")
    return found


def _walk(tree: ast.AST, at_module_level: bool = True, type_checking: bool = False):
    """(import node, at module level) for every import outside `if TYPE_CHECKING:` blocks."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, at_module_level
        elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        else:
            inner = at_module_level and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            yield from _walk(node, inner)


@dataclass(frozen=True)
class InsideImport:
    """An import statement inside a function, to anything (capture, tensorjit, torch)."""
    module: str
    line: int
    text: str
    reason: str | None  # the `# deferred:` comment, if any


def _reason(lines: list[str], line: int) -> str | None:
    """The `# deferred:` comment on the import's line, or above it (over a run of imports)."""
    if DEFERRAL in lines[line - 1]:
        return lines[line - 1][lines[line - 1].index(DEFERRAL):]
    above = line - 2
    while above >= 0 and lines[above].lstrip().startswith(("import ", "from ")):
        above -= 1
    text = lines[above].strip() if above >= 0 else ""
    return text if text.startswith(DEFERRAL) else None


def inside_imports() -> list[InsideImport]:
    found = []
    for name, path in _modules().items():
        source = path.read_text()
        lines = source.splitlines()
        for node, at_module_level in _walk(ast.parse(source)):
            if not at_module_level:
                found.append(InsideImport(name, node.lineno, ast.unparse(node), _reason(lines, node.lineno)))
    return found


def graph() -> tuple[list[Edge], int]:
    """The edges between capture modules, and the number of import statements inside functions
    (to anything, capture or not)."""
    modules = _modules()
    edges, indented = [], 0
    for name, path in modules.items():
        package = _package_of(name, path)
        for node, at_module_level in _walk(ast.parse(path.read_text())):
            indented += not at_module_level
            if isinstance(node, ast.ImportFrom):
                for target in dict.fromkeys(_targets(node, package, modules)):
                    if target != name:
                        edges.append(Edge(name, target, at_module_level, node.lineno))
    return edges, indented


def _place(name: str) -> tuple[int, int]:
    for index, (_, members) in enumerate(LAYERS):
        for position, member in enumerate(members):
            if name == member or member.endswith(".*") and (name == member[:-2] or name.startswith(member[:-1])):
                return index, position
    raise KeyError(f"capture module {name} is in no layer (tools/capture_imports.py LAYERS)")


def layer_of(name: str) -> int:
    return _place(name)[0]


def reaches_up(edge: Edge) -> bool:
    """Whether the import goes to a higher layer, or within an ordered layer to a later member."""
    (importer_layer, importer_at), (imported_layer, imported_at) = _place(edge.importer), _place(edge.imported)
    if importer_layer != imported_layer:
        return imported_layer > importer_layer
    return LAYERS[importer_layer][0] in ORDERED and imported_at > importer_at


def cycles(edges: list[Edge]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    successors: dict[str, set] = {}
    for edge in edges:
        successors.setdefault(edge.importer, set()).add(edge.imported)
        successors.setdefault(edge.imported, set())
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for following in sorted(successors[node]):
            if following not in index:
                visit(following)
                low[node] = min(low[node], low[following])
            elif following in on_stack:
                low[node] = min(low[node], index[following])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))
    for node in sorted(successors):
        if node not in index:
            visit(node)
    return sorted(found, key=len, reverse=True)


def report() -> str:
    edges, indented = graph()
    module_level = [e for e in edges if e.at_module_level]
    inside = [e for e in edges if not e.at_module_level]
    upward = [e for e in module_level if reaches_up(e)]
    upward_inside = [e for e in inside if reaches_up(e)]
    deferred = inside_imports()
    all_cycles, module_cycles = cycles(edges), cycles(module_level)
    lines = [
        f"- import statements inside functions (to anything): {indented} "
        f"({sum(i.reason is None for i in deferred)} without a `{DEFERRAL}` reason)",
        f"- imports of a capture module inside functions: {len(inside)} "
        f"({len(upward_inside)} of them reach up a layer)",
        f"- module-level imports of a capture module: {len(module_level)} ({len(upward)} reach up a layer)",
        f"- largest cycle, counting imports inside functions: {len(all_cycles[0]) if all_cycles else 0} modules",
        f"- largest cycle of module-level imports: {len(module_cycles[0]) if module_cycles else 0} modules",
        "",
        "| layer | modules | imports at module level from |",
        "| --- | --- | --- |",
    ]
    for number, (layer, _) in enumerate(LAYERS):
        members = sorted({n for n in _modules() if layer_of(n) == number})
        below = sorted({LAYERS[layer_of(e.imported)][0] for e in module_level
                        if layer_of(e.importer) == number and layer_of(e.imported) != number})
        lines.append(f"| {number} {layer} | {', '.join(members)} | {', '.join(below) or '-'} |")
    if upward:
        lines += ["", "Module-level imports that reach up a layer:", ""]
        lines += [f"- {e.importer} -> {e.imported} (line {e.line})" for e in upward]
    if all_cycles:
        lines += ["", "Cycles closed by imports inside functions:", ""]
        lines += [f"- {' '.join(cycle)}" for cycle in all_cycles]
    if deferred:
        lines += ["", "Imports inside functions:", ""]
        lines += [f"- {i.module}:{i.line} `{i.text}` {i.reason or '(no reason given)'}" for i in deferred]
    return "\n".join(lines)


if __name__ == "__main__":
    print(report())
