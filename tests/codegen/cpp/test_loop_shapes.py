"""Loop shapes of the C++ kernels (cpp/loops.py, kernels.loop_nest): adjacent loops that every
index walks as one run of memory are one loop (7x7 feature maps vectorise instead of running
thousands of 7-element loops; loops a broadcast or a transpose reads differently stay apart),
a pointwise kernel iterates in its output's memory order, and OpenMP regions appear only when
torch runs on several threads."""

import re
import shutil

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from tensorjit.codegen import compile_aten_graph
from tensorjit.codegen.decomp import decompositions

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")


def _compiled(fn, *inputs):
    gm = make_fx(fn, decomposition_table=decompositions())(*inputs)
    compiled = compile_aten_graph(gm, list(inputs))
    result = compiled(*inputs)
    expected = fn(*inputs)
    torch.testing.assert_close(list(result) if isinstance(result, (list, tuple)) else [result],
                               list(expected) if isinstance(expected, (list, tuple)) else [expected])
    return compiled.source


def _loop_sizes(source: str) -> list[int]:
    return [int(size) for size in re.findall(r"for \(int64_t \w+ = 0; \w+ < (\d+)L", source)]


def test_a_pointwise_kernel_over_contiguous_buffers_is_one_loop():
    source = _compiled(lambda x, y: (x * 2 + y).relu(), torch.randn(2, 6, 7, 7), torch.randn(2, 6, 7, 7))
    assert _loop_sizes(source) == [2 * 6 * 7 * 7]


def test_a_broadcast_keeps_its_loop_apart():
    # scale[c] per channel: the channel loop stays, the 7x7 loops under it merge
    source = _compiled(lambda x, scale: x * scale.view(1, 6, 1, 1).sigmoid(), torch.randn(1, 6, 7, 7), torch.randn(6))
    assert _loop_sizes(source) == [6, 49]


def test_a_transposed_read_is_not_merged():
    source = _compiled(lambda x: (x.transpose(1, 2) + 1).contiguous(), torch.randn(3, 5, 7))
    assert _loop_sizes(source) == [3, 7, 5]
    # eager lays the sum of a transposed tensor out as its operand: stored in memory order, one loop
    assert _loop_sizes(_compiled(lambda x: x.transpose(1, 2) + 1, torch.randn(3, 5, 7))) == [105]


def test_reduction_loops_and_group_members_merge():
    def fn(x, weight):
        normed = torch.nn.functional.batch_norm(x, torch.zeros(6), torch.ones(6), weight, None, False)
        return torch.nn.functional.hardswish(normed).mean((2, 3)), x.sum((2, 3))

    source = _compiled(fn, torch.randn(2, 6, 7, 7), torch.randn(6))
    assert 7 not in _loop_sizes(source) and 49 in _loop_sizes(source), source


def test_a_channels_last_output_is_written_in_memory_order():
    def fn(x):
        return (x.relu() * 2).contiguous(memory_format=torch.channels_last)

    source = _compiled(fn, torch.randn(1, 5, 6, 7))
    assert _loop_sizes(source) == [6 * 7, 5], source  # channels innermost: the store is contiguous


@pytest.mark.parametrize("threads", [1, 2])
def test_parallel_regions_only_with_several_threads(threads):
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        source = _compiled(lambda x: x.exp() + 1, torch.randn(256, 256))
    finally:
        torch.set_num_threads(before)
    assert ("#pragma omp parallel" in source) == (threads > 1)


def test_column_sums_accumulate_a_row_of_outputs_at_once():
    """A sum over the leading dimension (a bias gradient over tokens, a channels-last spatial
    mean) reads one element every row per output; it accumulates whole rows instead, the inner
    loop contiguous over the outputs. Other reductions keep their row loops."""
    def fn(x, y):
        return x.sum(0), (y * 2).mean((2, 3)), x.amax(0), x.sum(1)

    x = torch.randn(33, 40)
    y = torch.randn(2, 24, 5, 6).contiguous(memory_format=torch.channels_last)
    source = _compiled(fn, x, y)
    assert source.count("acc[") >= 6, source
    assert source.count("double acc[") == 2, source  # the two sums over leading dims; amax and the row sum not


def test_per_channel_work_of_a_channels_last_kernel_runs_once_per_channel():
    """A channels-last batch norm loops over pixels outside and channels inside; 1/sqrt(var + eps)
    depends on the channel alone and is computed into an array before the loops (cpp/hoist.py),
    not once per element (MobileNetV3-small's first batch norm: 131 -> 57 us)."""
    def fn(x, mean, var, weight, bias):
        return torch.nn.functional.hardswish(torch.nn.functional.batch_norm(x, mean, var, weight, bias, False))

    x = torch.randn(1, 16, 9, 10).contiguous(memory_format=torch.channels_last)
    source = _compiled(fn, x, torch.randn(16), torch.rand(16) + 0.5, torch.randn(16), torch.randn(16))
    kernel = source[source.index('extern "C" void kernel'):]
    assert _loop_sizes(kernel) == [16, 90, 16], kernel
    hoisted, main = kernel.split("for (int64_t i1", 1)
    assert "std::sqrt" in hoisted and "std::sqrt" not in main, kernel
    assert "tj_h0[" in main and "/ ((float)6.0)" in main, kernel  # the per-element division stays


def test_nothing_is_hoisted_from_a_kernel_of_one_row():
    source = _compiled(lambda x, y: x / y.sqrt(), torch.randn(1, 7), torch.rand(7) + 0.1)
    assert "tj_h" not in source
