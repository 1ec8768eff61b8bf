"""CPU path: ATen graph -> Program -> one C++ library -> runner.

Takes a GraphModule and example inputs; returns a callable. Without a C++
compiler (or on any internal error) it warns once and returns the graph's
own forward (ATen execution), which is always correct.
"""

from __future__ import annotations

import logging
import warnings

from ... import logs
from ..graph import GraphLowering
from ..report import timed
from ..schedule import fuse_loops
from ..wrapper import CppLaunch, build_runner
from .compiler import CompilerMissing, load_library
from .kernels import emit_program

log = logging.getLogger("tensorjit.codegen")
_warned_missing = [False]


def compile_cpu_graph(gm, example_inputs, config):
    name = type(gm).__name__
    with timed(name, "lowering"):
        lowered = GraphLowering(gm, example_inputs)
        program = fuse_loops(lowered.run())
    with timed(name, "emit"):
        source, orders = emit_program(program)
    logs.output_code(name, "C++", source)
    if orders:
        try:
            with timed(name, "cpp_compile"):
                library = load_library(source, config)
        except CompilerMissing as error:
            if not _warned_missing[0]:
                warnings.warn(f"tensorjit: {error}; CPU graphs run as ATen ops", RuntimeWarning)
                _warned_missing[0] = True
            return gm.forward
    else:
        library = None
    runner = build_runner(program, CppLaunch(library, orders), lowered.constants, gm.forward,
                          profile=getattr(config, "profile_kernels", False))
    runner.program = program
    runner.source = source
    return runner
