"""The decomposition table the Triton lowering expects, and the few decompositions of its own.

`decompositions()` returns core ATen's table plus softmax, layer norm, GELU,
var_mean and batch norm taken apart into pointwise ops and last-dimension
reductions, minus attention (kept as one fused ATen kernel: its decomposition
into matrix products and a softmax is slower on a GPU) and the rules torch gets
wrong (`tensorjit.codegen.decomp.WRONG_IN_TORCH`).

Inference batch norm is decomposed here rather than by torch's rule, which
computes 1/sqrt(var + eps) per channel as its own tensor: that tensor becomes
a kernel of C elements launched before every batch norm. Writing every
per-channel operand as a [C, 1, 1] view of an input instead lets the whole
normalisation (and the ReLU after it) be one kernel over the activation,
recomputing rsqrt per element, which is free next to the memory traffic.
"""

from __future__ import annotations

import torch

aten = torch.ops.aten


def batch_norm_inference(input, weight, bias, running_mean, running_var, momentum, eps):
    """aten._native_batch_norm_legit_no_training: (output, saved mean, saved inverse std)."""
    compute = torch.float32 if input.dtype in (torch.float16, torch.bfloat16) else input.dtype
    shape = [-1] + [1] * (input.dim() - 2)

    def per_channel(value):
        # expand to the activation's shape, so every op below is elementwise over it (one group)
        return value.view(shape).expand(input.shape).to(compute)

    output = (input.to(compute) - per_channel(running_mean)) * torch.rsqrt(per_channel(running_var) + eps)
    if weight is not None:
        output = output * per_channel(weight)
    if bias is not None:
        output = output + per_channel(bias)
    # The saved statistics are what eager returns on CUDA; unread, they are never computed.
    inverse_std = torch.rsqrt(running_var.to(compute) + eps)
    return output.to(input.dtype), running_mean.to(compute), inverse_std


def native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps):
    """aten.native_batch_norm: ours in inference, torch's rule (statistics over the batch) in training."""
    if training or running_mean is None or running_var is None:
        from torch._decomp import decompositions as torch_rules

        return torch_rules.native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps)
    return batch_norm_inference(input, weight, bias, running_mean, running_var, momentum, eps)


def decompositions() -> dict:
    from torch._decomp import core_aten_decompositions, get_decompositions

    table = core_aten_decompositions()
    table.update(get_decompositions([
        aten._softmax, aten._log_softmax, aten.native_layer_norm, aten.gelu, aten.var_mean, aten.silu,
        aten._softmax_backward_data, aten._log_softmax_backward_data, aten.native_layer_norm_backward,
        aten.gelu_backward, aten.sigmoid_backward, aten.tanh_backward, aten.threshold_backward,
        aten.native_batch_norm, aten._native_batch_norm_legit, aten._native_batch_norm_legit_functional,
        aten.hardtanh, aten.hardswish, aten.hardsigmoid, aten.mish, aten.leaky_relu, aten.elu,
    ]))
    table[aten._native_batch_norm_legit_no_training.default] = batch_norm_inference
    table[aten.native_batch_norm.default] = native_batch_norm
    for operator in [op for op in table if "scaled_dot_product" in str(op)]:
        del table[operator]
    from tensorjit.codegen.decomp import WRONG_IN_TORCH

    for operator in WRONG_IN_TORCH:
        table.pop(operator, None)
    return table
