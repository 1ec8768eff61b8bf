"""The `inductor` backend: ahead-of-time autograd, then generated kernels.

The captured graph goes through `tensorjit.autograd.aot_compile`, which hands the
forward and backward ATen graphs (or the inference graph) separately to the code
generator for the graph's device:

- CUDA: `tensorjit.codegen.triton` (the shared loop IR with the Triton emitter: fused Triton
  kernels, ATen for matmul/conv/attention); under mode="reduce-overhead"
  (`config.triton_cudagraphs`) each compiled graph (inference, forward, backward) is replayed
  through CUDA graphs (`runtime/cudagraphs.py`);
- CPU: `tensorjit.codegen.cpp` (the same pipeline with the C++/OpenMP emitter).

Any failure while compiling falls back to running the captured graph eagerly, with the
reason logged: the backend never gives a wrong answer.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

import torch

from .. import logs, progress
from ..autograd import aot_compile
from ..codegen.verify import IRError
from ..config import Config, config as default_config


def _run_as_is(gm, example_inputs):
    return gm.forward


def _code_generator(device_type: str, config: Config) -> tuple[Callable, dict | None]:
    name = {"cuda": "tensorjit.codegen.triton", "cpu": "tensorjit.codegen.cpp"}.get(device_type)
    if name is None:
        return _run_as_is, None
    try:
        module = importlib.import_module(name)
    except ImportError:
        return _run_as_is, None
    return module.compile_aten_graph, module.decompositions()


def prepare(target: Any, config: Config) -> None:
    """`tensorjit.compile(target)` with this backend, before any call: a large module on the GPU
    starts the kernel compile workers (`codegen.triton.expect_module`)."""
    if not isinstance(target, torch.nn.Module) or not torch.cuda.is_available():
        return  # (before importing the code generator: a CPU process never needs it)
    try:
        from ..codegen.triton import expect_module
    except ImportError:  # no Triton: graphs run as captured (`_code_generator`), nothing to start
        return
    expect_module(target, config=config)


def cudagraph_wrapper(config: Config, device: str, gm: torch.fx.GraphModule | None = None) -> Callable | None:
    """What aot_compile wraps each compiled graph in: CUDA graph runners under `triton_cudagraphs`,
    reading the module's parameters and buffers in place."""
    if not config.triton_cudagraphs or device != "cuda":
        return None
    from ..runtime.cudagraphs import Settings, module_state_indices, wrap_compiled

    static = module_state_indices(gm) if gm is not None else frozenset()
    return wrap_compiled(Settings.from_config(config), static_input_indices=static)


def inductor(gm: torch.fx.GraphModule, example_inputs: list[Any], *, config: Config | None = None) -> Callable:
    config = config or default_config
    devices = {x.device.type for x in example_inputs if isinstance(x, torch.Tensor)}
    device = devices.pop() if len(devices) == 1 else "mixed"
    compile_aten_graph, decompositions = _code_generator(device, config)
    if device == "cuda" and compile_aten_graph is not _run_as_is:
        from ..codegen.triton import expect_graph

        expect_graph(gm, config=config)
    wrap = cudagraph_wrapper(config, device, gm)
    # The wrapping happens here, per graph kind; the code generator must not wrap again.
    generator_config = config.replace(triton_cudagraphs=False) if wrap else config

    def compiler(aten_gm, aten_inputs):
        if compile_aten_graph is _run_as_is:
            return aten_gm.forward
        progress.graph_started()
        with progress.stage("codegen"):
            return compile_aten_graph(aten_gm, aten_inputs, config=generator_config)

    try:
        with progress.stage("autograd"):
            return aot_compile(gm, example_inputs, fw_compiler=compiler, decompositions=decompositions,
                               partitioner=config.partitioner, wrap_compiled=wrap,
                               reuse_repeated_blocks=config.reuse_repeated_blocks)
    except IRError:  # raised only under Config.verify_ir (the tests): a code generator bug, shown
        raise
    except Exception as error:  # noqa: BLE001 - a compiler gap must not become a wrong answer
        logs.emit("graph_breaks", f"inductor: running the graph eagerly: {type(error).__name__}: {error}")
        return gm.forward
