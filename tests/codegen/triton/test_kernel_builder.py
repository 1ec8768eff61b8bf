"""The kernel builder and launcher, with kernels written through the builder by hand."""

import pytest
import torch

from tensorjit.codegen.triton import heuristics
from tensorjit.codegen.triton.kernel import TritonKernel
from tensorjit.codegen.triton.launcher import KernelLauncher, load_kernel


def build_softmax(rows, columns, shape, dtype):
    kernel = TritonKernel("softmax_kernel", rows, columns, shape)
    index = f"rindex + {columns} * xindex"
    maximum = kernel.reduction("max", kernel.load("x", index, dtype), dtype)
    kernel.begin_loop()
    exponent = kernel.compute(f"tl.exp({kernel.load('x', index, dtype)} - {maximum})")
    total = kernel.reduction("sum", exponent, dtype)
    kernel.begin_loop()
    exponent = kernel.compute(f"tl.exp({kernel.load('x', index, dtype)} - {maximum})")
    kernel.store("out", index, kernel.compute(f"{exponent} / {total}"), dtype)
    return kernel


@pytest.mark.parametrize("persistent", [True, False])
@pytest.mark.parametrize("rows,columns", [(5, 7), (3, 1500), (64, 16)])
def test_softmax_matches_eager(persistent, rows, columns, device, cache_dir):
    if persistent:
        shape = heuristics.persistent_reduction_shape(rows, columns)
    else:
        shape = heuristics.looped_reduction_configs(rows, columns)[-1]
    kernel = build_softmax(rows, columns, shape, torch.float32)
    function = load_kernel(kernel.source(), "softmax_kernel", cache_dir)
    x = torch.randn(rows, columns, device=device)
    out = torch.full_like(x, float("nan"))
    launcher = KernelLauncher(function, shape)
    launcher(x, out)
    torch.testing.assert_close(out, torch.softmax(x, -1))
    if device == "cuda":  # the second launch takes the direct path and must agree
        out.fill_(float("nan"))
        launcher(x, out)
        assert launcher.fast_launches == 1
        torch.testing.assert_close(out, torch.softmax(x, -1))


def test_half_precision_is_computed_in_float32_and_stored_rounded(device, cache_dir):
    numel = 1000
    shape = heuristics.pointwise_shape(numel)
    kernel = TritonKernel("scale_kernel", numel, None, shape)
    value = kernel.load("x", "xindex", torch.bfloat16)
    kernel.store("out", "xindex", kernel.compute(f"{value} * 3.0 + 1.0"), torch.bfloat16)
    source = kernel.source()
    assert ".to(tl.float32)" in source and ".to(tl.bfloat16)" in source
    x = torch.randn(numel, device=device, dtype=torch.bfloat16)
    out = torch.empty_like(x)
    KernelLauncher(load_kernel(source, "scale_kernel", cache_dir), shape)(x, out)
    torch.testing.assert_close(out, (x.float() * 3 + 1).bfloat16())


def test_masks_are_dropped_when_blocks_divide_the_sizes():
    shape = heuristics.pointwise_shape(4096)
    kernel = TritonKernel("copy_kernel", 4096, None, shape)
    kernel.store("out", "xindex", kernel.load("x", "xindex", torch.float32), torch.float32)
    assert "xmask)" not in kernel.source() and ", other=0" not in kernel.source()


def test_heuristics():
    assert heuristics.pointwise_shape(1 << 24) == heuristics.LaunchShape(1024, None, 4, (16384, 1, 1))
    assert heuristics.pointwise_shape(1 << 24, heavy=True).num_warps == 8
    softmax_row = heuristics.persistent_reduction_shape(8192, 8192)
    assert (softmax_row.xblock, softmax_row.rblock, softmax_row.num_warps, softmax_row.persistent) == (1, 8192, 8, True)
    short_rows = heuristics.persistent_reduction_shape(1000, 16)
    assert short_rows.xblock * short_rows.rblock == heuristics.SMALL_ROW_TILE
    assert not heuristics.is_persistent(100000)
    assert heuristics.index_dtype(2**31 - 1) == "tl.int32" and heuristics.index_dtype(2**31) == "tl.int64"
