"""Pointwise epilogues of max-autotune's matrix products: the consumer kernel of a product,
offered to its `GemmChoice` to run inside the template's store.

`attach_epilogues(program)` takes a program whose products call `GemmChoice`s
(gemm_choice.choose_gemms) and returns it with each product whose only reader is one
Pointwise kernel P (bias add, activation, cast: element for element, at P's own position)
merged with P into one Extern step: it takes the product's operands and P's other inputs
and returns P's output. Its `GemmChoice` then has an `Epilogue` and times, besides the
product alone (followed by P's own kernel), the template with P's body in its store,
which never writes the product to memory; the fastest wins, so fusion happens only where
timing says so.

The fused kernel computes exactly what the two kernels compute: the product is rounded to
its dtype before P reads it, as the store and load between them would.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

from .. import ir
from ..memory import expression_loads, names_read, names_written, returned_names
from ..ops import evaluate
from ..schedule import linear_form, writes_in_place
from ..values import contiguous_strides
from .emitter import TritonOps, format_index, register_dtype, round_to, triton_type
from .kernels import KernelText, emit_kernel, flat_form, split_flat


@dataclasses.dataclass
class Epilogue:
    """P, the kernel that reads a product element for element, as `GemmChoice` runs it."""

    kernel: ir.Pointwise
    product: ir.Buffer
    """The product's buffer (never allocated once merged: the unfused path makes it per call)."""
    inputs: tuple[str, ...]
    """P's other buffers, in the order the merged Extern passes them after the product's operands."""
    output: ir.Buffer
    separate: KernelText
    """P as its own kernel (the unfused candidates run it after the product)."""
    buffers: dict[str, ir.Buffer]


def attach_epilogues(program: ir.Program, autotune: bool = True) -> ir.Program:
    """See the module docstring; `autotune`: P's own kernel offers its launch shapes too."""
    from .gemm_choice import GemmChoice

    buffers = {b.name: b for b in program.buffers}
    readers: dict[str, list[int]] = {}
    written_at: dict[str, int] = {}
    for position, step in enumerate(program.steps):
        for name in names_read(step):
            readers.setdefault(name, []).append(position)
        for name in names_written(step):
            written_at[name] = position
    returned = returned_names(program)
    steps = list(program.steps)
    dropped: set[int] = set()
    removed: set[str] = set()
    for position, step in enumerate(program.steps):
        if not (isinstance(step, ir.Extern) and isinstance(step.target, GemmChoice)) or step.target.epilogue:
            continue
        consumer = _single_reader(step.output, readers, returned, program.steps)
        if consumer is None or consumer in dropped:  # (a kernel reading two products joins one of them)
            continue
        kernel = program.steps[consumer]
        inputs = _other_inputs(kernel, step.output)
        if not _fusable(kernel, buffers[step.output], inputs, position, consumer, written_at, program.steps):
            continue
        used = {name: buffers[name] for name in (*inputs, step.output, kernel.output)}
        separate = emit_kernel(kernel, buffers, autotune)
        step.target.epilogue = Epilogue(kernel, buffers[step.output], inputs, buffers[kernel.output], separate, used)
        steps[position] = dataclasses.replace(step, args=step.args + tuple(ir.BufferRef(n) for n in inputs),
                                              output=kernel.output)
        dropped.add(consumer)
        removed.add(step.output)
    if not dropped:
        return program
    outputs = {program.steps[p].output for p in dropped}  # now made by the merged Extern steps
    new_buffers = tuple(dataclasses.replace(b, kind="extern") if b.name in outputs else b
                        for b in program.buffers if b.name not in removed)
    return dataclasses.replace(program, buffers=new_buffers,
                               steps=tuple(s for p, s in enumerate(steps) if p not in dropped))


def _single_reader(name: str, readers: dict[str, list[int]], returned: set[str], steps) -> int | None:
    """The position of the one step reading `name`, if it is a plain Pointwise kernel."""
    positions = readers.get(name, [])
    if name in returned or len(positions) != 1:
        return None
    step = steps[positions[0]]
    if not isinstance(step, ir.Pointwise) or step.scatter is not None or ir.checks_indices(step):
        return None
    return positions[0]


def _other_inputs(kernel: ir.Pointwise, product: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(load.buffer for load in expression_loads(kernel.body) if load.buffer != product))


def _fusable(kernel: ir.Pointwise, product: ir.Buffer, inputs, position: int, consumer: int, written_at,
             steps) -> bool:
    """Can P run at the product's position, reading each product element where it is made?"""
    if tuple(product.strides) != contiguous_strides(tuple(product.shape)) or \
            math.prod(product.shape) != math.prod(kernel.ranges):
        return False
    expected = flat_form(kernel.variables, kernel.ranges)
    size_of = {v.name: size for v, size in zip(kernel.variables, kernel.ranges)}
    for load in expression_loads(kernel.body):
        if load.buffer != product.name:
            continue
        form = linear_form(load.index)
        if form is None or form[1] != 0 or {n: c for n, c in form[0].items() if size_of.get(n) != 1} != expected:
            return False  # not the element P itself stands on: the tile does not hold it
    if any(written_at.get(name, -1) > position for name in inputs):
        return False  # computed after the product: P cannot move up to it
    return not any(writes_in_place(step) for step in steps[position + 1:consumer])


# -- the fused store ----------------------------------------------------------------------------
def fused_lines(epilogue: Epilogue, problem, wide: bool) -> tuple[list[str], list[str]]:
    """(P's body evaluated on the tile, stored to P's output; the pointer parameters it adds).

    The template has `value` (float32: the product's tile after alpha and bias), `rm`, `rn`,
    `batch` and `mask`; P's loop variables are recovered from the product's flat position."""
    kernel, product = epilogue.kernel, epilogue.product
    pointer = {name: f"epilogue{i}" for i, name in enumerate(epilogue.inputs)}
    m, n = problem.m, problem.n
    if wide:
        flat = f"batch.to(tl.int64) * {m * n} + rm[:, None].to(tl.int64) * {n} + rn[None, :]"
    else:
        flat = f"batch * {m * n} + rm[:, None] * {n} + rn[None, :]"
    lines = [f"flat = {flat}"] + split_flat("flat", kernel.variables, kernel.ranges)
    product_value = "value"
    if register_dtype(product.dtype) != product.dtype:  # rounded as the store to the product would
        product_value = f"({round_to('value', product.dtype)}).to(tl.float32)"
    lines.append(f"product = {product_value}")

    def load(buffer: str, index: ir.Index) -> str:
        if buffer == product.name:
            return "product"
        text = format_index(index, ops.indirect_names)
        if not ir.variables_of(index):
            text = f"{text} + tl.zeros([1, 1], tl.int32)"
        loaded = f"tl.load({pointer[buffer]} + ({text}){', mask=mask' if ir.variables_of(index) else ''})"
        dtype = epilogue.buffers[buffer].dtype
        if register_dtype(dtype) != dtype:
            loaded += f".to({triton_type(dtype)})"
        return ops.assign(loaded)

    ops = TritonOps(load, itertools.count(), constant_shape="[1, 1]")
    result = evaluate(kernel.body, ops, {})
    lines += ops.lines
    output = epilogue.output
    stored = result
    if output.dtype != kernel.body.dtype or register_dtype(output.dtype) != output.dtype:
        stored = round_to(result, output.dtype)
    store_index = format_index(ir.store_index(kernel, output))
    lines.append(f"tl.store(out + ({store_index}), {stored}, mask=mask)")
    return lines, list(pointer.values())


def epilogue_text(epilogue: Epilogue) -> str:
    """What identifies the epilogue in the fused kernel's name and cache file (its body and layouts,
    not the graph's buffer names)."""
    kernel = epilogue.kernel
    names = {name: f"epilogue{i}" for i, name in enumerate(epilogue.inputs)} | {epilogue.product.name: "product"}
    body = str(kernel.body)
    for name, replacement in sorted(names.items(), key=lambda item: -len(item[0])):
        body = body.replace(f"load({name},", f"load({replacement},")
    layouts = [(epilogue.buffers[n].dtype, epilogue.buffers[n].shape, epilogue.buffers[n].strides)
               for n in epilogue.inputs]
    output = epilogue.output
    return f"{kernel.ranges} {body} {layouts} -> {output.dtype}{output.shape}{output.strides}"
