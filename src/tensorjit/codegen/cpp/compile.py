"""CPU path: the shared pipeline (codegen/pipeline.py) with the C++ emitter.

Takes a GraphModule and example inputs; returns a callable. Without a C++
compiler, with an untrusted cache directory (runtime.disk_cache), or on any
internal error it warns once and returns the graph's
own forward (ATen execution), which is always correct.
"""

from __future__ import annotations

import logging
import warnings

import torch

from ... import logs
from ..pipeline import compile_graph
from ..report import timed
from ..wrapper import CppLaunch
from ...runtime.disk_cache import UntrustedCache
from ..triton.layout import prefer_channels_last
from .compiler import CompilerMissing, load_library
from .kernels import emit_program

log = logging.getLogger("tensorjit.codegen")
_warned_missing = [False]


class CppEmitter:
    """The C++ emitter's part of the pipeline: one translation unit per graph, loaded with ctypes."""

    half_floats = False  # no half types in the C++ kernels: those ops stay ATen calls
    device = torch.device("cpu")

    def prepare_graph(self, gm, example_inputs) -> None:
        # oneDNN's convolutions run NHWC natively (an NCHW depthwise convolution reorders its
        # input on every call): MobileNetV3-small's 52 convolutions take 1.37 ms NHWC, 1.81 NCHW
        prefer_channels_last(gm, example_inputs, require_cuda=False)

    def prepare(self, program):
        return program

    def build(self, name: str, program, config) -> CppLaunch | None:
        with timed(name, "emit"):
            source, orders = emit_program(program)
        logs.output_code(name, "C++", source)
        library = None
        if orders:
            try:
                with timed(name, "cpp_compile"):
                    library = load_library(source, config)
            except CompilerMissing as error:
                if not _warned_missing[0]:
                    warnings.warn(f"tensorjit: {error}; CPU graphs run as ATen ops", RuntimeWarning)
                    _warned_missing[0] = True
                return None
            except UntrustedCache:  # the cache warned once, naming the directory
                return None
        hook = CppLaunch(library, orders)
        hook.source = source
        return hook


def compile_cpu_graph(gm, example_inputs, config):
    emitter = CppEmitter()
    runner = compile_graph(gm, example_inputs, config, emitter)
    if hasattr(runner, "hook"):  # else no compiler: the graph's own forward
        runner.source = runner.hook.source
    return runner
