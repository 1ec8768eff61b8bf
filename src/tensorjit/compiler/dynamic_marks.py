"""mark_dynamic, maybe_mark_dynamic, mark_static, mark_unbacked: dimension marks on tensors.

The marks are the attributes torch._dynamo's markers set (`_dynamo_dynamic_indices`,
`_dynamo_dynamic_range`, `_dynamo_weak_dynamic_indices`, `_dynamo_static_indices`,
`_dynamo_unbacked_indices`, `_has_dynamo_dim_marking`), so a tensor marked here means
the same to torch.compile, and one marked by torch's functions (as libraries do) means
the same to tensorjit. `capture/dynamic.py` reads them when it makes a tensor's fake.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch


@dataclasses.dataclass(frozen=True, slots=True)
class DimRange:
    """A marked dimension's bounds (the fields of torch's `_DimRange`)."""

    dim: int
    min: int | None
    max: int | None


def _dims(index: int | list | tuple) -> list[int]:
    if isinstance(index, int):
        return [index]
    if not isinstance(index, (list, tuple)):
        raise TypeError(f"index must be an int, list or tuple, not {type(index).__name__}")
    return list(index)


def _add(t: torch.Tensor, name: str, dim: int) -> None:
    if not hasattr(t, name):
        setattr(t, name, set())
    getattr(t, name).add(dim)
    t._has_dynamo_dim_marking = True


def mark_dynamic(t: Any, index: int | list | tuple, *, hint_override: int | None = None,
                 min: int | None = None, max: int | None = None, specialize_on: list | None = None) -> None:
    """Make dimension(s) `index` of `t` symbolic from the first capture, within [min, max].

    A promise: capture code that specializes the size, or a size outside the bounds,
    raises torch's ConstraintViolationError (use maybe_mark_dynamic for a hint only).
    `hint_override` and `specialize_on` are recorded as torch records them; tensorjit's
    code generators do not use them yet."""
    for dim in _dims(index):
        if not hasattr(t, "_dynamo_dynamic_range"):
            t._dynamo_dynamic_range = set()
            t._dynamo_hint_overrides = {}
        if hint_override:
            t._dynamo_hint_overrides[dim] = hint_override
        _add(t, "_dynamo_dynamic_indices", dim)
        t._dynamo_dynamic_range.add(DimRange(dim, min, max))
        if not isinstance(getattr(t, "_specialize_on", None), dict):
            t._specialize_on = {}
        t._specialize_on[dim] = specialize_on if specialize_on is not None else []


def maybe_mark_dynamic(t: Any, index: int | list | tuple) -> None:
    """Make dimension(s) `index` symbolic, but let capture specialize them without error."""
    for dim in _dims(index):
        _add(t, "_dynamo_weak_dynamic_indices", dim)


def mark_static(t: Any, index: int | list | tuple | None = None) -> Any:
    """Keep dimension(s) `index` (all when None) static, even with dynamic=True.

    On an nn.Module class, marks the class static (torch's meaning: its int attributes stay
    constants, which they always are under tensorjit) and returns it."""
    if isinstance(t, type) and issubclass(t, torch.nn.Module):
        t._dynamo_marked_static = True
        return t
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"mark_static expects a tensor/nn.Module class but received {type(t)}")
    for dim in range(t.dim()) if index is None else _dims(index):
        _add(t, "_dynamo_static_indices", dim)
    return None


def mark_unbacked(t: Any, index: int | list | tuple, hint_override: int | None = None, strict: bool = False,
                  specialize_on: list | None = None, shape_id: str | None = None,
                  min: int | None = None, max: int | None = None) -> None:
    """Make dimension(s) `index` sizes with no hint: never specialized (not even to 0 or 1); a
    branch on one is a graph break. `strict` marks are kept apart as torch keeps them."""
    for dim in _dims(index):
        if strict:
            _add(t, "_dynamo_strict_unbacked_indices", dim)
            continue
        if min is not None or max is not None:
            if not hasattr(t, "_dynamo_unbacked_bounds"):
                t._dynamo_unbacked_bounds = {}
            t._dynamo_unbacked_bounds[dim] = (min, max)
        if shape_id is not None:
            if not hasattr(t, "_dynamo_shape_ids"):
                t._dynamo_shape_ids = {}
            t._dynamo_shape_ids[dim] = shape_id
        _add(t, "_dynamo_unbacked_indices", dim)
