"""Float graph inputs as 0-d tensors, for backends that compile for fixed values.

Capture makes a float that changes (an LR a scheduler sets every step) a SymFloat graph input.
A backend that traces the graph with concrete inputs (aot_eager, inductor) would bake the value
in; `lift(gm)` instead gives a graph taking the float as a 0-d float64 tensor, so one compiled
graph serves every value: Python arithmetic on the float stays arithmetic (now on the tensor, in
double precision as Python's), `torch._sym_cos` and its kin become `torch.cos`, and where the
float meets a tensor in a binary op it is first cast to the dtype Python's float would have been
converted to (the tensor's floating dtype, float32 for float16/bfloat16 as ATen's op math, the
default dtype for integer tensors), so results and result dtypes are those of the float.

Any other use (a float passed to an op as a keyword or a Scalar argument other than a binary
op's operand, a comparison, a float the graph returns) leaves the graph as it is: `lift` returns
None and the backend compiles it once per value (`registry.size_specializer`).
"""

from __future__ import annotations

import operator
from typing import Callable

import torch
import torch.fx

from ..runtime.persist import set_reduce

_SCALAR_OPERATORS = {operator.add, operator.sub, operator.mul, operator.truediv, operator.neg, operator.pow,
                     operator.abs, operator.pos}
"""Python arithmetic on floats that tensors do alike; `_same_on_tensors` excludes what Python raises on
or turns complex (dividing by the float, powers)."""
_SYMBOLIC_MATH = {getattr(torch, f"_sym_{name}"): getattr(torch, name) for name in ("cos", "sin", "tan", "tanh", "atan")}
"""The math functions defined (and finite) on every float: math.sqrt(-1.0), math.acos(2.0) and
math.cosh(1000.0) raise where a tensor gives nan or inf, so graphs using those keep the per-value compile."""
_BINARY_FUNCTIONS = {operator.add, operator.sub, operator.mul, operator.truediv, operator.iadd, operator.isub,
                     operator.imul, operator.itruediv, torch.add, torch.sub, torch.mul, torch.div}
_BINARY_METHODS = {"add", "sub", "mul", "div", "add_", "sub_", "mul_", "div_", "__add__", "__sub__", "__mul__",
                   "__truediv__", "__radd__", "__rsub__", "__rmul__", "__rtruediv__"}


def float_positions(gm: torch.fx.GraphModule) -> list[int]:
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    return [i for i, n in enumerate(placeholders) if isinstance(n.meta.get("example_value"), torch.SymFloat)]


def lift(gm: torch.fx.GraphModule) -> tuple[torch.fx.GraphModule, list[int]] | None:
    """(a copy of `gm` taking its float inputs as 0-d float64 tensors, their positions), or None."""
    positions = float_positions(gm)
    if not positions:
        return None
    graph = torch.fx.Graph()
    mapping: dict[torch.fx.Node, torch.fx.Node] = {}
    result = graph.graph_copy(gm.graph, mapping)
    graph.output(result)
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    scalars = {placeholders[i] for i in positions}
    for node in scalars:
        node.meta["example_value"] = torch.empty((), dtype=torch.float64)
    for node in list(graph.nodes):
        if node.op in ("placeholder", "output") or not any(a in scalars for a in node.all_input_nodes):
            continue
        if not _rewrite(graph, node, scalars):
            return None
    if any(a in scalars for n in graph.nodes if n.op == "output" for a in n.all_input_nodes):
        return None  # the graph returns the float (or arithmetic on it): the caller wants a float
    graph.lint()
    return torch.fx.GraphModule(gm, graph), positions


def _rewrite(graph: torch.fx.Graph, node: torch.fx.Node, scalars: set) -> bool:
    """Make `node` read the 0-d tensors among its inputs; False when it is a use `lift` refuses."""
    example = node.meta.get("example_value")
    if any(isinstance(v, torch.fx.Node) and v in scalars for v in node.kwargs.values()):
        return False
    if node.op == "call_function" and node.target in _SYMBOLIC_MATH and isinstance(example, torch.SymFloat):
        node.target = _SYMBOLIC_MATH[node.target]
        scalars.add(node)
        return True
    if node.op == "call_function" and node.target in _SCALAR_OPERATORS and isinstance(example, torch.SymFloat):
        if all(a in scalars for a in node.all_input_nodes) and _same_on_tensors(node, scalars):
            scalars.add(node)  # (no SymInt operand: an int would stay an int)
            return True
        return False
    if not isinstance(example, torch.Tensor) or len(node.args) != 2:
        return False
    binary = node.op == "call_function" and node.target in _BINARY_FUNCTIONS or \
        node.op == "call_method" and node.target in _BINARY_METHODS
    if not binary:
        return False
    first, second = node.args
    scalar, tensor = (first, second) if first in scalars else (second, first)
    if tensor in scalars or not isinstance(tensor, torch.fx.Node):
        return False
    other = tensor.meta.get("example_value")
    if not isinstance(other, torch.Tensor) or other.is_complex():
        return False
    with graph.inserting_before(node):
        cast = graph.call_method("to", (scalar, _float_dtype(other.dtype)))
    cast.meta["example_value"] = torch.empty((), dtype=_float_dtype(other.dtype))
    node.args = tuple(cast if a is scalar else a for a in node.args)
    return True


def _same_on_tensors(node: torch.fx.Node, scalars: set) -> bool:
    """Whether Python's float operator and the tensor operator agree on every value: 1 / 0.0 raises
    ZeroDivisionError where a tensor gives inf; 1e200 ** 2 raises OverflowError and (-8.0) ** 0.5 is
    complex where a tensor gives inf and nan."""
    if node.target is operator.truediv:
        return node.args[1] not in scalars
    return node.target is not operator.pow  # 1e200 ** 2 raises OverflowError, (-8.0) ** 0.5 is complex


def _float_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype ATen computes a Python float in, next to a tensor of `dtype`."""
    if not dtype.is_floating_point:
        return torch.get_default_dtype()
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def as_tensors(arguments, positions: list[int]) -> list:
    arguments = list(arguments)
    for i in positions:
        arguments[i] = torch.tensor(arguments[i], dtype=torch.float64)
    return arguments


def with_float_arguments(compiled: Callable, positions: list[int]) -> Callable:
    """`compiled` (taking 0-d tensors at `positions`) called with the floats themselves."""
    def run(*args):
        return compiled(*as_tensors(args, positions))
    return set_reduce(run, with_float_arguments, compiled, positions)

