"""The `aot_eager` backend: ahead-of-time autograd with the ATen graphs run as they are; and
`aot_eager_decomp_partition` (torch.compile's debugging backend of that name): the same after the
code generators' decompositions and the min-cut partitioner, so a wrong answer that appears with
`inductor` but not here points at code generation."""

from __future__ import annotations

from ..autograd import aot_compile
from ..config import config


def _run_as_is(gm, example_inputs):
    return gm.forward


def aot_eager(gm, example_inputs):
    return aot_compile(gm, example_inputs, fw_compiler=_run_as_is, partitioner=config.partitioner)


def aot_eager_decomp_partition(gm, example_inputs):
    from ..codegen.decomp import decompositions
    return aot_compile(gm, example_inputs, fw_compiler=_run_as_is, decompositions=decompositions(),
                       partitioner="min_cut")
