"""The Triton emitter of the shared code generator: CUDA ATen graphs to Triton kernels.

    compile_aten_graph(gm, example_inputs, *, config=None) -> callable
    decompositions() -> dict      the shared table (codegen/decomp.py)

The graph goes through the one pipeline (codegen/pipeline.py) with
`compile.TritonEmitter`: fused Triton kernels for pointwise work and reductions,
ATen kernels for the rest (matrix products, convolutions, attention), launched by
the shared generated wrapper. With `config.triton_cudagraphs` the whole call is
replayed through a CUDA graph, as an inference graph (the inductor backend
instead wraps forward and backward graphs itself, by kind, and turns this off).
If compiling fails, the graph runs eagerly, with the reason logged: never a wrong
answer.

Modules, all Triton's own: compile (the emitter's part of the pipeline), kernels
(one IR kernel or row group -> kernel text, launch shapes), emitter (TritonOps:
the ops protocol as Triton text), expressions (op -> text), heuristics (block
sizes, warps), launcher (loading and fast launches), parallel (compiling in worker
processes), interpreter_math (stand-ins under TRITON_INTERPRET), pad_matmul
(products cuBLAS handles slowly), layout (channels-last convolutions), and under
max-autotune gemm_template (a tiled tl.dot kernel for mm/addmm/bmm), gemm_choice
(cuBLAS or the template, timed per product) and gemm_epilogue (a product's pointwise
consumer in the template's store).
"""

from __future__ import annotations

import itertools
import logging
from typing import Any, Callable

import torch

log = logging.getLogger(__name__)


def compile_aten_graph(gm: torch.fx.GraphModule, example_inputs: list[Any], *, config=None) -> Callable[..., Any]:
    """ATen graph -> compiled callable; see the module docstring."""
    from tensorjit.codegen.triton.compile import compile_graph
    from tensorjit.codegen.verify import IRError
    from tensorjit.runtime.disk_cache import UntrustedCache

    eager = gm.forward  # the graph as traced: the graph passes (channels-last, padding) rewrite gm in place
    try:
        compiled: Callable[..., Any] = compile_graph(gm, list(example_inputs), config)
    except IRError:  # raised only under Config.verify_ir (the tests): a code generator bug, shown
        raise
    except UntrustedCache:  # the cache warned once, naming the directory
        compiled = eager
    except Exception as error:  # noqa: BLE001 - a lowering gap must not become a wrong answer
        log.warning("tensorjit triton: running the graph eagerly: %s: %s", type(error).__name__, error)
        compiled = eager
    if config is not None and getattr(config, "triton_cudagraphs", False):
        from tensorjit.runtime.cudagraphs import Settings, runner_for

        compiled = runner_for(compiled, name="graph", settings=Settings.from_config(config))
    return compiled


EARLY_WORKERS_MIN_OPS = 32
"""Captured graphs with at least this many operations start the compile workers before
autograd traces them (a smaller one may compile in the main process: parallel.MINIMUM_JOBS)."""


def expect_graph(gm: torch.fx.GraphModule, *, config=None) -> None:
    """A captured graph is on its way here (autograd traces and partitions it first, seconds
    for a large model): start the kernel compile workers now, so that their start-up (torch
    and Triton imported in each) overlaps that work instead of following it."""
    from tensorjit.codegen.triton.parallel import start_workers

    operations = sum(node.op in ("call_function", "call_method", "call_module") for node in gm.graph.nodes)
    if operations >= EARLY_WORKERS_MIN_OPS:
        start_workers(getattr(config, "compile_threads", 0))


EARLY_WORKERS_MIN_TENSORS = 64
"""Parameters and buffers of a CUDA module whose `tensorjit.compile` starts the compile workers
at once (`expect_module`): such a model's graphs are large."""


def expect_module(module: torch.nn.Module, *, config=None) -> None:
    """`tensorjit.compile` of a large module on the GPU: start the compile workers now, as
    `expect_graph` does, earlier, so that their start-up overlaps the capture too (GPT-2
    inference's first call waited 2.9 s for workers started as its graph entered the backend)."""
    from tensorjit.codegen.triton.parallel import start_workers

    state = itertools.islice(itertools.chain(module.parameters(), module.buffers()), EARLY_WORKERS_MIN_TENSORS)
    tensors = list(state)
    if len(tensors) >= EARLY_WORKERS_MIN_TENSORS and any(t.device.type == "cuda" for t in tensors):
        start_workers(getattr(config, "compile_threads", 0))


def decompositions() -> dict:
    """The decomposition table this code generator's lowering expects (the shared one)."""
    from tensorjit.codegen.decomp import decompositions as table

    return table()
