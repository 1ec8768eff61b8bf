"""2-D pooling and its gradients lowered to loads over the window (`lowering_pooling`), on
both emitters: compiled == eager for odd sizes, strides, padding, dilation, ceil_mode,
count_include_pad and divisor_override, NaN and -inf inputs, ties; and no ATen call left."""

import pytest
import torch
import torch.nn.functional as F

import tensorjit
from two_emitters import EMITTERS, check

aten = torch.ops.aten

AVERAGE = [  # kernel, stride, padding, ceil_mode, count_include_pad, divisor_override
    (2, 2, 0, False, True, None),
    (3, 2, 1, False, True, None),
    (3, 2, 1, True, False, None),
    (3, 2, 1, True, True, None),
    ((3, 2), (1, 2), (1, 0), False, False, None),
    (3, 3, 1, True, True, 5),
    (4, 3, 2, True, False, None),
]
MAXIMUM = [  # kernel, stride, padding, dilation, ceil_mode
    (3, 2, 1, 1, False),
    (2, 2, 0, 1, True),
    (3, 1, 1, 1, False),
    ((3, 2), (2, 1), (1, 1), (2, 1), True),
    (2, 3, 1, 2, True),
]
SHAPES = [(2, 3, 9, 11), (3, 8, 7)]


@pytest.mark.parametrize("emitter", EMITTERS)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("settings", AVERAGE)
def test_avg_pool2d_and_its_gradient(emitter, shape, settings):
    kernel, stride, padding, ceil_mode, include, divisor = settings
    x = torch.randn(shape)
    forward = lambda x: aten.avg_pool2d(x, kernel, stride, padding, ceil_mode, include, divisor)  # noqa: E731
    check(emitter, forward, x, rtol=1e-5, atol=1e-5)
    grad = torch.randn(forward(x).shape)
    backward = lambda g, x: aten.avg_pool2d_backward(  # noqa: E731
        g, x, kernel, stride, padding, ceil_mode, include, divisor)
    check(emitter, backward, grad, x, rtol=1e-5, atol=1e-5)


def with_specials(shape) -> torch.Tensor:
    """Ties (small integers), NaN and -inf among the values."""
    x = torch.randint(-3, 4, shape).float()
    flat = x.view(-1)
    flat[::7] = float("nan")
    flat[3::11] = float("-inf")
    return x


@pytest.mark.parametrize("emitter", EMITTERS)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("settings", MAXIMUM)
@pytest.mark.parametrize("values", ["random", "specials"])
def test_max_pool2d_with_indices_and_its_gradient(emitter, shape, settings, values):
    kernel, stride, padding, dilation, ceil_mode = settings
    x = torch.randn(shape) if values == "random" else with_specials(shape)
    forward = lambda x: aten.max_pool2d_with_indices(x, kernel, stride, padding, dilation, ceil_mode)  # noqa: E731
    check(emitter, forward, x)
    out, indices = forward(x)
    grad = torch.randn(out.shape)
    backward = lambda g, x, i: aten.max_pool2d_with_indices_backward(  # noqa: E731
        g, x, kernel, stride, padding, dilation, ceil_mode, i)
    check(emitter, backward, grad, x, indices, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("emitter", EMITTERS)
def test_all_minus_infinity_windows_take_their_first_tap(emitter):
    x = torch.full((1, 2, 5, 5), float("-inf"))
    check(emitter, lambda x: aten.max_pool2d_with_indices(x, [3, 3], [2, 2], [1, 1]), x)


class Pools(torch.nn.Module):
    """densenet121's stem and transition pooling, with a convolution between."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        x = F.max_pool2d(torch.relu(x * 2), 3, 2, 1)
        x = self.conv(x)
        return F.avg_pool2d(torch.relu(x), 2, 2).sum((2, 3))


def test_training_step_gradients_equal_eager():
    torch.manual_seed(0)
    model, x = Pools(), torch.randn(2, 3, 13, 10, requires_grad=True)
    compiled = tensorjit.compile(model)
    expected = model(x)
    expected.sum().backward()
    want = [x.grad.clone()] + [p.grad.clone() for p in model.parameters()]
    x.grad = None
    model.zero_grad()
    got = compiled(x)
    got.sum().backward()
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    for a, b in zip([x.grad] + [p.grad for p in model.parameters()], want):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def relu_then_pool(x, scale, shift):
    """The stem: batch norm's affine + ReLU, then the max pool (values and indices)."""
    return aten.max_pool2d_with_indices(torch.relu(x * scale + shift), [3, 3], [2, 2], [1, 1])


def summed_gradient_then_pool_backward(a, b, c, d, x, indices):
    """A gradient summed from several branches (densenet's block input), then the max pool's backward."""
    return aten.max_pool2d_with_indices_backward(a * 2 + b * c + d.exp(), x, [3, 3], [2, 2], [1, 1], [1, 1],
                                                 False, indices)


@pytest.mark.parametrize("emitter", EMITTERS)
def test_a_cheap_input_is_recomputed_at_each_tap_an_expensive_one_stored(emitter):
    x, scale, shift = torch.randn(2, 3, 9, 11), torch.randn(3, 1, 1), torch.randn(3, 1, 1)
    cheap = check(emitter, relu_then_pool, x, scale, shift, rtol=1e-5, atol=1e-5)
    assert not any(b.shape == (2, 3, 9, 11) and b.kind == "temp" for b in cheap.program.buffers), cheap.program
    _, indices = aten.max_pool2d_with_indices(x, [3, 3], [2, 2], [1, 1])
    branches = [torch.randn(2, 3, 5, 6) for _ in range(4)]
    expensive = check(emitter, summed_gradient_then_pool_backward, *branches, x, indices, rtol=1e-5, atol=1e-5)
    stored = [b for b in expensive.program.buffers if b.shape == (2, 3, 5, 6) and b.kind == "temp"]
    assert len(stored) == 1, expensive.program  # the sum, once, not at each of the nine taps
