"""`torch.ops.higher_order.cond` called directly (higher_order.py): the operator torch.cond calls,
and what torch.cond's eager path compiles (a wrapper given the branches as arguments). It is one
graph node, as torch.cond is, not a call capture cannot pass functions to."""

import pytest
import torch

import tensorjit


def wrapper(pred, true_fn, false_fn, operands):
    return torch.ops.higher_order.cond(pred, true_fn, false_fn, operands)


def plus(x):
    return x + 1


def minus(x):
    return x - 1


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_the_cond_operator_with_branches_passed_in_is_one_graph(backend, sign):
    compiled = tensorjit.compile(wrapper, backend=backend, fullgraph=True)
    x = torch.full((3,), sign, requires_grad=True)
    got = compiled(x.sum() > 0, plus, minus, (x * 2,))
    want = torch.cond(x.sum() > 0, plus, minus, (x * 2,))  # the operator itself wants tuple-returning branches
    torch.testing.assert_close(got, want)
    (gx,) = torch.autograd.grad(got.sum(), x)
    (wx,) = torch.autograd.grad(want.sum(), x)
    torch.testing.assert_close(gx, wx)
