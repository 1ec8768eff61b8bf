"""What a captured graph does to its inputs and how its outputs relate to them.

`analyze(gm, example_inputs)` runs the graph once on fake copies of the inputs
(no real computation, real inputs untouched) and returns a `GraphMetadata`:
which inputs are mutated in place, which outputs alias an input or an earlier
output (views), and which outputs require grad.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.multiprocessing.reductions import StorageWeakRef


@dataclass(frozen=True, slots=True)
class OutputAlias:
    """An output that is a view of an input (`source="input"`) or of an earlier output."""

    source: str
    index: int
    size: tuple[int, ...]
    stride: tuple[int, ...]
    storage_offset: int
    is_whole: bool
    """The output is the source tensor itself (`return x`), not a view of it."""
    requires_grad: bool
    """False for `x.detach()`-like aliases of a tensor that requires grad."""


@dataclass(frozen=True, slots=True)
class GraphMetadata:
    mutated_inputs: tuple[int, ...]
    output_aliases: tuple[OutputAlias | None, ...]
    output_requires_grad: tuple[bool, ...]
    output_count: int
    returns_tuple: bool


def _storage(tensor: torch.Tensor) -> StorageWeakRef:
    return StorageWeakRef(tensor.untyped_storage())


def _alias(source: str, index: int, out: torch.Tensor, base: torch.Tensor) -> OutputAlias:
    whole = out is base
    return OutputAlias(source, index, tuple(out.size()), tuple(out.stride()),
                       out.storage_offset(), whole, out.requires_grad)


def _find_alias(out, fake_inputs, outputs, position) -> OutputAlias | None:
    if not isinstance(out, torch.Tensor):
        return None
    storage = _storage(out)
    for index, inp in enumerate(fake_inputs):
        if isinstance(inp, torch.Tensor) and _storage(inp) == storage:
            return _alias("input", index, out, inp)
    for index in range(position):
        earlier = outputs[index]
        if not isinstance(earlier, torch.Tensor) or _storage(earlier) != storage:
            continue
        # Regenerating from an earlier output is only sound when that output
        # owns its whole storage from offset 0 (true of fresh compiled results).
        if earlier.storage_offset() == 0 and earlier.is_contiguous():
            return _alias("output", index, out, earlier)
    return None


def analyze(gm: torch.fx.GraphModule, example_inputs: list) -> GraphMetadata:
    mode = FakeTensorMode(allow_non_fake_inputs=False)
    fake_inputs = [mode.from_tensor(x) if isinstance(x, torch.Tensor) else x
                   for x in example_inputs]
    versions = [x._version if isinstance(x, torch.Tensor) else None for x in fake_inputs]
    # set_grad_enabled restores grad mode even if the graph switches it and fails.
    with mode, torch.set_grad_enabled(torch.is_grad_enabled()):
        result = gm(*fake_inputs)
    returns_tuple = isinstance(result, (tuple, list))
    outputs = list(result) if returns_tuple else [result]
    mutated = tuple(i for i, x in enumerate(fake_inputs)
                    if isinstance(x, torch.Tensor) and x._version != versions[i])
    aliases = tuple(_find_alias(out, fake_inputs, outputs, position)
                    for position, out in enumerate(outputs))
    requires_grad = tuple(isinstance(o, torch.Tensor) and o.requires_grad for o in outputs)
    return GraphMetadata(mutated, aliases, requires_grad, len(outputs), returns_tuple)
