"""The `cudagraphs` backend: run the captured graph as is, replayed through CUDA graphs.

Takes (gm: torch.fx.GraphModule, example_inputs) per the backend contract and
returns a callable with gm's signature. No code generation happens: the
graph's own ATen kernels are recorded once per input layout and replayed, which
removes Python and launch overhead and nothing else. CPU inputs, and calls
that record gradients, run gm eagerly (see runtime/cudagraphs.py for the
rules, and for why outputs are cloned).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from tensorjit.runtime.cudagraphs import CudaGraphRunner


def cudagraphs(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Callable[..., Any]:
    """Backend entry point: gm wrapped in a CudaGraphRunner."""
    del example_inputs  # recordings are keyed on each call's real inputs
    return CudaGraphRunner(gm)
