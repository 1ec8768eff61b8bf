"""Graph lowering: an ATen-level FX graph -> `ir.Program`.

Takes a GraphModule (make_fx output; nodes may carry meta["val"]) and example
inputs; returns a Program of Pointwise/Reduction kernels and Extern steps.
Fusion happens here by inlining: a pointwise value stays lazy (its loader is
composed into its consumers) until it must exist in memory: when it has more
than one user (never recompute), feeds an Extern, or is a graph output.
"""

from __future__ import annotations

import math
import operator

import torch
import torch.fx
from torch.utils._pytree import tree_leaves

from . import ir, lowering_indexing, lowering_pooling, lowering_reductions, lowering_views  # noqa: F401 (registrations)
from .lowering import LOWERINGS, to_dtype
from .lowering_indexing import ScatterValue
from .lowering_reductions import ReductionValue
from .memory import expression_loads
from .report import record_fallback
from .schedule import linear_form
from .simplify import simplify, simplify_expr
from . import values
from .externs import strided_view
from .values import LazyValue, NotLowerable, TORCH_TO_IR, buffer_value, contiguous_strides, kernel_dtype, torch_dtype

VIEW_TARGETS = {getattr(torch.ops.aten, n).default for n in
                ("view", "_unsafe_view", "permute", "expand", "unsqueeze", "t", "alias")} | {
    torch.ops.aten.transpose.int, torch.ops.aten.slice.Tensor, torch.ops.aten.select.int,
    torch.ops.aten.squeeze.dim, torch.ops.aten.squeeze.dims, torch.ops.aten.squeeze.default}
# *_copy variants (functionalize's output) become aliasing views when their input is in memory.
COPY_VIEWS = {torch.ops.aten.view_copy.default: torch.ops.aten.view.default,
              torch.ops.aten.permute_copy.default: torch.ops.aten.permute.default,
              torch.ops.aten.expand_copy.default: torch.ops.aten.expand.default,
              torch.ops.aten.unsqueeze_copy.default: torch.ops.aten.unsqueeze.default,
              torch.ops.aten.t_copy.default: torch.ops.aten.t.default,
              torch.ops.aten.transpose_copy.int: torch.ops.aten.transpose.int,
              torch.ops.aten.slice_copy.Tensor: torch.ops.aten.slice.Tensor,
              torch.ops.aten.select_copy.int: torch.ops.aten.select.int}
VIEW_TARGETS |= set(COPY_VIEWS)


TUPLE_LOWERINGS = {torch.ops.aten.var_mean.correction, torch.ops.aten.max_pool2d_with_indices.default,
                   *lowering_views.SPLITS}
COMPUTED_TOGETHER = {torch.ops.aten.max_pool2d_with_indices.default}
"""Multi-result nodes whose results one loop computes (a window's maximum and its position):
realized side by side, where horizontal fusion makes them one kernel reading the input once
(the indices, saved for the backward, would otherwise be computed when the graph returns)."""


MAX_SHARED_OPS = 24
MAX_SHARED_READS = 2
"""A value read by several nodes stays inlined only if it reads at most this many buffers
element by element (loads indexed by every loop variable; a broadcast bias or row statistic
does not count): each reading kernel loads them all again, and a chain of such values (a
transformer's residual stream x + attention + MLP + ...) would grow by a load per layer,
every layer recomputing the whole stream from the embedding on (GPT-2: 14 loads in the 12th
layer's norm, and no two layers' kernels alike)."""

MAX_REDUCED_SHARED_OPS = 8
"""A shared value a reduction reads stays inlined only up to this many operations, and only
where its readers load no more bytes per element recomputing it than loading it (a widening
cast, a product with a broadcast weight): a layer norm's backward upcasts its bfloat16
gradient and scales it by the weight, and stored, both were float32 tensors written for the
column sums of the weight and bias gradients to read back (GPT-2: 12.6 MB per layer norm).
A value that costs more (softmax's exponential) or narrows its inputs stays a kernel of its
own, which the reduction's row group holds as row-local scratch."""


TRANSCENDENTAL = frozenset({"exp", "log", "log1p", "expm1", "tanh", "sigmoid", "erf", "sin", "cos", "tan", "asin",
                            "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "exp2", "log2", "log10",
                            "erfinv", "lgamma", "pow", "atan2"})
TRANSCENDENTAL_COST = 20
"""A transcendental function counts as this many operations: a range reduction, a polynomial
and the selects for special values (tj_expf and tj_logf are about twenty each)."""


def count_ops(expr, seen=None) -> int:
    """The cost of a scalar expression in simple operations: transcendental functions count
    TRANSCENDENTAL_COST, and the operations computing the indices it reads through
    (`ir.IndirectIndex`: T5's position buckets, a log and a dozen more per element) count too."""
    seen = set() if seen is None else seen
    if expr in seen:
        return 0
    seen.add(expr)
    if isinstance(expr, (ir.Load, ir.IndexValue)):
        return sum(count_ops(node.value, seen) for node in ir.indirect_indices(expr.index))
    if not isinstance(expr, ir.Op):
        return 0
    own = TRANSCENDENTAL_COST if expr.name in TRANSCENDENTAL else 1
    return own + sum(count_ops(a, seen) for a in expr.args)


def dense(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Do these strides cover exactly prod(shape) elements, each once (a permutation of a
    contiguous layout)?"""
    expected = 1
    for size, stride in sorted(((size, stride) for size, stride in zip(shape, strides) if size != 1),
                               key=lambda item: item[1]):
        if stride != expected:
            return False
        expected *= size
    return True


def dead_pure_nodes(graph: torch.fx.Graph) -> set:
    """Nodes whose results nothing reads and whose only effect is their result (the unused
    statistics of a decomposed batch norm...). Random and mutating ops are never dead:
    skipping one would shift the random stream or lose a write."""
    dead: set = set()
    for node in reversed(graph.nodes):
        if node.op != "call_function" or any(user not in dead for user in node.users):
            continue
        schema = getattr(node.target, "_schema", None)
        tags = getattr(node.target, "tags", ())
        if node.target is operator.getitem or (schema is not None and not schema.is_mutable
                                               and torch.Tag.nondeterministic_seeded not in tags):
            dead.add(node)
    return dead


EXACT_LAYOUT_EXTERNS = frozenset({strided_view})
"""Externs whose result has exactly the layout the trace recorded (no check needed)."""


class ExternObject:
    """A non-tensor result of an Extern (a tuple of tensors...), referenced by slot name."""

    def __init__(self, name: str):
        self.name = name


def dtype_name(dtype: torch.dtype) -> str:
    return TORCH_TO_IR.get(dtype, str(dtype).replace("torch.", ""))


def node_values(gm: torch.fx.GraphModule, example_inputs) -> dict:
    """meta["val"] of every node, or (graphs without it) values from one eager run.

    The eager run is a whole second execution of the graph on real tensors (0.47 s and the
    activations' memory for GPT-2 inference on the H100, whose cuDNN attention outputs had
    items without a value), so it is kept for graphs that were not traced."""
    nodes = list(gm.graph.nodes)
    values = {}
    for n in nodes:
        if "val" in n.meta or n.op == "output":
            values[n] = n.meta.get("val")
        elif _is_item_of_traced(n, values):  # make_fx leaves an int or None item of a tuple unset
            values[n] = values[n.args[0]][n.args[1]]
        else:
            break
    else:
        return values
    values = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n):
            result = super().run_node(n)
            values[n] = result
            return result
    with torch.no_grad():
        Recorder(gm).run(*example_inputs)
    return values


def _is_item_of_traced(node: torch.fx.Node, values: dict) -> bool:
    """`getitem(t, i)` of a node whose traced value is a tuple or list (cuDNN attention's
    sequence lengths and random seeds: make_fx records the tuple, not its non-tensor items)."""
    if node.op != "call_function" or node.target is not operator.getitem:
        return False
    source, index = node.args
    return isinstance(source, torch.fx.Node) and isinstance(values.get(source), (tuple, list)) \
        and isinstance(index, int) and -len(values[source]) <= index < len(values[source])


class GraphLowering:
    def __init__(self, gm: torch.fx.GraphModule, example_inputs, *, half_floats: bool = False,
                 device: torch.device | None = None, shared_ops: int = MAX_SHARED_OPS,
                 masked_selects: bool = False):
        """half_floats: the emitter computes float16/bfloat16 (values.HALF_FLOATS). device: where
        the emitter's kernels run; a tensor elsewhere (a CPU scalar constant in a CUDA graph, a
        CPU arange) is only ever passed to ATen calls, which follow eager's device rules.
        shared_ops: what the emitter recomputes rather than store (`cheap_to_share`).
        masked_selects: the emitter masks off loads a positional select discards (values.MASKED_SELECTS)."""
        self.gm = gm
        self.half_floats = half_floats
        self.shared_ops = shared_ops
        self.masked_selects = masked_selects
        self.device = device
        self.example_inputs = example_inputs
        self.meta = node_values(gm, example_inputs)
        self.buffers: dict[str, ir.Buffer] = {}  # by name, in creation order
        self.steps: list = []
        self.env: dict = {}
        self.constants: dict[str, torch.Tensor] = {}
        self.returned: set = set()
        lowering_reductions.REALIZE[0] = self.realize

    def add_buffer(self, shape, dtype: str, strides=None, kind="temp", name=None) -> ir.Buffer:
        shape = tuple(int(s) for s in shape)
        strides = tuple(int(s) for s in strides) if strides is not None else contiguous_strides(shape)
        buffer = ir.Buffer(name or f"buf{len(self.buffers)}", dtype, shape, strides, kind)
        self.buffers[buffer.name] = buffer
        return buffer

    # -- realization -----------------------------------------------------------
    def eager_strides(self, node) -> tuple[int, ...] | None:
        """Eager's strides for a value computed by a kernel (None: contiguous). Graph outputs
        need them (autograd regenerates views of saved tensors with as_strided), and so do
        extern arguments: an ATen kernel's output layout follows its inputs' (flash attention
        returns its output in the query's layout), and the rest of the graph, and the backward
        graph that receives saved values, was traced with the layouts eager produced."""
        meta = self.meta.get(node)
        if not isinstance(meta, torch.Tensor) or meta.is_contiguous():
            return None
        return tuple(meta.stride()) if dense(tuple(meta.shape), tuple(meta.stride())) else None

    def realize(self, value, node=None):
        """A value that exists in memory (LazyValue with .buffer); `node` is the graph node it
        computes, when known (graph outputs keep eager's strides)."""
        if isinstance(value, ReductionValue):
            value = self.realize_reduction(value)
        if not isinstance(value, LazyValue) or value.buffer is not None:
            return value
        if node is not None and self.gapped_view(node, value):
            return self.realize(self.view_of_realized_source(node), node)
        if value.alias_of is not None:
            node = value.alias_of
            view = self.strided_view(value, node)
            if view is not None:
                return view
            return self.lower_extern(node, self.meta.get(node), "aliasing view of a buffer in memory", count=False)
        strides = self.eager_strides(node) if node is not None else None
        buffer = self.add_buffer(value.shape, value.dtype, strides=strides)
        variables = tuple(ir.IndexVar(f"i{d}") for d in range(len(value.shape)))
        body = simplify_expr(value.load(variables), dict(zip((v.name for v in variables), value.shape)))
        self.steps.append(ir.Pointwise(f"kernel{len(self.steps)}", buffer.name, value.shape, body, variables))
        return buffer_value(buffer)

    def strided_view(self, value: LazyValue, node) -> LazyValue | None:
        """A view of a buffer in memory as one `as_strided` call, when its index arithmetic is
        linear and gives eager's strides: a chain of views (view, permute, slice...) would
        otherwise run as one ATen call each, each with a layout check after it."""
        meta = self.meta.get(node)
        if not isinstance(meta, torch.Tensor) or tuple(meta.shape) != tuple(value.shape):
            return None
        variables = tuple(ir.IndexVar(f"i{d}") for d in range(len(value.shape)))
        ranges = {v.name: size for v, size in zip(variables, value.shape)}
        load = simplify_expr(value.load(variables), ranges)
        form = linear_form(load.index) if isinstance(load, ir.Load) else None
        base = self.buffers.get(load.buffer) if form is not None else None
        if base is None or base.dtype != value.dtype or form[1] < 0:
            return None
        strides = tuple(form[0].get(v.name, 0) for v in variables)
        if any(size != 1 and stride != expected
               for size, stride, expected in zip(value.shape, strides, meta.stride())):
            return None
        buffer = self.add_buffer(meta.shape, base.dtype, meta.stride(), "extern")
        self.steps.append(ir.Extern(f"extern{len(self.steps)}", strided_view,
                                    (ir.BufferRef(base.name), tuple(meta.shape), tuple(meta.stride()), form[1]),
                                    (), buffer.name))
        return buffer_value(buffer)

    def realize_scatter(self, value: ScatterValue, node) -> LazyValue:
        """Two kernels: one writes the initial values into a fresh buffer, the other writes
        the updates through their indices into that memory (an `ir.Scatter` store)."""
        # a fresh temporary (a LazyValue without a buffer is always computed into a new one),
        # so updating it in place changes nothing another step reads
        base = self.realize(LazyValue(value.shape, value.dtype, value.base.loader), node)
        output = self.add_buffer(value.shape, value.dtype, strides=base.buffer.strides)
        variables = tuple(ir.IndexVar(f"i{d}") for d in range(len(value.ranges)))
        ranges = {v.name: size for v, size in zip(variables, value.ranges)}
        body = simplify_expr(value.update(variables), ranges)
        index = simplify(ir.strided_index(value.target(variables), output.strides), ranges)
        self.steps.append(ir.Pointwise(f"kernel{len(self.steps)}", output.name, value.ranges, body, variables,
                                       ir.Scatter(base.buffer.name, index, value.accumulate)))
        return buffer_value(output)

    def realize_reduction(self, value: ReductionValue) -> LazyValue:
        source = value.source
        kept = [d for d in range(len(source.shape)) if d not in value.reduced_dims]
        ranges = tuple(source.shape[d] for d in kept)
        reduction_ranges = tuple(source.shape[d] for d in value.reduced_dims)
        variables = tuple(ir.IndexVar(f"i{k}") for k in range(len(ranges)))
        reduction_variables = tuple(ir.IndexVar(f"r{k}") for k in range(len(reduction_ranges)))
        index = [None] * len(source.shape)
        for d, var in zip(kept, variables):
            index[d] = var
        for d, var in zip(value.reduced_dims, reduction_variables):
            index[d] = var
        ranges_by_name = {v.name: size for v, size in zip(variables + reduction_variables, ranges + reduction_ranges)}
        body = simplify_expr(source.load(tuple(index)), ranges_by_name)
        if value.reduction_type not in ("argmax", "argmin"):
            body = to_dtype(body, value.compute_dtype)
        buffer = self.add_buffer(value.shape, value.dtype)
        self.steps.append(ir.Reduction(f"kernel{len(self.steps)}", buffer.name, ranges, reduction_ranges,
                                       value.reduction_type, body, variables, reduction_variables,
                                       value.dtype, value.divisor))
        return buffer_value(buffer)

    # -- nodes -----------------------------------------------------------------
    def run(self) -> ir.Program:
        values.HALF_FLOATS[0], values.MASKED_SELECTS[0] = self.half_floats, self.masked_selects
        try:
            return self.lower_graph()
        finally:
            values.HALF_FLOATS[0] = values.MASKED_SELECTS[0] = False

    def lower_graph(self) -> ir.Program:
        inputs = []
        dead = dead_pure_nodes(self.gm.graph)
        output = next(n for n in self.gm.graph.nodes if n.op == "output")
        self.returned = set(output.all_input_nodes)
        for node in self.gm.graph.nodes:
            if node in dead:
                continue
            if node.op == "placeholder":
                example = self.example_inputs[len(inputs)]
                if isinstance(example, torch.Tensor) and not self.elsewhere(example):
                    buffer = self.add_buffer(example.shape, dtype_name(example.dtype), example.stride(),
                                             "input", name=f"in{len(inputs)}")
                    self.env[node] = buffer_value(buffer)
                else:
                    buffer = self.add_buffer((), "object", (), "input", name=f"in{len(inputs)}")
                    self.env[node] = ExternObject(buffer.name)
                inputs.append(buffer.name)
            elif node.op == "get_attr":
                tensor = getattr(self.gm, node.target)
                if not isinstance(tensor, torch.Tensor) or self.elsewhere(tensor):  # (a subgraph of torch.cond)
                    buffer = self.add_buffer((), "object", (), "constant")
                    self.constants[buffer.name] = tensor
                    self.env[node] = ExternObject(buffer.name)
                    continue
                buffer = self.add_buffer(tensor.shape, dtype_name(tensor.dtype), tensor.stride(), "constant")
                self.constants[buffer.name] = tensor
                self.env[node] = buffer_value(buffer)
            elif node.op == "output":
                outputs = self.lower_outputs(node.args[0])
            else:
                self.env[node] = value = self.lower_node(node)
                if isinstance(value, tuple):
                    # A multi-result node (var_mean) read by its getitems and returned whole
                    # (saved for the backward): each reduction computed once, not once per reader.
                    self.env[node] = self.realize_results(node, value)
                elif len(node.users) > 1 and not self.cheap_to_share(node):
                    self.env[node] = self.realize(value, node)
        return ir.Program(tuple(self.buffers.values()), tuple(self.steps), tuple(inputs), outputs)

    def realize_results(self, node, results: tuple) -> tuple:
        """The results of a multi-result node: reductions realized, and every result of one
        in COMPUTED_TOGETHER that a getitem reads, in the strides eager gives that getitem."""
        if node.target not in COMPUTED_TOGETHER:
            return tuple(self.realize(v) if isinstance(v, ReductionValue) else v for v in results)
        readers = {user.args[1]: user for user in node.users if user.target is operator.getitem}
        return tuple(self.realize(v, readers[k]) if k in readers else v for k, v in enumerate(results))

    def cheap_to_share(self, node) -> bool:
        """A small pointwise value read only by lowerings stays inlined: users that land in one
        kernel compute it once (the emitter shares equal subexpressions); users in different
        kernels recompute at most MAX_SHARED_OPS ops over MAX_SHARED_READS buffers instead of a
        memory round trip (with a reduction among them: MAX_REDUCED_SHARED_OPS)."""
        value = self.env[node]
        if not isinstance(value, LazyValue) or value.buffer is not None:
            return False
        reduced = False
        for user in node.users:
            lowering = LOWERINGS.get(user.target) if user.op == "call_function" else None
            if lowering is None or user.target is operator.getitem:
                return False
            if user.target in VIEW_TARGETS and self.feeds_extern(user):
                return False  # each view would be realized on its own: the value computed per extern
            reduced = reduced or lowering.__module__.endswith("lowering_reductions")
        body = value.load(tuple(ir.IndexVar(f"i{d}") for d in range(len(value.shape))))
        every = {f"i{d}" for d, size in enumerate(value.shape) if size != 1}
        reads = {load for load in expression_loads(body) if ir.variables_of(load.index) >= every}
        if len({load.buffer for load in reads}) > MAX_SHARED_READS:
            return False
        if reduced:
            # A reader that recomputes the value loads its inputs instead of the value: no more
            # bytes per element for any number of readers (a widening cast, a product with a
            # broadcast weight); otherwise the stored value is as cheap, and row-local where the
            # reduction's group holds its readers.
            loaded = sum(torch_dtype(load.dtype).itemsize for load in reads)
            return count_ops(body) <= MAX_REDUCED_SHARED_OPS and loaded <= torch_dtype(value.dtype).itemsize
        return count_ops(body) <= self.sharing_budget(node, value)

    def sharing_budget(self, node, value: LazyValue) -> int:
        """The emitter's budget (`shared_ops`) where no user reads the value broadcast over more
        elements than it has (recomputed once per element either way); at most MAX_SHARED_OPS
        where one does (a rotary table recomputed for every head)."""
        numel = math.prod(value.shape)
        users = [self.meta.get(user) for user in node.users]
        if all(isinstance(meta, torch.Tensor) and meta.numel() <= numel for meta in users):
            return self.shared_ops
        return min(self.shared_ops, MAX_SHARED_OPS)

    def feeds_extern(self, node) -> bool:
        """Does `node` (a view) reach, through views only, a node that will not be lowered
        (an extern such as mm reads it from memory) or the graph's output?"""
        for user in node.users:
            if user.op == "output":
                return True
            if user.op == "call_function" and user.target in VIEW_TARGETS:
                if self.feeds_extern(user):
                    return True
            elif user.op != "call_function" or user.target not in LOWERINGS:
                return True
        return False

    def lower_outputs(self, result):
        def name_of(value):
            return value.buffer.name if isinstance(value, LazyValue) else ir.BufferRef(value.name)

        def convert(value):
            if isinstance(value, torch.fx.Node):
                node, value = value, self.env[value]
                if isinstance(value, (tuple, list)):  # a multi-result node returned whole
                    return tuple(name_of(self.realize(item)) for item in value)
                value = self.env[node] = self.realize(value, node)
                meta = self.meta.get(node)
                if isinstance(value, LazyValue) and value.buffer.kind == "temp" and isinstance(meta, torch.Tensor) \
                        and tuple(value.buffer.strides) != tuple(meta.stride()):
                    # An output eager returns as an overlapping or gapped view (an expand):
                    # callers may rebuild views of it with as_strided, so a dense copy is not
                    # the same value. The graph runs through ATen instead.
                    raise NotLowerable(f"output {node.name} has eager strides {tuple(meta.stride())}")
                return name_of(value)
            return value
        return torch.fx.node.map_aggregate(result, convert)

    def gapped_view(self, node, value) -> bool:
        """Is `node` a view (of a value not in memory) that eager lays out with gaps or overlaps
        between its elements (a slice kept for the backward)? A dense copy would not be the
        same value to a caller that rebuilds views of it with as_strided."""
        meta = self.meta.get(node)
        return value.alias_of is None and node.op == "call_function" and node.target in VIEW_TARGETS \
            and isinstance(node.args[0], torch.fx.Node) and isinstance(meta, torch.Tensor) \
            and not dense(tuple(meta.shape), tuple(meta.stride()))

    def view_of_realized_source(self, node):
        """The view `node` taken of its source computed into memory: an aliasing view then
        gives eager's strides (strided_view, or the ATen view op)."""
        source = node.args[0]
        self.env[source] = self.realize(self.env[source], source)
        return self.lower_node(node)

    def elsewhere(self, value) -> bool:
        """Is a tensor of `value` on a device other than the kernels'?"""
        return self.device is not None and any(
            isinstance(leaf, torch.Tensor) and leaf.device != self.device for leaf in tree_leaves(value))

    def lower_node(self, node: torch.fx.Node):
        meta = self.meta.get(node)
        target = node.target
        if self.elsewhere(meta):
            return self.lower_extern(node, meta, "a result on another device than the kernels'")
        if self.elsewhere([self.meta.get(n) for n in node.all_input_nodes]):
            # (a CPU scalar tensor times a CUDA tensor: ATen reads it as a scalar, a kernel cannot)
            return self.lower_extern(node, meta, "an operand on another device than the kernels'")
        if node.op == "call_function" and target in STORAGE_READERS and isinstance(node.args[0], torch.fx.Node):
            self.in_eagers_storage(node.args[0])
        if node.op == "call_function" and target in LOWERINGS:
            args = torch.fx.node.map_arg(node.args, lambda n: self.env[n])
            kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: self.env[n])
            if target in VIEW_TARGETS and in_memory(args[0]) or self.part_of_split_buffer(node):
                return self.lower_view_of_buffer(node, meta, args, kwargs)
            try:
                _check_kernel_dtypes(meta, args, kwargs)
                args = tuple(self.realize(a) if isinstance(a, ReductionValue) else a for a in args)
                if isinstance(meta, (tuple, list)) and target not in TUPLE_LOWERINGS:
                    raise NotLowerable("multiple results")
                result = LOWERINGS[target](meta, *args, **kwargs)
                if isinstance(result, ReductionValue) and target is operator.getitem:
                    result = self.realize(result)
                if isinstance(result, ScatterValue):
                    result = self.realize_scatter(result, node)
                return result
            except NotLowerable as error:
                return self.lower_extern(node, meta, str(error))
        return self.lower_extern(node, meta, "no lowering")

    def in_eagers_storage(self, node) -> None:
        """`node` (a view) as ATen's view of its source, itself so down to a tensor in memory: an
        op that reads the storage (as_strided's offset counts from the storage's start, not the
        view's) then sees eager's. A view computed into a buffer of its own starts that buffer."""
        if not is_view(node):
            return
        source = node.args[0]
        self.in_eagers_storage(source)
        self.env[node] = self.lower_extern(node, self.meta.get(node), "a view whose storage an op reads", count=False)

    def part_of_split_buffer(self, node) -> bool:
        """Is `node` a getitem of a split of a buffer in memory (a view of that buffer)?"""
        if node.target is not operator.getitem or not isinstance(node.args[0], torch.fx.Node):
            return False
        split = node.args[0]
        return split.op == "call_function" and split.target in lowering_views.SPLITS \
            and isinstance(split.args[0], torch.fx.Node) and in_memory(self.env.get(split.args[0]))

    def lower_view_of_buffer(self, node, meta, args, kwargs):
        """Index arithmetic for kernels; an aliasing view if it must exist (see LazyValue.alias_of)."""
        try:
            value = LOWERINGS[node.target](meta, *args, **kwargs)
        except NotLowerable:
            value = None
        if not isinstance(value, LazyValue):
            return self.lower_extern(node, meta, "aliasing view of a buffer in memory", count=False)
        if value is args[0]:
            return value
        return LazyValue(value.shape, value.dtype, value.loader, alias_of=node)

    def lower_extern(self, node, meta, reason: str, count: bool = True):
        if count and node.target is not operator.getitem:
            record_fallback(node.target, reason)

        def reference(n):
            if isinstance(self.env[n], (tuple, list)):
                # a split lowered to views (its getitems index them): the ATen call, whose
                # result an ATen getitem reads, where a piece is no strided view of a buffer
                self.env[n] = self.lower_extern(n, self.meta.get(n), "a piece of it read by ATen", count=False)
            value = self.env[n] = self.realize(self.env[n], n)
            if isinstance(value, LazyValue):
                return ir.BufferRef(value.buffer.name)
            return ir.BufferRef(value.name)
        args = torch.fx.node.map_arg(node.args, reference)
        kwargs = torch.fx.node.map_arg(node.kwargs, reference)
        target = COPY_VIEWS.get(node.target, node.target)
        if node.op == "call_method":
            target = getattr(torch.Tensor, node.target)
        elif node.op == "call_module":
            target = getattr(self.gm, node.target)
        if isinstance(meta, torch.Tensor):
            buffer = self.add_buffer(meta.shape, dtype_name(meta.dtype), meta.stride(), "extern")
            self.steps.append(ir.Extern(f"extern{len(self.steps)}", target, tuple(args),
                                        tuple(kwargs.items()), buffer.name))
            return buffer_value(buffer)
        buffer = self.add_buffer((), "object", (), "extern")
        self.steps.append(ir.Extern(f"extern{len(self.steps)}", target, tuple(args),
                                    tuple(kwargs.items()), buffer.name))
        return ExternObject(buffer.name)


STORAGE_READERS = frozenset({torch.ops.aten.as_strided.default})
"""Ops whose meaning depends on where their operand lies in its storage, not only its values."""


def is_view(node) -> bool:
    """Does `node` return a view of its first operand (ATen's alias annotation; a getitem of a split)?"""
    if node.op != "call_function" or not isinstance(node.args[0] if node.args else None, torch.fx.Node):
        return False
    if node.target is operator.getitem:
        return is_view(node.args[0])
    schema = getattr(node.target, "_schema", None)
    return schema is not None and bool(schema.returns) and all(
        ret.alias_info is not None and not ret.alias_info.is_write for ret in schema.returns)


def in_memory(value) -> bool:
    """Is `value` a buffer in memory or a view of one?"""
    return isinstance(value, LazyValue) and (value.buffer is not None or value.alias_of is not None)


def _check_kernel_dtypes(meta, args, kwargs) -> None:
    """Refuse (the node becomes an ATen extern) a node whose result or operands have a dtype
    kernels do not implement (complex64, float16 ...). Checked before lowering: loaders are
    called later, when a kernel is built, too late for the node to become an extern."""
    operands = [a for a in _flatten((args, kwargs)) if isinstance(a, LazyValue)]
    dtypes = {a.dtype for a in operands}
    if isinstance(meta, torch.Tensor):
        dtypes.add(dtype_name(meta.dtype))
    unsupported = sorted(d for d in dtypes if not kernel_dtype(d))
    if unsupported:
        raise NotLowerable(f"dtype {unsupported[0]} has no kernel support")


def _flatten(value) -> list:
    if isinstance(value, (list, tuple)):
        return [item for inner in value for item in _flatten(inner)]
    if isinstance(value, dict):
        return _flatten(list(value.values()))
    return [value]
