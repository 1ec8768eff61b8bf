"""tensorjit's CPU code generator: ATen graphs to C++/OpenMP kernels in one shared library.

    compile_aten_graph(gm, example_inputs, *, config=None) -> callable
    decompositions() -> the table the lowering expects

The graph is lowered to the loop-level IR (`tensorjit.codegen.graph`), every
pointwise and reduction kernel is emitted as C++ (`kernels.py`, `emitter.py`),
all kernels of the graph are compiled by one compiler invocation into one library
(`compiler.py`, through the disk cache), and a run-time wrapper calls them and the
ATen externs (`tensorjit.codegen.wrapper`). No compiler, or any lowering failure:
the graph runs through ATen, with the reason logged.
"""

from __future__ import annotations

from typing import Any, Callable

import torch


def compile_aten_graph(gm: torch.fx.GraphModule, example_inputs: list[Any], *, config=None) -> Callable[..., Any]:
    from .. import compile_aten_graph as compile_for_device

    return compile_for_device(gm, example_inputs, config=config)


def decompositions() -> dict:
    from ..decomp import decompositions as table

    return table()
