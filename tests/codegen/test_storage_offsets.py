"""as_strided counts its offset from the start of its operand's storage: where the operand is a
view of a computed tensor (a slice, a split, a diagonal), the compiled program must hand it a
view of that tensor, as eager has, not a buffer of its own, on both emitters."""

import pytest
import torch

from two_emitters import EMITTERS, compile_with, on_device

VIEWS_THEN_AS_STRIDED = {
    "slice": lambda x: (x * 2)[1:].as_strided((2,), (1,), 0),
    "slice, then a kernel": lambda x: (x * 2)[1:].as_strided((2,), (1,), 0) + 1,
    "split": lambda x: (x * 2).split(2)[1].as_strided((2,), (1,), 0),
    "diagonal of a transpose": lambda x: (x * 2).reshape(2, 3).t().diagonal().as_strided((2,), (2,), 1),
    "unfold": lambda x: (x * 2).unfold(0, 2, 2)[1:].as_strided((2,), (1,), 0),
    "select of a sum": lambda x: ((x * 2).prod(0, keepdim=True) + x)[-1].reshape(1, 1).as_strided((1,), (0,), 0),
    "slice of an input": lambda x: x[1:].as_strided((2,), (1,), 0) * 3,
}


@pytest.mark.parametrize("emitter", EMITTERS)
@pytest.mark.parametrize("name", list(VIEWS_THEN_AS_STRIDED))
def test_as_strided_of_a_view_reads_from_its_storage_start(emitter, name):
    fn = VIEWS_THEN_AS_STRIDED[name]
    x = on_device(emitter, (torch.arange(6.0),))[0]
    compiled = compile_with(emitter, fn, x)
    result = compiled(x)
    torch.testing.assert_close(result[0] if isinstance(result, (list, tuple)) else result, fn(x))
