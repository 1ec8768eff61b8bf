"""A kernel moves down to just before its first reader when nothing lives longer for it
(`triton/sink_to_use.py`): a backward's recomputation from saved inputs holds no memory
before the step that reads it."""

import torch

from tensorjit.codegen import ir, memory
from tensorjit.codegen.triton.sink_to_use import sink_to_first_use
from tensorjit.codegen.verify import verify

aten = torch.ops.aten
I, J = ir.IndexVar("i0"), ir.IndexVar("i1")


def buffer(name: str, kind: str = "temp") -> ir.Buffer:
    return ir.Buffer(name, "float32", (8, 8), (8, 1), kind)


def sigmoid_of(name: str, source: str) -> ir.Pointwise:
    load = ir.Load(source, ir.strided_index((I, J), (8, 1)), "float32")
    return ir.Pointwise(f"kernel_{name}", name, (8, 8), ir.Op("sigmoid", (load,), "float32"), (I, J))


def product(name: str, left: str, right: str) -> ir.Extern:
    return ir.Extern(f"extern_{name}", aten.mm.default, (ir.BufferRef(left), ir.BufferRef(right)), (), name)


def program_of(steps, *temporaries) -> ir.Program:
    buffers = (buffer("in0", "input"),) + tuple(buffer(name) for name in temporaries)
    program = ir.Program(buffers, tuple(steps), ("in0",), (steps[-1].output,))
    verify(program)
    return program


def names(program: ir.Program) -> list[str]:
    return [step.name for step in program.steps]


def test_a_kernel_reading_inputs_moves_to_its_reader():
    """The recomputation reads a graph input only: it moves past the products to the one
    reading it, and the plan's peak drops by its buffer."""
    program = program_of([sigmoid_of("buf0", "in0"), product("buf1", "in0", "in0"), product("buf2", "buf1", "in0"),
                          product("buf3", "buf1", "buf2"), product("buf4", "buf0", "buf3")],
                         "buf0", "buf1", "buf2", "buf3", "buf4")
    sunk = sink_to_first_use(program)
    verify(sunk)
    assert names(sunk) == ["extern_buf1", "extern_buf2", "extern_buf3", "kernel_buf0", "extern_buf4"]
    assert memory.planned_peak_bytes(sunk) < memory.planned_peak_bytes(program)


def test_a_kernel_whose_move_would_keep_a_temporary_alive_stays():
    """The kernel is the last reader of a temporary: moved, the temporary would live longer."""
    program = program_of([product("buf1", "in0", "in0"), sigmoid_of("buf0", "buf1"), product("buf2", "in0", "in0"),
                          product("buf3", "buf2", "in0"), product("buf4", "buf0", "buf3")],
                         "buf0", "buf1", "buf2", "buf3", "buf4")
    assert names(sink_to_first_use(program)) == names(program)


def test_a_kernel_does_not_pass_a_step_writing_what_it_reads():
    """An in-place ATen call between writes the input the kernel reads: the kernel stays
    before it (horizontal.passable)."""
    write = ir.Extern("extern_add", aten.add_.Tensor, (ir.BufferRef("in0"), ir.BufferRef("in0")), (), "buf1")
    program = program_of([sigmoid_of("buf0", "in0"), write, product("buf2", "buf0", "in0")], "buf0", "buf1", "buf2")
    assert names(sink_to_first_use(program)) == names(program)
