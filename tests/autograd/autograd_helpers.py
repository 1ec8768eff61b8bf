"""Helpers for autograd tests: graphs shaped like capture's, with parameters lifted to inputs."""

from __future__ import annotations

import torch
import torch.fx as fx
from torch._decomp import get_decompositions
from torch.fx.experimental.proxy_tensor import make_fx


class _InlineTracer(fx.Tracer):
    # Buffers must be proxies, or `num_batches_tracked.add_(1)` runs while tracing.
    proxy_buffer_attributes = True

    def is_leaf_module(self, module, qualified_name) -> bool:
        return False

    def call_module(self, module, forward, args, kwargs):
        # BatchNorm checks input.dim() in Python, which a proxy cannot answer.
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
            module._check_input_dim = lambda input: None
            try:
                return super().call_module(module, module.forward, args, kwargs)
            finally:
                del module._check_input_dim
        return super().call_module(module, forward, args, kwargs)


def module_state(module: torch.nn.Module) -> tuple[list[str], list[torch.Tensor]]:
    named = list(module.named_parameters()) + list(module.named_buffers())
    return [name for name, _ in named], [tensor for _, tensor in named]


def lift_symbolic(module: torch.nn.Module) -> tuple[fx.GraphModule, list[torch.Tensor]]:
    """symbolic_trace `module` (inlining submodules); parameters and buffers become the first inputs."""
    graph = _InlineTracer().trace(module)
    names, tensors = module_state(module)
    first = next(iter(graph.nodes))
    placeholders = {}
    with graph.inserting_before(first):
        for name in names:
            placeholders[name] = graph.placeholder("p_" + name.replace(".", "_"))
    for node in list(graph.nodes):
        if node.op == "get_attr" and node.target in placeholders:
            node.replace_all_uses_with(placeholders[node.target])
            graph.erase_node(node)
    output = next(n for n in graph.nodes if n.op == "output")
    if not isinstance(output.args[0], tuple):
        output.args = ((output.args[0],),)
    gm = fx.GraphModule(module, graph)
    return gm, tensors


def lift_make_fx(module: torch.nn.Module, *inputs) -> tuple[fx.GraphModule, list[torch.Tensor]]:
    """An ATen-level graph of `module` via make_fx on a copy; state tensors are the first inputs."""
    import copy

    names, tensors = module_state(module)
    shadow = copy.deepcopy(module)

    def run(*flat):
        state = dict(zip(names, flat[:len(names)]))
        return (torch.func.functional_call(shadow, state, tuple(flat[len(names):])),)

    copies = [t.detach().clone().requires_grad_(t.requires_grad) for t in tensors]
    # nn.LSTM would otherwise be traced into CPU mkldnn kernels; capture keeps
    # torch.lstm, which the autograd stage decomposes itself.
    table = get_decompositions([torch.ops.aten.lstm])
    previous = torch._C._get_mkldnn_enabled()
    torch._C._set_mkldnn_enabled(False)
    try:
        return make_fx(run, decomposition_table=table)(*copies, *inputs), tensors
    finally:
        torch._C._set_mkldnn_enabled(previous)
