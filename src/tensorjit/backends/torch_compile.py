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
  reach make_fx, which traces through them as torch defines them;
- tensors it reads as attributes of the graph module (an optimizer's parameters and state,
  which Dynamo keeps at static addresses) become inputs (`lift_tensor_attributes`), read from
  the module at each call: traced as attributes, the autograd stage's tracing wrote them in
  place for real (`p.mul_`, `step += 1`) before it failed and the graph ran eagerly, so every
  update was applied twice.

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
    lifted, names = lift_tensor_attributes(gm)
    if not names:
        return specialize_sizes(compile_graph)(gm, example_inputs)
    compiled = specialize_sizes(compile_graph)(lifted, [*example_inputs, *(_attribute(gm, n) for n in names)])

    def run(*args):
        return compiled(*args, *(_attribute(gm, name) for name in names))
    return run


def lift_tensor_attributes(gm: torch.fx.GraphModule) -> tuple[torch.fx.GraphModule, list[str]]:
    """A copy of `gm` taking the tensors its get_attr nodes read as extra inputs (after its own), and
    their attribute paths; `gm` itself and no names when it reads none."""
    nodes = [n for n in gm.graph.nodes if n.op == "get_attr" and isinstance(_attribute(gm, n.target), torch.Tensor)]
    if not nodes:
        return gm, []
    graph = torch.fx.Graph()
    mapping: dict[torch.fx.Node, torch.fx.Node] = {}
    result = graph.graph_copy(gm.graph, mapping)
    last = [mapping[n] for n in gm.graph.nodes if n.op == "placeholder"]
    names = []
    for node in nodes:
        copy = mapping[node]
        with graph.inserting_after(last[-1]) if last else graph.inserting_before(next(iter(graph.nodes))):
            placeholder = graph.placeholder(f"attribute_{len(names)}")
        placeholder.meta = dict(copy.meta)
        copy.replace_all_uses_with(placeholder)
        graph.erase_node(copy)
        last.append(placeholder)
        names.append(node.target)
    graph.output(result)
    return torch.fx.GraphModule(gm, graph), names


def _attribute(module: torch.nn.Module, path: str):
    for part in path.split("."):
        module = getattr(module, part)
    return module
