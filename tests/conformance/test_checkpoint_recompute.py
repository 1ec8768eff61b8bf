"""torch.utils.checkpoint regions are recomputed in the backward, as under torch.compile.

Eager checkpoint saves a region's inputs only and runs the region again in the backward;
torch.compile tags the region's nodes and its partitioner never saves them. tensorjit's
capture tags them (`recompute`) and its partitioner recomputes them: the tensors the compiled
forward saves for the backward (counted with saved_tensors_hooks on a warm call, inputs and
parameters left out) drop to what torch.compile saves, and gradients stay eager's.
"""

from __future__ import annotations

import functools

import pytest
import torch
import torch._dynamo
from torch.utils.checkpoint import checkpoint

import tensorjit

from .harness import REFERENCE

pytestmark = pytest.mark.skipif(REFERENCE, reason="compares tensorjit with torch.compile in one run")

torch.manual_seed(0)
first = torch.nn.Linear(16, 64)
second = torch.nn.Linear(64, 16)


def block(x):
    return torch.nn.functional.gelu(second(torch.nn.functional.gelu(first(x))))


def plain(x):
    h = block(x)
    return (h.sin() * h).sum()


def checkpointed(x):
    h = checkpoint(block, x, use_reentrant=False)
    return (h.sin() * h).sum()


def two_regions(x):
    h = checkpoint(block, x, use_reentrant=False)
    h = checkpoint(block, h.tanh(), use_reentrant=False)
    return (h * h).sum()


def saved_activation_bytes(fn, x) -> int:
    """Bytes the call saves for its backward, besides the input and the parameters."""
    kept = {t.data_ptr() for t in [x, *first.parameters(), *second.parameters()]}
    sizes = []

    def pack(tensor):
        if tensor.data_ptr() not in kept:
            sizes.append(tensor.numel() * tensor.element_size())
        return tensor
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        out = fn(x)
    out.backward()
    return sum(sizes)


def gradients(fn, x):
    first.zero_grad()
    second.zero_grad()
    x = x.detach().requires_grad_()
    out = fn(x)
    out.backward()
    return out.detach(), x.grad, first.weight.grad.clone(), second.weight.grad.clone()


def compiled(compile_fn, program, backend):
    fn = compile_fn(program, backend=backend)
    fn(torch.randn(8, 16, requires_grad=True)).backward()  # compiles outside the hooks
    return fn


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("program", [checkpointed, two_regions], ids=["one_region", "two_regions"])
def test_checkpoint_gradients_equal_eager(program, backend):
    tensorjit.reset()
    fn = tensorjit.compile(program, backend=backend)
    x = torch.randn(8, 16)
    torch.testing.assert_close(gradients(fn, x), gradients(program, x))


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_checkpointed_region_saves_no_activations(backend):
    x = torch.randn(8, 16, requires_grad=True)
    tensorjit.reset()
    ours_plain = saved_activation_bytes(compiled(tensorjit.compile, plain, backend), x)
    tensorjit.reset()
    ours = saved_activation_bytes(compiled(tensorjit.compile, checkpointed, backend), x)
    torch._dynamo.reset()
    theirs = saved_activation_bytes(compiled(torch.compile, checkpointed, "aot_eager"), x)
    assert ours_plain > 0  # without checkpoint the matrix products' results are saved
    assert ours <= theirs and ours < ours_plain, (ours, theirs, ours_plain)


def test_partition_saves_only_inputs_of_the_region():
    """The partition itself: every saved value is a graph input (x or a parameter)."""
    from tensorjit.autograd import aot_compile
    tensorjit.reset()
    partitions = []

    def backend(gm, example_inputs):
        compiled_fn = aot_compile(gm, example_inputs, fw_compiler=lambda g, _: g.forward)
        partitions.append(compiled_fn.partition)
        return compiled_fn
    fn = tensorjit.compile(checkpointed, backend=backend)
    fn(torch.randn(8, 16, requires_grad=True)).backward()
    (partition,) = partitions
    placeholders = {n.name for n in partition.forward.graph.nodes if n.op == "placeholder"}
    assert set(partition.saved_names) <= placeholders, partition.saved_names


def save_matrix_products(ctx, op, *args, **kwargs):
    from torch.utils.checkpoint import CheckpointPolicy
    if op in (torch.ops.aten.mm.default, torch.ops.aten.addmm.default):
        return CheckpointPolicy.MUST_SAVE
    return CheckpointPolicy.PREFER_RECOMPUTE


def selective(x):
    from torch.utils.checkpoint import create_selective_checkpoint_contexts
    context = functools.partial(create_selective_checkpoint_contexts, save_matrix_products)
    h = checkpoint(block, x, use_reentrant=False, context_fn=context)
    return (h.sin() * h).sum()


def selective_list(x):
    from torch.utils.checkpoint import create_selective_checkpoint_contexts
    context = functools.partial(create_selective_checkpoint_contexts, [torch.ops.aten.addmm.default])
    h = checkpoint(block, x, use_reentrant=False, context_fn=context)
    return (h.sin() * h).sum()


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("program", [selective, selective_list], ids=["policy_function", "op_list"])
def test_selective_checkpointing_saves_what_the_policy_names(program, backend):
    """torch's selective checkpointing: the matrix products the policy saves are saved (as torch.compile
    saves them), the rest of the region is recomputed; gradients equal eager's."""
    x = torch.randn(8, 16, requires_grad=True)
    tensorjit.reset()
    ours = saved_activation_bytes(compiled(tensorjit.compile, program, backend), x)
    torch._dynamo.reset()
    theirs = saved_activation_bytes(compiled(torch.compile, program, "aot_eager"), x)
    tensorjit.reset()
    everything_recomputed = saved_activation_bytes(compiled(tensorjit.compile, checkpointed, backend), x)
    assert ours == theirs > everything_recomputed
    tensorjit.reset()
    torch.testing.assert_close(gradients(tensorjit.compile(program, backend=backend), x), gradients(program, x))


def test_other_context_fn_breaks_and_runs_eagerly():
    import contextlib

    def contexts():
        return contextlib.nullcontext(), contextlib.nullcontext()

    def program(x):
        return checkpoint(block, x, use_reentrant=False, context_fn=contexts).sum()
    tensorjit.reset()
    x = torch.randn(8, 16)
    torch.testing.assert_close(gradients(tensorjit.compile(program, backend="aot_eager"), x), gradients(program, x))
