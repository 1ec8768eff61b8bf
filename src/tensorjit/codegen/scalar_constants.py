"""0-dim constants moved onto the kernels' device when they only ever meet its tensors.

`z[2] = 0.5` on a CUDA tensor traces (after functionalisation) into a 0-dim CPU constant,
`lift_fresh_copy` of it, and a copy into the CUDA tensor. ATen reads a 0-dim CPU tensor
next to CUDA tensors as a scalar; a kernel cannot read CPU memory, so such a node would
run as an ATen call (graph.py's "operand on another device" rule). A 0-dim tensor takes
part in type promotion the same way on either device, so when every chain of copies
starting at the constant ends in a node whose result is on the kernels' device, moving
the constant there changes nothing but where it lives: the kernels then read it.
"""

from __future__ import annotations

import torch
import torch.fx

aten = torch.ops.aten
COPIES = (aten.lift_fresh_copy.default, aten.clone.default, aten.alias.default, aten.detach.default,
          aten.view.default, aten.expand.default, aten.unsqueeze.default)
"""Ops whose result stays where their operand is: followed to the constant's real users."""


def move_scalar_constants(gm: torch.fx.GraphModule, device: torch.device) -> int:
    """Move 0-dim CPU constants of `gm` to `device` where that is exact; returns how many."""
    if device.type == "cpu":
        return 0
    moved = 0
    for node in gm.graph.nodes:
        if node.op != "get_attr":
            continue
        value = getattr(gm, node.target, None)
        if isinstance(value, torch.Tensor) and value.dim() == 0 and value.device.type == "cpu" \
                and _only_meets(node, device):
            setattr(gm, node.target, value.to(device))
            _retrace_meta(node, device)
            moved += 1
    return moved


def _retrace_meta(node: torch.fx.Node, device: torch.device) -> None:
    """meta["val"] of the moved constant and of the copies after it, now on `device`
    (the lowering reads devices from meta["val"])."""
    value = node.meta.get("val")
    if isinstance(value, torch.Tensor):
        node.meta["val"] = value.to(device)
    _retrace_copies(node)


def _retrace_copies(node: torch.fx.Node) -> None:
    for user in node.users:
        if user.target in COPIES and "val" in user.meta:
            args = torch.fx.node.map_arg(user.args, lambda n: n.meta.get("val"))
            kwargs = torch.fx.node.map_arg(user.kwargs, lambda n: n.meta.get("val"))
            user.meta["val"] = user.target(*args, **kwargs)
            _retrace_copies(user)


def _only_meets(node: torch.fx.Node, device: torch.device) -> bool:
    """Does every use of `node`, through copies, produce a tensor on `device`?"""
    for user in node.users:
        if user.op != "call_function":
            return False
        if user.target in COPIES:
            if not _only_meets(user, device):
                return False
            continue
        value = user.meta.get("val")
        if not isinstance(value, torch.Tensor) or value.device != device:
            return False
    return bool(node.users)
