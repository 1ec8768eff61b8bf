"""The boxed calling convention: a graph handed its inputs in a list it owns.

A Python call `f(a, b)` keeps `a` and `b` alive in the caller until `f` returns, so a
compiled backward called that way can free none of its inputs early: a saved activation
lives until the whole backward has run. Called boxed, `f([a, b])`, the callee unpacks the
list and clears it; then its own names are the last references, and the generated code
drops each at its last reader (codegen/wrapper.py, torch.fx's code for a graph run as it
is), so the allocator reuses an activation's memory within the backward. The caller must
hold no other reference (the autograd runtime releases the node's saved tensors first).

- `BOXED_INPUTS`: the graph meta key that asks a code generator for a boxed runner
  (the autograd stage sets it on the backward graph it compiles).
- A boxed callable has a true `takes_boxed_inputs` attribute; `boxed_caller(function)`
  returns a function of one list for any callable (positional ones get the list unpacked).
- `boxed_graph_module(function, gm)`: for `gm.forward` (a compiler that runs the graph as it
  is), torch.fx's code of `gm` with a boxed signature; else `function` itself.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from .persist import GraphCode, NotPersistable

BOXED_INPUTS = "tensorjit_boxed_inputs"
"""GraphModule meta key: the runner built for this graph is called boxed (`run(inputs)`)."""


def takes_boxed_inputs(function: Callable) -> bool:
    return bool(getattr(function, "takes_boxed_inputs", False))


def boxed_caller(function: Callable) -> Callable[[list], Any]:
    """`function` as a callable of one list that it may clear."""
    if takes_boxed_inputs(function):
        return function

    def call_unboxed(inputs: list) -> Any:
        values = tuple(inputs)
        inputs.clear()
        return function(*values)
    return call_unboxed


class BoxedSignature(torch.fx.graph.CodeGen):
    """torch.fx's code for a graph, taking its placeholders from one list that it then clears
    (torch.fx already drops each value, placeholders included, after its last use)."""

    def gen_fn_def(self, free_vars: list[str], maybe_return_annotation: str, **kwargs) -> str:
        names = [v.split(":")[0].split("=")[0].strip() for v in free_vars if v != "self"]
        lines = [f"def {self._func_name}(self, inputs){maybe_return_annotation}:"]
        if names:
            lines += [f"    {', '.join(names)}, = inputs", "    inputs.clear()"]
        return "\n".join(lines)


def boxed_graph_module(function: Callable, gm: torch.fx.GraphModule) -> Callable:
    """A boxed run of `gm` where `function` is `gm.forward` as it is now (a compiler that ran
    the graph as traced); `function` otherwise. The boxed code is a `persist.GraphCode`, saved
    by the warm-start cache like the forward it stands for."""
    if getattr(function, "__self__", None) is not gm or getattr(function, "__func__", None) is not type(gm).forward:
        return function  # compiled code, or a forward from before a graph pass rewrote gm
    if type(gm.graph._codegen) is not torch.fx.graph.CodeGen:
        return function  # a pytree signature or another codegen of its own
    placeholders = [node for node in gm.graph.nodes if node.op == "placeholder"]
    if any(str(node.target).startswith("*") for node in placeholders) or \
            any(node.name == "inputs" for node in gm.graph.nodes):
        return function  # varargs, or a value of the list's own name
    original = gm.graph._codegen
    gm.graph.set_codegen(BoxedSignature())
    try:
        code = gm.graph.python_code(root_module="self")
    finally:
        gm.graph.set_codegen(original)
    try:
        return GraphCode.of(gm, code=code, boxed=True)
    except NotPersistable:  # attributes GraphCode cannot hold: run the graph's forward unboxed
        return function
