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
import re
from typing import Any, Callable

import torch
import torch.fx

from tensorjit.codegen.triton import heuristics
from tensorjit.codegen.triton.emitter import TritonOps
from tensorjit.codegen.triton.expressions import interpreted
from tensorjit.codegen.triton.indexing import split_index
from tensorjit.codegen.triton.kernel import TritonKernel
from tensorjit.codegen.triton.layout import prefer_channels_last
from tensorjit.codegen.triton.launcher import AutotunedLauncher, KernelLauncher, load_kernel_file, source_path
from tensorjit.codegen.triton.parallel import CompileJob, compile_in_parallel
from tensorjit.codegen.triton.pointwise_ops import POINTWISE
from tensorjit.codegen.triton.wrapper import WrapperBuilder

log = logging.getLogger(__name__)
aten = torch.ops.aten
prims = torch.ops.prims

REDUCTIONS: dict[Any, str] = {
    aten.sum.dim_IntList: "sum", prims.sum.default: "sum", aten.amax.default: "max", aten.amin.default: "min",
    aten.mean.dim: "mean", prims.var.default: "var", aten.prod.dim_int: "prod",
}
VIEWS = {
    aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.unsqueeze.default,
    aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, prims.broadcast_in_dim.default, aten.expand.default,
}


def value_of(node: Any) -> Any:
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def numel_of(node: torch.fx.Node) -> int:
    return math.prod(value_of(node).shape)


@dataclasses.dataclass
class Group:
    """Nodes fused into one kernel: over `rows` elements, or rows x `row_length` with a reduction."""

    rows: int
    row_length: int | None
    members: list[torch.fx.Node]

    def level(self, node: torch.fx.Node) -> str | None:
        """"full" (one value per element), "row" (one per row), or None (does not fit)."""
        shape = value_of(node).shape
        numel = math.prod(shape)
        if self.row_length is None:
            return "full" if numel == self.rows else None
        if numel == self.rows * self.row_length and len(shape) and shape[-1] == self.row_length:
            return "full"
        return "row" if numel == self.rows else None


def reduced_last_dimension(node: torch.fx.Node) -> int | None:
    """The length of the reduced last dimension, when `node` reduces exactly that one."""
    source = node.args[0]
    shape = value_of(source).shape if isinstance(source, torch.fx.Node) else None
    if not shape or len(node.args) < 2:
        return None
    dims = node.args[1]
    dims = [dims] if isinstance(dims, int) else list(dims or [])
    if [d % len(shape) for d in dims] != [len(shape) - 1] or shape[-1] <= 1:
        return None
    return shape[-1]


def classify(node: torch.fx.Node) -> str:
    if node.op != "call_function":
        return node.op
    result = value_of(node)
    if not isinstance(result, torch.Tensor) or not _kernel_device(result.device) or result.is_complex():
        return "extern"
    inputs = [a for a in node.all_input_nodes if isinstance(value_of(a), torch.Tensor)]
    if any(value_of(a).device != result.device for a in inputs):
        return "extern"
    if node.target in REDUCTIONS and reduced_last_dimension(node) and not node.kwargs.get("dtype"):
        return "reduction"
    if node.target in POINTWISE and all(value_of(a).numel() in (1, result.numel()) or _broadcastable(a, node)
                                        for a in inputs):
        return "pointwise"
    if node.target in VIEWS:
        return "view"
    return "extern"


def _kernel_device(device: torch.device) -> bool:
    # CPU tensors only under Triton's interpreter, which is how tests run kernels without a GPU.
    return device.type == "cuda" or (device.type == "cpu" and interpreted())


def decompositions() -> dict:
    """The decomposition table this lowering expects (see decompositions.py)."""
    from tensorjit.codegen.triton.decompositions import decompositions as table

    return table()


def _broadcastable(source: torch.fx.Node, node: torch.fx.Node) -> bool:
    small, large = value_of(source).shape, value_of(node).shape
    if len(small) > len(large):
        return False
    return all(s in (1, l) for s, l in zip(reversed(small), reversed(large)))


def try_join(group: Group | None, node: torch.fx.Node, kind: str) -> bool:
    if group is None:
        return False
    members = set(group.members)
    if kind == "view":
        source = node.args[0]
        if source not in members or group.level(source) is None:
            return False
        level = group.level(node)
        # A view keeps the element order; a broadcast may only widen a row value across the row.
        if level == "full" and group.level(source) == "row" and node.target not in (prims.broadcast_in_dim.default,
                                                                                     aten.expand.default):
            return False
        return level is not None
    if kind == "reduction":
        length = reduced_last_dimension(node)
        source = node.args[0]
        if group.row_length is None:
            if numel_of(source) != group.rows or any(value_of(m).shape[-1:] != (length,) for m in group.members):
                return False
            group.rows, group.row_length = group.rows // length, length
            return True
        return length == group.row_length and group.level(source) == "full"
    return group.level(node) is not None and all(
        group.level(a) is not None or a not in members for a in node.all_input_nodes
    )


def new_group(node: torch.fx.Node, kind: str) -> Group:
    if kind == "reduction":
        length = reduced_last_dimension(node)
        return Group(rows=numel_of(node.args[0]) // length, row_length=length, members=[node])
    return Group(rows=numel_of(node), row_length=None, members=[node])


FOLDABLE_VIEWS = (VIEWS - {aten.reshape.default}) | {
    aten.permute.default, aten.t.default, aten.transpose.int, aten.slice.Tensor, aten.select.int,
    aten.alias.default, aten.as_strided.default,
}
"""Views a kernel reads through by index arithmetic on the base buffer (their
strides and offset are in meta["val"]), so the wrapper need not make them.
reshape is not one: it may copy."""
CONSTANTS = {aten.full.default, aten.scalar_tensor.default}
VARIABLE_INDEX = re.compile(r"[xr]index")


def resolve_view(node: torch.fx.Node) -> tuple[torch.fx.Node, int]:
    """The buffer a chain of foldable views reads, and the view's element offset into it."""
    base = node
    while base.op == "call_function" and base.target in FOLDABLE_VIEWS and isinstance(base.args[0], torch.fx.Node):
        base = base.args[0]
    if base is node or base.target in CONSTANTS:
        return base, 0
    return base, value_of(node).storage_offset() - value_of(base).storage_offset()


def constant_value(node: torch.fx.Node) -> Any:
    return node.args[1] if node.target is aten.full.default else node.args[0]


HOISTABLE = VIEWS | {
    aten.permute.default, aten.t.default, aten.transpose.int, aten.slice.Tensor, aten.select.int,
    aten.full.default, aten.scalar_tensor.default, aten.arange.start_step, aten.arange.default,
    aten.empty.memory_format, aten.zeros.default, aten.ones.default, aten.alias.default, operator.getitem,
}
"""Cheap, pure externs that may run before an open group instead of ending it: the
views and constants decompositions scatter between pointwise ops."""


def partition(gm: torch.fx.GraphModule) -> list[Group | torch.fx.Node]:
    """Graph nodes in order, with fusable runs replaced by Groups."""
    steps: list[Group | torch.fx.Node] = []
    current: Group | None = None
    for node in gm.graph.nodes:
        kind = classify(node)
        if kind in ("pointwise", "reduction", "view"):
            if try_join(current, node, kind):
                current.members.append(node)
                continue
            if kind != "view":
                current = new_group(node, kind)
                steps.append(current)
                continue
        if current is not None and node.op == "call_function" and node.target in HOISTABLE \
                and not set(node.all_input_nodes) & set(current.members):
            steps.insert(steps.index(current), node)  # run it before the group; the group stays open
            continue
        current = None
        steps.append(node)
    return steps


class GroupEmitter:
    """Writes one Group as one kernel; `stored` are the members read outside the group."""

    def __init__(self, group: Group, stored: list[torch.fx.Node], names: dict[torch.fx.Node, str],
                 shape: heuristics.LaunchShape):
        self.group = group
        self.members = set(group.members)
        self.stored = stored
        self.names = names
        self.shape = shape
        extent = group.rows * (group.row_length or 1)
        name = "reduction_kernel" if group.row_length else "pointwise_kernel"
        self.kernel = TritonKernel(name, group.rows, group.row_length, self.shape,
                                   heuristics.index_dtype(extent, *self._outside_extents()))
        self.ops = TritonOps(self.kernel)
        self.memo: dict[tuple[torch.fx.Node, int], str] = {}
        self.loaded: set[torch.fx.Node] = set()
        """Buffers the kernel reads (views of them are folded into the index)."""
        self.reduced: dict[torch.fx.Node, str] = {}

    def _outside_extents(self) -> list[int]:
        extents = []
        for member in self.group.members:
            for source in member.all_input_nodes:
                value = value_of(source)
                if source not in self.members and isinstance(value, torch.Tensor) and value.numel():
                    extents.append(sum((s - 1) * st for s, st in zip(value.shape, value.stride())) + 1)
        return extents

    def emit(self) -> TritonKernel:
        for member in self.group.members:
            if classify(member) == "reduction":
                self.kernel.begin_loop()
                self.reduced[member] = self._reduce(member)
        rows_last = [m for m in self.stored if self.group.level(m) == "row"]
        full = [m for m in self.stored if self.group.level(m) == "full"]
        for member in rows_last:
            self.ops.store(self.names[member], self._store_index(member), self.evaluate(member, None),
                           value_of(member).dtype, uses_row=self.group.row_length is None)
        if full:
            self.kernel.begin_loop()
            for member in full:
                self.ops.store(self.names[member], self._store_index(member), self.evaluate(member, None),
                               value_of(member).dtype)
        return self.kernel

    def _store_index(self, node: torch.fx.Node) -> str:
        """Where each element goes in a buffer laid out like eager's (`meta["val"]` strides)."""
        value = value_of(node)
        coordinates = self._coordinates(tuple(value.shape))
        terms = [
            coordinate if stride == 1 else f"{coordinate} * {stride}"
            for coordinate, size, stride in zip(coordinates, value.shape, value.stride())
            if size != 1 and coordinate != "0"
        ]
        return " + ".join(terms) or "xindex * 0"

    def _reduce(self, node: torch.fx.Node) -> str:
        kind = REDUCTIONS[node.target]
        dtype = value_of(node).dtype
        source = self.evaluate(node.args[0], value_of(node.args[0]).shape)
        length = float(self.group.row_length)
        if kind in ("sum", "max", "min", "prod"):
            return self.ops.reduction(kind, source, dtype)
        total = self.ops.reduction("sum", source, dtype)
        mean = self.ops.binary("truediv", total, self.ops.constant(length, torch.float32))
        if kind == "mean":
            return mean
        # var: two passes over the row (exact, unlike one-pass sum of squares)
        correction = node.args[2] if len(node.args) > 2 else node.kwargs.get("correction", 1.0)
        self.kernel.begin_loop()
        centered = self.ops.binary("sub", self.evaluate(node.args[0], value_of(node.args[0]).shape), mean)
        squares = self.ops.reduction("sum", self.ops.binary("mul", centered, centered), dtype)
        divisor = self.ops.constant(max(length - float(correction or 0.0), 0.0), torch.float32)
        return self.ops.binary("truediv", squares, divisor)

    def evaluate(self, node: Any, consumer_shape) -> Any:
        """The emitter value of `node` at the current element (of the consumer, for loads)."""
        if not isinstance(node, torch.fx.Node):
            return node
        if node in self.reduced:
            return self.reduced[node]
        if node not in self.members:
            return self._load(node, consumer_shape)
        key = (node, len(self.kernel.sections))
        if key not in self.memo:
            self.memo[key] = self._compute(node)
        return self.memo[key]

    def _compute(self, node: torch.fx.Node) -> str:
        shape = value_of(node).shape
        if node.target in VIEWS:
            return self.evaluate(node.args[0], shape)
        arguments = [self.evaluate(a, shape) for a in node.args]
        keywords = {k: self.evaluate(v, shape) for k, v in node.kwargs.items()}
        return POINTWISE[node.target](self.ops, *arguments, **keywords)

    def _load(self, node: torch.fx.Node, consumer_shape) -> str:
        value = value_of(node)
        base, offset_elements = resolve_view(node)
        if base.target in CONSTANTS:
            return self.ops.constant(constant_value(base), value.dtype)
        consumer_shape = tuple(consumer_shape if consumer_shape is not None else value.shape)
        coordinates = self._coordinates(consumer_shape)
        offset = len(consumer_shape) - value.dim()
        terms = [
            f"{coordinates[offset + i]} * {stride}" if stride != 1 else coordinates[offset + i]
            for i, (size, stride) in enumerate(zip(value.shape, value.stride()))
            if size != 1 and coordinates[offset + i] != "0"
        ]
        if offset_elements:
            terms.append(str(offset_elements))
        index = " + ".join(terms) or "0"
        uses_row = "rindex" in index
        if not VARIABLE_INDEX.search(index):
            index = f"xindex * 0 + {index}"  # one element, broadcast to the block
        self.loaded.add(base)
        return self.ops.load(self.names[base], index, value.dtype, uses_row=uses_row or self.group.row_length is None)

    def _coordinates(self, shape: tuple[int, ...]) -> list[str]:
        numel = math.prod(shape)
        if self.group.row_length is None:
            return split_index("xindex", shape)
        if numel == self.group.rows * self.group.row_length:
            return split_index("xindex", shape[:-1]) + ["rindex"]
        return split_index("xindex", shape)


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

    def __call__(self, *inputs: Any) -> Any:
        for index, strides, dtype, device in self.expected:
            value = inputs[index]
            if value.stride() != strides or value.dtype != dtype or value.device != device:
                self.eager_calls += 1
                return self.fallback(*inputs)
        return self.call(*inputs)


def compile_graph(gm: torch.fx.GraphModule, example_inputs: list[Any], config=None) -> CompiledGraph:
    """ATen graph -> Triton kernels + wrapper; see the module docstring."""
    _ensure_meta(gm, example_inputs)
    remove_dead_pure_nodes(gm)
    prefer_channels_last(gm, example_inputs)
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
            if not stored:
                continue  # nothing reads what it computes (a dead output of a decomposition)
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
            if not users_outside[id(step)][0]:
                continue
            needed |= kernels[id(step)].loaded
            for view in users_outside[id(step)][1]:
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
    arguments = ", ".join(_expression(builder, a, names) for a in node.args)
    keywords = ", ".join(f"{k}={_expression(builder, v, names)}" for k, v in node.kwargs.items())
    function = builder._global("extern", node.target)
    builder.alias(names[node], f"{function}({', '.join(p for p in (arguments, keywords) if p)})")


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


def _users_outside(steps) -> dict[int, tuple[list[torch.fx.Node], list[torch.fx.Node]]]:
    """For each group: the members a later step (or the output) reads, and the views among them.

    A view read outside is not stored: its source is, and the wrapper applies
    the view to it after the launch, so the result has exactly eager's strides
    (later kernels bake strides in, and views of views must line up)."""
    result = {}
    for step in steps:
        if not isinstance(step, Group):
            continue
        members = set(step.members)
        read_outside = {m for m in step.members if any(user not in members for user in m.users)}
        views = [m for m in step.members if m in read_outside and m.target in VIEWS]
        stored = set(read_outside) - set(views)
        for view in views:
            source = view.args[0]
            while source.target in VIEWS and source in members:
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
        while source in members and source.target in VIEWS:
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


def remove_dead_pure_nodes(gm: torch.fx.GraphModule) -> None:
    """Drop unread nodes that have no effect (a decomposition's unused statistics), so they
    do not sit between fusable nodes. Random and mutating ops are kept whatever reads them."""
    for node in reversed(list(gm.graph.nodes)):
        if node.op == "call_function" and not node.users and _pure(node):
            gm.graph.erase_node(node)
    gm.recompile()


def _pure(node: torch.fx.Node) -> bool:
    return (node.target in POINTWISE or node.target in REDUCTIONS or node.target in FOLDABLE_VIEWS
            or node.target in CONSTANTS or node.target in HOISTABLE or node.target is operator.getitem)


def _python_name(name: str) -> str:
    cleaned = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return cleaned if cleaned.isidentifier() and not cleaned[0].isdigit() else f"v_{cleaned}"


def _ensure_meta(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> None:
    if all("val" in node.meta for node in gm.graph.nodes if node.op not in ("output",)):
        return
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    mode = FakeTensorMode(allow_non_fake_inputs=True)
    FakeTensorProp(gm, mode).propagate(*example_inputs)
