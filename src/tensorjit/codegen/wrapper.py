"""The run-time wrapper: executes an `ir.Program` with compiled kernels and ATen externs.

Takes a Program, a loaded kernel library (ctypes) with each kernel's pointer
order, and the graph's constants; returns a callable taking the graph's
positional inputs. Temporaries are allocated per call and dropped after their
last use (memory.py decides when), so the allocator reuses their memory.
"""

from __future__ import annotations

import ctypes

import torch
from torch.utils._pytree import tree_map

from . import ir
from .memory import last_uses, names_written
from .values import IR_TO_TORCH


def _resolve(value, slots):
    return tree_map(lambda v: slots[v.name] if isinstance(v, ir.BufferRef) else v, value)


def make_kernel_step(function, names, outputs: list[ir.Buffer]):
    pointer_array = ctypes.c_void_p * len(names)
    allocations = [(o.name, o.shape, IR_TO_TORCH[o.dtype]) for o in outputs]

    def step(slots):
        for name, shape, dtype in allocations:
            slots[name] = torch.empty(shape, dtype=dtype)
        function(pointer_array(*[slots[n].data_ptr() for n in names]))
    return step


def make_extern_step(extern: ir.Extern, output: ir.Buffer):
    args, kwargs, target = extern.args, dict(extern.kwargs), extern.target
    expected = None if output.dtype == "object" else (output.shape, output.strides)

    def step(slots):
        result = target(*_resolve(args, slots), **_resolve(kwargs, slots))
        if expected is not None and isinstance(result, torch.Tensor) and \
                (tuple(result.shape), result.stride()) != expected:
            # Kernels read this buffer with the strides seen at compile time.
            result = torch.empty_strided(expected[0], expected[1], dtype=result.dtype).copy_(result)
        slots[output.name] = result
    return step


def build_runner(program: ir.Program, library, orders: dict, constants: dict, fallback):
    buffers = {b.name: b for b in program.buffers}
    steps = []
    for step in program.steps:
        if isinstance(step, ir.Extern):
            steps.append(make_extern_step(step, buffers[step.output]))
        else:
            function = getattr(library, step.name)
            function.argtypes = [ctypes.c_void_p]
            function.restype = None
            outputs = [buffers[name] for name in names_written(step)]
            steps.append(make_kernel_step(function, orders[step.name], outputs))
    frees = last_uses(program)
    schedule = list(zip(steps, frees))
    signature = [(b.shape, b.strides, IR_TO_TORCH.get(b.dtype)) for b in (buffers[n] for n in program.inputs)]
    input_names = program.inputs
    outputs = program.outputs

    def run(*inputs):
        slots = dict(constants)
        for name, value, (shape, strides, dtype) in zip(input_names, inputs, signature):
            if isinstance(value, torch.Tensor) and (value.shape != shape or value.stride() != strides
                                                    or value.dtype != dtype or value.device.type != "cpu"):
                return fallback(*inputs)  # kernels are specialised to the example layouts
            slots[name] = value
        for step, dead in schedule:
            step(slots)
            for name in dead:
                del slots[name]
        return tree_map(lambda v: slots[v] if isinstance(v, str) else
                        (slots[v.name] if isinstance(v, ir.BufferRef) else v), outputs)
    return run
