"""The per-call Python function of a compiled graph, generated as straight-line code.

`WrapperBuilder` takes the steps of a compiled graph in order (allocate a
buffer, launch a kernel, call an extern ATen kernel, free a dead buffer) and
`build()` returns `(source, function)`: readable Python whose function takes
the graph's inputs positionally and returns its outputs as a tuple.

Why generated code rather than a loop over step objects: a straight-line
function reads every buffer from a local variable and calls each launcher
directly, so the per-call cost is a few hundred nanoseconds per step; an
interpreter loop over steps costs several times that in dictionary lookups
and argument packing. Static shapes make every size a literal.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Sequence

import torch


class WrapperBuilder:
    """Collects steps; see the module docstring."""

    def __init__(self, input_names: Sequence[str]):
        self.input_names = list(input_names)
        self.lines: list[str] = []
        self.globals: dict[str, Any] = {"empty_strided": torch.empty_strided, "torch": torch}
        self.output_names: list[str] = []
        self.output_expression: str | None = None

    def _global(self, prefix: str, value: Any) -> str:
        for name, existing in self.globals.items():
            if existing is value and name.startswith(prefix):
                return name
        name = f"{prefix}{len(self.globals)}"
        self.globals[name] = value
        return name

    def allocate(self, name: str, size: Sequence[int], stride: Sequence[int], dtype: torch.dtype, device: torch.device) -> None:
        dtype_name = self._global("dtype", dtype)
        device_name = self._global("device", torch.device(device))
        self.lines.append(
            f"{name} = empty_strided({tuple(size)!r}, {tuple(stride)!r}, dtype={dtype_name}, device={device_name})"
        )

    def launch(self, label: str, launcher: Callable[..., None], arguments: Sequence[str]) -> None:
        name = self._global(f"{label}_", launcher)
        self.lines.append(f"{name}({', '.join(arguments)})")

    def call(self, result: str | None, label: str, function: Callable[..., Any], arguments: Sequence[str],
             keywords: dict[str, Any] | None = None) -> None:
        """`result = function(*arguments, **keywords)`; keywords are constants held as globals."""
        name = self._global(f"{label}_", function)
        parts = list(arguments)
        for key, value in (keywords or {}).items():
            parts.append(f"{key}={self._global('constant', value)}")
        call = f"{name}({', '.join(parts)})"
        self.lines.append(f"{result} = {call}" if result else call)

    def alias(self, name: str, expression: str) -> None:
        """`name = expression`, for views: expression reads earlier names."""
        self.lines.append(f"{name} = {expression}")

    def free(self, name: str) -> None:
        self.lines.append(f"del {name}")

    def returns(self, names: Sequence[str]) -> None:
        """Return the tuple of these names."""
        self.output_names = list(names)
        self.output_expression = None

    def returns_expression(self, expression: str) -> None:
        """Return this expression as is (a single value, a list, a nested structure)."""
        self.output_expression = expression

    def build(self, function_name: str = "call") -> tuple[str, Callable[..., Any]]:
        outputs = ", ".join(self.output_names)
        returned = self.output_expression or f"({outputs}{',' if len(self.output_names) == 1 else ''})"
        body = _with_releases(self.lines, returned) or ["pass"]
        source = "\n".join(
            [f"def {function_name}({', '.join(self.input_names)}):"]
            + [f"    {line}" for line in body]
            + [f"    return {returned}"]
        )
        namespace = dict(self.globals)
        exec(compile(source, f"<tensorjit wrapper {function_name}>", "exec"), namespace)
        return source, namespace[function_name]


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _with_releases(lines: list[str], returned: str) -> list[str]:
    """`lines` with `del name` after the statement that mentions a local for the last time.

    Without it every buffer lived until the graph returned: peak memory was the sum of all
    temporaries, and the caching allocator could not hand a dead buffer's block to a later
    allocation of the same step. Locals are the names the lines assign; a token that only
    looks like a use (a keyword name, text in a string) can delay a release, never advance
    it. Views keep their base's storage alive by themselves, so a base is released after its
    last mention, not its views'."""
    assigned = [line.split(" = ", 1)[0] if " = " in line else None for line in lines]
    defined = {name for name in assigned if name is not None and name.isidentifier()}
    kept = set(_NAME.findall(returned))
    kept |= {name for line in lines if line.startswith("del ") for name in _NAME.findall(line[4:])}  # freed already
    last: dict[str, int] = {}
    for index, line in enumerate(lines):
        for name in _NAME.findall(line):
            if name in defined:
                last[name] = index
    releases: dict[int, list[str]] = {}
    for name, index in last.items():
        if name not in kept:
            releases.setdefault(index, []).append(name)
    result = []
    for index, line in enumerate(lines):
        result.append(line)
        if index in releases:
            result.append(f"del {', '.join(sorted(releases[index]))}")
    return result
