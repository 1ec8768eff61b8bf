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
from ..graph import MAX_SHARED_OPS
from ..schedule import permuted_in_memory
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
    shared_ops = MAX_SHARED_OPS
    masked_selects = False  # every piece of a concatenation is loaded at every element
    device = torch.device("cpu")

    def prepare_graph(self, gm, example_inputs) -> None:
        if any(_grouped(node) for node in gm.graph.nodes):
            prefer_channels_last(gm, example_inputs, require_cuda=False)

    def prepare(self, program):
        return permuted_in_memory(program)

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


def _grouped(node) -> bool:
    """A grouped (depthwise) convolution: oneDNN runs those NHWC natively and reorders an NCHW
    input on every call, so a graph with them runs channels-last (MobileNetV3-small's 52
    convolutions: 1.37 ms NHWC, 1.81 ms NCHW, one thread). Dense convolutions are not faster
    NHWC on the CPU (ResNet-18's 20: 9.5 ms NHWC, 8.8 ms NCHW), so other graphs keep eager's layout."""
    return node.op == "call_function" and node.target is torch.ops.aten.convolution.default \
        and len(node.args) > 8 and node.args[8] > 1


def compile_cpu_graph(gm, example_inputs, config):
    emitter = CppEmitter()
    runner = compile_graph(gm, example_inputs, config, emitter)
    if hasattr(runner, "hook"):  # else no compiler: the graph's own forward
        runner.source = runner.hook.source
    return runner
