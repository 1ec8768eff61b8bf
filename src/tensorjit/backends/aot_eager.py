"""The aot_eager backend: tensorjit's autograd stage with graphs run by ATen directly.

`aot_eager(gm, example_inputs)` returns a callable; forward, backward and
inference ATen graphs are run as they are (boxed eager), min-cut partitioned.
Useful to check the autograd stage alone, without code generation.
"""

from __future__ import annotations

import torch

from tensorjit.autograd import aot_compile


def run_graph_eagerly(graph_module: torch.fx.GraphModule, example_inputs: list):
    """A compiler that compiles nothing: the ATen graph's generated forward is the callable.

    The bound `forward` skips nn.Module.__call__ (hooks, wrapping), a few
    microseconds per graph per call.
    """
    return graph_module.forward


def aot_eager(gm: torch.fx.GraphModule, example_inputs: list):
    return aot_compile(gm, example_inputs, fw_compiler=run_graph_eagerly, partitioner="min_cut")
