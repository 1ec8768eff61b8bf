"""Compiling one function with either emitter of the shared pipeline (C++, or Triton: on a
GPU with CUDA tensors, elsewhere in its interpreter on CPU tensors): what the tests that check
a lowering on both share."""

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from tensorjit.codegen.decomp import decompositions
from tensorjit.codegen.verify import verify

EMITTERS = ["cpp", "triton"]


def on_device(emitter: str, inputs: tuple) -> tuple:
    """The inputs where the emitter's kernels run (Triton on a CUDA machine: the GPU)."""
    if emitter != "triton" or not torch.cuda.is_available():
        return inputs
    return tuple(x.cuda() if isinstance(x, torch.Tensor) else x for x in inputs)


def compile_with(emitter: str, fn, *inputs):
    inputs = on_device(emitter, inputs)
    return compile_traced(emitter, make_fx(fn, decomposition_table=decompositions())(*inputs), *inputs)


def compile_traced(emitter: str, gm, *inputs):
    """An ATen graph as it is (a test that edits the traced graph: no retrace)."""
    if emitter == "cpp":
        from tensorjit.codegen.cpp.compile import compile_cpu_graph
        from tensorjit.config import Config

        compiled = compile_cpu_graph(gm, list(inputs), Config())
    else:
        pytest.importorskip("triton")
        from tensorjit.codegen.triton import compile as triton_compile

        compiled = triton_compile.compile_graph(gm, list(inputs))
    verify(compiled.program)
    return compiled


def steps(compiled) -> list[str]:
    return [type(step).__name__ for step in compiled.program.steps]


def check(emitter, fn, *inputs, externs=0, **tolerances):
    """compiled == eager, with `externs` ATen steps in the program."""
    inputs = on_device(emitter, inputs)
    compiled = compile_with(emitter, fn, *inputs)
    expected, actual = fn(*inputs), compiled(*inputs)
    torch.testing.assert_close(actual, expected, equal_nan=True, **tolerances)
    assert steps(compiled).count("Extern") == externs, compiled.program
    return compiled
