"""A runner built boxed (`runtime/boxed.py`: the graph's meta asks for it, as the autograd stage
does for a backward) takes its inputs in one list, clears it, and drops each input after its
last reader; both emitters (Triton in its interpreter on a machine without CUDA)."""

import gc

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx
from torch.multiprocessing.reductions import StorageWeakRef

from tensorjit.codegen.decomp import decompositions
from tensorjit.runtime.boxed import BOXED_INPUTS

from two_emitters import EMITTERS, compile_traced, on_device

WATCHED: list[StorageWeakRef] = []
SEEN: list[bool] = []


@torch.library.custom_op("tensorjit_test::observe_inputs", mutates_args=())
def observe(x: torch.Tensor) -> torch.Tensor:
    # Collected first: Triton's interpreter leaves a kernel's arguments in a reference cycle
    # (its compiled kernels do not); only what a live reference holds survives.
    gc.collect()
    SEEN.append(all(ref.expired() for ref in WATCHED))
    return x.clone()


@observe.register_fake
def _(x):
    return torch.empty_like(x)


@torch.library.custom_op("tensorjit_test::misshapen", mutates_args=())
def misshapen(x: torch.Tensor) -> torch.Tensor:
    """The identity, whose fake says it drops the last element (a shape rule its kernel
    disagrees with, as ATen's multi_margin_loss of a 1-d input)."""
    return x.clone()


@misshapen.register_fake
def _(x):
    return x.new_empty(x.shape[0] - 1, *x.shape[1:])


def boxed(emitter, fn, *inputs, tracing_mode="real"):
    inputs = on_device(emitter, inputs)
    gm = make_fx(fn, decomposition_table=decompositions(), tracing_mode=tracing_mode)(*inputs)
    gm.meta[BOXED_INPUTS] = True
    return compile_traced(emitter, gm, *inputs)


def scaled_product(a, b):
    return observe(torch.mm(a.sin() * 2, b))


@pytest.mark.parametrize("emitter", EMITTERS)
def test_an_input_is_freed_after_its_last_reader(emitter):
    """`a` is read by the first kernel only: by the time the last step runs it is gone (from the
    second call: the first keeps every input until it has passed the ATen shape check after
    the drop); the caller's list is emptied."""
    compiled = boxed(emitter, scaled_product, torch.randn(16, 8), torch.randn(8, 4))
    assert compiled.takes_boxed_inputs
    freed = []
    for _ in range(3):
        a, b = on_device(emitter, (torch.randn(16, 8), torch.randn(8, 4)))
        expected = scaled_product(a, b)
        WATCHED[:] = [StorageWeakRef(a.untyped_storage())]
        arguments = [a, b]
        del a
        SEEN.clear()
        result = compiled(arguments)
        freed += SEEN
        assert arguments == []
        torch.testing.assert_close(result, expected)
    assert freed[1:] == [True, True]


def shifted(a, b):
    return misshapen(b * a.sum()) * 2


@pytest.mark.parametrize("emitter", EMITTERS)
def test_a_shape_fallback_after_a_drop_runs_on_the_kept_inputs(emitter):
    """The ATen call's shape is not the trace's: the graph runs through ATen, after the runner
    dropped `a`, on the inputs it kept, on every call (it never passed the check)."""
    a, b = on_device(emitter, (torch.randn(6, 3), torch.randn(5, 2)))
    compiled = boxed(emitter, shifted, a, b, tracing_mode="fake")
    assert "fallback_after_frees(fallback, kept)" in compiled.wrapper_source
    for _ in range(2):
        arguments = [a, b]
        result = compiled(arguments)
        assert arguments == []
        torch.testing.assert_close(result, shifted(a, b))


def gathered(a, t, index):
    return t[index] * a.sum()


def test_an_index_check_keeps_every_input_until_it_has_run():
    """A C++ kernel that checks indices falls back on the data (ATen then raises eager's error):
    no input is dropped before it, on any call."""
    a, t = torch.randn(4, 3), torch.randn(5, 2)
    compiled = boxed("cpp", gathered, a, t, torch.tensor([0, 4, 1]))
    assert "fallback_after_frees" not in compiled.wrapper_source
    for _ in range(2):
        index = torch.tensor([3, 1, 2])
        torch.testing.assert_close(compiled([a, t, index]), gathered(a, t, index))
    index = torch.tensor([3, 7, 2])
    with pytest.raises(IndexError) as expected:
        gathered(a, t, index)
    with pytest.raises(IndexError) as actual:
        compiled([a, t, index])
    assert str(actual.value) == str(expected.value)
