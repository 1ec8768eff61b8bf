"""Repeated blocks in a captured graph: the transformer layers, residual stages and the like that a
model runs one after another.

    find_repeats(gm) -> Repeats | None

takes a captured FX graph and returns its longest run of consecutive blocks that do the same thing:
`Repeats.blocks` lists k >= 2 ranges of L nodes each, back to back in the graph's order, where node p
of every block has the same operation (op, target, constant arguments), an output of the same
metadata, and reads either the same earlier node of its own block or the block's i-th outside value
(by first use), block for block. Outside values differ from block to block (each layer's weights,
the previous layer's output); their metadata is compared where the blocks are traced
(`segments.py`), which decides whether a block's ATen trace may be stamped from the first one's.

The search looks at node signatures only (operation and output metadata, no references): for each
period L the longest stretch where node i matches node i + L, the period saving the most nodes
(L * (k - 1)) wins; the blocks found are then checked with their references, shifted by one node at
a time where a cut would fall inside a multi-output value. No module boundary is needed and nothing
is specific to a model.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy
import torch
import torch.fx

MIN_BLOCK = 4
"""Shortest block looked for."""
MIN_SAVED = 64
"""Fewest captured nodes the copies must hold (L x (k - 1)) for tracing by segments to pay: each
segment's own make_fx costs a few milliseconds, and stamping a node about a tenth of tracing it.
ResNet-18's two like blocks of 7 nodes traced in 0.25 s by segments against 0.22 s whole; GPT-2's
12 blocks of 42, 0.17 against 0.36."""


@dataclass(frozen=True)
class Repeats:
    blocks: tuple[tuple[torch.fx.Node, ...], ...]   # k blocks of L nodes, back to back

    @property
    def length(self) -> int:
        return len(self.blocks[0])


def metadata(value) -> tuple | None:
    """What a traced op's result depends on in a tensor argument, or None for a value that is not a
    plain tensor of static sizes (a tuple, a symbolic size, a scalar)."""
    if not isinstance(value, torch.Tensor) or value.layout != torch.strided:
        return None
    sizes, strides = tuple(value.shape), tuple(value.stride())
    if not all(type(s) is int for s in (*sizes, *strides)) or type(value.storage_offset()) is not int:
        return None
    return (sizes, strides, value.storage_offset(), value.dtype, value.device, value.requires_grad)


def example(node: torch.fx.Node):
    return node.meta.get("example_value", node.meta.get("val"))


def _output_metadata(node: torch.fx.Node):
    value = example(node)
    if isinstance(value, (tuple, list)):
        return tuple(metadata(v) for v in value)
    return metadata(value)


_PLAIN = (int, float, bool, complex, str, type(None), type(Ellipsis), torch.dtype, torch.device, torch.layout,
          torch.memory_format)


def _constants(value, refer) -> str:
    """The arguments as text, every node reference written as `refer(node)`. Numbers, strings, dtypes
    and the like are written as they are; any other object (a tensor, a callable) by its identity, so
    that two blocks match only where they hold the very same object."""
    if isinstance(value, torch.fx.Node):
        return f"<{refer(value)}>"
    if type(value) in _PLAIN:
        return f"{type(value).__name__}:{value!r}"
    if isinstance(value, (tuple, list)):  # torch.Size too
        inner = ",".join(_constants(v, refer) for v in value)
        return f"{type(value).__name__}({inner})"
    if isinstance(value, dict):
        inner = ",".join(f"{k!r}:{_constants(v, refer)}" for k, v in value.items())
        return f"{{{inner}}}"
    if isinstance(value, slice):
        parts = (value.start, value.stop, value.step)
        return f"slice({','.join(_constants(part, refer) for part in parts)})"
    return f"<object {type(value).__name__} {id(value)}>"


def _target(node: torch.fx.Node) -> str:
    target = node.target
    return target if isinstance(target, str) else f"<{getattr(target, '__name__', '')} {id(target)}>"


def _signature(node: torch.fx.Node) -> str:
    return f"{node.op}|{_target(node)}|{_constants((node.args, node.kwargs), lambda n: '')}|{_output_metadata(node)}"


def _body(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]


def _longest_period(codes: numpy.ndarray) -> tuple[int, int, int, int] | None:
    """(start, length, count, run) of the repetition saving the most nodes, or None: `run` nodes from
    `start` on equal the node `length` after them."""
    best = None
    n = len(codes)
    for length in range(MIN_BLOCK, n // 2 + 1):
        same = codes[:-length] == codes[length:]
        if not same.any():
            continue
        # Longest stretch of True: positions where a run starts and ends.
        padded = numpy.concatenate(([False], same, [False])).astype(numpy.int8)
        edges = numpy.flatnonzero(numpy.diff(padded))
        starts, ends = edges[0::2], edges[1::2]
        runs = ends - starts
        i = int(runs.argmax())
        count = int(runs[i]) // length + 1
        if count >= 2 and (best is None or length * (count - 1) > best[1] * (best[2] - 1)):
            best = (int(starts[i]), length, count, int(runs[i]))
    return best


def _block_signature(block: list[torch.fx.Node], signatures: dict) -> list[str]:
    """Each node's signature with its references: `local<p>` for the block's node p, `outside<i>` for
    the block's i-th value from before it, by first use."""
    inside = {node: i for i, node in enumerate(block)}
    outside: dict[torch.fx.Node, int] = {}

    def refer(node):
        if node in inside:
            return f"local{inside[node]}"
        return f"outside{outside.setdefault(node, len(outside))}"
    return [f"{signatures[node]}|{_constants((node.args, node.kwargs), refer)}" for node in block]


def _clean_cut(body: list[torch.fx.Node], at: int) -> bool:
    """No value made before position `at` that is not a plain tensor is read at or after it."""
    later = set(body[at:])
    return all(metadata(example(node)) is not None or not any(u in later for u in node.users)
               for node in body[:at])


def find_repeats(gm: torch.fx.GraphModule) -> Repeats | None:
    body = _body(gm)
    if len(body) < 2 * MIN_BLOCK:
        return None
    ids: dict[str, int] = {}
    signatures = {node: _signature(node) for node in body}
    codes = numpy.array([ids.setdefault(signatures[node], len(ids)) for node in body], dtype=numpy.int64)
    found = _longest_period(codes)
    if found is None:
        return None
    start, length, count, run = found
    if length * (count - 1) < MIN_SAVED:
        return None
    for shift in range(length):  # the first shift whose cuts are clean and whose blocks check
        first = start + shift
        count = (run - shift) // length + 1
        if count < 2:
            return None
        blocks = _checked_blocks(body, signatures, first, length, count)
        if blocks is not None:
            return Repeats(blocks) if length * (len(blocks) - 1) >= MIN_SAVED else None
    return None


def _checked_blocks(body, signatures: dict, first: int, length: int, count: int):
    blocks = [body[first + j * length:first + (j + 1) * length] for j in range(count)]
    reference = _block_signature(blocks[0], signatures)
    kept = [tuple(blocks[0])]
    for block in blocks[1:]:
        if _block_signature(block, signatures) != reference:
            break
        kept.append(tuple(block))
    if len(kept) < 2:
        return None
    cuts = [first + j * length for j in range(len(kept) + 1)]
    if not all(_clean_cut(body, at) for at in cuts):
        return None
    return tuple(kept)
