"""flex_attention compiled: eager's results without the whole score matrix.

Eager flex_attention materializes the (batch, heads, queries, keys) scores; torch.compile fuses
it into a kernel that does not. tensorjit captures the call as one node (score_mod and mask_mod as
submodules, the block mask's tables as inputs) computed by blocks of keys with an online softmax:
outputs, log-sum-exp and gradients equal eager's, and no tensor in the compiled forward or backward
graph has the score matrix's shape.
"""

from __future__ import annotations

import math
import types

import pytest
import torch
import torch._dynamo
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

import tensorjit
from tensorjit.capture.flex_attention import KEY_BLOCK

from .harness import REFERENCE, CountingBackend

pytestmark = pytest.mark.skipif(REFERENCE, reason="compares tensorjit with torch.compile in one run")

BATCH, HEADS, LENGTH, DIM = 2, 4, 192, 16  # three key blocks
BIAS = torch.randn(HEADS, LENGTH, LENGTH) * 0.1


def relative(score, b, h, q_idx, kv_idx):
    return score + (q_idx - kv_idx) * 0.01


def biased(score, b, h, q_idx, kv_idx):
    return score + BIAS[h, q_idx, kv_idx]


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def sliding(b, h, q_idx, kv_idx):
    return (q_idx - kv_idx).abs() < 40


CAUSAL = create_block_mask(causal, None, None, LENGTH, LENGTH, device="cpu")
SLIDING = create_block_mask(sliding, 1, 1, LENGTH, LENGTH, device="cpu", BLOCK_SIZE=32)


def plain(q, k, v):
    return flex_attention(q, k, v)


def with_score_mod(q, k, v):
    return flex_attention(q, k, v, score_mod=relative)


def with_bias_table(q, k, v):
    return flex_attention(q, k, v, score_mod=biased, scale=0.3)


def causal_mask(q, k, v, mask):
    return flex_attention(q, k, v, score_mod=relative, block_mask=mask)


def with_lse(q, k, v, mask):
    out, lse = flex_attention(q, k, v, block_mask=mask, return_lse=True)
    return out * 2, lse


def grouped_query(q, k, v):
    return flex_attention(q, k[:, :2], v[:, :2], enable_gqa=True)


CASES = [(plain, None), (with_score_mod, None), (with_bias_table, None), (causal_mask, CAUSAL),
         (causal_mask, SLIDING), (with_lse, CAUSAL), (grouped_query, None)]
IDS = ["plain", "score_mod", "bias_table", "causal_block_mask", "sliding_block_mask", "lse", "gqa"]


def inputs(requires_grad: bool = False):
    generator = torch.Generator().manual_seed(0)
    return [torch.randn(BATCH, HEADS, LENGTH, DIM, generator=generator).requires_grad_(requires_grad)
            for _ in range(3)]


def arguments(tensors, mask):
    return (*tensors, mask) if mask is not None else tuple(tensors)


@pytest.mark.parametrize("program, mask", CASES, ids=IDS)
def test_one_graph_and_eager_results(program, mask):
    expected = program(*arguments(inputs(), mask))
    tensorjit.reset()
    ours = CountingBackend()
    torch.testing.assert_close(tensorjit.compile(program, backend=ours)(*arguments(inputs(), mask)), expected)
    torch._dynamo.reset()
    theirs = CountingBackend()
    torch.compile(program, backend=theirs)(*arguments(inputs(), mask))
    assert ours.graph_count == theirs.graph_count == 1


def differentiable_reference(q, k, v, score_mod=None, block_mask=None, scale=None, enable_gqa=False,
                             return_lse=False):
    """flex_attention's eager math under plain autograd (eager flex_attention has no CPU backward)."""
    from torch._higher_order_ops.flex_attention import math_attention
    from torch.nn.attention import flex_attention as flex
    if enable_gqa:
        k, v = (t.repeat_interleave(q.shape[1] // t.shape[1], dim=1) for t in (k, v))
    block_mask = block_mask if block_mask is not None else flex._create_empty_block_mask(q, k)
    scale = scale if scale is not None else q.shape[-1] ** -0.5
    out, lse, _ = math_attention(q, k, v, score_mod or flex._identity, block_mask.as_tuple(), scale, {})
    out = out.to(q.dtype)
    return (out, lse * math.log(2.0)) if return_lse else out  # math_attention's is in base 2


def with_reference(program):
    """`program` calling differentiable_reference where it calls flex_attention."""
    return types.FunctionType(program.__code__, {**program.__globals__, "flex_attention": differentiable_reference})


GRADIENT_CASES = [pytest.param(*case, backend, id=f"{name}-{backend}") for case, name in zip(CASES, IDS)
                  for backend in ("aot_eager", "inductor")
                  if backend == "aot_eager" or name in ("bias_table", "sliding_block_mask", "lse")]


@pytest.mark.parametrize("program, mask, backend", GRADIENT_CASES)
def test_gradients_through_autograd_and_code_generation(program, mask, backend):
    def loss(fn):
        tensors = inputs(requires_grad=True)
        out = fn(*arguments(tensors, mask))
        out = out if isinstance(out, tuple) else (out,)
        total = sum((o.float() * (i + 1)).sum() for i, o in enumerate(out) if o.requires_grad)
        return (*out, *torch.autograd.grad(total, tensors))
    tensorjit.reset()
    torch.testing.assert_close(loss(tensorjit.compile(program, backend=backend)), loss(with_reference(program)),
                               atol=2e-4, rtol=2e-4)


def test_no_graph_holds_the_score_matrix():
    """Every tensor of the compiled forward and backward ATen graphs is smaller than the scores."""
    from tensorjit.autograd import aot_compile
    graphs = []

    def keep(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def backend(gm, example_inputs):
        return aot_compile(gm, example_inputs, fw_compiler=keep)
    tensorjit.reset()
    tensors = inputs(requires_grad=True)
    out = tensorjit.compile(causal_mask, backend=backend)(*tensors, CAUSAL)
    out.sum().backward()
    assert len(graphs) == 2
    largest = max(node.meta["val"].numel() for gm in graphs for node in gm.graph.nodes
                  if isinstance(node.meta.get("val"), torch.Tensor))
    assert largest <= BATCH * HEADS * LENGTH * KEY_BLOCK < BATCH * HEADS * LENGTH * LENGTH


def test_learnable_bias_table_gets_its_gradient():
    """A tensor global read by score_mod is a graph input, traced: its gradient is eager's."""
    global TABLE
    TABLE = torch.zeros(HEADS, LENGTH, LENGTH, requires_grad=True)
    tensorjit.reset()
    compiled = tensorjit.compile(learned_bias, backend="aot_eager")
    tensors = inputs()
    (ours,) = torch.autograd.grad(compiled(*tensors).sum(), TABLE)
    (expected,) = torch.autograd.grad(with_reference(learned_bias)(*tensors).sum(), TABLE)
    torch.testing.assert_close(ours, expected)


TABLE = None


def learned(score, b, h, q_idx, kv_idx):
    return score + TABLE[h, q_idx, kv_idx]


def learned_bias(q, k, v):
    return flex_attention(q, k, v, score_mod=learned)


def test_score_mod_closing_over_a_frame_tensor_breaks_and_runs_eagerly():
    def program(q, k, v):
        offset = q.mean()
        return flex_attention(q, k, v, score_mod=lambda score, b, h, i, j: score + offset)
    tensorjit.reset()
    torch.testing.assert_close(tensorjit.compile(program, backend="eager")(*inputs()), program(*inputs()))
