"""Lowering an ATen graph straight to Triton kernels plus a generated wrapper.

`compile_graph(gm, example_inputs, config=None)` takes an ATen-level FX graph
(what make_fx produces with a decomposition table; every node carries
`meta["val"]`) whose tensors live on one CUDA device, and returns a callable
with the graph's signature.

This is the Triton backend's own lowering, for the ops it fuses best:
pointwise operators, reductions over the last dimension (sum, mean, amax,
amin, var) and views that keep the element order. Consecutive such nodes are
fused greedily into one kernel per group; a group holding a reduction runs
over (rows, row) and everything else over a flat range. Every other node
(matrix products, convolutions, attention, indexing, ...) is an extern: the
wrapper calls its ATen kernel directly, which is always correct.

A call whose tensor inputs do not have the strides, dtypes and devices the
graph was compiled for runs the graph eagerly instead (the kernels bake
strides in).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import operator
from typing import Any, Callable

import torch
import torch.fx

from tensorjit import logs
from tensorjit.codegen.triton import heuristics
from tensorjit.codegen.triton.expressions import interpreted
from tensorjit.codegen.triton.group_emitter import GroupEmitter
from tensorjit.codegen.triton.layout import prefer_channels_last
from tensorjit.codegen.triton.pad_matmul import pad_matmuls
from tensorjit.codegen.triton.launcher import (AutotunedLauncher, KernelLauncher, check_triton_cache, load_kernel_file,
                                               source_path)
from tensorjit.codegen.triton.parallel import CompileJob, compile_in_parallel
from tensorjit.codegen.triton.partition import (  # noqa: F401  (re-exported for tests)
    CONSTANTS, FOLDABLE_VIEWS, HOISTABLE, VIEWS, Group, partition, remove_dead_pure_nodes, value_of,
)
from tensorjit.codegen.triton.wrapper import WrapperBuilder

log = logging.getLogger(__name__)
aten = torch.ops.aten
prims = torch.ops.prims


def decompositions() -> dict:
    """The decomposition table this lowering expects (see decomposition_table.py)."""
    from tensorjit.codegen.triton.decomposition_table import decompositions as table

    return table()


@dataclasses.dataclass
class CompiledGraph:
    """The result of compile_graph: the wrapper, and what it was built from (for tests and debugging)."""

    call: Callable[..., Any]
    wrapper_source: str
    kernel_sources: list[str]
    fallback: Callable[..., Any]
    expected: list[tuple[int, tuple, torch.dtype, torch.device]]
    """(input index, strides, dtype, device) the kernels were specialised for."""
    eager_calls: int = 0

    def __post_init__(self) -> None:
        self.matches = _layout_check(self.expected)

    def __call__(self, *inputs: Any) -> Any:
        if self.matches(inputs):
            return self.call(*inputs)
        self.eager_calls += 1
        return self.fallback(*inputs)


def _layout_check(expected: list[tuple[int, tuple, torch.dtype, torch.device]]) -> Callable[[tuple], bool]:
    """A generated `inputs -> bool`: one inlined comparison per input, no loop (~0.1 us each)."""
    constants: dict[str, Any] = {}
    terms = []
    for index, strides, dtype, device in expected:
        constants[f"dtype{index}"] = dtype
        device_index = -1 if device.type == "cpu" else (device.index or 0)
        terms.append(f"inputs[{index}].stride() == {strides!r} and inputs[{index}].dtype is dtype{index} "
                     f"and inputs[{index}].get_device() == {device_index}")
    source = f"def matches(inputs):\n    return {' and '.join(terms) or 'True'}\n"
    exec(compile(source, "<tensorjit layout check>", "exec"), constants)
    return constants["matches"]


CHANNELS_LAST = True
"""Convolutions read channels-last activations (cuDNN's tensor-core kernels are NHWC).
Pointwise groups iterate in their stored output's memory order
(`GroupEmitter._memory_order`); before they did, channels-last made resnet50 fp16
2.5x slower on an H100 (7.1 -> 18.9 ms, docs/performance.md)."""


def compile_graph(gm: torch.fx.GraphModule, example_inputs: list[Any], config=None) -> CompiledGraph:
    """ATen graph -> Triton kernels + wrapper; see the module docstring."""
    _ensure_meta(gm, example_inputs)
    _refuse_symbolic_shapes(gm)
    remove_dead_pure_nodes(gm)
    pad_matmuls(gm)
    if CHANNELS_LAST:
        prefer_channels_last(gm, example_inputs)
    if not interpreted():
        check_triton_cache()
    names = {node: _python_name(node.name) for node in gm.graph.nodes}
    steps = partition(gm)
    users_outside = _users_outside(steps)
    cache_dir = getattr(config, "cache_dir", None)
    kernels = {id(step): _kernels_of(step, users_outside[id(step)][0], names, cache_dir)
               for step in steps if isinstance(step, Group)}
    needed = _needed_nodes(steps, kernels, users_outside)
    placeholders = [node for node in gm.graph.nodes if node.op == "placeholder"]
    builder = WrapperBuilder([names[node] for node in placeholders])
    for step in steps:
        if isinstance(step, Group):
            stored, views = users_outside[id(step)]
            if stored:  # else nothing reads what it computes, or only views of what it reads
                _launch_group(builder, stored, kernels[id(step)], names)
            for view in views:
                if view in needed:
                    _emit_node(builder, view, names)
        elif step in needed or not _removable(step):
            _emit_node(builder, step, names)
    source, call = builder.build()
    if not interpreted():
        jobs = [job for group_kernels in kernels.values() for job in group_kernels.jobs]
        compile_in_parallel(jobs, getattr(config, "compile_threads", 0))
    expected = [
        (index, tuple(value.stride()), value.dtype, value.device)
        for index, value in enumerate(example_inputs)
        if isinstance(value, torch.Tensor) and not isinstance(value, torch.nn.Parameter)
    ]
    sources = [group_kernels.sources[0] for group_kernels in kernels.values()]
    logs.output_code(type(gm).__name__, "Triton", "\n\n".join([*sources, source]))
    return CompiledGraph(call, source, sources, gm.forward, expected)


@dataclasses.dataclass
class GroupKernels:
    """A group's launcher (one, or an autotuned choice), what it reads, and how to precompile it."""

    launcher: Any
    arguments: list[str]
    loaded: set
    sources: list[str]
    jobs: list[CompileJob]


def _kernels_of(group: Group, stored: list[torch.fx.Node], names, cache_dir) -> GroupKernels:
    launchers, sources, jobs = [], [], []
    buffers = {name: node for node, name in names.items()}
    for shape in launch_shapes(group):
        emitter = GroupEmitter(group, stored, names, shape)
        kernel = emitter.emit()
        sources.append(kernel.source())
        path = source_path(sources[-1], cache_dir)
        launchers.append(KernelLauncher(load_kernel_file(path, kernel.name), shape))
        jobs.append(CompileJob(path, kernel.name, tuple(value_of(buffers[name]).dtype for name in kernel.arguments),
                               tuple(shape.constants().items()), shape.num_warps, shape.num_stages))
    launcher = launchers[0] if len(launchers) == 1 else AutotunedLauncher(launchers)
    return GroupKernels(launcher, list(kernel.arguments), emitter.loaded, sources, jobs)


HEAVY_GROUP = 24
"""Members from which a pointwise group counts as arithmetic-heavy (see heuristics.pointwise_shape)."""


def launch_shapes(group: Group) -> list[heuristics.LaunchShape]:
    """One shape where the sizes decide it; the autotune candidates for rows too long for registers."""
    if group.row_length is None:
        return [heuristics.pointwise_shape(group.rows, heavy=len(group.members) >= HEAVY_GROUP)]
    if heuristics.is_persistent(group.row_length):
        return [heuristics.persistent_reduction_shape(group.rows, group.row_length)]
    return heuristics.looped_reduction_configs(group.rows, group.row_length)


def _launch_group(builder: WrapperBuilder, stored: list[torch.fx.Node], kernels: GroupKernels, names) -> None:
    for member in stored:
        value = value_of(member)
        builder.allocate(names[member], tuple(value.shape), tuple(value.stride()), value.dtype, value.device)
    builder.launch("kernel", kernels.launcher, kernels.arguments)


def _removable(node: torch.fx.Node) -> bool:
    """Pure nodes the wrapper may skip when nothing reads them."""
    return node.op == "call_function" and (
        node.target in FOLDABLE_VIEWS or node.target in CONSTANTS or node.target in HOISTABLE
    )


def _needed_nodes(steps, kernels: dict[int, GroupKernels], users_outside) -> set:
    """Nodes whose values the wrapper must make: read by kept externs, kernels or the output."""
    needed: set = set()
    for step in reversed(steps):
        if isinstance(step, Group):
            if users_outside[id(step)][0]:
                needed |= kernels[id(step)].loaded
            for view in reversed(users_outside[id(step)][1]):  # a view of a view marks its source
                if view in needed:
                    needed |= set(view.all_input_nodes)
        elif step.op == "output" or step in needed or not _removable(step):
            needed |= set(step.all_input_nodes)
    return needed


def _emit_node(builder: WrapperBuilder, node: torch.fx.Node, names) -> None:
    if node.op == "placeholder":
        return
    if node.op == "output":
        builder.returns_expression(_expression(builder, node.args[0], names))
        return
    if node.op == "get_attr":
        builder.alias(names[node], f"{builder._global('attribute', getattr(node.graph.owning_module, node.target))}")
        return
    if node.target is operator.getitem:
        builder.alias(names[node], f"{names[node.args[0]]}[{node.args[1]!r}]")
        return
    if node.target in TENSOR_METHODS and not node.kwargs and isinstance(node.args[0], torch.fx.Node):
        # x.view(...) costs about 1 us less than aten.view.default(x, ...): it skips the op-overload layer.
        rest = ", ".join(_expression(builder, a, names) for a in node.args[1:])
        builder.alias(names[node], f"{names[node.args[0]]}.{TENSOR_METHODS[node.target]}({rest})")
        return
    target, args, kwargs = _as_aten(node)
    arguments = ", ".join(_expression(builder, a, names) for a in args)
    keywords = ", ".join(f"{k}={_expression(builder, v, names)}" for k, v in kwargs.items())
    function = builder._global("extern", target)
    builder.alias(names[node], f"{function}({', '.join(p for p in (arguments, keywords) if p)})")


PRIMS_AS_ATEN = {torch.ops.prims.var.default: aten.var.correction, torch.ops.prims.sum.default: aten.sum.dim_IntList}


def _as_aten(node: torch.fx.Node) -> tuple[Any, tuple, dict]:
    """The call for a node the wrapper runs. The decompositions leave prims.var and prims.sum
    (batch norm's statistics over N, H, W); run as prims they cost about 106 us of host time a
    call, through the Python reference, where the ATen kernels they equal cost 35 (densenet121
    training makes 121 a step). Only floating types, where the result types agree."""
    target, args, kwargs = node.target, node.args, dict(node.kwargs)
    replacement = PRIMS_AS_ATEN.get(target)
    if replacement is None or kwargs.get("output_dtype") is not None or len(args) < 2 \
            or not isinstance(args[1], (list, tuple)):
        return target, args, kwargs
    value, source = node.meta.get("val"), args[0]
    if not (isinstance(value, torch.Tensor) and isinstance(source, torch.fx.Node) and value.is_floating_point()
            and value_of(source).dtype == value.dtype):
        return target, args, kwargs
    if replacement is aten.var.correction:
        return replacement, (source, list(args[1])), {"correction": args[2] if len(args) > 2 else kwargs["correction"]}
    return replacement, (source, list(args[1])), {}


TENSOR_METHODS = {
    aten.view.default: "view", aten._unsafe_view.default: "view", aten.permute.default: "permute",
    aten.unsqueeze.default: "unsqueeze", aten.squeeze.dim: "squeeze", aten.squeeze.dims: "squeeze",
    aten.expand.default: "expand", aten.t.default: "t", aten.transpose.int: "transpose", aten.select.int: "select",
}


def _expression(builder: WrapperBuilder, value: Any, names) -> str:
    if isinstance(value, torch.fx.Node):
        return names[value]
    if isinstance(value, (list, tuple)):
        inner = ", ".join(_expression(builder, v, names) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner}{',' if len(value) == 1 else ''})"
    if value is None or isinstance(value, (bool, int, str)):
        return repr(value)
    if isinstance(value, float) and math.isfinite(value):
        return repr(value)
    return builder._global("constant", value)


VIEW_TARGETS = VIEWS | FOLDABLE_VIEWS
"""Members a later kernel reads through to their source (`resolve_view` folds FOLDABLE_VIEWS;
an alias member stored in place of its source once left the source unwritten)."""


def _users_outside(steps) -> dict[int, tuple[list[torch.fx.Node], list[torch.fx.Node]]]:
    """For each group: the members a later step (or the output) reads, and the views among them.

    A view (VIEW_TARGETS) read outside is not stored: its source is, and the wrapper applies
    the view to it after the launch, so the result has exactly eager's strides
    (later kernels bake strides in, and views of views must line up)."""
    result = {}
    for step in steps:
        if not isinstance(step, Group):
            continue
        members = set(step.members)
        read_outside = {m for m in step.members if any(user not in members for user in m.users)}
        views = [m for m in step.members if m in read_outside and m.target in VIEW_TARGETS]
        stored = set(read_outside) - set(views)
        for view in views:
            source = view.args[0]
            while source.target in VIEW_TARGETS and source in members:
                source = source.args[0]
            stored.add(source)
        result[id(step)] = ([m for m in step.members if m in stored], _with_view_sources(views, members))
    return result


def _with_view_sources(views: list[torch.fx.Node], members: set) -> list[torch.fx.Node]:
    """`views` plus the member views they are built on, in graph order."""
    chain: list[torch.fx.Node] = []
    for view in views:
        pending = []
        source = view
        while source in members and source.target in VIEW_TARGETS:
            pending.append(source)
            source = source.args[0]
        chain.extend(reversed(pending))
    return list(dict.fromkeys(chain))


def _contiguous_strides(shape) -> tuple[int, ...]:
    strides, running = [], 1
    for size in reversed(shape):
        strides.append(running)
        running *= max(size, 1)
    return tuple(reversed(strides))


def _python_name(name: str) -> str:
    cleaned = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return cleaned if cleaned.isidentifier() and not cleaned[0].isdigit() else f"v_{cleaned}"


def _refuse_symbolic_shapes(gm: torch.fx.GraphModule) -> None:
    """Kernels and the wrapper write sizes as literals: a graph traced with symbolic sizes
    (make_fx tracing_mode="symbolic") would name unbound symbols at call time."""
    for node in gm.graph.nodes:
        value = node.meta.get("val")
        values = value if isinstance(value, (list, tuple)) else [value]
        for item in values:
            if isinstance(item, torch.SymInt) or isinstance(item, torch.Tensor) and not all(
                    isinstance(size, int) for size in (*item.shape, *item.stride())):
                raise NotImplementedError(f"triton emitter: symbolic sizes at {node.name}")


def _ensure_meta(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> None:
    if all("val" in node.meta for node in gm.graph.nodes if node.op not in ("output",)):
        return
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    mode = FakeTensorMode(allow_non_fake_inputs=True)
    FakeTensorProp(gm, mode).propagate(*example_inputs)
