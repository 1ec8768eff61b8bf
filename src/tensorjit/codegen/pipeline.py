"""One code generation pipeline for every device: ATen graph -> kernels -> wrapper.

`compile_graph(gm, example_inputs, config, emitter)` takes an ATen graph traced with
`decomp.decompositions()` and an emitter (`cpp.compile.CppEmitter`,
`triton.compile.TritonEmitter`), and returns the runner: generated Python with
the graph's signature, or `gm.forward` when the emitter cannot build (no C++
compiler). The steps, in order:

    emitter.prepare_graph(gm, ...) device graph passes (Triton: pad misaligned matmuls, NHWC convolutions)
    GraphLowering(...).run()       one @lowering registry (lowering*.py) -> ir.Program
    squeeze.squeeze_unit_loops     kernels loop only over dims of size > 1 (rows line up)
    schedule.fuse_loops            one scheduler: row groups, refusals logged (TENSORJIT_LOGS=fusion)
    emitter.prepare(program)       what the emitter needs of the groups (Triton: registers vs memory)
    emitter.build(name, program)   emit, compile and load the kernels -> the wrapper's device hook
    wrapper.build_runner           one wrapper for every device; memory.last_uses frees temporaries
                                   (and inputs, in a runner called boxed: gm.meta[runtime.boxed.BOXED_INPUTS])

An emitter has `half_floats` (does it compute float16/bfloat16), `device` (where its kernels
run: tensors elsewhere only reach ATen calls), `shared_ops` (the operations per element it
recomputes rather than store a shared value), `masked_selects` (does it skip the loads a
positional select discards) and the three methods above; everything else is shared.
"""

from __future__ import annotations

from .. import logs
from .graph import GraphLowering
from .memory import launches
from .report import timed
from .schedule import fuse_loops
from .squeeze import squeeze_unit_loops
from .verify import verify
from .wrapper import build_runner
from ..capture.guards import GUARDED_INPUTS
from ..runtime.boxed import BOXED_INPUTS


def compile_graph(gm, example_inputs, config, emitter):
    name = type(gm).__name__
    eager = gm.forward  # the graph as traced: prepare_graph rewrites gm in place
    emitter.prepare_graph(gm, example_inputs)
    with timed(name, "lowering"):
        lowered = GraphLowering(gm, example_inputs, half_floats=emitter.half_floats, device=emitter.device,
                                shared_ops=emitter.shared_ops, masked_selects=emitter.masked_selects)
        program = emitter.prepare(fuse_loops(squeeze_unit_loops(lowered.run())))
    if getattr(config, "verify_ir", False):
        verify(program)
    hook = emitter.build(name, program, config)
    if hook is None:
        return eager
    runner = build_runner(program, hook, lowered.constants, eager,
                          profile=getattr(config, "profile_kernels", False), proven=gm.meta.get(GUARDED_INPUTS),
                          boxed=bool(gm.meta.get(BOXED_INPUTS)))
    logs.output_code(name, "Python wrapper", runner.wrapper_source)
    runner.program = program
    runner.launches = launches(program)
    runner.hook = hook
    return runner
