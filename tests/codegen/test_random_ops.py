"""Random ops run as ATen calls in compiled graphs, so their numbers match eager's bit for bit
(why there is no `fallback_random` option: nothing generates random numbers in a kernel)."""

import torch
import torch.nn.functional as F

import tensorjit


def test_dropout_and_bernoulli_match_eager_under_the_same_seed():
    def fn(x):
        return F.dropout(x, 0.5, training=True) * 2 + torch.bernoulli(x.sigmoid()) + F.rrelu(x, training=True)

    x = torch.randn(32, 32)
    compiled = tensorjit.compile(fn, backend="inductor")
    torch.manual_seed(0)
    actual = compiled(x)
    torch.manual_seed(0)
    assert torch.equal(actual, fn(x))


def test_fallback_random_is_not_an_option():
    assert "fallback_random" not in tensorjit.config.option_names()
