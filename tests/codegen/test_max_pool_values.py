"""Max pooling whose indices nothing reads runs as one Triton kernel over strided window slices
(codegen/pooling.py), equal to ATen's, NaN and -inf included, and computes no indices; with its
indices read, the window-tap lowering (lowering_pooling.py) computes them in a kernel too."""

import pytest
import torch
import torch.nn.functional as F

from tensorjit.codegen import ir, memory
from two_emitters import compile_with, on_device

POOL = torch.ops.aten.max_pool2d_with_indices.default


def pool_steps(compiled) -> int:
    return sum(isinstance(s, ir.Extern) and s.target is POOL for s in compiled.program.steps)


def index_buffers(compiled) -> list[str]:
    return [b.name for b in compiled.program.buffers if b.dtype == "int64"]


@pytest.mark.parametrize("shape, arguments", [
    ((2, 3, 9, 11), dict(kernel_size=3, stride=2, padding=1)),                     # resnet's
    ((2, 3, 9, 11), dict(kernel_size=(2, 3), stride=(1, 2), padding=(1, 0))),
    ((2, 3, 10, 10), dict(kernel_size=3, stride=1, padding=1, dilation=2)),
    ((3, 8, 8), dict(kernel_size=2)),                                              # no batch dimension
    ((2, 3, 10, 10), dict(kernel_size=3, stride=2, ceil_mode=True)),               # a last window past the end
])
def test_values_only_max_pooling_equals_eager(shape, arguments):
    x = torch.randn(*shape)
    x.view(-1)[::7] = float("nan")
    x.view(-1)[3::11] = -float("inf")
    [x] = on_device("triton", (x,))

    def fn(x):
        return F.max_pool2d(x * 2, **arguments).relu()

    compiled = compile_with("triton", fn, x)
    torch.testing.assert_close(compiled(x), fn(x), equal_nan=True, rtol=0, atol=0)
    assert pool_steps(compiled) == 0, compiled.program
    if not arguments.get("ceil_mode"):  # the strided-slices rewrite; ceil_mode's goes to the tap lowering
        assert index_buffers(compiled) == [], compiled.program


def test_pooling_with_its_indices_read_computes_them_in_a_kernel():
    [x] = on_device("triton", (torch.randn(2, 3, 8, 8),))

    def fn(x):
        values, indices = F.max_pool2d(x, 3, 2, 1, return_indices=True)
        return values + 1, indices

    compiled = compile_with("triton", fn, x)
    for got, want in zip(compiled(x), fn(x)):
        torch.testing.assert_close(got, want)
    assert pool_steps(compiled) == 0
    assert index_buffers(compiled), compiled.program


def test_a_convolution_stem_pools_in_the_batch_norm_kernel():
    """resnet's stem: the batch norm and ReLU of the convolution's output are computed in the
    pooling kernel, at each window element, and the convolution's output is read once."""
    stem = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 7, 2, 3, bias=False), torch.nn.BatchNorm2d(8),
                               torch.nn.ReLU(), torch.nn.MaxPool2d(3, 2, 1)).eval()
    with torch.no_grad():
        stem[1].running_mean.uniform_(-1, 1)
        stem[1].running_var.uniform_(0.5, 2)
    x = torch.randn(2, 3, 32, 32)
    if torch.cuda.is_available():
        stem, x = stem.cuda(), x.cuda()
    cudnn = torch.backends.cudnn
    # Float32 convolutions: under cuDNN's default TF32 eager's NCHW and the compiled channels-last
    # convolution round differently by ~1e-3.
    with torch.no_grad(), cudnn.flags(enabled=cudnn.enabled, benchmark=cudnn.benchmark,
                                      deterministic=cudnn.deterministic, allow_tf32=False):
        compiled = compile_with("triton", stem, x)
        torch.testing.assert_close(compiled(x), stem(x), rtol=1e-4, atol=1e-4)
    assert pool_steps(compiled) == 0
    # One kernel reads the convolution's output: batch norm, ReLU and pooling (on a GPU, layout.py
    # adds kernels around the channels-last convolution; they do not read its output).
    steps = compiled.program.steps
    [convolution] = [s for s in steps if isinstance(s, ir.Extern) and "convolution" in str(s.target)]
    readers = [s for s in steps if convolution.output in memory.names_read(s)]
    assert len(readers) == 1 and not isinstance(readers[0], ir.Extern), compiled.program
    shapes = {b.name: b.shape for b in compiled.program.buffers}
    assert [shapes[name] for name in memory.names_written(readers[0])] == [(2, 8, 8, 8)], compiled.program
