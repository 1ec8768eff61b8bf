"""0-dim CPU constants that only meet the kernels' device move there (scalar_constants.py)."""

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from tensorjit.codegen.scalar_constants import move_scalar_constants

DEVICE = torch.device("meta")  # stands for the kernels' device on a machine without a GPU


def constants(gm) -> dict[str, torch.device]:
    return {n.target: getattr(gm, n.target).device for n in gm.graph.nodes if n.op == "get_attr"}


def test_a_constant_written_into_a_device_tensor_moves():
    # a CUDA tensor's `z[1] = 0.5` traces into a CPU constant, lift_fresh_copy and copy
    def fn(x):
        z = x.clone()
        z[1] = torch.tensor(0.5)
        return z
    gm = make_fx(torch.func.functionalize(fn))(torch.empty(3, 4, device=DEVICE))
    assert move_scalar_constants(gm, DEVICE) == 1
    assert set(constants(gm).values()) == {DEVICE}
    # the lowering reads devices from meta["val"]: the constant and its copies moved there too
    chain = [n for n in gm.graph.nodes if n.op == "get_attr" or n.target in (
        torch.ops.aten.lift_fresh_copy.default, torch.ops.aten.detach.default)]
    assert len(chain) >= 2 and all(n.meta["val"].device == DEVICE for n in chain)


def test_a_constant_that_reaches_a_cpu_result_stays():
    def fn(x):
        return x * torch.tensor(2.0), torch.tensor(3.0) + 1
    gm = make_fx(fn)(torch.empty(3, device=DEVICE))
    assert move_scalar_constants(gm, DEVICE) == 1
    assert sorted(d.type for d in constants(gm).values()) == ["cpu", "meta"]


def test_nothing_moves_for_cpu_kernels():
    gm = make_fx(lambda x: x * torch.tensor(2.0))(torch.randn(3))
    assert move_scalar_constants(gm, torch.device("cpu")) == 0
