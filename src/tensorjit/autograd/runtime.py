"""The per-call wrappers around compiled forward, backward and inference graphs.

`RuntimePlan` is everything decided at compile time about how to call the
compiled graphs. `training_callable(plan, forward, backward)` returns a function
that runs the forward inside a torch.autograd.Function (saving exactly the
partitioner's tensors) and the backward when autograd asks for it;
`inference_callable(plan, inference)` returns the forward-only path with no
autograd.Function. Both copy new values into mutated inputs and regenerate
outputs that alias inputs or earlier outputs as views, as eager would return.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch.autograd.function import once_differentiable

from .metadata import OutputAlias


@dataclass(frozen=True, slots=True)
class RuntimePlan:
    input_count: int
    output_count: int
    returns_tuple: bool
    kept_outputs: tuple[int, ...]
    """Captured-graph output index of each user output the compiled graph returns."""
    aliases: tuple[tuple[int, OutputAlias], ...]
    """(output index, how to regenerate it) for outputs that are views."""
    mutated_inputs: tuple[int, ...]
    """Input index of each new-value output that follows the user outputs."""
    differentiable_outputs: tuple[int, ...] = ()
    """Compiled-forward output positions that receive a tangent, in tangent order."""
    grad_inputs: tuple[int, ...] = ()
    """Input indices the backward returns gradients for, in order."""
    non_differentiable: tuple[int, ...] = ()
    """Compiled-forward output positions autograd must not differentiate."""


def _copy_back(plan: RuntimePlan, args, new_values) -> None:
    with torch.no_grad():
        for index, value in zip(plan.mutated_inputs, new_values):
            args[index].copy_(value)


def _assemble(plan: RuntimePlan, args, computed) -> object:
    """Place computed outputs and regenerated views into the captured graph's output order."""
    if not plan.aliases and plan.returns_tuple:
        return computed if isinstance(computed, tuple) else tuple(computed)
    outputs: list = [None] * plan.output_count
    for position, index in enumerate(plan.kept_outputs):
        outputs[index] = computed[position]
    for index, alias in plan.aliases:
        base = args[alias.index] if alias.source == "input" else outputs[alias.index]
        if not alias.requires_grad and base.requires_grad:
            base = base.detach()
        if alias.is_whole:
            outputs[index] = base
        elif alias.source == "output" and base.storage_offset() != 0:
            raise AssertionError("aliased output base moved; recompile without view regeneration")
        else:
            outputs[index] = base.as_strided(alias.size, alias.stride, alias.storage_offset)
    return tuple(outputs) if plan.returns_tuple else outputs[0]


def inference_callable(plan: RuntimePlan, inference: Callable) -> Callable:
    kept = len(plan.kept_outputs)

    def run_inference(*args):
        results = inference(*args)
        if plan.mutated_inputs:
            _copy_back(plan, args, results[kept:])
        return _assemble(plan, args, results[:kept])

    return run_inference


def _function_class(plan: RuntimePlan, forward: Callable, backward: Callable):
    kept = len(plan.kept_outputs)
    forward_count = kept + len(plan.mutated_inputs)

    def forward_step(ctx, *args):
        results = forward(*args)
        ctx.save_for_backward(*results[forward_count:])
        if plan.mutated_inputs:
            _copy_back(plan, args, results[kept:forward_count])
        outputs = tuple(results[:kept])
        if plan.non_differentiable:
            ctx.mark_non_differentiable(*[outputs[i] for i in plan.non_differentiable])
        return outputs

    @once_differentiable
    def backward_step(ctx, *grad_outputs):
        # The backward graph was traced with contiguous tangents.
        tangents = [grad_outputs[i].contiguous() for i in plan.differentiable_outputs]
        grads = backward(*ctx.saved_tensors, *tangents)
        result = [None] * plan.input_count
        for index, grad in zip(plan.grad_inputs, grads):
            result[index] = grad
        return tuple(result)

    return type("CompiledFunction", (torch.autograd.Function,), {
        "forward": staticmethod(forward_step),
        "backward": staticmethod(backward_step),
    })


def training_callable(plan: RuntimePlan, forward: Callable, backward: Callable) -> Callable:
    apply = _function_class(plan, forward, backward).apply

    def run_training(*args):
        return _assemble(plan, args, apply(*args))

    return run_training
