"""tensorjit as a torch.compile backend: `torch.compile(model, backend="tensorjit")`.

pyproject.toml names `tensorjit_backend` in the `torch_dynamo_backends` entry-point group,
where torch.compile looks a backend name up, so with tensorjit installed Dynamo's capture
hands its graphs to tensorjit's autograd stage and code generators. The callable is the
backend contract, `(gm, example_inputs) -> callable`; nothing here imports torch._dynamo.

Dynamo's graphs differ from tensorjit's own in what they may hold, and each difference is
handled here, before the graph reaches the `inductor` backend:

- symbolic sizes (dynamic shapes): the example inputs are real, so the graph is compiled
  for their sizes; tensorjit's `specialize_sizes` compiles it again for each new size set;
- its higher-order ops (autograd_function_apply for custom autograd.Functions, wrap, ...)
  reach make_fx, which traces through them as torch defines them.

`tensorjit_backend(mode=..., options=...)` is accepted as torch.compile passes them (it
calls the backend with the graph only; options arrive through `torch.compile(options=)`).
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch._guards

from .registry import specialize_sizes


def tensorjit_backend(gm: torch.fx.GraphModule, example_inputs: list[Any], **options) -> Callable:
    """Compile one Dynamo graph with tensorjit's autograd and code generators (its inductor)."""
    from ..config import config as default_config
    from .inductor import inductor
    config = default_config.replace(**options) if options else default_config

    def compile_graph(graph, inputs):
        # Dynamo calls its backend inside its tracing context, whose fake mode (and shape
        # environment) torch's tracing utilities would pick up: tensorjit's stages use their own.
        with torch._guards.tracing(None):
            return inductor(graph, inputs, config=config)
    compile_graph.__name__ = "tensorjit"
    return specialize_sizes(compile_graph)(gm, example_inputs)
