"""Builtins answering as CPython does on values capture knows: str()/repr() of objects, isinstance
of torch's legacy tensor types, torch._check of a static condition, Tensor.__iter__."""

import pytest
import torch

import tensorjit


def _compiled(fn):
    return tensorjit.compile(fn, backend="eager", fullgraph=True)


def test_str_and_repr_of_objects_from_outside_and_of_exceptions():
    class Config:
        def __repr__(self):
            return "Config()"

    def fn(x, config):
        try:
            raise KeyError("k")
        except KeyError as e:
            text = str(e) + repr(e)
        return x * len(repr(config)) + len(str(config)), text

    args = (torch.ones(2), Config())
    out, text = _compiled(fn)(*args)
    ref, ref_text = fn(*args)
    torch.testing.assert_close(out, ref)
    assert text == ref_text


def test_isinstance_of_legacy_tensor_types_answers_by_dtype():
    def fn(x):
        return isinstance(x, torch.FloatTensor), isinstance(x, (torch.DoubleTensor, torch.LongTensor)), \
            isinstance(x + 1, torch.Tensor)

    compiled = _compiled(fn)
    for dtype in (torch.float32, torch.float64, torch.int64, torch.float16):
        x = torch.zeros(2, dtype=dtype)
        assert compiled(x) == fn(x)


def test_torch_check_of_a_true_static_condition_never_calls_its_message():
    def fn(x):
        torch._check(x.shape[0] > 3, lambda: "Shape is not greater than 3")
        return x + 1

    x = torch.ones(4)
    torch.testing.assert_close(tensorjit.compile(fn, backend="eager", fullgraph=True)(x), x + 1)
    with pytest.raises(RuntimeError, match="Shape is not greater than 3"):  # false: eager's error
        tensorjit.compile(fn, backend="eager")(torch.ones(2))


def test_tensor_dunder_iter_is_iteration_over_rows():
    def fn(x):
        it = x.__iter__()
        for row in it:
            row.add_(1.0)
        return row

    x = torch.zeros(3, 2)
    out = tensorjit.compile(fn, backend="eager", fullgraph=True)(x)
    torch.testing.assert_close(x, torch.ones(3, 2))
    torch.testing.assert_close(out, torch.ones(2))
