"""Pointwise and reduction kernels as C++ functions (uses emitter.ScalarEmitter).

Takes an ir.Pointwise or ir.Reduction and the Program's buffers by name;
returns (C++ function text, buffer names in pointer order).
"""

from __future__ import annotations

import dataclasses
import math

import torch

from .. import ir
from ..ops import bind_indirect, evaluate
from ..memory import expression_loads, in_place_pairs, read_in_place
from ..schedule import linear_form, row_index
from ..values import contiguous_strides
from .hoist import hoist_inner, hoisted_lines
from .loops import memory_order, merge_loops
from .emitter import CTYPES, PARALLEL_THRESHOLD, ScalarEmitter, format_constant, format_index

REDUCTION_INIT = {"sum": "0", "prod": "1", "any": "false"}


CHECK_CLAUSE = " reduction(|:tj_bad)"
"""Kernels that read through an indirect index (`ir.checks_indices`) collect out-of-range
indices in `tj_bad` across threads and SIMD lanes, and return it."""


def loop_nest(variables, ranges, work: int, depth: int, leave_inner: bool,
              checks: bool = False) -> tuple[list[str], str]:
    """The outer loops of a kernel; parallel where the work is large enough and torch runs on
    more than one thread when the graph is compiled (as inductor decides): with one thread an
    OpenMP region only costs its call, and g++ outlines its body into a function where the
    buffers' __restrict__ is lost (loops then vectorise behind runtime aliasing checks)."""
    lines, indent = [], "  "
    outer = len(ranges) - (1 if leave_inner and len(ranges) > 1 else 0)
    if work >= PARALLEL_THRESHOLD and outer > 0 and torch.get_num_threads() > 1:
        lines.append(f"{indent}#pragma omp parallel for" + (f" collapse({outer})" if outer > 1 else "")
                     + (CHECK_CLAUSE if checks else ""))
    loops, indent = for_loops(variables, ranges, indent)
    return lines + loops, indent


def for_loops(variables, ranges, indent: str) -> tuple[list[str], str]:
    """Nested `for`s over variables < ranges, and the indent of their body."""
    lines = []
    for variable, size in zip(variables, ranges):
        lines.append(f"{indent}for (int64_t {variable} = 0; {variable} < {size}L; ++{variable}) {{")
        indent += "  "
    return lines, indent


def closing(indent: str, depth: int) -> list[str]:
    """The closing braces of `depth` loops opened at `indent`."""
    return [indent + "  " * k + "}" for k in reversed(range(depth))]


def head(name: str, checks: bool) -> list[str]:
    """The function's first lines: a checking kernel returns how its index checks went."""
    if checks:
        return [f'extern "C" int64_t {name}(void** pointers) {{', "  int64_t tj_bad = 0;"]
    return [f'extern "C" void {name}(void** pointers) {{']


def tail(checks: bool) -> list[str]:
    return ["  return tj_bad;", "}"] if checks else ["}"]


def signature(name: str, kernel_buffers: list[str], buffers: dict[str, ir.Buffer], written: set[str],
              checks: bool = False) -> list[str]:
    lines = head(name, checks)
    for position, buffer_name in enumerate(kernel_buffers):
        ctype = CTYPES[buffers[buffer_name].dtype]
        qualifier = "" if buffer_name in written else "const "
        lines.append(f"  {qualifier}{ctype}* __restrict__ {buffer_name} = ({qualifier}{ctype}*)pointers[{position}];")
    return lines


def emit_pointwise(kernel: ir.Pointwise, buffers: dict[str, ir.Buffer]) -> tuple[str, list[str]]:
    # A scatter runs on one thread, in order: its indices may repeat (eager's CPU kernels
    # add repeated entries in this order too, so float sums round the same way).
    work = math.prod(kernel.ranges) if kernel.scatter is None else 0
    checks = ir.checks_indices(kernel)
    variables, ranges, body, (store_index,) = kernel.variables, kernel.ranges, kernel.body, \
        (ir.store_index(kernel, buffers[kernel.output]),)
    if kernel.scatter is None:
        variables, ranges = memory_order(variables, ranges, store_index)
        variables, ranges, body, (store_index,) = merge_loops(variables, ranges, body, (store_index,))
    body, hoisted = hoist_inner(body, variables, ranges) if kernel.scatter is None else (body, {})
    prelude, prelude_reads = hoisted_lines(hoisted, variables, ranges, ScalarEmitter, CTYPES)
    loops, indent = loop_nest(variables, ranges, work, 0, leave_inner=True, checks=checks)
    scalar = ScalarEmitter(indent)
    memo: dict = {}
    value = evaluate(body, scalar, memo)
    bind_indirect(store_index, scalar, memo)
    out_type = CTYPES[buffers[kernel.output].dtype]
    operator = "+=" if kernel.scatter is not None and kernel.scatter.accumulate else "="
    target = f"{kernel.output}[{format_index(store_index, scalar.indirect_names)}]"
    body = scalar.lines + [f"{indent}{target} {operator} ({out_type})({value});"]
    names = sorted((scalar.buffers | prelude_reads) - set(hoisted.values()) - {kernel.output}) + [kernel.output]
    text = "\n".join(signature(kernel.name, names, buffers, {kernel.output}, checks) + prelude + loops + body
                     + closing("  ", len(ranges)) + tail(checks))
    return text, names


def merged_reduction(kernel: ir.Reduction, outer: bool = True) -> ir.Reduction:
    """`kernel` with its adjacent reduction loops merged (loops.py), and its outer loops too
    unless `outer` is False (a group member shares them with the group)."""
    if kernel.reduction_type in ("argmax", "argmin"):
        return kernel  # the position it returns counts along one reduced dimension
    variables, ranges, body = kernel.variables, kernel.ranges, kernel.body
    if outer:  # the output is contiguous over them: its index stays linear when they merge
        variables, ranges, body, _ = merge_loops(variables, ranges, body, (),
                                                 dict(zip((v.name for v in kernel.reduction_variables),
                                                          kernel.reduction_ranges)))
    reduction_variables, reduction_ranges, body, _ = merge_loops(
        kernel.reduction_variables, kernel.reduction_ranges, body, (), dict(zip((v.name for v in variables), ranges)))
    return dataclasses.replace(kernel, variables=variables, ranges=ranges, body=body,
                               reduction_variables=reduction_variables, reduction_ranges=reduction_ranges)


def combine(reduction_type: str, accumulator: str, value: str, ctype: str, position: str) -> list[str]:
    if reduction_type == "sum":
        return [f"{accumulator} += {value};"]
    if reduction_type == "prod":
        return [f"{accumulator} *= {value};"]
    if reduction_type == "any":
        return [f"{accumulator} = {accumulator} || (bool){value};"]
    if reduction_type in ("max", "min"):
        # Vectorisable: a plain max/min plus a NaN flag (eager's max propagates NaN).
        compare = ">" if reduction_type == "max" else "<"
        return [f"{accumulator} = ({value} {compare} {accumulator}) ? {value} : {accumulator};",
                f"{accumulator}_nan |= ({value} != {value});"]
    compare = ">" if reduction_type == "argmax" else "<"
    return [f"if (!({accumulator} != {accumulator}) && ({value} {compare} {accumulator} || {value} != {value})) "
            f"{{ {accumulator} = {value}; {accumulator}_index = {position}; }}"]


SIMD_CLAUSES = {"sum": "reduction(+:acc)", "prod": "reduction(*:acc)",
                "max": "reduction(max:acc) reduction(|:acc_nan)", "min": "reduction(min:acc) reduction(|:acc_nan)"}


def reduction_lines(kernel: ir.Reduction, indent: str, emitter_for, store,
                    checks: bool = False) -> tuple[list[str], set[str]]:
    """The accumulation loops of one reduction for the current outer index, and the buffers read.

    emitter_for(indent) makes the scalar emitter; store(value) returns the store statement;
    checks: the function collects index checks in `tj_bad` (a SIMD reduction too)."""
    value_dtype = kernel.body.dtype
    acc_dtype = kernel.dtype if kernel.reduction_type not in ("argmax", "argmin") else value_dtype
    acc_type = "double" if acc_dtype == "float32" and kernel.reduction_type in ("sum", "prod") else CTYPES[acc_dtype]
    if kernel.reduction_type in ("sum", "prod", "any"):
        init = f"({acc_type}){REDUCTION_INIT[kernel.reduction_type]}"
    else:
        largest = kernel.reduction_type in ("min", "argmin")
        init = format_constant(float("inf") if largest else float("-inf"), acc_dtype) if acc_dtype.startswith("float") \
            else f"std::numeric_limits<{acc_type}>::{'max' if largest else 'lowest'}()"
    lines = [f"{indent}{acc_type} acc = {init};", f"{indent}int64_t acc_index = 0;", f"{indent}int acc_nan = 0;"]
    clause = SIMD_CLAUSES.get(kernel.reduction_type)
    loops, inner = for_loops(kernel.reduction_variables, kernel.reduction_ranges, indent)
    if clause and loops:
        # Lets the compiler vectorise the innermost loop by reassociating (as eager's
        # vectorised reductions do); the outer reduction loops keep accumulating into acc.
        loops.insert(-1, f"{inner[:-2]}#pragma omp simd {clause}" + (CHECK_CLAUSE if checks else ""))
    lines += loops
    scalar = emitter_for(inner)
    value = evaluate(kernel.body, scalar)
    position = kernel.reduction_variables[0].name if kernel.reduction_variables else "0"
    lines += scalar.lines + [inner + line for line in combine(kernel.reduction_type, "acc", value, acc_type, position)]
    lines += closing(indent, len(kernel.reduction_ranges))
    result = "acc_index" if kernel.reduction_type in ("argmax", "argmin") else "acc"
    if kernel.reduction_type in ("max", "min") and acc_dtype.startswith("float"):
        result = f"(acc_nan ? std::numeric_limits<{acc_type}>::quiet_NaN() : acc)"
    if kernel.divisor != 1:
        result = f"({result} / ({acc_type}){kernel.divisor})"
    lines.append(f"{indent}{store(result)}")
    return lines, scalar.buffers


def emit_reduction(kernel: ir.Reduction, buffers: dict[str, ir.Buffer]) -> tuple[str, list[str]]:
    kernel = merged_reduction(kernel)
    if column_reduction(kernel):
        return emit_column_reduction(kernel, buffers)
    work = math.prod(kernel.ranges) * math.prod(kernel.reduction_ranges)
    parallel_work = work if math.prod(kernel.ranges) > 1 else 0
    checks = ir.checks_indices(kernel)
    loops, indent = loop_nest(kernel.variables, kernel.ranges, parallel_work, 0, leave_inner=False, checks=checks)
    store_index = format_index(ir.strided_index(kernel.variables, contiguous_strides(kernel.ranges)))
    out_type = CTYPES[kernel.dtype]
    store = lambda result: f"{kernel.output}[{store_index}] = ({out_type})({result});"  # noqa: E731
    body, read = reduction_lines(kernel, indent, ScalarEmitter, store, checks)
    names = sorted(read - {kernel.output}) + [kernel.output]
    text = "\n".join(signature(kernel.name, names, buffers, {kernel.output}, checks) + loops + body
                     + closing("  ", len(kernel.ranges)) + tail(checks))
    return text, names


MAX_COLUMNS = 4096  # accumulators of a column reduction, on the stack (32 KiB of doubles)


def column_reduction(kernel: ir.Reduction) -> bool:
    """Is `kernel` a sum whose reads are contiguous along its last output dimension and strided
    along the reduced ones (a channels-last spatial mean, a bias gradient summed over tokens)?
    Reduced row by row, each output reads one element every stride; emit_column_reduction
    accumulates a whole row of outputs at once instead, its inner loop contiguous."""
    if kernel.reduction_type != "sum" or not kernel.variables or not kernel.reduction_variables \
            or ir.checks_indices(kernel) \
            or kernel.ranges[-1] > MAX_COLUMNS or kernel.ranges[-1] < 8:
        return False
    column, row = kernel.variables[-1].name, kernel.reduction_variables[-1].name
    forms = [linear_form(load.index) for load in expression_loads(kernel.body)]
    if not forms or any(form is None or form[0].get(column, 0) not in (0, 1) for form in forms):
        return False
    return any(form[0].get(column) == 1 and form[0].get(row, 0) not in (0, 1) for form in forms)


def emit_column_reduction(kernel: ir.Reduction, buffers: dict[str, ir.Buffer]) -> tuple[str, list[str]]:
    """for each row of outputs: acc[column] = 0; over the reduced loops, acc[column] += body for
    the whole row (a contiguous, vectorised inner loop); store acc / divisor."""
    acc_type = "double" if kernel.dtype == "float32" else CTYPES[kernel.dtype]
    *outer, column = kernel.variables
    *outer_ranges, columns = kernel.ranges
    work = math.prod(kernel.ranges) * math.prod(kernel.reduction_ranges) if outer else 0
    loops, indent = loop_nest(outer, outer_ranges, work, 0, leave_inner=False)
    lines = loops + [f"{indent}{acc_type} acc[{columns}];",
                     f"{indent}for (int64_t {column} = 0; {column} < {columns}L; ++{column}) acc[{column}] = 0;"]
    reduction_loops, inner = for_loops(kernel.reduction_variables, kernel.reduction_ranges, indent)
    lines += reduction_loops + [f"{inner}#pragma omp simd", f"{inner}for (int64_t {column} = 0; {column} < {columns}L; ++{column}) {{"]
    scalar = ScalarEmitter(inner + "  ")
    value = evaluate(kernel.body, scalar)
    lines += scalar.lines + [f"{inner}  acc[{column}] += {value};", f"{inner}}}"]
    lines += closing(indent, len(kernel.reduction_ranges))
    store_index = format_index(ir.strided_index(kernel.variables, contiguous_strides(kernel.ranges)))
    result = f"acc[{column}]" if kernel.divisor == 1 else f"(acc[{column}] / ({acc_type}){kernel.divisor})"
    lines.append(f"{indent}for (int64_t {column} = 0; {column} < {columns}L; ++{column}) "
                 f"{kernel.output}[{store_index}] = ({CTYPES[kernel.dtype]})({result});")
    lines += closing("  ", len(outer))
    names = sorted(scalar.buffers - {kernel.output}) + [kernel.output]
    return "\n".join(signature(kernel.name, names, buffers, {kernel.output}) + lines + ["}"]), names


class RowEmitter(ScalarEmitter):
    """Scalar emitter inside a LoopGroup: row-local buffers are read at their offset in the row."""

    def __init__(self, indent: str, local: set[str], outer_variables: set[str]):
        super().__init__(indent)
        self.local = local
        self.outer_variables = outer_variables

    def load(self, buffer: str, index: ir.Index) -> str:
        if buffer in self.local:
            return f"{buffer}[{format_index(row_index(index, self.outer_variables))}]"
        return super().load(buffer, index)


def member_lines(member, group: ir.LoopGroup, buffers: dict[str, ir.Buffer], indent: str,
                 checks: bool = False) -> tuple[list[str], set[str]]:
    """One member's loops for the current row of `group`."""
    outer = len(group.ranges)
    local, outer_names = set(group.local), {v.name for v in group.variables}
    emitter_for = lambda level: RowEmitter(level, local, outer_names)  # noqa: E731
    out_type = CTYPES[buffers[member.output].dtype]
    index = ir.store_index(member, buffers[member.output]) if isinstance(member, ir.Pointwise) \
        else ir.strided_index(member.variables, contiguous_strides(member.ranges))
    if member.output in local:
        index = row_index(index, outer_names)
    target = f"{member.output}[{format_index(index)}]"
    if isinstance(member, ir.Reduction):
        return reduction_lines(merged_reduction(member, outer=False), indent, emitter_for,
                               lambda result: f"{target} = ({out_type})({result});", checks)
    row_sizes = dict(zip((v.name for v in group.variables), group.ranges))
    variables, ranges, body, (index,) = merge_loops(member.variables[outer:], member.ranges[outer:], member.body,
                                                    (index,), row_sizes)
    target = f"{member.output}[{format_index(index)}]"
    lines, level = for_loops(variables, ranges, indent)
    scalar = emitter_for(level)
    value = evaluate(body, scalar)
    lines += scalar.lines + [f"{level}{target} = ({out_type})({value});"] + closing(indent, len(ranges))
    return lines, scalar.buffers


def emit_group(group: ir.LoopGroup, buffers: dict[str, ir.Buffer]) -> tuple[str, list[str]]:
    work = sum(math.prod(m.ranges) * (math.prod(m.reduction_ranges) if isinstance(m, ir.Reduction) else 1)
               for m in group.members)
    checks = ir.checks_indices(group)
    loops, indent = loop_nest(group.variables, group.ranges, work if math.prod(group.ranges) > 1 else 0, 0,
                              leave_inner=False, checks=checks)
    body, read = [], set()
    for buffer_name in group.local:
        buffer = buffers[buffer_name]
        member = next(m for m in group.members if m.output == buffer_name)
        size = 1 if isinstance(member, ir.Reduction) else math.prod(member.ranges[len(group.ranges):])
        body.append(f"{indent}alignas(64) {CTYPES[buffer.dtype]} {buffer_name}[{size}];")
    for member in group.members:
        lines, member_reads = member_lines(member, group, buffers, indent + "  ", checks)
        body += [f"{indent}{{  // {member.name}"] + lines + [f"{indent}}}"]
        read |= member_reads
    written = set(group.outputs)
    names = sorted(read - written - set(group.local)) + list(group.outputs)
    return "\n".join(signature(group.name, names, buffers, written, checks) + loops + body
                      + closing("  ", len(group.ranges)) + tail(checks)), names


def emit_program(program: ir.Program) -> tuple[str, dict[str, list[str]]]:
    """C++ source for every kernel of the program, and each kernel's pointer order."""
    from .emitter import PRELUDE
    buffers = {b.name: b for b in program.buffers}
    parts, orders = [PRELUDE], {}
    in_place = in_place_pairs(program)
    for step in program.steps:
        step = read_in_place(step, in_place)  # a kernel writing over what it reads: one pointer
        if isinstance(step, ir.Pointwise):
            text, names = emit_pointwise(step, buffers)
        elif isinstance(step, ir.Reduction):
            text, names = emit_reduction(step, buffers)
        elif isinstance(step, ir.LoopGroup):
            text, names = emit_group(step, buffers)
        else:
            continue
        parts.append(text)
        orders[step.name] = names
    return "\n\n".join(parts) + "\n", orders
