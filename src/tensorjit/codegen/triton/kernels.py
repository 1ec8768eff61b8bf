"""Triton kernels for the shared loop IR: ir.Pointwise, ir.Reduction, ir.LoopGroup -> kernel text.

Takes one scheduled step and the Program's buffers by name; returns a
`KernelText` (module source with one @triton.jit function, the buffers it takes
in parameter order, and its launch shapes from `heuristics`). Sizes are literals:
a compiled graph has static shapes.

Kernel kinds:
  * a Pointwise step: a 1-D grid, XBLOCK elements of the flattened range per
    program; the loop variables are recovered from the flat index.
  * a Reduction, or a LoopGroup (schedule.py: a reduction with the pointwise
    work before and after it, softmax, layer norm): XBLOCK rows per program,
    the row along the second block axis. Each member is one stretch of code
    over the row (lanes `rindex`). When the longest member row fits
    (`heuristics.PERSISTENT_LIMIT`) the whole row is in registers at once
    (persistent) and a member reads an earlier member's value from registers:
    a reduction's result (one per row) always, a pointwise value when it reads
    it at its own lane. Longer rows loop over the row RBLOCK lanes at a time,
    each member its own loop; then only reduction results stay in registers.
    Any other read of an earlier member goes through memory after a barrier
    (`prepare_groups` keeps such buffers out of row-local scratch first).
  * a column reduction (reductions only, whose loads are consecutive across
    outputs, strided along the reduction: a bias gradient's sum over the batch)
    is looped over tiles of 64 outputs x 64 reduced elements, so every load
    of the tile reads consecutive memory.

Masks follow the index: a load that depends only on the row is masked by
`xmask`, only on the lane by `rmask`, on both by both, on neither by nothing,
so a pointer and its mask always have one shape.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import math
import re

from .. import ir
from ..memory import expression_loads, names_read, names_written
from ..ops import bind_indirect, evaluate
from ..schedule import is_permuted, linear_form, row_index
from ..values import IR_TO_TORCH, contiguous_strides
from . import expressions, heuristics, interpreter_math
from .heuristics import LaunchShape
from .emitter import TritonOps, format_index, register_dtype, round_to, triton_type
from .guards import LoadGuards

# Helpers every kernel module defines: NaN-propagating max/min (eager's semantics) and a
# product combine function for tl.reduce.
PRELUDE = '''import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.jit
def _maximum_propagating_nan(left, right):
    return tl.where((left > right) | (left != left), left, right)


@triton.jit
def _minimum_propagating_nan(left, right):
    return tl.where((left < right) | (left != left), left, right)


@triton.jit
def _multiply(left, right):
    return left * right
'''

HEAVY_POINTWISE = 24
"""Statements from which a pointwise kernel counts as arithmetic-heavy (heuristics.pointwise_shape)."""
SHARED_REDUCTIONS = frozenset({"sum", "prod", "max", "min"})
"""Reductions `RowWriter.shared_loop` accumulates (one accumulator each; no positions)."""
NO_INDEX = 2**31 - 1
"""argmax/argmin: the position a lane holds before it has seen an element."""


@dataclasses.dataclass
class KernelText:
    name: str
    source: str
    arguments: tuple[str, ...]
    """Buffer names in parameter order (read buffers, then written ones)."""
    shapes: list[LaunchShape]
    """One launch shape, or the candidates an autotune chooses between."""


def emit_kernel(step, buffers: dict[str, ir.Buffer], autotune: bool = False) -> KernelText:
    """The kernel of one step, named by its text (see `shareable`). `autotune`
    (mode="max-autotune"): launch shapes to time on the first call, for every kernel that
    may run more than once on the same arguments (not a scatter, which updates in place)."""
    # Only the step's own buffers decide its index width (int32 while every offset fits).
    buffers = {name: buffers[name] for name in names_read(step) | set(names_written(step))}
    if isinstance(step, ir.Pointwise) or is_horizontal(step):
        writer = PointwiseWriter(step, buffers)
        writer.autotune = autotune and getattr(step, "scatter", None) is None
        return shareable(writer.emit())
    if isinstance(step, ir.Reduction):
        step = ir.LoopGroup(step.name, step.ranges, step.variables, (step,))
    writer = RowWriter(step, buffers)
    writer.autotune = autotune
    return shareable(writer.emit())


BUFFER_NAMES = re.compile(r"\b(?:in|buf)\d+(?:_(?!ptr\b)[a-z]+)?(?=_ptr\b|\b)")
"""A graph's buffer name in kernel text: `buf12`, `in3`, and names derived from one (`buf12_partials`,
split_reductions.py), each followed by `_ptr` or a word boundary."""
STEP_NAMES = re.compile(r"\b(?:group\d+_)?kernel\d+(?:_[a-z]+)?\b")  # (_partials: split_reductions.py)


def shareable(kernel: KernelText) -> KernelText:
    """The same text for the same kernel in any graph or layer: the graph's buffer and step
    names are renumbered in order of appearance (buf0, buf1, ...; step0, ...) and the kernel is
    named by a digest of the text. GPT-2's twelve layers then load, compile and cache each
    kernel once (with the graph's names every layer's kernels were distinct: 28 s of Triton
    compiles for its inference graph instead of 3)."""
    def renumber(pattern, prefix, text):
        names: dict[str, str] = {}
        return pattern.sub(lambda m: names.setdefault(m.group(0), f"{prefix}{len(names)}"), text)

    text = renumber(STEP_NAMES, "step", renumber(BUFFER_NAMES, "buf", kernel.source))
    # The kernel's own text decides its name, not the prelude (which differs under the interpreter).
    name = "tj_" + hashlib.sha256(text[text.rindex("@triton.jit"):].encode()).hexdigest()[:20]
    return dataclasses.replace(kernel, name=name, source=text.replace("def step0(", f"def {name}(", 1))


def is_horizontal(step) -> bool:
    """A group of pointwise kernels over its whole range (`horizontal.fuse_horizontally`):
    one pointwise kernel with an output per member."""
    return isinstance(step, ir.LoopGroup) and all(
        isinstance(m, ir.Pointwise) and m.ranges == step.ranges and m.scatter is None for m in step.members)


# -- which values stay in registers ------------------------------------------------
def lanes(member, outer: int) -> tuple[tuple[ir.IndexVar, ...], tuple[int, ...]]:
    """The variables and sizes a member's row lanes enumerate (row-major over `rindex`)."""
    if isinstance(member, ir.Reduction):
        return member.reduction_variables, member.reduction_ranges
    return member.variables[outer:], member.ranges[outer:]


def row_length(group: ir.LoopGroup) -> int:
    return max((math.prod(lanes(m, len(group.ranges))[1]) for m in group.members), default=1)


def is_persistent(group: ir.LoopGroup) -> bool:
    return heuristics.is_persistent(row_length(group)) and not is_column_reduction(group)


COLUMN_TILE = (64, 64, 8)
"""XBLOCK, RBLOCK, warps of a column reduction: 64 neighbouring outputs per program, so each
step over the reduced dimension reads 64 consecutive elements per row of the tile."""


def is_column_reduction(group: ir.LoopGroup) -> bool:
    """Reductions (and their row epilogues) whose loads are consecutive across outputs and
    strided along the reduction (a sum over the batch dimension): lanes along the row would
    each read one element of a different memory line, so they are tiled across outputs
    instead. Only loads that vary across the tiled outputs count: a layer-norm weight gradient
    also reads each input row's mean and inverse deviation, the same for every output."""
    if not group.ranges or not all(isinstance(m, ir.Reduction) or is_row_epilogue(m, group)
                                   for m in group.members[len(lane_members(group)):]):
        return False
    reductions = [m for m in group.members if isinstance(m, ir.Reduction)]
    innermost = next((v.name for v, size in zip(reversed(group.variables), reversed(group.ranges)) if size > 1), None)
    reduced = {v.name for m in reductions for v, size in zip(m.reduction_variables, m.reduction_ranges) if size > 1}
    forms = [linear_form(load.index) for m in reductions for load in expression_loads(m.body)]
    forms = [form for form in forms if form is None or innermost in form[0]]
    if innermost is None or not reduced or not forms or any(form is None for form in forms):
        return False
    across = any(form[0].get(innermost) == 1 for form in forms)
    along = any(form[0].get(name) == 1 for form in forms for name in reduced)
    return across and not along


def lane_strides(producer, reader, group: ir.LoopGroup) -> tuple[tuple[int, ...], int] | None:
    """Where `producer` stored the element of each of `reader`'s lane variables, and the row's
    first element: row-major over the lanes, or, for a member that stores elsewhere
    (schedule.permuted_to_rows), its store's strides when both enumerate the same lanes."""
    outer = len(group.ranges)
    variables, sizes = lanes(reader, outer)
    if not is_permuted(producer):
        return contiguous_strides(sizes), 0
    form = linear_form(row_index(producer.store, {v.name for v in group.variables}))
    produced, produced_sizes = lanes(producer, outer)
    if form is None or produced_sizes != sizes:
        return None
    return tuple(form[0].get(v.name, 0) for v in produced), form[1]


def lane_members(group: ir.LoopGroup) -> tuple:
    """The pointwise members leading a group of reductions over the reductions' lanes (what a
    column reduction reduces, produced in its own loop: fused_column_sums.py). They run in one
    loop with the reductions after them (`RowWriter.shared_loop`)."""
    outer = len(group.ranges)
    reductions = [m for m in group.members if isinstance(m, ir.Reduction)]
    count = 0
    for member in group.members:
        if not isinstance(member, ir.Pointwise) or member.scatter is not None or \
                member.ranges[:outer] != group.ranges or len(member.ranges) == outer or \
                any(member.ranges[outer:] != r.reduction_ranges for r in reductions):
            break
        count += 1
    return group.members[:count] if reductions and count < len(group.members) else ()


def is_row_epilogue(member, group: ir.LoopGroup) -> bool:
    """A pointwise member with one element per row (a running-statistics update after the
    statistics): it has no lanes, so it leaves a column reduction a column reduction."""
    return isinstance(member, ir.Pointwise) and member.ranges == group.ranges


def same_lane(index: ir.Index, reader, producer, group: ir.LoopGroup) -> bool:
    """Does `reader` read, at `index`, the element of the row that its own lane of `producer`
    computed (lanes enumerate a member's loops row-major)?"""
    variables, sizes = lanes(reader, len(group.ranges))
    stored = lane_strides(producer, reader, group)
    form = linear_form(row_index(index, {v.name for v in group.variables}))
    if form is None or stored is None:
        return False
    size_of = {v.name: size for v, size in zip(variables, sizes)}
    terms = {name: c for name, c in form[0].items() if size_of.get(name) != 1}
    expected = {v.name: stride for v, size, stride in zip(variables, sizes, stored[0]) if size != 1}
    return form[1] == stored[1] and terms == expected


def in_registers(load: ir.Load, producer, reader, group: ir.LoopGroup, persistent: bool) -> bool:
    if isinstance(producer, ir.Reduction):
        return True  # one value per row, computed before the reader's code
    return persistent and same_lane(load.index, reader, producer, group)


def prepare_groups(program: ir.Program) -> ir.Program:
    """Row-local buffers some member reads other than from registers become real buffers
    (written to memory and read back after a barrier)."""
    steps = []
    for step in program.steps:
        if isinstance(step, ir.LoopGroup) and step.local:
            persistent = is_persistent(step)
            written, in_memory = {}, set()
            for member in step.members:
                for load in expression_loads(member.body):
                    producer = written.get(load.buffer)
                    if producer is not None and not in_registers(load, producer, member, step, persistent):
                        in_memory.add(load.buffer)
                written[member.output] = member
            local = tuple(name for name in step.local if name not in in_memory)
            step = dataclasses.replace(step, local=local)
        steps.append(step)
    return dataclasses.replace(program, steps=tuple(steps))


# -- writers ------------------------------------------------------------------------------
def named(line: str, accumulator: str) -> str:
    """A line of `RowWriter.accumulators`/`combine`/`reduce_row` with its accumulator `acc`
    renamed (a shared loop keeps one per reduction)."""
    return re.sub(r"\bacc\b", accumulator, line)


def split_flat(flat: str, variables, sizes) -> list[str]:
    """`variable = (flat // stride) % size` for a row-major flat index over `sizes`."""
    lines = []
    for position, (variable, size, stride) in enumerate(zip(variables, sizes, contiguous_strides(sizes))):
        if size == 1:
            lines.append(f"{variable} = 0 * {flat}")
            continue
        text = flat if stride == 1 else f"({flat} // {stride})"
        if position > 0 and any(s != 1 for s in sizes[:position]):
            text = f"{text} % {size}"
        lines.append(f"{variable} = {text}")
    return lines


def flat_form(variables, sizes) -> dict[str, int]:
    """The linear form of the row-major flat index over `sizes` (size-1 variables left out)."""
    return {v.name: stride for v, size, stride in zip(variables, sizes, contiguous_strides(sizes)) if size != 1}


def index_text(index: ir.Index, variables, sizes, flat: str, indirect: dict | None = None) -> str:
    """`flat` when `index` is exactly the row-major position over (variables, sizes), which
    spares the divisions that recovered the variables; else the index arithmetic
    (`indirect`: the variables holding checked indirect indices, TritonOps.indirect_names)."""
    form, expected = linear_form(index), flat_form(variables, sizes)
    size_of = {v.name: size for v, size in zip(variables, sizes)}
    if form is None or form[1] != 0 or not expected:
        return format_index(index, indirect)
    terms = {name: c for name, c in form[0].items() if size_of.get(name) != 1}
    return flat if terms == expected else format_index(index, indirect)


def index_names(index: ir.Index) -> set[str]:
    """The loop variables `index` depends on (through the values of indirect indices too)."""
    return ir.variables_of(index)


def module_source(name: str, parameters: list[str], body: list[str]) -> str:
    prelude = PRELUDE + interpreter_math.PRELUDE if expressions.interpreted() else PRELUDE
    lines = "\n    ".join(body)
    # Device asserts (indirect index checks, TritonOps.indirect) are compiled only in debug mode.
    decorator = "@triton.jit(debug=True)" if any(line.lstrip().startswith("tl.device_assert") for line in body) \
        else "@triton.jit"
    return f"{prelude}\n\n{decorator}\ndef {name}({', '.join(parameters)}):\n    {lines}\n"


class Writer:
    """What both kernel shapes share: pointer arguments, loads, stores."""

    autotune = False
    """Offer several launch shapes (mode="max-autotune"); see emit_kernel."""

    def __init__(self, buffers: dict[str, ir.Buffer]):
        self.buffers = buffers
        self.read: dict[str, None] = {}  # in order of first load: equal kernels get equal parameter lists
        self.written: list[str] = []
        self.counter = itertools.count()

    def index_type(self, work: int) -> str:
        return heuristics.index_dtype(work, *(ir.extent(b) for b in self.buffers.values() if b.dtype != "object"))

    def load_text(self, buffer: str, index: str, mask: str | None) -> str:
        self.read.setdefault(buffer)
        masked = f", {mask}" if mask else ""
        text = f"tl.load({buffer}_ptr + ({index}){masked})"
        dtype = self.buffers[buffer].dtype
        if register_dtype(dtype) != dtype:
            text += f".to({triton_type(dtype)})"
        return text

    def guarded(self, mask: str | None, buffer: str, index: ir.Index) -> str | None:
        """`mask` narrowed to the lanes that keep the load's value (guards.py). The guard comes
        first: conditions on the row alone are combined per row, before the lanes widen them."""
        if mask is None:
            return None  # (a load of one element for every lane: a pointer of shape [1])
        guard = self.guards.mask(buffer, index, index_names(index))
        return mask if guard is None else f"({guard}) & {mask}"

    def store_text(self, buffer: str, index: str, value: str, value_dtype: str, mask: str,
                   accumulate: bool = False) -> str:
        dtype = self.buffers[buffer].dtype
        if dtype != value_dtype or register_dtype(dtype) != dtype:
            value = round_to(value, dtype)
        if not accumulate:
            return f"tl.store({buffer}_ptr + ({index}), {value}, {mask})"
        # Indices may repeat: add atomically. The value is made a block of every lane's own value
        # (a [1] block: a scalar gradient expanded): Triton's interpreter adds a value's stored
        # elements in order, so a one-element or broadcast value read past its end for the rest.
        lanes = f"({value}) + tl.zeros([XBLOCK], {expressions.triton_dtype(IR_TO_TORCH[dtype])})"
        return f"tl.atomic_add({buffer}_ptr + ({index}), {lanes}, {mask})"

    def parameters(self) -> tuple[list[str], tuple[str, ...]]:
        arguments = tuple(name for name in self.read if name not in self.written) + tuple(self.written)
        return [f"{name}_ptr" for name in arguments], arguments


def memory_order(kernel: ir.Pointwise, output: ir.Buffer) -> tuple[tuple[ir.IndexVar, ...], tuple[int, ...]]:
    """The kernel's loop variables and sizes, outermost first, in the order its stores walk
    memory: a channels-last output (strides N: HWC, C: 1, H: WC, W: C) is iterated N, H, W, C,
    so consecutive lanes store to consecutive addresses (the row-major order would store
    with a stride of HW elements between lanes)."""
    form = None if kernel.scatter is not None else linear_form(ir.store_index(kernel, output))
    if form is None:
        return kernel.variables, kernel.ranges
    pairs = sorted(zip(kernel.variables, kernel.ranges), key=lambda pair: -form[0].get(pair[0].name, 0))
    return tuple(v for v, _ in pairs), tuple(size for _, size in pairs)


class PointwiseWriter(Writer):
    """A Pointwise kernel, or a group of them over one range (`is_horizontal`): each member's
    value stored in turn, the loads the members share made once."""

    def __init__(self, step, buffers: dict[str, ir.Buffer]):
        super().__init__(buffers)
        self.name = step.name
        self.members = step.members if isinstance(step, ir.LoopGroup) else (step,)
        self.kernel = self.members[0]
        self.variables, self.sizes = memory_order(self.kernel, buffers[self.kernel.output])

    def load(self, buffer: str, index: ir.Index) -> str:
        text = index_text(index, self.variables, self.sizes, "xindex", self.ops.indirect_names)
        names = index_names(index)
        if not names:
            text += " + tl.zeros([1], tl.int32)"  # a [1] block like constants (see expressions.constant)
        return self.ops.assign(self.load_text(buffer, text, self.guarded("xmask" if names else None, buffer, index)))

    def emit(self) -> KernelText:
        numel = math.prod(self.kernel.ranges)
        self.ops = TritonOps(self.load, self.counter, mask_of=lambda index: "xmask" if index_names(index) else None)
        memo: dict = {}
        self.guards = LoadGuards([member.body for member in self.members], memo)
        stores = []
        for kernel in self.members:
            value = evaluate(kernel.body, self.ops, memo)
            self.written.append(kernel.output)
            store_index = ir.store_index(kernel, self.buffers[kernel.output])
            bind_indirect(store_index, self.ops, memo)  # a scatter's store index reads index tensors
            index = index_text(store_index, self.variables, self.sizes, "xindex", self.ops.indirect_names) + \
                ("" if index_names(store_index) else " + 0 * xindex")
            stores.append(self.store_text(kernel.output, index, value, kernel.body.dtype, "xmask",
                                          accumulate=kernel.scatter is not None and kernel.scatter.accumulate))
        body = [f"xindex = tl.program_id(0).to({self.index_type(numel)}) * XBLOCK + tl.arange(0, XBLOCK)",
                f"xmask = xindex < {numel}"]
        body += split_flat("xindex", self.variables, self.sizes) + self.ops.lines + stores
        parameters, arguments = self.parameters()
        source = module_source(self.name, parameters + ["XBLOCK: tl.constexpr"], body)
        heavy = len(self.ops.lines) >= HEAVY_POINTWISE
        shapes = heuristics.pointwise_candidates(numel, heavy) if self.autotune else \
            [heuristics.pointwise_shape(numel, heavy)]
        return KernelText(self.name, source, arguments, shapes)


class RowWriter(Writer):
    """A reduction or a LoopGroup; see the module docstring."""

    def __init__(self, group: ir.LoopGroup, buffers: dict[str, ir.Buffer]):
        super().__init__(buffers)
        self.group = group
        self.outer = len(group.ranges)
        self.outer_names = {v.name for v in group.variables}
        self.persistent = is_persistent(group)
        self.registers: dict[str, str] = {}  # buffer -> the variable holding its value for this lane/row
        self.producers: dict[str, object] = {}
        self.loaded: dict[tuple, str] = {}  # (buffer, index text, mask, lane sizes) -> variable
        self.member = None
        self.sharing = False  # in `shared_loop`: a lane's values of earlier members are in registers

    # -- loads ----------------------------------------------------------------------
    def mask_for(self, names: set[str]) -> str | None:
        outer, inner = bool(names & self.outer_names), bool(names - self.outer_names)
        return {(True, True): "xmask & rmask", (True, False): "xmask", (False, True): "rmask"}.get((outer, inner))

    def load(self, buffer: str, index: ir.Index) -> str:
        if buffer in self.registers and in_registers(ir.Load(buffer, index, ""), self.producers[buffer],
                                                      self.member, self.group, self.persistent or self.sharing):
            return self.registers[buffer]
        text = self.index_text(index, self.member)
        if not index_names(index):
            text += " + tl.zeros([1, 1], tl.int32)"  # a [1, 1] block like constants (see expressions.constant)
        mask = self.guarded(self.mask_for(index_names(index)), buffer, index)
        if not (self.persistent or self.sharing) or buffer in self.producers:
            return self.ops.assign(self.load_text(buffer, text, mask))
        # The same element another member loaded (same text, or the same linear form, as
        # members sum their terms in their own order, over the same lane sizes, so the same
        # variables): its variable is still in scope, a persistent kernel has no loops (and a
        # shared loop is one).
        form = linear_form(index)
        sizes = lanes(self.member, self.outer)[1]
        keys = [(buffer, text, mask, sizes)] + \
            ([] if form is None else [(buffer, tuple(sorted(form[0].items())), form[1], mask, sizes)])
        known = next((self.loaded[key] for key in keys if key in self.loaded), None)
        value = known or self.ops.assign(self.load_text(buffer, text, mask))
        self.loaded.update((key, value) for key in keys)
        return value

    def index_text(self, index: ir.Index, member) -> str:
        variables, sizes = lanes(member, self.outer)
        flat = f"(xindex * {math.prod(sizes)} + rindex)" if variables else "xindex"
        return index_text(index, self.group.variables + tuple(variables), self.group.ranges + tuple(sizes), flat,
                          self.ops.indirect_names)

    def needs_barrier(self, member) -> bool:
        """Does `member` read from memory what an earlier member of this kernel wrote?"""
        return any(load.buffer in self.producers and not (
            load.buffer in self.registers and
            in_registers(load, self.producers[load.buffer], member, self.group, self.persistent))
            for load in expression_loads(member.body))

    # -- members --------------------------------------------------------------------
    def emit(self) -> KernelText:
        group = self.group
        rows, length = math.prod(group.ranges), row_length(group)
        body = [f"xindex = tl.program_id(0).to({self.index_type(rows * max(length, 1))}) * XBLOCK"
                f" + tl.arange(0, XBLOCK)[:, None]",
                f"xmask = xindex < {rows}"]
        body += split_flat("xindex", group.variables, group.ranges)
        body.append("rbase = tl.arange(0, RBLOCK)[None, :]")
        shared = self.shared_members()
        if shared:
            body += self.shared_loop(shared)
        for member in group.members[len(shared):]:
            self.member = member
            if self.needs_barrier(member):
                body.append("tl.debug_barrier()  # earlier members' stores are visible to the whole program")
            body.append(f"# {member.name}: {member.output}")
            if isinstance(member, ir.Reduction):
                body += self.reduction(member)
            else:
                body += self.pointwise(member)
            self.producers[member.output] = member
        parameters, arguments = self.parameters()
        source = module_source(group.name, parameters + ["XBLOCK: tl.constexpr", "RBLOCK: tl.constexpr"], body)
        if self.persistent:
            shapes = heuristics.persistent_candidates(rows, length) if self.autotune else \
                [heuristics.persistent_reduction_shape(rows, length)]
        elif is_column_reduction(group):
            xblock, rblock, warps = COLUMN_TILE
            xblock = min(xblock, heuristics.next_power_of_2(rows))
            rblock = min(rblock, heuristics.next_power_of_2(length))
            warps = min(warps, max(1, xblock * rblock // 256))
            shapes = [heuristics.LaunchShape(xblock=xblock, rblock=rblock, num_warps=warps,
                                             grid=(heuristics.ceil_div(rows, xblock), 1, 1))]
        else:
            shapes = heuristics.looped_reduction_configs(rows, length)
        return KernelText(group.name, source, arguments, shapes)

    def shared_members(self) -> tuple:
        """The lane members of a column reduction and the reductions after them that read no
        reduction's result: one loop computes them all (`shared_loop`)."""
        leading = lane_members(self.group)
        if not leading or self.persistent or not is_column_reduction(self.group):
            return ()
        produced = {m.output: m for m in leading}
        if any(load.buffer in produced for m in leading for load in expression_loads(m.body)):
            return ()  # (another lane's value, stored in the same loop: the usual loops and a barrier)
        reductions = []
        for member in self.group.members[len(leading):]:
            reduced = {m.output for m in reductions}
            if not isinstance(member, ir.Reduction) or member.reduction_type not in SHARED_REDUCTIONS or any(
                    load.buffer in reduced or load.buffer in produced and
                    not same_lane(load.index, member, produced[load.buffer], self.group)
                    for load in expression_loads(member.body)):
                break
            reductions.append(member)
        return leading + tuple(reductions) if reductions else ()

    def shared_loop(self, members) -> list[str]:
        """Lane members and reductions in one loop over the lanes: each member's value of a
        tile is computed (and stored) once, and a reduction adds it from registers, instead of
        reading back from memory what an earlier loop of the kernel stored."""
        loop, indent = self.row_loop(members[0])
        before, after = [], []
        self.sharing = True
        for position, member in enumerate(members):
            self.member = member
            if position:  # (this member's own names for the lanes)
                loop += [indent + line for line in split_flat("rindex", *lanes(member, self.outer))]
            loop.append(f"{indent}# {member.name}: {member.output}")
            statements, value = self.body_value(member)
            loop += [indent + line for line in statements]
            if isinstance(member, ir.Pointwise):
                self.registers[member.output] = value
                loop += [indent + line for line in self.stored(member, value)]
            else:
                accumulator = f"acc{position}"
                kind, dtype = member.reduction_type, self.accumulator_type(member)
                identity = expressions.reduction_identity(kind, IR_TO_TORCH[register_dtype(member.body.dtype)])
                masked = f"tmp{next(self.counter)}"
                loop.append(f"{indent}{masked} = tl.where(xmask & rmask, {value}, {identity})")
                before += [named(line, accumulator) for line in self.accumulators(kind, identity, dtype)]
                loop += [indent + named(line, accumulator) for line in self.combine(kind, masked, dtype)]
                result = f"tmp{next(self.counter)}"
                after += [named(line, accumulator) for line in self.reduce_row(kind, "acc", "", "", result)]
                after += self.reduced(member, result)
            self.producers[member.output] = member
        self.sharing = False
        for member in members:  # (a lane's value is gone after the loop: later members read memory)
            if isinstance(member, ir.Pointwise):
                del self.registers[member.output]
        return before + loop + after

    def row_loop(self, member) -> tuple[list[str], str]:
        """Lines opening the member's stretch over the row, and the indent of its body."""
        variables, sizes = lanes(member, self.outer)
        numel = math.prod(sizes)
        if self.persistent:
            lines, indent = ["rindex = rbase"], ""
        else:
            lines, indent = [f"for roffset in range(0, {numel}, RBLOCK):"], "    "
            lines.append(f"{indent}rindex = roffset + rbase")
        lines.append(f"{indent}rmask = rindex < {numel}")
        lines += [indent + line for line in split_flat("rindex", variables, sizes)]
        return lines, indent

    def body_value(self, member) -> tuple[list[str], str]:
        self.ops = TritonOps(self.load, self.counter, "[1, 1]", lambda index: self.mask_for(index_names(index)))
        memo: dict = {}
        self.guards = LoadGuards([member.body], memo)
        value = evaluate(member.body, self.ops, memo)
        return self.ops.lines, value

    def pointwise(self, member: ir.Pointwise) -> list[str]:
        lines, indent = self.row_loop(member)
        statements, value = self.body_value(member)
        lines += [indent + line for line in statements]
        if self.persistent:
            self.registers[member.output] = value
        return lines + [indent + line for line in self.stored(member, value)]

    def stored(self, member: ir.Pointwise, value: str) -> list[str]:
        """The store of a pointwise member's `value` (none for row-local scratch)."""
        if member.output in self.group.local:
            return []
        self.written.append(member.output)
        index = ir.store_index(member, self.buffers[member.output])
        names = index_names(index)
        pad = ("" if names & self.outer_names else " + 0 * xindex") + \
            ("" if names - self.outer_names else " + 0 * rindex")
        return [self.store_text(member.output, self.index_text(index, member) + pad, value, member.body.dtype,
                                "xmask & rmask")]

    def reduction(self, member: ir.Reduction) -> list[str]:
        kind = member.reduction_type
        value_dtype = member.body.dtype
        identity = expressions.reduction_identity(kind, IR_TO_TORCH[register_dtype(value_dtype)])
        accumulator = self.accumulator_type(member)
        lines, indent = self.row_loop(member)
        statements, value = self.body_value(member)
        lines += [indent + line for line in statements]
        masked = f"tmp{next(self.counter)}"
        lines.append(f"{indent}{masked} = tl.where(xmask & rmask, {value}, {identity})")
        result = f"tmp{next(self.counter)}"
        if self.persistent:
            lines += self.reduce_row(kind, masked, "rindex", "rmask", result)
        else:
            lines[:0] = self.accumulators(kind, identity, accumulator)
            lines += [indent + line for line in self.combine(kind, masked, accumulator)]
            lines += self.reduce_row(kind, "acc", "acc_index", "acc_index != NO_INDEX", result)
        lines += self.reduced(member, result)
        return [line.replace("NO_INDEX", str(NO_INDEX)) for line in lines]

    def reduced(self, member: ir.Reduction, result: str) -> list[str]:
        """A row's reduced `result` divided (mean), rounded to the member's dtype, kept in
        registers for later members and stored (unless row-local)."""
        lines = []
        if member.divisor != 1:
            lines.append(f"{result} = {result} / {float(member.divisor)!r}")
        stored = result
        if register_dtype(member.dtype) != member.dtype:
            stored = f"tmp{next(self.counter)}"
            lines.append(f"{stored} = {round_to(result, member.dtype)}.to(tl.float32)")
        self.registers[member.output] = stored
        if member.output not in self.group.local:
            self.written.append(member.output)
            index = ir.strided_index(member.variables, contiguous_strides(member.ranges))
            pad = "" if index_names(index) else " + 0 * xindex"
            result_dtype = "int64" if member.reduction_type in ("argmax", "argmin") else register_dtype(member.dtype)
            text = index_text(index, self.group.variables, self.group.ranges, "xindex")
            lines.append(self.store_text(member.output, text + pad, stored, result_dtype, "xmask"))
        return lines

    @staticmethod
    def accumulator_type(member: ir.Reduction) -> str:
        if member.reduction_type == "any":
            return "tl.int8"
        return triton_type(member.body.dtype)

    @staticmethod
    def accumulators(kind: str, identity: str, accumulator: str) -> list[str]:
        lines = [f"acc = tl.full([XBLOCK, RBLOCK], {identity}, {accumulator})"]
        if kind in ("argmax", "argmin"):
            lines.append("acc_index = tl.full([XBLOCK, RBLOCK], NO_INDEX, tl.int32)")
        return lines

    @staticmethod
    def combine(kind: str, masked: str, accumulator: str) -> list[str]:
        value = f"{masked}.to({accumulator})"
        if kind == "sum":
            return [f"acc = acc + {value}"]
        if kind == "prod":
            return [f"acc = acc * {value}"]
        if kind == "any":
            return [f"acc = tl.maximum(acc, {value})"]
        if kind in ("max", "min"):
            return [f"acc = _{'maximum' if kind == 'max' else 'minimum'}_propagating_nan(acc, {value})"]
        better = ">" if kind == "argmax" else "<"
        # A lane keeps its first best element; NaN wins (eager's argmax returns the first NaN).
        return [f"take = (xmask & rmask) & (({value} {better} acc) | (({value} != {value}) & (acc == acc))"
                f" | (acc_index == NO_INDEX))",
                f"acc = tl.where(take, {value}, acc)",
                "acc_index = tl.where(take, rindex, acc_index)"]

    @staticmethod
    def reduce_row(kind: str, values: str, positions: str, valid: str, result: str) -> list[str]:
        """`result` = the reduction of each row of the [XBLOCK, RBLOCK] block `values`."""
        if kind == "sum":
            return [f"{result} = tl.sum({values}, 1)[:, None]"]
        if kind == "prod":
            return [f"{result} = tl.reduce({values}, 1, _multiply)[:, None]"]
        if kind == "any":
            return [f"{result} = tl.max({values}.to(tl.int8), 1)[:, None] != 0"]
        if kind in ("max", "min"):
            combine = "_maximum_propagating_nan" if kind == "max" else "_minimum_propagating_nan"
            return [f"{result} = tl.reduce({values}, 1, {combine})[:, None]"]
        combine = "_maximum_propagating_nan" if kind == "argmax" else "_minimum_propagating_nan"
        return [f"best = tl.reduce({values}, 1, {combine})[:, None]",
                f"hits = (({values} == best) | (({values} != {values}) & (best != best))) & ({valid})",
                f"{result} = tl.min(tl.where(hits, {positions}, NO_INDEX), 1)[:, None].to(tl.int64)"]
