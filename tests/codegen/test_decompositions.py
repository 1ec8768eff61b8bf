"""Decompositions the code generators apply: each must give the ATen kernel's answer."""

import pytest
import torch
import torch.nn.functional as F

import tensorjit
from tensorjit.codegen.decomp import WRONG_IN_TORCH, decompositions

MARGIN_LOSSES = {
    # A 1-d input with reduction="none" gives a 0-d loss.
    "multilabel 1-d": (lambda x, t: F.multilabel_margin_loss(x, t, reduction="none"),
                       lambda: (torch.randn(4, requires_grad=True), torch.tensor([3, 0, 2, 1]))),
    "multi 1-d": (lambda x, t: F.multi_margin_loss(x, t, reduction="none"),
                  lambda: (torch.randn(5, requires_grad=True), torch.tensor(2))),
    # Labels end at the first -1: the positions after it add no terms.
    "multilabel with -1": (lambda x, t: F.multilabel_margin_loss(x, t, reduction="none"),
                           lambda: (torch.randn(3, 4, requires_grad=True),
                                    torch.tensor([[3, -1, 0, 0], [1, 2, 3, -1], [-1, 0, 0, 0]]))),
    "multilabel mean": (lambda x, t: F.multilabel_margin_loss(x, t),
                        lambda: (torch.randn(3, 4, requires_grad=True),
                                 torch.tensor([[3, -1, 0, 0], [1, 2, 3, -1], [0, 1, 2, 3]]))),
}


@pytest.mark.parametrize("name", sorted(MARGIN_LOSSES))
def test_margin_losses_match_eager_under_inductor(name):
    function, make_inputs = MARGIN_LOSSES[name]
    torch.manual_seed(0)
    x, target = make_inputs()
    expected = function(x, target)
    expected.sum().backward()
    expected_grad, x.grad = x.grad, None
    tensorjit.reset()
    actual = tensorjit.compile(function, backend="inductor")(x, target)
    actual.sum().backward()
    torch.testing.assert_close(actual, expected)
    torch.testing.assert_close(x.grad, expected_grad)


def test_no_code_generator_applies_a_rule_torch_gets_wrong():
    tables = [decompositions()]
    try:
        from tensorjit.codegen.triton import decompositions as triton_decompositions
        tables.append(triton_decompositions())
    except ImportError:
        pass
    for table in tables:
        assert not [op for op in WRONG_IN_TORCH if op in table]
