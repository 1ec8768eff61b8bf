"""Ahead-of-time autograd: the AOTAutograd role.

    aot_compile(gm, example_inputs, *, fw_compiler, bw_compiler=None, inference_compiler=None,
                decompositions=None, partitioner="min_cut", wrap_compiled=None,
                reuse_repeated_blocks=False) -> callable

takes a captured FX graph and returns a callable with the same inputs and outputs.
When some output requires grad, as it would in eager (the call's grad mode, the inputs'
`requires_grad` and the graph's own grad-mode regions decide), the graph is traced into a joint
forward/backward ATen graph (`joint.py`), split by the partitioner (`partition.py`),
the two halves are compiled separately by `fw_compiler` and `bw_compiler` (how a code
generator receives them), and a `torch.autograd.Function` runs them (`runtime.py`).
Otherwise only the functionalized forward is traced and compiled by
`inference_compiler`, with no autograd overhead. A graph that makes its own leaves
(`requires_grad_()` on a value without history) runs eagerly.

`wrap_compiled(compiled, kind, saved_outputs, kept_outputs)`, when given, wraps each
compiled graph before the runtime calls it: kind is "inference", "forward" or "backward";
the first `kept_outputs` outputs are what the caller gets (None: all, as the backward's
gradients), the ones after are new values of mutated inputs, which the runtime copies at
once, and the forward's last `saved_outputs` are the values saved for the backward. CUDA
graphs (mode="reduce-overhead") come in here, around the compiled graphs and not the
`torch.autograd.Function`.

`reuse_repeated_blocks` traces an inference graph's repeated blocks once and stamps the copies
(`segments.py`), where it can prove them alike; the graph handed on is the one a whole trace gives.

Without such a wrapper the backward is called boxed (`runtime/boxed.py`): its inputs, the
saved values and the tangents, in one list the compiled code takes over, so each is freed
after its last reader instead of when the whole backward returns.
"""

from __future__ import annotations

from typing import Callable

import torch

from .. import logs
from ..capture.guards import GUARDED_INPUTS
from ..runtime.boxed import BOXED_INPUTS, boxed_graph_module
from .joint import (TracedGraph, differentiable_outputs, fake_outputs, segment_plan, trace_forward, trace_joint,
                    untraceable)
from .partition import partition as split_joint
from .runtime import make_inference_function, make_training_function

__all__ = ["aot_compile"]


def _example_of(node: torch.fx.Node):
    return node.meta.get("val")


def _examples(gm: torch.fx.GraphModule) -> list:
    return [_example_of(n) for n in gm.graph.nodes if n.op == "placeholder"]


def _pass_guarded_inputs(gm: torch.fx.GraphModule, traced: torch.fx.GraphModule, wrapped: bool) -> None:
    """The layouts capture's guards prove for `gm`'s inputs hold for `traced`'s too, where
    `traced` (the inference graph, the forward) takes the same inputs in the same order and
    nothing stands between the runtime's call and the compiled graph (a CUDA graph runner
    copies inputs into buffers of its own)."""
    proven = gm.meta.get(GUARDED_INPUTS)
    placeholders = sum(1 for node in traced.graph.nodes if node.op == "placeholder")
    if proven is not None and not wrapped and placeholders == len(proven):
        traced.meta[GUARDED_INPUTS] = proven


def _unwrapped(compiled: Callable, kind: str, saved_outputs: int, kept_outputs: int | None) -> Callable:
    return compiled


def aot_compile(gm: torch.fx.GraphModule, example_inputs: list, *, fw_compiler: Callable,
                bw_compiler: Callable | None = None, inference_compiler: Callable | None = None,
                decompositions: dict | None = None, partitioner: str = "min_cut",
                wrap_compiled: Callable | None = None, reuse_repeated_blocks: bool = False) -> Callable:
    bw_compiler = bw_compiler or fw_compiler
    wrap = wrap_compiled or _unwrapped
    inference_compiler = inference_compiler or fw_compiler
    if not torch.is_grad_enabled():
        traced = _traced_without_grad(gm, example_inputs, decompositions, reuse_repeated_blocks)
        if traced is not None:
            return _compile_inference(gm, traced, inference_compiler, wrap)
    plan = segment_plan(gm) if reuse_repeated_blocks else None
    try:
        outputs = fake_outputs(gm, example_inputs, plan)
    except Exception as error:  # noqa: BLE001 - a tracing gap runs the graph eagerly, correctly
        return _eagerly(gm, f"{type(error).__name__}: {error}")
    layouts = {t.layout for t in [*example_inputs, *outputs] if isinstance(t, torch.Tensor)} - {torch.strided}
    if layouts:  # sparse tensors: functionalization and the partitioner know strided ones only
        return _eagerly(gm, f"tensors of layout {sorted(map(str, layouts))[0]}")
    if not differentiable_outputs(outputs):
        return _inference(gm, example_inputs, inference_compiler, decompositions, wrap, reuse_repeated_blocks)
    reason = untraceable(gm, example_inputs)
    if reason is not None:
        return _eagerly(gm, reason)
    try:
        traced = trace_joint(gm, example_inputs, decompositions, outputs, reuse_repeated_blocks, plan)
    except Exception as error:  # noqa: BLE001 - e.g. requires_grad_() inside: autograd runs it eagerly
        return _eagerly(gm, f"{type(error).__name__}: {error}")
    parts = split_joint(traced, partitioner)
    _pass_guarded_inputs(gm, parts.forward, wrap is not _unwrapped)
    forward = wrap(fw_compiler(parts.forward, _examples(parts.forward)), "forward", parts.num_saved,
                   traced.num_outputs)
    backward = _compile_backward(parts.backward, bw_compiler, wrap)
    training = make_training_function(
        forward, backward, num_inputs=len(example_inputs), num_outputs=traced.num_outputs,
        mutated=traced.mutated_inputs, num_saved=parts.num_saved,
        differentiable_outputs=traced.differentiable_outputs, grad_inputs=traced.grad_inputs)
    training.partition = parts
    return training


def _compile_backward(gm: torch.fx.GraphModule, bw_compiler: Callable, wrap: Callable) -> Callable:
    """The compiled backward, called boxed (`runtime/boxed.py`) where nothing wraps it: a code
    generator builds a boxed runner (`BOXED_INPUTS`), a graph run as it is gets torch.fx's code
    with a boxed signature, so that each saved activation is freed after its last reader. A CUDA
    graph runner replays with its inputs in place: it is called as it is."""
    if wrap is not _unwrapped:
        return wrap(bw_compiler(gm, _examples(gm)), "backward", 0, None)
    gm.meta[BOXED_INPUTS] = True
    return boxed_graph_module(bw_compiler(gm, _examples(gm)), gm)


def _traced_without_grad(gm, example_inputs, decompositions, reuse: bool) -> TracedGraph | None:
    """A call under no_grad or inference_mode (a model's inference): the inference graph, traced at
    once, where no output requires grad, which the trace itself shows (the graph's own
    `enable_grad` regions and `requires_grad_()` run while it traces). This spares running the graph
    on fake tensors first (`fake_outputs`) only to learn that. None where an output requires grad,
    an output is not strided, or tracing fails: the general path decides, with its reasons."""
    outputs: list = []
    try:
        traced = trace_forward(gm, example_inputs, decompositions, outputs, reuse_repeated_blocks=reuse)
    except Exception:  # noqa: BLE001 - the general path tries again and names the reason
        return None
    tensors = [t for t in [*example_inputs, *outputs] if isinstance(t, torch.Tensor)]
    if differentiable_outputs(outputs) or any(t.layout != torch.strided for t in tensors):
        return None
    return traced


def _inference(gm, example_inputs, inference_compiler, decompositions, wrap, reuse: bool) -> Callable:
    """No output requires grad (given the call's grad mode and the graph's own grad-mode
    regions): the functionalized forward alone, without autograd."""
    try:
        traced = trace_forward(gm, example_inputs, decompositions, reuse_repeated_blocks=reuse)
    except Exception as error:  # noqa: BLE001 - a tracing gap runs the graph eagerly, correctly
        return _eagerly(gm, f"{type(error).__name__}: {error}")
    return _compile_inference(gm, traced, inference_compiler, wrap)


def _compile_inference(gm, traced: TracedGraph, inference_compiler, wrap) -> Callable:
    _pass_guarded_inputs(gm, traced.graph_module, wrap is not _unwrapped)
    compiled = wrap(inference_compiler(traced.graph_module, _examples(traced.graph_module)), "inference", 0,
                    traced.num_outputs)
    return make_inference_function(compiled, traced.num_outputs, traced.mutated_inputs)


def _eagerly(gm: torch.fx.GraphModule, reason: str) -> Callable:
    logs.emit("graph_breaks", f"autograd: running the graph eagerly: {reason}")
    return gm.forward
