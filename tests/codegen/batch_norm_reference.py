"""Batch norm + ReLU written out in ATen ops, forward and backward, over NCHW's channels: the
programs the batch-norm fusion and row-group division tests lower (test_batch_norm_fusion.py,
triton/test_split_row_groups.py)."""

import torch

DIMS = [0, 2, 3]
"""N, H, W: what a channel's statistics reduce over."""


def batch_norm_relu(x, weight, bias):
    mean = x.mean(DIMS, keepdim=True)
    var = ((x - mean) ** 2).mean(DIMS, keepdim=True)
    normed = (x - mean) * torch.rsqrt(var + 1e-5)
    return torch.relu(normed * weight[None, :, None, None] + bias[None, :, None, None]), mean, var


def batch_norm_relu_backward(grad, out, x, mean, invstd, weight):
    g = torch.where(out <= 0, 0.0, grad)
    total = g.sum(DIMS)
    dot = (g * (x - mean[None, :, None, None])).sum(DIMS)
    count = x.numel() // x.shape[1]
    scale = (invstd * weight)[None, :, None, None]
    projection = (dot * invstd * invstd / count)[None, :, None, None]
    return (g - (x - mean[None, :, None, None]) * projection - (total / count)[None, :, None, None]) * scale, total, dot
