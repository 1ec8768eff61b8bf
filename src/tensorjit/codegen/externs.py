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
