"""torch.tensor([...]) of 0-d tensors and numbers, and torch.LongTensor(list) & co. (legacy typed
constructors), made in the graph (values/torch_calls.py `tensor_of_items`): the items' values,
detached, in the dtype torch.tensor infers. Both broke before; a list of NumPy scalars read from
an array broke too, and its eager run after the break then failed on 0-d arrays."""

import warnings

import numpy as np
import pytest
import torch

import tensorjit


def _mixed(a, b):
    return torch.tensor([a.sum(), b[0], 2]), torch.tensor([b[1], 2]), torch.tensor((a[0], 1.5), dtype=torch.float64)


def _legacy(a):
    return torch.LongTensor([3, 4]), torch.FloatTensor((a[0], a[1])), torch.DoubleTensor([1, 2.5])


def _numpy_items():
    x = np.array([1, 2, 3, 4, 5, 6], dtype=np.int64)
    y = [x[0], x[2], x[4]]
    return torch.LongTensor(y), torch.tensor(y)


@pytest.mark.parametrize("fn, args", [
    (_mixed, (torch.randn(3, requires_grad=True), torch.arange(3, dtype=torch.int32))),
    (_legacy, (torch.randn(2, requires_grad=True),)),
    (_numpy_items, ()),
])
def test_tensor_of_items_matches_eager(fn, args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.tensor(tensor) recommends clone().detach()
        expected = fn(*args)
        got = tensorjit.compile(fn, backend="aot_eager", fullgraph=True)(*args)
    for e, g in zip(expected, got):
        assert g.dtype == e.dtype and g.requires_grad == e.requires_grad
        torch.testing.assert_close(g, e)


def test_int32_item_with_int_infers_int64():
    def fn(b):
        return torch.tensor([b[0], 7])

    b = torch.arange(3, dtype=torch.int32)
    assert tensorjit.compile(fn, backend="eager", fullgraph=True)(b).dtype == fn(b).dtype == torch.int64
