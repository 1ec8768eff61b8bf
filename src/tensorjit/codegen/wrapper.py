"""The run-time wrapper: executes an `ir.Program` with compiled kernels and ATen externs.

Takes a Program, a device hook that launches its kernels (`CppLaunch`: a loaded
ctypes library and each kernel's pointer order; Triton's in `triton/compile.py`),
and the graph's constants; returns a callable taking the graph's
positional inputs. The callable is generated Python, one line per step:

    def run(in0, in1):
        if not (in0.stride() == (64, 1) and ...): return fallback(in0, in1)
        buf2 = buffers.new((8, 64), (64, 1), float32, cpu)
        kernel2(pointers2(in0.data_ptr(), buf2.data_ptr()))
        buf3 = extern3(buf2, [1, 0])
        del buf2
        return (buf3,)

Straight-line code keeps each buffer in a local variable and binds every
callable and constant once, so a step costs about a microsecond of Python
instead of a dictionary round trip per argument. Temporaries are dropped
after their last reader (memory.py), so the allocator reuses their memory.
Buffers are allocated, and views of the call's private memory taken, through
runtime/buffers.py (C functions once the native extension is loaded).
"""

from __future__ import annotations

import ctypes
import math
import operator
from typing import Any

import torch

from . import ir
from .externs import overlapping, relaid, strided_view
from .graph import EXACT_LAYOUT_EXTERNS
from .memory import (fresh_memory, last_uses, last_uses_by_name, names_read, names_written, private_memory,
                     returned_names, reuses)
from .values import IR_TO_TORCH, contiguous_strides, torch_dtype
from ..runtime import buffers as runtime_buffers
from ..runtime.persist import CompiledText, rebuild_runner, remember_kernel, set_reduce


class _Source:
    """Lines of the generated function plus the globals they name."""

    def __init__(self):
        self.lines: list[str] = []
        self.globals: dict[str, Any] = {"empty_strided": torch.empty_strided, "buffers": runtime_buffers}

    def constant(self, value: Any, prefix: str = "constant") -> str:
        name = f"{prefix}{len(self.globals)}"
        self.globals[name] = value
        return name

    def literal(self, value: Any) -> str:
        """Python text for an extern argument: buffers by name, plain values inline."""
        if isinstance(value, ir.BufferRef):
            return value.name
        if isinstance(value, (list, tuple)):
            inner = ", ".join(self.literal(v) for v in value)
            return f"[{inner}]" if isinstance(value, list) else f"({inner}{',' if len(value) == 1 else ''})"
        if value is None or isinstance(value, (bool, int, str)) or (isinstance(value, float) and math.isfinite(value)):
            return repr(value)
        return self.constant(value)


class CppLaunch:
    """The device hook for C++ kernels: one ctypes call into the loaded library per kernel.

    A device hook says how the wrapper checks an input's device (`device_test`: text after
    `input.`, true on the right device), where it allocates (`device`, None for the CPU) and the statement that
    launches one kernel (`statement(source, step, names) -> str`, names: the buffers written).
    With `reports_index_errors`, the statement of a kernel that checks indirect indices
    (`ir.checks_indices`) is an expression, true when an index was out of range."""

    device_test = "is_cpu"
    device = None
    reports_index_errors = True
    writes_in_place = True  # a kernel may write over what it reads (memory.reuses; emit_program reads it so)

    def __init__(self, library, orders: dict):
        self.library = library
        self.orders = orders

    def statement(self, source: "_Source", step, written: list[str]) -> str:
        function = getattr(self.library, step.name)
        function.argtypes = [ctypes.c_void_p]
        function.restype = ctypes.c_int64 if ir.checks_indices(step) else None
        remember_kernel(function, self.library._name, step.name)  # saved by its library's path (warm start)
        names = self.orders[step.name]
        pointers = source.constant(ctypes.c_void_p * len(names), "pointers")
        kernel = source.constant(function, "kernel")
        return f"{kernel}({pointers}({', '.join(f'{n}.data_ptr()' for n in names)}))"


def _kernel_lines(source: _Source, step, hook, buffers: dict[str, ir.Buffer], fallback: str,
                  reused: dict[str, str]) -> None:
    outputs = [buffers[name] for name in names_written(step)]
    device = source.constant(hook.device or torch.device("cpu"), "device") if outputs else None
    scatter = getattr(step, "scatter", None)
    if scatter is not None:  # the kernel updates its base in place: the same tensor, renamed
        source.lines.append(f"{step.output} = {scatter.base}")
        outputs = []
    for output in outputs:
        if output.name in reused:  # a dead tensor of this layout or size (memory.reuses)
            donor = reused[output.name]
            same = (buffers[donor].shape, buffers[donor].strides) == (output.shape, output.strides)
            # The donor is dead: a tensor over its memory needs no view bookkeeping.
            view = donor if same else \
                f"buffers.alias({donor}, {tuple(output.shape)!r}, {tuple(output.strides)!r}, 0)"
            source.lines.append(f"{output.name} = {view}; del {donor}")
            continue
        dtype = source.constant(IR_TO_TORCH[output.dtype], "dtype")
        source.lines.append(f"{output.name} = buffers.new({tuple(output.shape)!r}, {tuple(output.strides)!r}, "
                            f"{dtype}, {device})")
    statement = hook.statement(source, step, [o.name for o in outputs])
    if getattr(hook, "reports_index_errors", False) and ir.checks_indices(step):
        # An index out of range (the kernel read element 0 instead): ATen raises eager's error.
        source.lines.append(f"if {statement}:")
        source.lines.append(f"    return {fallback}")
    else:
        source.lines.append(statement)


FRESH_CONTIGUOUS_EXTERNS = frozenset({torch.ops.aten.mm.default, torch.ops.aten.addmm.default,
                                      torch.ops.aten.bmm.default, torch.ops.aten.baddbmm.default})
"""ATen ops whose result is always a new contiguous tensor of the shape their operands' shapes
give: where the trace recorded that layout, the wrapper checks nothing after them (two checks
per matrix product were ~5% of a small transformer's call). Other callables say so with a true
`fresh_contiguous` attribute (max-autotune's `triton.gemm_choice.GemmChoice`)."""


def _checks_layout(extern: ir.Extern, output: ir.Buffer) -> bool:
    if output.dtype == "object" or extern.target in EXACT_LAYOUT_EXTERNS:
        return False
    fresh = extern.target in FRESH_CONTIGUOUS_EXTERNS or getattr(extern.target, "fresh_contiguous", False)
    return not (fresh and tuple(output.strides) == contiguous_strides(tuple(output.shape)))


def _extern_lines(source: _Source, extern: ir.Extern, output: ir.Buffer, fallback: str,
                  buffers: dict[str, ir.Buffer], returnable: set[str], private: set[str]) -> None:
    if extern.target is strided_view:  # inline: one C call instead of a Python function and two
        base, shape, strides, offset = extern.args
        layout = (tuple(buffers[base.name].shape), tuple(buffers[base.name].strides))
        if not offset and layout == (tuple(shape), tuple(strides)) and output.name in returnable:
            # The view would be the base itself (the wrapper holds every buffer in its traced
            # layout): the name is bound to it, no call (109 of a GPT-2 backward's 255 views).
            source.lines.append(f"{output.name} = {base.name}")
            return
        if output.name in private:  # seen by this call alone: no view bookkeeping (runtime/buffers.py)
            source.lines.append(f"{output.name} = buffers.alias({base.name}, {tuple(shape)!r}, {tuple(strides)!r}, "
                                f"{offset})")
            return
        start = f"{base.name}.storage_offset() + {offset}" if offset else f"{base.name}.storage_offset()"
        source.lines.append(f"{output.name} = {base.name}.as_strided({tuple(shape)!r}, {tuple(strides)!r}, {start})")
        return
    target = source.constant(extern.target, "extern")
    arguments = [source.literal(a) for a in extern.args]
    arguments += [f"{key}={source.literal(value)}" for key, value in extern.kwargs]
    source.lines.append(f"{output.name} = {target}({', '.join(arguments)})")
    if _checks_layout(extern, output):
        shape, strides = tuple(output.shape), tuple(output.strides)
        # A shape other than the trace's: torch's shape rule for the op disagrees with its kernel
        # (multi_margin_loss of a 1-d input gives [] where the rule says [1]). Every later step was
        # built for the traced shape, so the graph runs through ATen instead, as eager would.
        # (None where the trace saw a tensor: an undefined tensor an ATen kernel returns.)
        source.lines.append(f"if {output.name} is not None and {output.name}.shape != {shape!r}:")
        source.lines.append(f"    return {fallback}")
        # Kernels read this buffer with the strides seen at compile time.
        source.lines.append(f"if {output.name} is not None and {output.name}.stride() != {strides!r}:")
        if overlapping(shape, strides):  # (an expand's stride 0: empty_strided().copy_() would raise)
            source.lines.append(f"    {output.name} = {source.constant(relaid, 'relaid')}({output.name}, "
                                f"{shape!r}, {strides!r})")
        else:
            source.lines.append(f"    {output.name} = empty_strided({shape!r}, {strides!r}, "
                                f"dtype={output.name}.dtype, device={output.name}.device).copy_({output.name})")


def _base_returnable(program: ir.Program) -> set[str]:
    """The views that may be their base itself, where their layout is the base's: those not
    returned, and returned ones whose base is this call's own memory (no input or constant
    shares it), not returned itself or as another such view: the caller gets a tensor of
    eager's values and layout, only not marked a view of something it never sees."""
    returned = returned_names(program)
    fresh = fresh_memory(program)
    views = [step for step in program.steps if isinstance(step, ir.Extern) and step.target is strided_view]
    returnable, given = set(), set(returned)
    for view in views:
        base = view.args[0].name
        if view.output not in returned:
            returnable.add(view.output)
        elif base in fresh and base not in given:
            returnable.add(view.output)
            given.add(base)
    return returnable


def _input_check(source: _Source, program: ir.Program, buffers: dict[str, ir.Buffer], hook,
                 proven: tuple | None = None) -> str:
    """The test that every input has the layout the kernels were built for. proven: per input,
    the (shape, strides, dtype, device) that capture's guards check before every call that
    reaches this graph (or None): an input whose proven layout is the one tested needs no test."""
    terms = []
    for index, name in enumerate(program.inputs):
        buffer = buffers[name]
        if buffer.dtype == "object":
            continue
        if proven is not None and index < len(proven) and _proves(proven[index], buffer, hook):
            continue
        device_test = hook.device_test
        dtype = source.constant(torch_dtype(buffer.dtype), "dtype")  # an input only externs read
        terms.append(f"{name}.stride() == {tuple(buffer.strides)!r} and {name}.shape == {tuple(buffer.shape)!r} "
                     f"and {name}.dtype is {dtype} and {name}.{device_test}")
    return " and ".join(terms) or "True"


def _proves(layout: tuple | None, buffer: ir.Buffer, hook) -> bool:
    if layout is None:
        return False
    shape, strides, dtype, device = layout
    wanted = hook.device or torch.device("cpu")
    return (tuple(shape) == tuple(buffer.shape) and tuple(strides) == tuple(buffer.strides)
            and dtype == torch_dtype(buffer.dtype) and device.type == wanted.type
            and (device.index or 0) == (wanted.index or 0))


def _output_text(source: _Source, outputs: Any) -> str:
    if isinstance(outputs, (list, tuple)):
        inner = ", ".join(_output_text(source, v) for v in outputs)
        return f"[{inner}]" if isinstance(outputs, list) else f"({inner}{',' if len(outputs) == 1 else ''})"
    if isinstance(outputs, str):
        return outputs
    return source.literal(outputs)


def build_runner(program: ir.Program, hook, constants: dict, fallback, *, profile: bool = False,
                 proven: tuple | None = None, boxed: bool = False):
    """hook: the device hook launching kernels (`CppLaunch`, `triton.compile.TritonLaunch`).
    profile=True names each step in torch.profiler (`record_function`). proven: the input
    layouts capture's guards check before every call (`capture.guards.GUARDED_INPUTS`): the
    wrapper does not test them again. boxed=True: the runner takes its inputs in one list,
    which it clears, and drops each input after its last reader (`runtime/boxed.py`;
    `_input_frees` says when)."""
    buffers = {b.name: b for b in program.buffers}
    source = _Source()
    for name, tensor in constants.items():
        source.lines.append(f"{name} = {source.constant(tensor, 'tensor')}")
    parameters = ", ".join(program.inputs)
    frees = _input_frees(program, hook, buffers) if boxed else {}
    plain, after_frees = f"fallback({parameters})", "fallback_after_frees(fallback, kept)"
    reused = reuses(program, in_place=getattr(hook, "writes_in_place", False))
    donors = set(reused.values())  # dropped where their receiver takes them over
    returnable = _base_returnable(program)
    private = private_memory(program)
    freed = bool(frees.get(-1))  # an input was dropped: a fallback from here on needs `kept`
    late_fallback = False
    for position, (step, dead) in enumerate(zip(program.steps, last_uses(program))):
        start = len(source.lines)
        fallback_call = after_frees if freed else plain
        if isinstance(step, ir.Extern):
            _extern_lines(source, step, buffers[step.output], fallback_call, buffers, returnable, private)
            label = f"tensorjit extern {getattr(step.target, '__name__', step.target)} -> {step.output}"
        else:
            _kernel_lines(source, step, hook, buffers, fallback_call, reused)
            label = f"tensorjit {step.name}"
        late_fallback |= any(after_frees in line for line in source.lines[start:])
        if profile:
            record = source.constant(torch.profiler.record_function, "record")
            source.lines[start:] = [f"with {record}({label!r}):"] + [f"    {line}" for line in source.lines[start:]]
        dead = [name for name in dead if name not in donors] + frees.get(position, [])
        if dead:
            source.lines.append(f"del {', '.join(dead)}")
        freed |= bool(frees.get(position))
    source.globals["fallback"] = fallback
    check = _input_check(source, program, buffers, hook, proven)
    body = ([f"if not ({check}):",
             f"    return fallback({parameters})  # kernels are specialised to the example layouts"]
            if check != "True" else [])
    if frees.get(-1):
        body.append(f"del {', '.join(frees[-1])}")
    body += source.lines
    if boxed:
        body = _boxed_prologue(source, program, late_fallback) + body
    if late_fallback:
        body.append("inputs_proven = True")
    text = "\n".join(
        [f"def run({'inputs' if boxed else parameters}):"]
        + [f"    {line}" for line in body]
        + [f"    return {_output_text(source, program.outputs)}"]
        + (["run.takes_boxed_inputs = True"] if boxed else []))
    code = CompiledText(text, f"<tensorjit {type(hook).__name__} wrapper>")
    run = rebuild_runner(code, source.globals)
    set_reduce(run, rebuild_runner, code, dict(source.globals))  # the warm-start cache saves it so
    return run


def _boxed_prologue(source: _Source, program: ir.Program, late_fallback: bool) -> list[str]:
    """Take the inputs out of the caller's list. With `late_fallback` (a fallback after an input
    was dropped), every input is also kept in `kept` until a call has run to its end once."""
    names = ", ".join(program.inputs)
    lines = [f"{names}, = inputs" if program.inputs else "pass", "inputs.clear()"]
    if late_fallback:
        source.globals["inputs_proven"] = False
        source.globals["fallback_after_frees"] = fallback_after_frees
        lines = ["global inputs_proven"] + lines + [f"kept = None if inputs_proven else ({names},)"]
    return lines


def _input_frees(program: ir.Program, hook, buffers: dict[str, ir.Buffer]) -> dict[int, list[str]]:
    """step position (-1: before the first) -> the inputs a boxed runner drops after it: each
    after its last reader, none before a step whose fallback may be taken on one call and not on
    another with the same input layouts (`_fallback_varies`): that fallback needs them all. The
    other fallbacks (an ATen call's shape) come out the same on every call; after an input was
    dropped they run on `kept`, the inputs held until one call has passed them."""
    returned = returned_names(program)
    last = last_uses_by_name(program)
    inputs = set(program.inputs)
    hold = max((position for position, step in enumerate(program.steps)
                if _fallback_varies(step, hook, buffers, inputs)), default=-1)
    frees: dict[int, list[str]] = {}
    for name in program.inputs:
        if name not in returned:
            frees.setdefault(max(last.get(name, -1), hold), []).append(name)
    return frees


def _fallback_varies(step, hook, buffers: dict[str, ir.Buffer], inputs: set[str]) -> bool:
    """Whether `step` may fall back on some calls and not others with the same input layouts:
    a kernel's index check (data), an ATen call's shape check where the op's output shape
    depends on data (`dynamic_output_shape`) or on a number the graph takes as an input, or
    where the callable is not an ATen op (a user's submodule). A shape check of an ATen op given
    tensors of fixed layouts (what every earlier step makes) comes out the same every time, as
    does an item of a tuple the graph takes (a multi-output op's results, saved whole by the
    forward, which makes them in one layout). Were one to differ all the same, after an input
    was dropped, `fallback_after_frees` raises: never a wrong answer."""
    if not isinstance(step, ir.Extern):
        return bool(getattr(hook, "reports_index_errors", False) and ir.checks_indices(step))
    output = buffers[step.output]
    if step.target is strided_view or step.target is operator.getitem or not _checks_layout(step, output):
        return False
    if not isinstance(step.target, torch._ops.OpOverload) or torch.Tag.dynamic_output_shape in step.target.tags:
        return True
    return any(buffers[name].dtype == "object" for name in names_read(step) & inputs)


def fallback_after_frees(fallback, kept: tuple | None):
    """A boxed runner's fallback after it dropped inputs (`_input_frees`): on `kept` inputs, or an
    error where a call after the first one that passed this point fails it (it cannot: the
    shape an ATen op returns for tensors of one layout does not change)."""
    if kept is None:
        raise RuntimeError("tensorjit: an ATen call in a compiled graph returned a shape other than on an "
                           "earlier call with the same input layouts, after the graph freed its inputs")
    return fallback(*kept)
