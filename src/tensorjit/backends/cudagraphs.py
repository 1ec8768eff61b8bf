"""The `cudagraphs` backend: run the captured graph as is, replayed through CUDA graphs.

Takes (gm: torch.fx.GraphModule, example_inputs) per the backend contract and
returns a callable with gm's signature. No code generation happens: the
graph's own ATen kernels are recorded once per input layout and replayed, which
removes Python and launch overhead and nothing else.

Calls that need no gradient replay gm itself. When an input requires grad, the
graph goes through the autograd stage (`aot_compile`) with its ATen graphs run
as they are, and the forward and backward graphs are each replayed through CUDA
graphs (see runtime/cudagraphs.py for the rules: inputs read in place, pools,
outputs, and the reasons a call runs eagerly).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from tensorjit.autograd import aot_compile
from tensorjit.config import Config, config as default_config
from tensorjit.runtime.cudagraphs import CudaGraphRunner, Settings, module_state_indices, wrap_compiled


def _as_is(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    return gm.forward


def cudagraphs(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor], *,
               config: Config | None = None) -> Callable[..., Any]:
    """Backend entry point: gm wrapped in a CudaGraphRunner, or its forward and backward when training."""
    settings = Settings.from_config(config or default_config)
    needs_grad = torch.is_grad_enabled() and any(
        isinstance(value, torch.Tensor) and value.requires_grad for value in example_inputs)
    static = module_state_indices(gm)  # module parameters and buffers: read in place
    if not needs_grad:
        return CudaGraphRunner(gm, settings=settings, static_input_indices=static,
                               name="cudagraphs backend (inference)")
    return aot_compile(gm, example_inputs, fw_compiler=_as_is,
                       wrap_compiled=wrap_compiled(settings, name="cudagraphs backend", static_input_indices=static))
