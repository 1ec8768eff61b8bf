"""runtime/buffers.py: the wrappers' buffer and alias constructors, torch's and the native
extension's, and where the wrapper takes an alias without view bookkeeping."""

import sys

import pytest
import torch

from tensorjit.capture import native_guards
from tensorjit.config import config as default_config
from tensorjit.runtime import buffers

sys.path.insert(0, __file__.rsplit("/", 2)[0] + "/codegen")
from two_emitters import compile_with  # noqa: E402


def native_calls():
    """(new, alias) of the native extension, loaded (which hands them to runtime/buffers.py)."""
    if native_guards.checker(default_config, wait=True) is None:
        pytest.skip("no native extension on this machine (no C++ compiler)")
    assert buffers.new is not buffers._new and buffers.alias is not buffers._alias
    return buffers.new, buffers.alias


@pytest.fixture(params=["torch", "native"])
def calls(request):
    """(new, alias): torch's calls, or the native extension's."""
    return (buffers._new, buffers._alias) if request.param == "torch" else native_calls()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_new_has_the_layout_asked_for(calls, dtype):
    new, _ = calls
    for shape, strides in [((3, 4), (4, 1)), ((3, 4), (1, 3)), ((), ()), ((2, 0, 5), (5, 5, 1))]:
        tensor = new(shape, strides, dtype, torch.device("cpu"))
        assert (tuple(tensor.shape), tensor.stride(), tensor.dtype, tensor.device.type) == \
            (shape, strides, dtype, "cpu")
        assert not tensor.requires_grad


def test_new_under_inference_mode_makes_an_inference_tensor(calls):
    new, _ = calls
    with torch.inference_mode():
        assert new((2,), (1,), torch.float32, torch.device("cpu")).is_inference()
    assert not new((2,), (1,), torch.float32, torch.device("cpu")).is_inference()


def test_alias_reads_and_writes_the_base_at_its_offset(calls):
    _, alias = calls
    base = torch.arange(24.0)[2:]  # a base that starts 2 elements into its storage
    view = alias(base, (2, 3), (3, 1), 5)
    assert view.storage_offset() == 7 and view.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
    torch.testing.assert_close(view, torch.arange(24.0)[7:13].view(2, 3))
    view.fill_(-1)
    assert base[5:11].eq(-1).all() and base[4] == 6 and base[11] == 13


def test_the_native_calls_refuse_wrong_arguments():
    new, alias = native_calls()
    with pytest.raises(TypeError, match="new_buffer"):
        new((3,), (1, 2), torch.float32, torch.device("cpu"))  # strides of another rank
    with pytest.raises(TypeError, match="new_buffer"):
        new([3], (1,), torch.float32, torch.device("cpu"))
    with pytest.raises(TypeError, match="alias"):
        alias(torch.zeros(4), (2,), (1,), "0")


def test_private_views_are_aliases_and_returned_views_stay_views():
    def f(a, b, c):
        product = torch.mm(a, b)
        second = torch.mm(product.t(), c)  # a view of the call's own memory, seen by the call alone
        return second, second.t()  # a returned view of a returned buffer

    inputs = torch.randn(4, 3), torch.randn(3, 5), torch.randn(4, 2)
    compiled = compile_with("cpp", f, *inputs)
    source = compiled.wrapper_source
    assert source.count("buffers.alias(") == 1 and source.count(".as_strided(") == 1, source
    second, transposed = compiled(*inputs)
    expected = f(*inputs)
    torch.testing.assert_close(second, expected[0])
    torch.testing.assert_close(transposed, expected[1])
    assert transposed._base is second  # eager's view relation, kept for what the caller sees
