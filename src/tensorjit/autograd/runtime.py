"""Running compiled forward and backward graphs under autograd.

`make_training_function` wraps a compiled forward and backward in a
`torch.autograd.Function`: the forward returns the outputs, writes the new values of
mutated inputs back into them, and saves exactly the values the partitioner chose;
the backward releases them from the node and hands them, with the tangents, to the
compiled backward in one list it takes over (`runtime/boxed.py`), which frees each after its
last reader. Double backward through it is an
error (`once_differentiable`), never a silently wrong gradient. `make_inference_function`
is the path without autograd, for calls under no_grad/inference_mode or with no input
that requires grad.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch.autograd.function import once_differentiable

from ..runtime.boxed import boxed_caller
from ..runtime.persist import set_reduce


class WriteBack:
    """Copies the new values of mutated inputs into them, in one `_foreach_copy_` per group of
    same-shaped pairs of one dtype (a model's batch-norm statistics are hundreds of small tensors:
    one copy kernel each otherwise) and one per other pair (`copy_`'s broadcasting and casts).

    The grouping is decided at the first call and kept: a compiled graph's new values have the
    same shapes, dtypes and devices at every call its guards let through, so a call is a few
    C++ calls instead of a Python loop over every pair. Batching is safe: no two mutated inputs
    share memory (capture guards it: `guards.storages_unshared`), and a new value is an output of
    the graph, never one of the inputs it writes (except the input itself: generated code that
    wrote it in place returns it, and then nothing is copied)."""

    __slots__ = ("mutated", "groups", "identical")

    def __init__(self, mutated: list[int]):
        self.mutated = mutated
        self.groups: list[tuple[list[int], list[int]]] | None = None
        """(input indices, value positions) copied by one `_foreach_copy_` each."""
        self.identical: list[tuple[int, int]] = []
        """(input index, value position) pairs the first call found to be one tensor."""

    def __call__(self, inputs, values) -> None:
        if self.groups is None:
            self._plan(inputs, values)
        with torch.no_grad():
            for targets, sources in self.groups:
                torch._foreach_copy_([inputs[i] for i in targets], [values[j] for j in sources])
            for index, position in self.identical:
                if inputs[index] is not values[position]:
                    inputs[index].copy_(values[position])

    def _plan(self, inputs, values) -> None:
        batches: dict = {}
        singles = []
        for position, index in enumerate(self.mutated):
            target, value = inputs[index], values[position]
            if target is value:
                self.identical.append((index, position))
            elif isinstance(value, torch.Tensor) and value.shape == target.shape and value.dtype == target.dtype \
                    and value.device == target.device:
                targets, sources = batches.setdefault((value.dtype, value.device), ([], []))
                targets.append(index)
                sources.append(position)
            else:
                singles.append(([index], [position]))
        self.groups = list(batches.values()) + singles


def _as_traced(tangent):
    if isinstance(tangent, torch.Tensor) and not tangent.is_contiguous():
        return tangent.contiguous()
    return tangent


BACKWARD_TWICE = ("Trying to backward through the graph a second time (or directly access saved tensors after "
                  "they have already been freed). Saved intermediate values of the graph are freed when you call "
                  ".backward() or autograd.grad(). Specify retain_graph=True if you need to backward through the "
                  "graph a second time or if you need to access saved tensors after calling backward.")
"""Eager autograd's error for a second backward through a released graph (also ours: `_take_saved`)."""


def _take_saved(ctx) -> list:
    """The values the forward saved, in order, released from the node unless the graph is retained
    (a second backward reads them again): the compiled backward then holds the last references
    and frees each after its last reader, instead of the node keeping them all until the backward
    returns. A second backward after a release fails with eager's error."""
    if ctx.saved_other is None:
        raise RuntimeError(BACKWARD_TWICE)
    tensors, others = iter(ctx.saved_tensors), iter(ctx.saved_other)
    saved = [next(tensors) if is_tensor else next(others) for is_tensor in ctx.saved_layout]
    del tensors  # (an iterator not run past its end holds its tuple)
    if not torch._C._autograd._get_current_graph_task_keep_graph():
        ctx.saved_other = None  # tuples of tensors (a multi-output op saved whole) among them
    ctx.maybe_clear_saved_tensors()  # the same test, inside: `retain_graph` keeps them
    return saved


def make_inference_function(compiled: Callable, num_outputs: int, mutated: list[int]) -> Callable:
    write_back = WriteBack(mutated)

    def run(*inputs):
        # No output requires grad (the graph decided it); generated code that views an input
        # (`detach` lowered to an alias) must not record autograd history on it either.
        with torch.no_grad():
            results = compiled(*inputs)
        if mutated:
            write_back(inputs, results[num_outputs:num_outputs + len(mutated)])
        # A graph's `x.detach()` may come back as the input tensor itself from generated code.
        return tuple(out.detach() if isinstance(out, torch.Tensor) and out.requires_grad else out
                     for out in results[:num_outputs])
    return set_reduce(run, make_inference_function, compiled, num_outputs, mutated)  # warm start saves it so


def make_training_function(forward: Callable, backward: Callable, *, num_inputs: int, num_outputs: int,
                           mutated: list[int], num_saved: int, differentiable_outputs: list[int],
                           grad_inputs: list[int]) -> Callable:
    num_mutated = len(mutated)
    write_back = WriteBack(mutated)
    non_differentiable = [i for i in range(num_outputs) if i not in set(differentiable_outputs)]
    take_step_token = getattr(forward, "take_step_token", None)
    call_backward = boxed_caller(backward)

    class CompiledFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *inputs):
            results = forward(*inputs)
            # A forward replayed through a CUDA graph hands out its saved activations in place; the
            # token says when the backward has read them (runtime/cudagraphs.py).
            ctx.step_token = take_step_token() if take_step_token else None
            outputs = results[:num_outputs]
            if num_mutated:
                write_back(inputs, results[num_outputs:num_outputs + num_mutated])
            saved = results[num_outputs + num_mutated:]
            tensors = [s for s in saved if isinstance(s, torch.Tensor)]
            ctx.save_for_backward(*tensors)
            ctx.saved_layout = [isinstance(s, torch.Tensor) for s in saved]
            ctx.saved_other = [s for s in saved if not isinstance(s, torch.Tensor)]
            # A fresh alias for each output that needs no gradient: a compiled graph may return
            # one tensor for several outputs (`y.detach(), y`), and marking is per tensor.
            outputs = [out.detach() if i in non_differentiable and isinstance(out, torch.Tensor) else out
                       for i, out in enumerate(outputs)]
            ctx.mark_non_differentiable(*[outputs[i] for i in non_differentiable
                                          if isinstance(outputs[i], torch.Tensor)])
            return tuple(outputs)

        @staticmethod
        @once_differentiable
        def backward(ctx, *grad_outputs):
            inputs = _take_saved(ctx)
            # Materialized zeros if unused. The backward was traced with contiguous tangents and
            # may view or as_strided them accordingly; autograd hands us whatever layout the
            # caller's gradient has (an expanded scalar from .sum().backward(), a transpose).
            inputs += [_as_traced(grad_outputs[i]) for i in differentiable_outputs]
            grads = call_backward(inputs)  # boxed: it empties `inputs`
            if ctx.step_token is not None:
                ctx.step_token.finish()
            result: list = [None] * num_inputs
            for index, grad in zip(grad_inputs, grads):
                result[index] = grad
            return tuple(result)

    def run(*inputs):
        # Grad mode on: an output computed under the graph's own enable_grad() needs a gradient
        # even in a call made under no_grad; the others are marked non-differentiable.
        with torch.enable_grad():
            return CompiledFunction.apply(*inputs)

    # The warm-start cache saves the two compiled graphs and this call, never the traced graphs.
    return set_reduce(run, make_training_function, forward, backward, num_inputs=num_inputs,
                      num_outputs=num_outputs, mutated=mutated, num_saved=num_saved,
                      differentiable_outputs=differentiable_outputs, grad_inputs=grad_inputs)
