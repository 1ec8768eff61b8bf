"""The `inductor` backend: a Dynamo-style FX graph -> compiled callable.

Takes (gm, example_inputs) as every backend does; returns a callable with the
same positional inputs. Training graphs go through `tensorjit.autograd.aot_compile`
when that module exists; until it does they run eagerly (correct, uncompiled).
Inference graphs are traced to ATen with our decompositions on fake tensors and
handed to `compile_aten_graph`. Any failure falls back to gm.forward.
"""

from __future__ import annotations

import logging

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

from ..codegen import compile_aten_graph
from ..codegen.decomp import decompositions

log = logging.getLogger("tensorjit.backends.inductor")


def _needs_grad(gm, example_inputs) -> bool:
    tensors = [t for t in example_inputs if isinstance(t, torch.Tensor)] + list(gm.parameters())
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def trace_inference(gm, example_inputs):
    """ATen graph of gm under no_grad, functionalized, traced on fake tensors."""
    def run(*args):
        with torch.no_grad():
            return gm(*args)
    fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
    fakes = [fake_mode.from_tensor(t) if isinstance(t, torch.Tensor) else t for t in example_inputs]
    with fake_mode:
        return make_fx(torch.func.functionalize(run, remove="mutations_and_views"),
                       decomposition_table=decompositions())(*fakes)


def inductor(gm: torch.fx.GraphModule, example_inputs):
    if _needs_grad(gm, example_inputs):
        try:
            from ..autograd import aot_compile
        except ImportError:
            return gm.forward  # training graphs run eagerly until aot_compile lands
        return aot_compile(gm, example_inputs, fw_compiler=compile_aten_graph,
                           decompositions=decompositions())
    try:
        aten_graph = trace_inference(gm, example_inputs)
        compiled = compile_aten_graph(aten_graph, list(example_inputs))
    except Exception as error:
        log.warning("inductor: compile failed (%s: %s); running eagerly", type(error).__name__, error)
        return gm.forward
    returns_tuple = isinstance(_output_structure(gm), tuple)

    def run(*args):
        result = compiled(*args)
        return tuple(result) if returns_tuple and isinstance(result, list) else result
    return run


def _output_structure(gm):
    for node in gm.graph.nodes:
        if node.op == "output":
            return node.args[0]
    return None
