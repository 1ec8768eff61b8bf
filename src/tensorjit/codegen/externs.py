"""Python functions that generated wrappers call as externs.

Kept apart from the lowering that emits them: a wrapper loaded by the warm-start cache
(runtime/warm_start.py) imports this small module, not the code generator.
"""

from __future__ import annotations

import torch


def strided_view(base: torch.Tensor, shape: tuple, strides: tuple, offset: int) -> torch.Tensor:
    """The view of `base` that kernels read at `offset + sum(index * strides)` (relative to
    the first element of `base`): what a chain of ATen view ops on it would return."""
    return base.as_strided(shape, strides, base.storage_offset() + offset)


def overlapping(shape: tuple, strides: tuple) -> bool:
    """May two elements of this layout share an address (an expand's stride 0, unfold's
    windows)? False is certain; True where the strides, sorted, do not each step past all the
    elements below them."""
    reach = 0
    for size, stride in sorted(((size, abs(stride)) for size, stride in zip(shape, strides) if size > 1),
                               key=lambda item: item[1]):
        if stride <= reach:
            return True
        reach += (size - 1) * stride
    return False


def relaid(tensor: torch.Tensor, shape: tuple, strides: tuple) -> torch.Tensor:
    """`tensor`'s values in the layout `strides`, which kernels were compiled to read. An
    overlapping layout (eager's select of an expand: stride 0) cannot be copied into (ATen
    refuses to write one address twice); its elements that share an address are equal in
    eager, so each address is written once, from any of them."""
    if not overlapping(shape, strides):
        return torch.empty_strided(shape, strides, dtype=tensor.dtype, device=tensor.device).copy_(tensor)
    extent = 1 + sum((size - 1) * stride for size, stride in zip(shape, strides) if size > 0)
    memory = torch.empty(extent if tensor.numel() else 0, dtype=tensor.dtype, device=tensor.device)
    if tensor.numel():
        addresses = torch.zeros((), dtype=torch.int64, device=tensor.device)
        for dim, (size, stride) in enumerate(zip(shape, strides)):
            place = [1] * len(shape)
            place[dim] = size
            addresses = addresses + (torch.arange(size, device=tensor.device) * stride).view(place)
        memory[addresses.reshape(-1)] = tensor.reshape(-1)
    return memory.as_strided(shape, strides, 0)
