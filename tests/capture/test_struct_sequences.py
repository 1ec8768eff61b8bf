"""torch's struct sequences made in the function (calls.py `_struct_sequence`):
`torch.return_types.max((values, indices))` is a tuple of that class, as torch.max's result is."""

import pytest
import torch

import tensorjit


def test_a_struct_sequence_made_from_a_tuple():
    def fn(x, y):
        return torch.return_types.max((x, y))

    x, y = torch.randn(3, 2), torch.randn(2, 4)
    out = tensorjit.compile(fn, backend="eager", fullgraph=True)(x, y)
    assert type(out) is torch.return_types.max
    assert out.values is x and out.indices is y


def test_its_items_are_read_back():
    def fn(x, y):
        return tuple(torch.return_types.topk((2 * x, y - 1)))  # (torch 2.14 has no return_types.qr)

    x, y = torch.randn(3, 2), torch.randn(2, 4)
    for got, want in zip(tensorjit.compile(fn, backend="eager", fullgraph=True)(x, y), fn(x, y)):
        torch.testing.assert_close(got, want)


def test_a_wrong_length_raises_as_in_eager():
    def fn(x):
        return torch.return_types.max((x,))

    with pytest.raises(TypeError):
        tensorjit.compile(fn, backend="eager")(torch.ones(2))
