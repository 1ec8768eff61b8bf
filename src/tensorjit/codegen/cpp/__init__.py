"""tensorjit's CPU code generator: fused C++/OpenMP kernels for chains of pointwise ops.

    compile_aten_graph(gm, example_inputs, *, config=None) -> callable

takes an ATen graph (as `tensorjit.autograd` hands to code generators) and returns a
callable with its signature. Runs of consecutive pointwise ops over contiguous float32 /
float64 tensors of one shape become one C++ loop each (`#pragma omp parallel for`, no
torch headers, one library per graph loaded with ctypes); every other op — matmul,
convolution, reductions, views, anything not in `ops.POINTWISE` — runs its ATen kernel.
No C++ compiler: a one-time warning and the graph runs through ATen.

This is the first slice of issue 5: no reductions yet (softmax and layer norm call ATen).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.fx

from .build import find_compiler, load_library, warn_no_compiler
from .ops import POINTWISE, TRANSCENDENTAL

_C_TYPES = {torch.float32: "float", torch.float64: "double"}


def decompositions() -> dict:
    """What to trace with: ATen as it is, so layer norm and softmax keep their fast kernels."""
    return {}


def _value(node: Any):
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def _fusible(node: torch.fx.Node) -> bool:
    if node.op != "call_function" or node.target not in POINTWISE or node.target in TRANSCENDENTAL or node.kwargs and \
            set(node.kwargs) - {"alpha", "approximate"}:
        return False
    out = _value(node)
    if not isinstance(out, torch.Tensor) or out.device.type != "cpu" or out.dtype not in _C_TYPES \
            or not out.is_contiguous():
        return False
    for arg in node.args:
        value = _value(arg)
        if isinstance(arg, torch.fx.Node):
            if not isinstance(value, torch.Tensor) or value.shape != out.shape or value.dtype != out.dtype \
                    or not value.is_contiguous():
                return False
        elif not isinstance(arg, (int, float)) or isinstance(arg, bool):
            return False
    return True


@dataclass
class Group:
    nodes: list[torch.fx.Node] = field(default_factory=list)
    inputs: list[torch.fx.Node] = field(default_factory=list)
    outputs: list[torch.fx.Node] = field(default_factory=list)


def _groups(gm: torch.fx.GraphModule) -> list[Group]:
    groups, current = [], None
    for node in gm.graph.nodes:
        if _fusible(node) and current is not None and _value(node).shape == _value(current.nodes[0]).shape \
                and _value(node).dtype == _value(current.nodes[0]).dtype:
            current.nodes.append(node)
            continue
        if current is not None:
            groups.append(current)
        current = Group([node]) if _fusible(node) else None
    if current is not None:
        groups.append(current)
    for group in groups:
        members = set(group.nodes)
        for node in group.nodes:
            for arg in node.args:
                if isinstance(arg, torch.fx.Node) and arg not in members and arg not in group.inputs:
                    group.inputs.append(arg)
            if any(user not in members for user in node.users):
                group.outputs.append(node)
    return [g for g in groups if len(g.nodes) > 1 and g.outputs]


def _kernel_source(name: str, group: Group) -> str:
    ctype = _C_TYPES[_value(group.nodes[0]).dtype]
    names = {node: f"in{i}[i]" for i, node in enumerate(group.inputs)}
    body = []
    for k, node in enumerate(group.nodes):
        operands = [names[a] if isinstance(a, torch.fx.Node) else f"(T)({a!r})" for a in node.args]
        body.append(f"    T t{k} = {POINTWISE[node.target](*operands, **dict(node.kwargs))};")
        names[node] = f"t{k}"
    stores = [f"    out{j}[i] = {names[node]};" for j, node in enumerate(group.outputs)]
    params = [f"const T* __restrict in{i}" for i in range(len(group.inputs))] + \
        [f"T* __restrict out{j}" for j in range(len(group.outputs))] + ["int64_t n"]
    return "\n".join([
        f"extern \"C\" void {name}({', '.join(params).replace('T*', ctype + '*')}) {{",
        f"  using T = {ctype};",
        "  #pragma omp parallel for simd if(n > 65536)",
        "  for (int64_t i = 0; i < n; ++i) {",
        *body, *stores, "  }", "}"])


def _runner(function, group: Group) -> Callable:
    example = _value(group.outputs[0])
    shape, dtype = tuple(example.shape), example.dtype
    numel = example.numel()
    count = len(group.outputs)
    function.argtypes = [ctypes.c_void_p] * (len(group.inputs) + count) + [ctypes.c_int64]
    function.restype = None
    fallback = _aten_steps(group)

    def run(*inputs):
        for t in inputs:  # the kernel assumes the traced layout; anything else takes the ATen ops
            if t.dtype != dtype or t.numel() != numel or not t.is_contiguous() or t.device.type != "cpu":
                return fallback(inputs)
        outputs = [torch.empty(shape, dtype=dtype) for _ in range(count)]
        function(*[t.data_ptr() for t in inputs], *[o.data_ptr() for o in outputs], numel)
        return outputs
    return run


def _aten_steps(group: Group) -> Callable:
    """The group's ops as ATen calls, recorded now: the graph rewrite erases its nodes."""
    slots = {node: i for i, node in enumerate(group.inputs + group.nodes)}
    steps = [(node.target, [("slot", slots[a]) if isinstance(a, torch.fx.Node) else ("value", a) for a in node.args],
              dict(node.kwargs)) for node in group.nodes]
    outputs = [slots[node] for node in group.outputs]

    def run(inputs) -> list:
        values = list(inputs)
        for target, args, kwargs in steps:
            values.append(target(*[values[v] if kind == "slot" else v for kind, v in args], **kwargs))
        return [values[i] for i in outputs]
    return run


def compile_aten_graph(gm: torch.fx.GraphModule, example_inputs: list, *, config=None) -> Callable:
    groups = _groups(gm)
    if not groups:
        return gm.forward
    compiler = find_compiler(getattr(config, "cpp_compiler", None))
    if compiler is None:
        warn_no_compiler()
        return gm.forward
    source = "#include <cmath>\n#include <cstdint>\n#include <algorithm>\n\n" + "\n\n".join(
        _kernel_source(f"kernel_{i}", g) for i, g in enumerate(groups))
    library = load_library(source, compiler, getattr(config, "cache_dir", None))
    runners = [_runner(getattr(library, f"kernel_{i}"), g) for i, g in enumerate(groups)]
    compiled = _rewrite(gm, groups, runners)
    compiled.kernel_source = source
    return compiled.forward


def _rewrite(gm: torch.fx.GraphModule, groups: list[Group], runners: list[Callable]) -> torch.fx.GraphModule:
    """The graph with each group replaced by one call of its kernel."""
    graph = gm.graph
    for group, runner in zip(groups, runners):
        last = group.nodes[-1]
        with graph.inserting_after(last):
            call = graph.call_function(runner, tuple(group.inputs))
        with graph.inserting_after(call):
            for j, node in enumerate(group.outputs):
                item = graph.call_function(_getitem, (call, j))
                node.replace_all_uses_with(item, delete_user_cb=lambda user: user is not call and user not in group.nodes)
    graph.eliminate_dead_code()
    gm.recompile()
    return gm


def _getitem(values, index):
    return values[index]
