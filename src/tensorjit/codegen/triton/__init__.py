"""tensorjit's GPU code generator: ATen graphs to Triton kernels and a thin wrapper.

    compile_aten_graph(gm, example_inputs, *, config=None) -> callable

takes an ATen-level FX graph whose tensors live on a CUDA device (what make_fx
produces with `decompositions()`), and returns a callable with the graph's
signature: fused Triton kernels for pointwise work and last-dimension
reductions, ATen kernels for the rest (matrix products, convolutions,
attention), launched by generated straight-line Python. With
`config.triton_cudagraphs` the whole call is replayed through a CUDA graph, as
an inference graph (the inductor backend instead wraps forward and backward
graphs itself, by kind, and turns this off). If lowering fails, the graph runs eagerly, with the
reason logged: never a wrong answer.

Modules: expressions (scalar op -> Triton text), emitter (the scalar-op
protocol), kernel (one kernel's text), heuristics (block sizes), launcher
(loading and fast launches), parallel (compiling in worker processes),
pointwise_ops (ATen pointwise ops on the emitter), decomposition_table (the table
the lowering expects), partition (which nodes share a kernel), group_emitter
(one group -> one kernel), layout (channels-last convolutions), direct (the
whole graph: kernels + wrapper), wrapper (the per-call function), indexing.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

import torch

log = logging.getLogger(__name__)


def compile_aten_graph(gm: torch.fx.GraphModule, example_inputs: list[Any], *, config=None) -> Callable[..., Any]:
    """ATen graph -> compiled callable; see the module docstring."""
    from tensorjit.codegen.triton.direct import compile_graph
    from tensorjit.runtime.disk_cache import UntrustedCache

    try:
        compiled: Callable[..., Any] = compile_graph(gm, example_inputs, config)
    except UntrustedCache:  # the cache warned once, naming the directory
        compiled = gm.forward
    except Exception as error:  # noqa: BLE001 - a lowering gap must not become a wrong answer
        log.warning("tensorjit triton: running the graph eagerly: %s: %s", type(error).__name__, error)
        compiled = gm.forward
    if config is not None and getattr(config, "triton_cudagraphs", False):
        from tensorjit.runtime.cudagraphs import CudaGraphRunner

        from tensorjit.runtime.cudagraphs import Settings

        compiled = CudaGraphRunner(compiled, settings=Settings.from_config(config))
    return compiled


def decompositions() -> dict:
    """The decomposition table this code generator's lowering expects."""
    from tensorjit.codegen.triton.direct import decompositions as table

    return table()
