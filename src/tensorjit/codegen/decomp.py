"""The decomposition table tracing applies before code generation.

Takes nothing; `decompositions()` returns {OpOverload: python decomposition}:
torch's core ATen decompositions plus softmax/log_softmax/layer norm/var_mean
pieces so they reach the code generator as pointwise ops and reductions.
"""

from __future__ import annotations

import functools

import torch
from torch._decomp import core_aten_decompositions, get_decompositions

aten = torch.ops.aten

EXTRA = [
    aten._softmax, aten._log_softmax, aten.native_layer_norm,
    aten.gelu, aten.silu, aten.hardtanh, aten.mse_loss, aten.addcmul, aten.addcdiv,
    aten.leaky_relu, aten.elu, aten.hardsigmoid, aten.hardswish, aten.softplus,
    aten.native_batch_norm, aten._native_batch_norm_legit_no_training, aten.logsumexp,
    aten.rsub, aten.lerp, aten.clamp_min, aten.clamp_max,
]


KEPT = [aten._scaled_dot_product_flash_attention_for_cpu.default]
"""Ops left to their ATen kernels although core ATen decomposes them. CPU flash attention:
its fused kernel is faster than the decomposed math, and tracing joint forward/backward
through torch's decomposition gave wrong in_proj gradients for nn.MultiheadAttention
(tests/conformance/test_with_inductor.py)."""

WRONG_IN_TORCH = [
    aten.multilabel_margin_loss_forward.default,
    aten.multi_margin_loss.default,
]
"""torch decompositions that give a different answer from the ATen kernel; the kernel runs
instead (every code generator's table drops them). Both return shape [1], not [], for a 1-d
input with reduction="none"; multilabel_margin_loss_forward also counts the terms of the
target positions after the first -1 (gathering input[0] for them), so any target with fewer
labels than classes gets a larger loss (tests/codegen/test_decompositions.py)."""


@functools.lru_cache(maxsize=1)
def _table() -> dict:
    table = dict(core_aten_decompositions())
    table.update(get_decompositions(EXTRA))
    for op in KEPT + WRONG_IN_TORCH:
        table.pop(op, None)
    return table


def decompositions() -> dict:
    """A fresh copy (callers may edit it)."""
    return dict(_table())
