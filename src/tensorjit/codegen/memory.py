"""Memory planning: when each temporary buffer dies, and which later buffer takes its memory.

Takes an ir.Program; `last_uses` returns, per step, the temporary buffer names
whose last reader is that step (the wrapper drops them right after it, so the
allocator hands their memory to later buffers). Inputs, constants and outputs
are never dropped. `reuses` pairs a kernel's output with a dead temporary of the
same shape, strides and dtype: the wrapper hands the dead tensor over instead of
allocating (one allocator call less per pair on every call of the graph).
"""

from __future__ import annotations

import math

from torch.utils._pytree import tree_leaves

from . import ir
from .values import contiguous_strides


def expression_loads(expr: ir.Expr) -> list[ir.Load]:
    loads, stack = [], [expr]
    while stack:
        expr = stack.pop()
        if isinstance(expr, ir.Load):
            loads.append(expr)
        if isinstance(expr, (ir.Load, ir.IndexValue)):  # the loads giving indirect indices
            stack.extend(node.value for node in ir.indirect_indices(expr.index))
        elif isinstance(expr, ir.Op):
            stack.extend(expr.args)
    return loads


def names_read(step) -> set[str]:
    """Buffers in memory that `step` reads (a group's row-local scratch is not in memory)."""
    if isinstance(step, ir.Extern):
        leaves = tree_leaves((step.args, [v for _, v in step.kwargs]))
        return {leaf.name for leaf in leaves if isinstance(leaf, ir.BufferRef)}
    if isinstance(step, ir.LoopGroup):
        written = {m.output for m in step.members}
        return set().union(*(names_read(m) for m in step.members)) - written
    read = {load.buffer for load in expression_loads(step.body)}
    scatter = getattr(step, "scatter", None)
    if scatter is not None:  # its base (updated in place), and the index tensors of its store
        read.add(scatter.base)
        read |= {load.buffer for node in ir.indirect_indices(scatter.index) for load in expression_loads(node.value)}
    return read


def names_written(step) -> tuple[str, ...]:
    return step.outputs if isinstance(step, ir.LoopGroup) else (step.output,)


def returned_names(program: ir.Program) -> set[str]:
    """The buffers the program returns (never freed, never handed over)."""
    return {leaf if isinstance(leaf, str) else getattr(leaf, "name", None) for leaf in tree_leaves(program.outputs)}


def last_uses(program: ir.Program) -> list[list[str]]:
    kinds = {b.name: b.kind for b in program.buffers}
    kept = returned_names(program)
    frees: list[list[str]] = [[] for _ in program.steps]
    for name, position in last_uses_by_name(program).items():
        if kinds.get(name) in ("temp", "extern") and name not in kept:
            frees[position].append(name)
    return frees


def may_alias(extern: ir.Extern) -> bool:
    """Can the result of `extern` share memory with its arguments? ATen ops say so in their
    schema (a view, an in-place op, `out=`); any other callable (our strided views, Python
    functions) is assumed to."""
    schema = getattr(extern.target, "_schema", None)
    if schema is None:
        return True
    return any(argument.alias_info is not None for argument in (*schema.arguments, *schema.returns))


def _alias_classes(program: ir.Program) -> dict[str, set[str]]:
    """Buffer name -> the names whose memory it may share (itself included): an aliasing
    extern's result joins the class of each buffer it reads."""
    classes: dict[str, set[str]] = {b.name: {b.name} for b in program.buffers}
    for step in program.steps:
        if isinstance(step, ir.Extern) and may_alias(step):
            merged = set().union(classes[step.output], *(classes[name] for name in names_read(step)))
            for name in merged:
                classes[name] = merged
        scatter = getattr(step, "scatter", None)
        if scatter is not None:  # updated in place and renamed: the same tensor under two names
            merged = classes[scatter.base] | classes[step.output]
            for name in merged:
                classes[name] = merged
    return classes


def reuses(program: ir.Program, in_place: bool = False) -> dict[str, str]:
    """{kernel output: dead tensor it takes over}. A donor is the one tensor allocated for a
    memory (a temporary, or an ATen call's fresh result) that nothing can still reach: every
    buffer that may alias it (`_alias_classes`: views taken by ATen calls) has been read for
    the last time, at a step before the one writing the receiver (a kernel may read and write
    at once only where it reads what it writes, which this cannot know), and no input,
    constant or returned buffer shares its memory. The receiver has the donor's dtype and
    either its exact layout or, both contiguous, its element count (the wrapper then views
    the donor in the receiver's shape).

    With `in_place` (emitters whose kernels run once per call: C++), a pointwise kernel also
    takes over a tensor it reads for the last time, where it reads it only at the element it
    writes (`reads_only_its_own_element`): a batch norm writes into its convolution's output,
    as inductor's in_out_ptr. The emitter then reads and writes through one pointer
    (`in_place_pairs`)."""
    buffers = {b.name: b for b in program.buffers}
    classes = _alias_classes(program)
    kept = returned_names(program)
    last = last_uses_by_name(program)
    views = {step.output for step in program.steps if isinstance(step, ir.Extern) and may_alias(step)}
    dying: dict[int, list[str]] = {}
    for name, members in classes.items():
        if name in views or buffers[name].dtype == "object" or name not in last:
            continue
        if any(buffers[m].kind not in ("temp", "extern") or m in kept for m in members):
            continue
        if len(members - views) != 1:
            continue  # the memory of several allocations, or renamed in place (a scatter)
        dying.setdefault(max(last.get(m, -1) for m in members), []).append(name)
    free: dict[tuple, list[str]] = {}
    plan: dict[str, str] = {}
    for position, step in enumerate(program.steps):
        if not isinstance(step, ir.Extern) and getattr(step, "scatter", None) is None:
            for name in names_written(step):
                donor = _take(free, buffers[name])
                if donor is None and in_place:
                    donor = next((d for d in dying.get(position, ()) if d not in plan.values()
                                  and reads_only_its_own_element(step, buffers, d, classes[d])), None)
                if donor is not None:
                    plan[name] = donor
        for name in dying.get(position, ()):
            if name not in plan.values():
                free.setdefault(_layout(buffers[name]), []).append(name)
    return plan


def reads_only_its_own_element(step, buffers: dict[str, ir.Buffer], donor: str, aliases: set[str]) -> bool:
    """Does the pointwise `step` read `donor`'s memory only as `donor`, of the layout it
    writes, at the very element it writes? Then each element is read before it is written
    over, and by nothing else."""
    from .schedule import linear_form  # schedule reads this module's helpers
    if not isinstance(step, ir.Pointwise) or step.scatter is not None or step.store is not None:
        return False
    output = buffers[step.output]
    if _layout(buffers[donor]) != _layout(output) or names_read(step) & aliases != {donor}:
        return False
    store = linear_form(ir.store_index(step, output))
    return store is not None and all(linear_form(load.index) == store
                                     for load in expression_loads(step.body) if load.buffer == donor)


def in_place_pairs(program: ir.Program) -> dict[str, str]:
    """{kernel output: the tensor it reads and writes over} of the in-place reuse plan."""
    readers = {step.output: names_read(step) for step in program.steps if isinstance(step, ir.Pointwise)}
    return {receiver: donor for receiver, donor in reuses(program, in_place=True).items()
            if donor in readers.get(receiver, ())}


def last_uses_by_name(program: ir.Program) -> dict[str, int]:
    last: dict[str, int] = {}
    for position, step in enumerate(program.steps):
        for name in names_read(step) | set(names_written(step)):
            last[name] = position
    return last


def _dense(buffer: ir.Buffer) -> bool:
    return tuple(buffer.strides) == contiguous_strides(buffer.shape)


def _layout(buffer: ir.Buffer) -> tuple:
    return (buffer.shape, buffer.strides, buffer.dtype)


def _take(free: dict[tuple, list[str]], receiver: ir.Buffer) -> str | None:
    donors = free.get(_layout(receiver))
    if donors:
        return donors.pop()
    if not _dense(receiver):
        return None
    for (shape, strides, dtype), names in free.items():
        if names and dtype == receiver.dtype and math.prod(shape) == math.prod(receiver.shape) and \
                tuple(strides) == contiguous_strides(shape):
            return names.pop()
    return None
