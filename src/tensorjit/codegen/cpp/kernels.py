"""Pointwise and reduction kernels as C++ functions (uses emitter.ScalarEmitter).

Takes an ir.Pointwise or ir.Reduction and the Program's buffers by name;
returns (C++ function text, buffer names in pointer order).
"""

from __future__ import annotations

import math

from .. import ir
from ..ops import evaluate
from ..values import contiguous_strides
from .emitter import CTYPES, PARALLEL_THRESHOLD, ScalarEmitter, format_constant

REDUCTION_INIT = {"sum": "0", "prod": "1", "any": "false"}


def loop_nest(variables, ranges, work: int, depth: int, leave_inner: bool) -> tuple[list[str], str]:
    lines, indent = [], "  "
    outer = len(ranges) - (1 if leave_inner and len(ranges) > 1 else 0)
    if work >= PARALLEL_THRESHOLD and outer > 0:
        lines.append(f"{indent}#pragma omp parallel for" + (f" collapse({outer})" if outer > 1 else ""))
    for variable, size in zip(variables, ranges):
        lines.append(f"{indent}for (int64_t {variable} = 0; {variable} < {size}L; ++{variable}) {{")
        indent += "  "
    return lines, indent


def signature(name: str, kernel_buffers: list[str], buffers: dict[str, ir.Buffer], output: str) -> list[str]:
    lines = [f'extern "C" void {name}(void** pointers) {{']
    for position, buffer_name in enumerate(kernel_buffers):
        ctype = CTYPES[buffers[buffer_name].dtype]
        qualifier = "" if buffer_name == output else "const "
        lines.append(f"  {qualifier}{ctype}* __restrict__ {buffer_name} = ({qualifier}{ctype}*)pointers[{position}];")
    return lines


def emit_pointwise(kernel: ir.Pointwise, buffers: dict[str, ir.Buffer]) -> tuple[str, list[str]]:
    work = math.prod(kernel.ranges)
    loops, indent = loop_nest(kernel.variables, kernel.ranges, work, 0, leave_inner=True)
    scalar = ScalarEmitter(indent)
    value = evaluate(kernel.body, scalar)
    store_index = ir.strided_index(kernel.variables, contiguous_strides(kernel.ranges))
    from .emitter import format_index
    out_type = CTYPES[buffers[kernel.output].dtype]
    body = scalar.lines + [f"{indent}{kernel.output}[{format_index(store_index)}] = ({out_type})({value});"]
    names = sorted(scalar.buffers - {kernel.output}) + [kernel.output]
    closing = ["  " + "  " * (len(kernel.ranges) - 1 - k) + "}" for k in range(len(kernel.ranges))]
    text = "\n".join(signature(kernel.name, names, buffers, kernel.output) + loops + body + closing + ["}"])
    return text, names


def combine(reduction_type: str, accumulator: str, value: str, ctype: str, position: str) -> list[str]:
    if reduction_type == "sum":
        return [f"{accumulator} += {value};"]
    if reduction_type == "prod":
        return [f"{accumulator} *= {value};"]
    if reduction_type == "any":
        return [f"{accumulator} = {accumulator} || (bool){value};"]
    if reduction_type in ("max", "min"):
        function = "tj_max" if reduction_type == "max" else "tj_min"
        return [f"{accumulator} = {function}<{ctype}>({accumulator}, {value});"]
    compare = ">" if reduction_type == "argmax" else "<"
    return [f"if (!({accumulator} != {accumulator}) && ({value} {compare} {accumulator} || {value} != {value})) "
            f"{{ {accumulator} = {value}; {accumulator}_index = {position}; }}"]


def emit_reduction(kernel: ir.Reduction, buffers: dict[str, ir.Buffer]) -> tuple[str, list[str]]:
    work = math.prod(kernel.ranges) * math.prod(kernel.reduction_ranges)
    parallel_work = work if math.prod(kernel.ranges) > 1 else 0
    loops, indent = loop_nest(kernel.variables, kernel.ranges, parallel_work, 0, leave_inner=False)
    value_dtype = kernel.body.dtype
    acc_dtype = kernel.dtype if kernel.reduction_type not in ("argmax", "argmin") else value_dtype
    acc_type = "double" if acc_dtype == "float32" and kernel.reduction_type in ("sum", "prod") else CTYPES[acc_dtype]
    if kernel.reduction_type in ("sum", "prod", "any"):
        init = f"({acc_type}){REDUCTION_INIT[kernel.reduction_type]}"
    else:
        largest = kernel.reduction_type in ("min", "argmin")
        init = format_constant(float("inf") if largest else float("-inf"), acc_dtype) if acc_dtype.startswith("float") \
            else f"std::numeric_limits<{acc_type}>::{'max' if largest else 'lowest'}()"
    body = loops + [f"{indent}{acc_type} acc = {init};", f"{indent}int64_t acc_index = 0;"]
    inner = indent
    if kernel.reduction_type in ("sum", "prod") and len(kernel.reduction_ranges) == 1:
        # Lets the compiler vectorise the sum by reassociating it (as eager's vectorised sums do).
        body.append(f"{indent}#pragma omp simd reduction({'+' if kernel.reduction_type == 'sum' else '*'}:acc)")
    for variable, size in zip(kernel.reduction_variables, kernel.reduction_ranges):
        body.append(f"{inner}for (int64_t {variable} = 0; {variable} < {size}L; ++{variable}) {{")
        inner += "  "
    scalar = ScalarEmitter(inner)
    value = evaluate(kernel.body, scalar)
    position = kernel.reduction_variables[0].name if kernel.reduction_variables else "0"
    body += scalar.lines + [inner + line for line in combine(kernel.reduction_type, "acc", value, acc_type, position)]
    body += [indent + "  " * (len(kernel.reduction_ranges) - 1 - k) + "}" for k in range(len(kernel.reduction_ranges))]
    from .emitter import format_index
    store_index = format_index(ir.strided_index(kernel.variables, contiguous_strides(kernel.ranges)))
    out_type = CTYPES[kernel.dtype]
    result = "acc_index" if kernel.reduction_type in ("argmax", "argmin") else "acc"
    if kernel.divisor != 1:
        result = f"(acc / ({acc_type}){kernel.divisor})"
    body.append(f"{indent}{kernel.output}[{store_index}] = ({out_type})({result});")
    body += ["  " + "  " * (len(kernel.ranges) - 1 - k) + "}" for k in range(len(kernel.ranges))]
    names = sorted(scalar.buffers - {kernel.output}) + [kernel.output]
    text = "\n".join(signature(kernel.name, names, buffers, kernel.output) + body + ["}"])
    return text, names


def emit_program(program: ir.Program) -> tuple[str, dict[str, list[str]]]:
    """C++ source for every kernel of the program, and each kernel's pointer order."""
    from .emitter import PRELUDE
    buffers = {b.name: b for b in program.buffers}
    parts, orders = [PRELUDE], {}
    for step in program.steps:
        if isinstance(step, ir.Pointwise):
            text, names = emit_pointwise(step, buffers)
        elif isinstance(step, ir.Reduction):
            text, names = emit_reduction(step, buffers)
        else:
            continue
        parts.append(text)
        orders[step.name] = names
    return "\n\n".join(parts) + "\n", orders
