"""The IR verifier: checks the invariants emitters rely on.

Takes an `ir.Program` (as lowered, or after `schedule.fuse_loops`); returns
nothing, or raises `IRError` naming the step and the broken rule:

  * buffer names are unique, every step writes a declared buffer, and none is
    written twice;
  * every buffer a step reads is an input or constant, or written by an earlier
    step (or, inside a LoopGroup, by an earlier member);
  * a kernel's loop variables match its ranges, and its body uses only its own
    variables; a group's members share its outer ranges and variables;
  * row-local buffers of a group are read by no other step and never returned;
  * each Op's operands are expressions, and every dtype is one the IR knows;
  * every load stays inside its buffer for every value of the loop variables, including
    loads whose value is discarded by a select (emitters load before they select, so
    such a load must still be in bounds: `lowering_views.lower_cat` takes a piece's
    index modulo its size for this reason);
  * an indirect index has an integer value (checked the same way) and a non-empty dimension;
  * a scattering kernel's base is a temporary, outside any group, that no later step reads
    and the program does not return (the kernel updates it in place).

Tests run it on every program they compile; emitters may assume what it checks.
"""

from __future__ import annotations

from torch.utils._pytree import tree_leaves

from . import ir
from .memory import expression_loads, names_read

KNOWN_DTYPES = set(ir.DTYPES) | set(ir.HALF_DTYPES)


class IRError(Exception):
    """A program breaks an invariant of the IR."""


def check_expression(expr: ir.Expr, where: str) -> None:
    stack = [expr]
    while stack:
        node = stack.pop()
        if not isinstance(node, (ir.Load, ir.Constant, ir.IndexValue, ir.Op)):
            raise IRError(f"{where}: {node!r} is not an IR expression")
        if node.dtype not in KNOWN_DTYPES:
            raise IRError(f"{where}: {node} has dtype {node.dtype!r}")
        if isinstance(node, ir.Op):
            stack.extend(node.args)
        if isinstance(node, (ir.Load, ir.IndexValue)):
            for indirect in ir.indirect_indices(node.index):
                if indirect.value.dtype not in ("int64", "int32") or indirect.size <= 0:
                    raise IRError(f"{where}: {indirect} needs an integer value and a dimension of size > 0")
                stack.append(indirect.value)


def index_bounds(index: ir.Index, ranges: dict[str, int]) -> tuple[int, int]:
    """Smallest and largest value of `index` over the loop ranges (interval arithmetic:
    exact for sums and products of non-negative terms, an over-estimate at worst)."""
    if isinstance(index, ir.IndexVar):
        return 0, ranges[index.name] - 1
    if isinstance(index, ir.IndexConst):
        return index.value, index.value
    if isinstance(index, ir.IndirectIndex):  # checked against its dimension by every emitter
        return 0, index.size - 1
    low, high = index_bounds(index.left, ranges)
    right_low, right_high = index_bounds(index.right, ranges)
    if index.op == "add":
        return low + right_low, high + right_high
    if index.op == "mul":
        products = (low * right_low, low * right_high, high * right_low, high * right_high)
        return min(products), max(products)
    if index.op == "floordiv":
        return low // right_high, high // right_low
    if low >= 0 and high < right_low:  # mod: below the divisor, the value is unchanged
        return low, high
    return 0, right_high - 1


def check_bounds(kernel, buffers: dict[str, ir.Buffer], where: str) -> None:
    variables = list(zip(kernel.variables, kernel.ranges))
    if isinstance(kernel, ir.Reduction):
        variables += zip(kernel.reduction_variables, kernel.reduction_ranges)
    ranges = {variable.name: size for variable, size in variables}
    if any(size == 0 for size in ranges.values()):
        return  # the body never runs
    for load in expression_loads(kernel.body):
        if load.buffer not in buffers:
            continue
        low, high = index_bounds(load.index, ranges)
        extent = ir.extent(buffers[load.buffer])
        if low < 0 or high >= extent:
            raise IRError(f"{where}: load({load.buffer}, {load.index}) reaches offsets {low}..{high}, "
                          f"outside the buffer's 0..{extent - 1}")


def check_kernel(kernel, where: str) -> None:
    if len(kernel.variables) != len(kernel.ranges):
        raise IRError(f"{where}: {len(kernel.variables)} loop variables for {len(kernel.ranges)} ranges")
    allowed = {v.name for v in kernel.variables}
    if isinstance(kernel, ir.Reduction):
        if len(kernel.reduction_variables) != len(kernel.reduction_ranges):
            raise IRError(f"{where}: reduction variables do not match reduction ranges")
        allowed |= {v.name for v in kernel.reduction_variables}
    check_expression(kernel.body, where)  # every node an IR expression: variables_of can walk it
    stray = ir.variables_of(kernel.body) - allowed
    if getattr(kernel, "scatter", None) is not None:
        stray |= ir.variables_of(kernel.scatter.index) - allowed
    if getattr(kernel, "store", None) is not None:
        stray |= ir.variables_of(kernel.store) - allowed
    if stray:
        raise IRError(f"{where}: body uses {sorted(stray)}, not loop variables of this kernel")


def check_group(group: ir.LoopGroup, available: set[str], buffers: dict[str, ir.Buffer]) -> None:
    outer = len(group.ranges)
    written = set()
    for member in group.members:
        where = f"{group.name}/{member.name}"
        if tuple(member.ranges[:outer]) != tuple(group.ranges) or \
                tuple(v.name for v in member.variables[:outer]) != tuple(v.name for v in group.variables):
            raise IRError(f"{where}: outer loops {member.ranges[:outer]} differ from the group's {group.ranges}")
        check_kernel(member, where)
        check_bounds(member, buffers, where)
        for load in expression_loads(member.body):
            if load.buffer not in available and load.buffer not in written:
                raise IRError(f"{where}: reads {load.buffer} before it is written")
        written.add(member.output)
    unknown = set(group.local) - written
    if unknown:
        raise IRError(f"{group.name}: row-local {sorted(unknown)} not written by a member")


def verify(program: ir.Program) -> None:
    """Raise IRError if `program` breaks an invariant (see the module docstring)."""
    declared = {}
    for buffer in program.buffers:
        if buffer.name in declared:
            raise IRError(f"buffer {buffer.name} declared twice")
        declared[buffer.name] = buffer
    available = {b.name for b in program.buffers if b.kind in ("input", "constant")}
    local_of: dict[str, str] = {}
    updated: dict[str, str] = {}  # scatter bases -> the step that updated them in place
    for step in program.steps:
        for name in names_read(step):
            if name not in available:
                raise IRError(f"{step.name}: reads {name} before it is written")
            if name in local_of:
                raise IRError(f"{step.name}: reads {name}, row-local to {local_of[name]}")
            if name in updated:
                raise IRError(f"{step.name}: reads {name}, which {updated[name]} updated in place")
        scatter = getattr(step, "scatter", None)
        if isinstance(step, ir.LoopGroup) and any(getattr(m, "scatter", None) is not None for m in step.members):
            raise IRError(f"{step.name}: a scattering kernel in a row group")
        if scatter is not None:
            if declared.get(scatter.base) is None or declared[scatter.base].kind != "temp":
                raise IRError(f"{step.name}: scatters into {scatter.base}, which is not a temporary")
            updated[scatter.base] = step.name
        if isinstance(step, ir.LoopGroup):
            check_group(step, available, declared)
            local_of.update((name, step.name) for name in step.local)
            written = [m.output for m in step.members]
        else:
            if not isinstance(step, ir.Extern):
                check_kernel(step, step.name)
                check_bounds(step, declared, step.name)
            written = [step.output]
        for name in written:
            if name not in declared:
                raise IRError(f"{step.name}: writes undeclared buffer {name}")
            if name in available:
                raise IRError(f"{step.name}: writes {name}, already written")
            available.add(name)
    for leaf in tree_leaves(program.outputs):
        name = leaf if isinstance(leaf, str) else getattr(leaf, "name", None)
        if isinstance(leaf, (str, ir.BufferRef)) and name not in available:
            raise IRError(f"returns {name}, which no step writes")
        if name in local_of:
            raise IRError(f"returns {name}, row-local to {local_of[name]}")
        if name in updated:
            raise IRError(f"returns {name}, which {updated[name]} updated in place")
