"""Loop fusion: consecutive kernels that share their outer loops become one `ir.LoopGroup`.

Takes an `ir.Program` whose steps are single kernels (graph.py's output) and
returns one where runs of row-compatible kernels are grouped. A reduction over
the last dimensions and the pointwise work around it (softmax: max, exp, sum,
divide; layer norm: mean, variance, normalise) then iterate the rows once, each
row staying in cache between members, instead of streaming the tensor through
memory once per kernel.

Members of a group share the outer ranges; a member may read what an earlier
member wrote only within the same row, which `reads_within_row` proves from the
index arithmetic (linear forms). Buffers written and read only inside a group
become row-local scratch. Device-independent: an emitter that cannot run groups
simply does not call `fuse_loops`.

Each decision not to fuse is a `FusionRefusal` (which two kernels, why), logged
under TENSORJIT_LOGS=fusion and appended to the `refusals` list a caller passes.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from .. import logs
from . import ir

from .memory import expression_loads, names_read, names_written, returned_names
from .squeeze import substitute
from .values import contiguous_strides

ITEMSIZE = {"float32": 4, "float64": 8, "int64": 8, "int32": 4, "bool": 1}
LinearForm = tuple[dict[str, int], int]  # {variable: coefficient}, constant
MAX_LOCAL_BYTES = 1 << 17  # row-local scratch per group: stays in L2 and on a thread's stack


@dataclass(frozen=True, slots=True)
class FusionRefusal:
    """`second` did not join the group (or kernel) that `first` ends, because of `reason`."""

    first: str
    second: str
    reason: str

    def __str__(self) -> str:
        return f"not fusing {self.second} after {self.first}: {self.reason}"


def linear_form(index: ir.Index) -> LinearForm | None:
    """index as sum(coefficient * variable) + constant, or None if it is not linear."""
    if isinstance(index, ir.IndexVar):
        return {index.name: 1}, 0
    if isinstance(index, ir.IndexConst):
        return {}, index.value
    if isinstance(index, ir.IndirectIndex) or index.op not in ("add", "mul"):
        return None
    left, right = linear_form(index.left), linear_form(index.right)
    if left is None or right is None:
        return None
    if index.op == "add":
        terms = dict(left[0])
        for name, coefficient in right[0].items():
            terms[name] = terms.get(name, 0) + coefficient
        return {n: c for n, c in terms.items() if c}, left[1] + right[1]
    for (terms, constant), (other_terms, scale) in ((left, right), (right, left)):
        if not other_terms:
            return {n: c * scale for n, c in terms.items() if c * scale}, constant * scale
    return None


def reads_within_row(load_index: ir.Index, producer, outer: int, reader_inner: dict[str, int]) -> bool:
    """Does every read at `load_index` land in the row of `producer`'s output that the
    current outer index owns? `reader_inner` maps the reader's inner variables to their sizes."""
    if is_permuted(producer):
        return reads_stored_elements(load_index, producer, outer, reader_inner)
    form = linear_form(load_index)
    if form is None:
        return False
    terms, constant = form
    ranges = producer.ranges
    strides = contiguous_strides(ranges)
    row_size = math.prod(ranges[outer:])
    for variable, stride in zip(producer.variables[:outer], strides[:outer]):
        if terms.pop(variable.name, 0) != stride:
            return False
    lowest = highest = constant
    for name, coefficient in terms.items():
        if name not in reader_inner:
            return False  # depends on a variable outside this row's loops
        span = coefficient * (reader_inner[name] - 1)
        lowest, highest = lowest + min(span, 0), highest + max(span, 0)
    return 0 <= lowest and highest < row_size


def is_permuted(member) -> bool:
    """Does `member` store its elements other than row-major over its loops (`permuted_to_rows`:
    a channel's elements of an NCHW tensor, looped channel first)?"""
    if not isinstance(member, ir.Pointwise) or member.store is None:
        return False
    expected = {v.name: stride for v, stride, size in
                zip(member.variables, contiguous_strides(member.ranges), member.ranges) if size != 1}
    form = linear_form(member.store)
    return form is None or form[1] != 0 or \
        {name: c for name, c in form[0].items() if name in expected} != expected


def reads_stored_elements(load_index: ir.Index, producer, outer: int, reader_inner: dict[str, int]) -> bool:
    """`reads_within_row` for a producer that does not store row-major: every address read is
    one the producer stores in the same row when the row terms and the constant agree and each
    inner term of the read matches its own inner term of the store (same coefficient, a range
    at least as long)."""
    load, store = linear_form(load_index), linear_form(producer.store)
    if load is None or store is None or load[1] != store[1]:
        return False
    load_terms, store_terms = dict(load[0]), dict(store[0])
    for variable in producer.variables[:outer]:
        if load_terms.pop(variable.name, 0) != store_terms.pop(variable.name, 0):
            return False
    sizes = {v.name: size for v, size in zip(producer.variables[outer:], producer.ranges[outer:])}
    for name, coefficient in load_terms.items():
        if name not in reader_inner:
            return False  # depends on a variable outside this row's loops
        if reader_inner[name] == 1:
            continue
        match = next((p for p, c in store_terms.items() if c == coefficient and sizes.get(p, 0) >= reader_inner[name]),
                     None)
        if match is None:
            return False
        del store_terms[match]
    return True


def inner_variables(kernel, outer: int) -> dict[str, int]:
    if isinstance(kernel, ir.Reduction):
        return {v.name: size for v, size in zip(kernel.reduction_variables, kernel.reduction_ranges)}
    return {v.name: size for v, size in zip(kernel.variables[outer:], kernel.ranges[outer:])}


def fit_refusal(kernel, ranges: tuple[int, ...]) -> str | None:
    """Why `kernel` cannot run as a member of a group over `ranges` (None: it can). A member
    whose output is not laid out row-major over its loops carries its store index
    (`with_store`, `permuted_to_rows`): `reads_within_row` reads such a member by it."""
    if isinstance(kernel, ir.Reduction):
        if kernel.ranges == ranges:
            return None
        return f"it keeps ranges {list(kernel.ranges)}, the rows are {list(ranges)}"
    if getattr(kernel, "scatter", None) is not None:
        return "it writes through an index tensor (scatter), not row by row"
    if not isinstance(kernel, ir.Pointwise):
        return "it is an ATen call (Extern), not a loop kernel"
    if len(kernel.ranges) >= len(ranges) and kernel.ranges[:len(ranges)] == ranges:
        return None  # (equal ranges: one element per row, a reduction's epilogue)
    return f"its ranges {list(kernel.ranges)} do not extend the rows {list(ranges)}"


def over_rows(kernel, ranges: tuple[int, ...], buffers: dict[str, ir.Buffer]):
    """`kernel` re-expressed to loop over `ranges` first when its first loop runs over those
    rows flattened (a view between a reduction and its epilogue: layer norm's output
    reshaped to [rows, features] for a matrix product); otherwise `kernel` itself. Its old
    first variable is a linear form of the row variables, so row reads stay provable and
    the store keeps its address (`Pointwise.store`)."""
    if not isinstance(kernel, ir.Pointwise) or kernel.scatter is not None or len(ranges) < 2 \
            or len(kernel.ranges) < 2 or kernel.ranges[0] != math.prod(ranges):
        return kernel
    rows = tuple(ir.IndexVar(f"i{d}") for d in range(len(ranges)))
    inner = tuple(ir.IndexVar(f"i{len(ranges) + d}") for d in range(len(kernel.ranges) - 1))
    mapping = {kernel.variables[0].name: ir.strided_index(rows, contiguous_strides(ranges))}
    mapping.update({old.name: new for old, new in zip(kernel.variables[1:], inner)})
    memo: dict = {}
    store = substitute(ir.store_index(kernel, buffers[kernel.output]), mapping, memo)
    return ir.Pointwise(kernel.name, kernel.output, ranges + kernel.ranges[1:],
                        substitute(kernel.body, mapping, memo), rows + inner, None, store)


def permuted_to_rows(kernel, ranges: tuple[int, ...], buffers: dict[str, ir.Buffer], anchor: dict[str, int],
                     row_coefficients: tuple[int, ...]):
    """`kernel` with its loops reordered so that the group's rows come first (batch norm's
    normalisation over (N, C, H, W) joining the statistics' group over channels: loops C, N,
    H, W), storing where it did; otherwise `kernel` itself. Row k is the loop whose
    coefficient in `anchor` (a linear form over the kernel's variables) is
    `row_coefficients[k]`, with the row's size: the reads and writes that tie the kernel to
    the group say which of its loops are the rows. `join_refusal` checks the result."""
    if not isinstance(kernel, ir.Pointwise) or kernel.scatter is not None or len(kernel.ranges) <= len(ranges):
        return kernel
    size = {v.name: extent for v, extent in zip(kernel.variables, kernel.ranges)}
    row_names: list[str] = []
    for extent, coefficient in zip(ranges, row_coefficients):
        candidates = [name for name, c in anchor.items()
                      if c == coefficient and size.get(name) == extent and name not in row_names]
        if len(candidates) != 1:
            return kernel
        row_names.append(candidates[0])
    store_index = ir.store_index(kernel, buffers[kernel.output])
    store = linear_form(store_index)
    if store is None or any(store[0].get(name) == 1 for name in row_names):
        # Rows over its unit-stride loop (channels of an NHWC tensor): each row's elements would
        # lie a row apart in memory; such statistics are column reductions, tiled across rows.
        return kernel
    rest = [(v, extent) for v, extent in zip(kernel.variables, kernel.ranges) if v.name not in row_names]
    rows = tuple(ir.IndexVar(f"i{d}") for d in range(len(ranges)))
    inner = tuple(ir.IndexVar(f"i{len(ranges) + d}") for d in range(len(rest)))
    mapping = dict(zip(row_names, rows))
    mapping.update({old.name: new for (old, _), new in zip(rest, inner)})
    memo: dict = {}
    return ir.Pointwise(kernel.name, kernel.output, ranges + tuple(extent for _, extent in rest),
                        substitute(kernel.body, mapping, memo), rows + inner, None,
                        substitute(store_index, mapping, memo))


def with_store(kernel, buffers: dict[str, ir.Buffer]):
    """A pointwise kernel whose output eager lays out permuted (not row-major over its loops)
    with its store index spelled out, so that a group reads it by where it stores
    (`reads_stored_elements`)."""
    if isinstance(kernel, ir.Pointwise) and kernel.store is None and kernel.scatter is None \
            and kernel.output in UNGROUPABLE[0]:
        return dataclasses.replace(kernel, store=ir.store_index(kernel, buffers[kernel.output]))
    return kernel


def after_rows(kernel, members: list, ranges: tuple[int, ...], buffers: dict[str, ir.Buffer]):
    """`kernel`, about to follow `members` in a group over `ranges`, looped rows first: flattened
    rows (`over_rows`) or its loops reordered after how it reads a reduction's results."""
    kernel = with_store(over_rows(kernel, ranges, buffers), buffers)
    if not isinstance(kernel, ir.Pointwise):
        return kernel
    results = {m.output for m in members if isinstance(m, ir.Reduction)}
    for load in expression_loads(kernel.body):
        form = linear_form(load.index) if load.buffer in results else None
        if form is not None:  # (which loop reads the row's result says which loop is the row)
            candidate = permuted_to_rows(kernel, ranges, buffers, form[0], contiguous_strides(ranges))
            if candidate is not kernel:
                return candidate
    return kernel


def before_rows(kernel, reduction: ir.Reduction, buffers: dict[str, ir.Buffer]):
    """`kernel`, a producer of `reduction`'s input about to join its group, looped rows first:
    flattened rows (`over_rows`) or its loops reordered after how the reduction reads it."""
    ranges = reduction.ranges
    kernel = with_store(over_rows(kernel, ranges, buffers), buffers)
    if not isinstance(kernel, ir.Pointwise) or kernel.scatter is not None:
        return kernel
    store = linear_form(ir.store_index(kernel, buffers[kernel.output]))
    for load in expression_loads(reduction.body):
        form = linear_form(load.index) if load.buffer == kernel.output else None
        if form is not None and store is not None:
            coefficients = tuple(form[0].get(v.name, 0) for v in reduction.variables)
            candidate = permuted_to_rows(kernel, ranges, buffers, store[0], coefficients)
            if candidate is not kernel:
                return candidate
    return kernel


def fits(kernel, ranges: tuple[int, ...]) -> bool:
    return fit_refusal(kernel, ranges) is None


def join_refusal(kernel, members: list, ranges: tuple[int, ...]) -> str | None:
    """Why `kernel` cannot join a group of `members` over `ranges` (None: it can)."""
    reason = fit_refusal(kernel, ranges)
    if reason is not None:
        return reason
    written = {m.output: m for m in members}
    outer = len(ranges)
    reader_inner = inner_variables(kernel, outer)
    for load in expression_loads(kernel.body):
        producer = written.get(load.buffer)
        if producer is not None and not reads_within_row(load.index, producer, outer, reader_inner):
            return f"it reads {load.buffer} at {load.index}, outside the current row"
    return None


def row_elements(kernel, outer: int) -> int:
    """Elements `kernel` writes per row of a group with `outer` outer dimensions."""
    return 1 if isinstance(kernel, ir.Reduction) else math.prod(kernel.ranges[outer:])


def local_buffers(members: list, outer: int, read_outside: set[str], itemsize: dict[str, int]) -> tuple[str, ...]:
    """Outputs of members that nothing outside the group reads: one row of each suffices."""
    local, total = [], 0
    for member in members:
        size = row_elements(member, outer) * itemsize[member.output]
        if member.output not in read_outside and total + size <= MAX_LOCAL_BYTES:
            local.append(member.output)
            total += size
    return tuple(local)


def row_index(index: ir.Index, outer_variables: set[str]) -> ir.Index:
    """`index` with the outer variables set to 0: the offset inside the current row."""
    if isinstance(index, ir.IndexVar):
        return ir.IndexConst(0) if index.name in outer_variables else index
    if isinstance(index, (ir.IndexConst, ir.IndirectIndex)):
        return index  # an indirect index is never a row-local read (not linear: fuse_loops refuses it)
    left, right = row_index(index.left, outer_variables), row_index(index.right, outer_variables)
    return ir.index_add(left, right) if index.op == "add" else ir.index_mul(left, right)


def permuted_in_memory(program: ir.Program) -> ir.Program:
    """For an emitter whose row-local scratch is an array indexed by a member's offset in the
    row (`row_index` of its store, C++): permuted members (`permuted_to_rows`) store at offsets
    beyond the row's extent, so they stay in memory. (Triton keeps scratch in registers, lane
    by lane: `triton.kernels.prepare_groups` decides there.)"""
    steps = []
    for step in program.steps:
        if isinstance(step, ir.LoopGroup) and step.local:
            permuted = {m.output for m in step.members if is_permuted(m)}
            step = dataclasses.replace(step, local=tuple(name for name in step.local if name not in permuted))
        steps.append(step)
    return dataclasses.replace(program, steps=tuple(steps))


UNGROUPABLE: list[set[str]] = [set()]


def refuse(refusals: list | None, first, second, reason: str) -> None:
    refusal = FusionRefusal(first.name, second.name, reason)
    logs.emit("fusion", str(refusal))
    if refusals is not None:
        refusals.append(refusal)


def writes_in_place(step) -> bool:
    """An ATen call that mutates one of its arguments (what it writes is not its output)."""
    schema = getattr(getattr(step, "target", None), "_schema", None)
    return isinstance(step, ir.Extern) and schema is not None and schema.is_mutable


def hoist_row_epilogues(steps, buffers: dict[str, ir.Buffer]) -> list:
    """Each pointwise kernel over exactly a reduction's rows (batch norm's running-statistics
    update and weight gradient read its batch statistics) moved up to just after that
    reduction, when the reduction is the last step writing what it reads and nothing in
    between writes in place: the graph's order left them after the next convolution, where
    each ran as a launch of its own (363 per densenet121 training step). So is a kernel over
    the reduction's rows and more that can join its group (a layer norm's input gradient,
    which a bfloat16 graph computes after the column sums of the weight and bias gradients)."""
    kept: list = []
    after: dict[int, list] = {}  # position in `kept` -> epilogues moved behind it
    writer: dict[str, int] = {}
    last_in_place = -1
    for step in steps:
        position = None
        if isinstance(step, ir.Pointwise) and step.scatter is None:
            last = max((writer[name] for name in names_read(step) if name in writer), default=-1)
            if last > last_in_place and isinstance(kept[last], ir.Reduction) and last != len(kept) - 1 \
                    and joins_after(step, kept[:last + 1], buffers):
                position = last
        if position is not None:
            after.setdefault(position, []).append(step)
        else:
            position = len(kept)
            kept.append(step)
            if writes_in_place(step):
                last_in_place = position
        for name in names_written(step):
            writer[name] = position
    return [moved for position, step in enumerate(kept) for moved in [step] + after.get(position, [])]


def joins_after(step: ir.Pointwise, kept: list, buffers: dict[str, ir.Buffer]) -> bool:
    """Would `step` join the group of the reduction ending `kept`: over its rows exactly, or
    over rows it extends, reading the results of the kernels just before (those the group
    may hold) only within the row, and no pointwise value among them (whose group form,
    permuted to the rows, is not known yet)?"""
    reduction = kept[-1]
    if step.ranges == reduction.ranges:
        return True
    if not reduction.ranges or not reduction.reduction_ranges:
        return False
    run = []
    for kernel in reversed(kept):
        if not isinstance(kernel, (ir.Pointwise, ir.Reduction)):
            break
        run.append(kernel)
    read = names_read(step)
    if any(isinstance(kernel, ir.Pointwise) and kernel.output in read for kernel in run):
        return False
    reductions = [kernel for kernel in run if kernel.output in read]
    if any(kernel.ranges != reduction.ranges for kernel in reductions):
        return False
    candidate = after_rows(step, reductions, reduction.ranges, buffers)
    return len(candidate.ranges) > len(reduction.ranges) and \
        join_refusal(candidate, reductions, reduction.ranges) is None


def fuse_loops(program: ir.Program, refusals: list | None = None) -> ir.Program:
    """Group runs of row-compatible kernels (see the module docstring); each refusal to fuse
    is logged and appended to `refusals`."""
    UNGROUPABLE[0] = {b.name for b in program.buffers if b.kind == "temp" and
                      tuple(b.strides) != contiguous_strides(b.shape)}
    buffers = {b.name: b for b in program.buffers}
    runs: list[list] = []  # consecutive steps; a run of 2+ kernels with `ranges` becomes a group
    ranges_of: list[tuple[int, ...] | None] = []
    for step in hoist_row_epilogues(program.steps, buffers):
        if runs and ranges_of[-1] is not None:
            candidate = after_rows(step, runs[-1], ranges_of[-1], buffers)
            reason = join_refusal(candidate, runs[-1], ranges_of[-1])
            if reason is None:
                runs[-1].append(candidate)
                continue
            refuse(refusals, runs[-1][-1], step, reason)
        if isinstance(step, ir.Reduction) and step.ranges and step.reduction_ranges:
            # Pointwise kernels just before it whose rows line up join it (producers of its input).
            start, members = len(runs), []
            while start > 0 and ranges_of[start - 1] is None and len(runs[start - 1]) == 1 \
                    and isinstance(runs[start - 1][0], ir.Pointwise):
                candidate = before_rows(runs[start - 1][0], step, buffers)
                if not fits(candidate, step.ranges):
                    break
                members.insert(0, candidate)
                start -= 1
            while members:
                failing = next(((k, reason) for k, m in enumerate(members)
                                if (reason := join_refusal(m, members[:k], step.ranges)) is not None), None)
                if failing is None:
                    break
                k, reason = failing
                refuse(refusals, members[0], step, f"{members[k].name} could not join the producers before "
                                                   f"{step.name}: {reason}")
                members.pop(0)
                start += 1
            del runs[start:], ranges_of[start:]
            reason = join_refusal(step, members, step.ranges)
            if reason is None:
                runs.append(members + [step])
                ranges_of.append(step.ranges)
                continue
            for member in members:
                refuse(refusals, member, step, reason)
            runs.extend([m] for m in members)
            ranges_of.extend(None for _ in members)
            runs.append([step])
            ranges_of.append(step.ranges)
            continue
        runs.append([step])
        ranges_of.append(None)
    return ir.Program(program.buffers, tuple(build_steps(runs, ranges_of, program)),
                      program.inputs, program.outputs)


def build_steps(runs: list[list], ranges_of: list, program: ir.Program) -> list:
    returned = returned_names(program)
    itemsize = {b.name: ITEMSIZE.get(b.dtype, 8) for b in program.buffers}
    # What the runs after each group read, gathered once from the end (per group, it was a
    # pass over every later step: quadratic, 15 of densenet121 training's 21 s of lowering).
    read_after: list[set[str] | None] = [None] * len(runs)
    later_reads: set[str] = set(returned)
    for position in range(len(runs) - 1, -1, -1):
        if ranges_of[position] is not None and len(runs[position]) > 1:
            read_after[position] = set(later_reads)
        for step in runs[position]:
            later_reads |= names_read(step)
    steps = []
    for position, (run, ranges) in enumerate(zip(runs, ranges_of)):
        if ranges is None or len(run) == 1:
            steps.extend(run)
            continue
        read_outside = read_after[position]
        variables = tuple(ir.IndexVar(f"i{d}") for d in range(len(ranges)))
        local = local_buffers(run, len(ranges), read_outside, itemsize)
        steps.append(ir.LoopGroup(f"group{len(steps)}_{run[0].name}", ranges, variables, tuple(run), local))
    return steps
