"""Memory planning: when each temporary buffer dies, and which later buffer takes its memory.

Takes an ir.Program; `last_uses` returns, per step, the temporary buffer names
whose last reader is that step (the wrapper drops them right after it, so the
allocator hands their memory to later buffers). Inputs, constants and outputs
are never dropped. `reuses` pairs a kernel's output with a tensor it takes over
instead of allocating: one it reads for the last time at the very element it
writes (in place: the two never live at once), or one already dead, of the same
layout, where holding it until then raises no peak (`live_bytes`). Emitters read
an in-place donor through the output's pointer (`in_place_pairs`, `read_in_place`).
"""

from __future__ import annotations

import dataclasses
import math

from torch.utils._pytree import tree_leaves

from . import ir
from .externs import strided_view
from .values import contiguous_strides, torch_dtype


def expression_loads(expr: ir.Expr) -> list[ir.Load]:
    """The loads of `expr`, each shared subexpression walked once (expressions are DAGs: walked
    per path, a chain of shared values costs 2**depth), in the order of their first reading."""
    loads, stack, seen = [], [expr], set()
    while stack:
        expr = stack.pop()
        if id(expr) in seen:
            continue
        seen.add(id(expr))
        if isinstance(expr, ir.Load):
            loads.append(expr)
        if isinstance(expr, (ir.Load, ir.IndexValue)):  # the loads giving indirect indices
            stack.extend(node.value for node in ir.indirect_indices(expr.index))
        elif isinstance(expr, ir.Op):
            stack.extend(expr.args)
    return loads


def names_read(step) -> frozenset[str]:
    """Buffers in memory that `step` reads (a group's row-local scratch is not in memory).
    The scheduler, the memory planner and the Triton passes ask it of the same kernels many
    times: a kernel remembers its answer (`ir._remembered`), which walked its body each time
    (a fifth of GPT-2's code generation, CPU and Triton alike)."""
    if isinstance(step, ir.Extern):
        leaves = tree_leaves((step.args, [v for _, v in step.kwargs]))
        return frozenset(leaf.name for leaf in leaves if isinstance(leaf, ir.BufferRef))
    read = getattr(step, "_reads", None)
    if read is None:
        read = frozenset(_walk_reads(step))
        if hasattr(step, "_reads"):
            object.__setattr__(step, "_reads", read)
    return read


def _walk_reads(step) -> set[str]:
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


def launches(program: ir.Program) -> int:
    """The steps that launch device work: every kernel, and every ATen call but a view (a view,
    ours or ATen's, makes a tensor over memory that is there and launches nothing)."""
    return sum(1 for step in program.steps if not (isinstance(step, ir.Extern) and _is_view(step)))


def _is_view(extern: ir.Extern) -> bool:
    return extern.target is strided_view or bool(getattr(extern.target, "is_view", False))


def may_alias(extern: ir.Extern) -> bool:
    """Can the result of `extern` share memory with its arguments? ATen ops say so in their
    schema (a view, an in-place op, `out=`); any other callable (our strided views, Python
    functions) is assumed to."""
    schema = getattr(extern.target, "_schema", None)
    if schema is None:
        return True
    return any(argument.alias_info is not None for argument in (*schema.arguments, *schema.returns))


def fresh_memory(program: ir.Program) -> set[str]:
    """The buffers whose memory no input or constant may share (the call's own allocations)."""
    kinds = {b.name: b.kind for b in program.buffers}
    return {name for name, members in _alias_classes(program).items()
            if all(kinds[m] in ("temp", "extern") for m in members)}


def private_memory(program: ir.Program) -> set[str]:
    """The buffers of the call's own memory that nothing it returns may share: a tensor over
    them is seen by the call alone (the wrapper may alias them without view bookkeeping:
    runtime/buffers.py)."""
    returned = returned_names(program)
    classes = _alias_classes(program)
    fresh = fresh_memory(program)
    return {name for name in fresh if not (classes[name] & returned)}


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
    the last time, and no input, constant or returned buffer shares its memory.

    With `in_place` (emitters that read a donor through their output's pointer: both), a
    kernel first takes over a tensor it reads for the last time where it reads it only at the
    element it writes (`in_place_donor`): a batch norm writes into its convolution's output,
    as inductor's in_out_ptr. That saves memory as well as an allocation: the two tensors
    were alive at once.

    Then a kernel output takes a tensor that died at an earlier step, of its dtype and either
    its exact layout or, both contiguous, its element count (the wrapper then views the donor
    in the receiver's shape), where holding the dead tensor until then raises no peak
    (`live_bytes`: freed, its memory would have served the allocations in between)."""
    buffers = {b.name: b for b in program.buffers}
    classes = _alias_classes(program)
    dying = _dying(program, buffers, classes)
    plan: dict[str, str] = {}
    if in_place:
        for position, step in enumerate(program.steps):
            for name in names_written(step) if _allocates(step) else ():
                donor = in_place_donor(step, name, buffers, dying.get(position, ()), classes, set(plan.values()))
                if donor is not None:
                    plan[name] = donor
    live = live_bytes(program, plan, classes)
    peak = max(live, default=0)
    free: dict[tuple, list[tuple[str, int]]] = {}  # layout -> (dead tensor, the step after which it died)
    for position, step in enumerate(program.steps):
        for name in names_written(step) if _allocates(step) else ():
            if name in plan:
                continue
            taken = _take(free, buffers[name], live, position, peak)
            if taken is not None:
                plan[name], died = taken
                for held in range(died + 1, position):  # alive until handed over, no longer freed
                    live[held] += _bytes(buffers[name])
        for name in dying.get(position, ()):
            if name not in plan.values():
                free.setdefault(_layout(buffers[name]), []).append((name, position))
    return plan


def _allocates(step) -> bool:
    """Does the wrapper allocate what `step` writes (a kernel, not a scatter or an ATen call)?"""
    return not isinstance(step, ir.Extern) and getattr(step, "scatter", None) is None


def _dying(program: ir.Program, buffers: dict[str, ir.Buffer], classes) -> dict[int, list[str]]:
    """step position -> the donors (see `reuses`) whose memory nothing reads after that step."""
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
    return dying


def in_place_donor(step, receiver: str, buffers: dict[str, ir.Buffer], candidates, classes,
                   taken: set[str]) -> str | None:
    """The tensor among `candidates` (dying at `step`) that `step` may write `receiver` over:
    of the receiver's layout, read by the one member writing it (the kernel itself, or a
    Pointwise member of a group), at the element it writes and nowhere else, and by no other
    member; nothing of its memory read through another name. Each element is then read
    before it is written over, by the same program instance, and by nothing else. Not a
    reduction reading whole rows, a transpose, a shifted or broadcast read, a concatenation."""
    from .schedule import linear_form  # schedule reads this module's helpers
    members = step.members if isinstance(step, ir.LoopGroup) else (step,)
    writer = next(m for m in members if m.output == receiver)
    if not isinstance(writer, ir.Pointwise) or writer.scatter is not None:
        return None
    output = buffers[receiver]
    store = linear_form(ir.store_index(writer, output))
    if store is None:
        return None
    others = [m for m in members if m is not writer]
    written = names_written(step)
    for donor in candidates:
        aliases = classes[donor]
        if donor in written:
            continue  # made by another member of this group: the wrapper allocates it for this very launch
        if donor in taken or _layout(buffers[donor]) != _layout(output) or names_read(writer) & aliases != {donor}:
            continue
        if any(names_read(m) & (aliases | {receiver}) for m in others):
            continue  # another member would read it after it is written over (or from registers)
        if all(linear_form(load.index) == store for load in expression_loads(writer.body) if load.buffer == donor):
            return donor
    return None


def in_place_pairs(program: ir.Program) -> dict[str, str]:
    """{kernel output: the tensor it reads and writes over} of the in-place reuse plan. The
    emitters read the donor through the output's pointer (`read_in_place`)."""
    steps = {name: step for step in program.steps if _allocates(step) for name in names_written(step)}
    return {receiver: donor for receiver, donor in reuses(program, in_place=True).items()
            if donor in names_read(steps[receiver])}


def read_in_place(step, pairs: dict[str, str]):
    """`step` with each load of a donor it writes over (`in_place_pairs`) made a load of its
    receiver: the kernel reads and writes through one pointer, as the wrapper hands it one
    tensor. (Two pointers to one memory would break the C++ kernels' __restrict__.)"""
    def renamed(member):
        donor = pairs.get(member.output)
        if donor is None or donor not in names_read(member):
            return member
        return dataclasses.replace(member, body=rename_loads(member.body, donor, member.output, {}))

    if isinstance(step, ir.LoopGroup):
        return dataclasses.replace(step, members=tuple(renamed(m) for m in step.members))
    return renamed(step) if isinstance(step, ir.Pointwise) else step


def rename_loads(expr: ir.Expr, old: str, new: str, memo: dict) -> ir.Expr:
    if expr not in memo:
        if isinstance(expr, ir.Load) and expr.buffer == old:
            memo[expr] = ir.Load(new, expr.index, expr.dtype)
        elif isinstance(expr, ir.Op):
            memo[expr] = ir.Op(expr.name, tuple(rename_loads(a, old, new, memo) for a in expr.args), expr.dtype,
                               expr.extra)
        else:
            memo[expr] = expr
    return memo[expr]


def last_uses_by_name(program: ir.Program) -> dict[str, int]:
    last: dict[str, int] = {}
    for position, step in enumerate(program.steps):
        for name in names_read(step) | set(names_written(step)):
            last[name] = position
    return last


def planned_peak_bytes(program: ir.Program, in_place: bool = False) -> int:
    """The most bytes the wrapper's own allocations hold at once under its plan (`reuses`):
    a measure of the plan (bench/memory_plan.py)."""
    return max(live_bytes(program, reuses(program, in_place), _alias_classes(program)), default=0)


def live_bytes(program: ir.Program, plan: dict[str, str], classes) -> list[int]:
    """Per step, the bytes of the wrapper's allocations alive while it runs: kernel outputs it
    allocates and fresh ATen results, from the step making them until every name that may
    share their memory (`classes`, and the receivers `plan` hands them to) is read for the
    last time, returned ones to the end. Inputs, constants and ATen's workspaces are not
    counted; freed memory counts as ready for any later allocation (an ideal allocator)."""
    buffers = {b.name: b for b in program.buffers}
    last = last_uses_by_name(program)
    kept = returned_names(program)
    owner: dict[str, str] = {}  # buffer -> the allocation whose memory it holds
    made: dict[int, list[str]] = {}
    for position, step in enumerate(program.steps):
        if isinstance(step, ir.Extern) and may_alias(step) or getattr(step, "scatter", None) is not None:
            continue
        for name in names_written(step):
            if name in plan:
                owner[name] = owner.get(plan[name], plan[name])
            elif buffers[name].dtype != "object":
                owner[name] = name
                made.setdefault(position, []).append(name)
    holders: dict[str, set[str]] = {}
    for name, allocation in owner.items():
        holders.setdefault(allocation, set()).update(classes[name])
    end = len(program.steps)
    released: dict[int, list[str]] = {}
    for allocation, names in holders.items():
        position = end if names & kept else max(last.get(name, -1) for name in names)
        released.setdefault(position, []).append(allocation)
    live, total = [], 0
    for position in range(end):
        total += sum(_bytes(buffers[name]) for name in made.get(position, ()))
        live.append(total)
        total -= sum(_bytes(buffers[name]) for name in released.get(position, ()))
    return live


def _bytes(buffer: ir.Buffer) -> int:
    return ir.extent(buffer) * torch_dtype(buffer.dtype).itemsize  # (complex too: not a kernel dtype)


def _dense(buffer: ir.Buffer) -> bool:
    return tuple(buffer.strides) == contiguous_strides(buffer.shape)


def _layout(buffer: ir.Buffer) -> tuple:
    return (buffer.shape, buffer.strides, buffer.dtype)


def _take(free: dict[tuple, list[tuple[str, int]]], receiver: ir.Buffer, live: list[int], position: int,
          peak: int) -> tuple[str, int] | None:
    """A dead tensor for `receiver` (its layout, or both contiguous and of its size), the most
    recently dead first, whose holding until `position` keeps `live` at or under `peak`. Each
    list is in order of death: where its last tensor does not fit, no earlier one does (its
    holding spans the same steps and more)."""
    size = _bytes(receiver)
    choices = [free.get(_layout(receiver), [])]
    if _dense(receiver):
        choices += [names for (shape, strides, dtype), names in free.items()
                    if names is not choices[0] and dtype == receiver.dtype
                    and math.prod(shape) == math.prod(receiver.shape) and tuple(strides) == contiguous_strides(shape)]
    for names in choices:
        if names and max(live[names[-1][1] + 1:position], default=0) + size <= peak:
            return names.pop()
    return None
