"""Code generation (the TorchInductor role).

`compile_aten_graph(gm, example_inputs, *, config=None) -> callable`: takes an
ATen-level functional FX graph (make_fx with `decomp.decompositions()`) and
returns a callable with the same positional inputs and outputs. CPU graphs go
to the C++/OpenMP generator, CUDA graphs to the Triton emitter (`tensorjit.codegen.triton`,
when Triton is installed), both through the one pipeline (`pipeline.py`); anything else, or
any failure, runs the graph through ATen.
"""

from __future__ import annotations

import logging

import torch

from ..runtime.disk_cache import UntrustedCache

log = logging.getLogger("tensorjit.codegen")


def _devices(example_inputs) -> set[str]:
    return {t.device.type for t in example_inputs if isinstance(t, torch.Tensor)}


def compile_aten_graph(gm, example_inputs, *, config=None):
    from ..config import config as default_config
    config = config or default_config
    devices = _devices(example_inputs)
    eager = gm.forward  # the graph as traced: the emitters' graph passes rewrite gm in place
    try:
        if devices <= {"cpu"}:
            from .cpp.compile import compile_cpu_graph
            return compile_cpu_graph(gm, list(example_inputs), config)
        if devices == {"cuda"}:
            try:
                from .triton.compile import compile_graph
            except ImportError:  # no Triton
                return eager
            return compile_graph(gm, list(example_inputs), config)
    except UntrustedCache:  # the cache warned once, naming the directory; ATen execution instead
        return eager
    except Exception as error:  # never a wrong answer: ATen execution instead
        log.warning("tensorjit codegen failed (%s: %s); running the graph through ATen",
                    type(error).__name__, error)
    return eager
