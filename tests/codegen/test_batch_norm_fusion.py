"""Batch norm's statistics and the pointwise work around them are one row group although
their loops disagree: the statistics loop over channels (rows) and reduce over N, H, W; the
normalisation and ReLU's backward loop over (N, C, H, W). `schedule.permuted_to_rows` loops
such a neighbour channel first, storing where it did (NCHW), so a training step's batch norm
is one kernel forward and one backward, as torch.compile's are."""

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from codegen.batch_norm_reference import DIMS, batch_norm_relu, batch_norm_relu_backward
from tensorjit.codegen import ir
from tensorjit.codegen.decomp import decompositions
from two_emitters import EMITTERS, compile_traced, compile_with, on_device


def groups(compiled) -> list[ir.LoopGroup]:
    return [s for s in compiled.program.steps if isinstance(s, ir.LoopGroup)]


def kernels(compiled) -> list:
    return [s for s in compiled.program.steps if not isinstance(s, ir.Extern)]


@pytest.mark.parametrize("emitter", EMITTERS)
@pytest.mark.parametrize("shape", [(4, 6, 5, 3), (2, 16, 8, 8)])
def test_statistics_and_normalisation_are_one_group(emitter, shape):
    inputs = (torch.randn(shape), torch.randn(shape[1]), torch.randn(shape[1]))
    compiled = compile_with(emitter, batch_norm_relu, *inputs)
    assert len(kernels(compiled)) == 1 and len(groups(compiled)) == 1, compiled.program
    [group] = groups(compiled)
    assert any(isinstance(m, ir.Pointwise) and m.ranges[0] == shape[1] for m in group.members), group
    for got, want in zip(compiled(*on_device(emitter, inputs)), batch_norm_relu(*inputs)):
        torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("emitter", EMITTERS)
@pytest.mark.parametrize("shape", [(4, 6, 5, 3), (2, 16, 8, 8)])
def test_relu_backward_sums_and_input_gradient_are_one_group(emitter, shape):
    channels = shape[1]
    inputs = (torch.randn(shape), torch.randn(shape), torch.randn(shape), torch.randn(channels),
              torch.rand(channels) + 0.5, torch.randn(channels))
    compiled = compile_with(emitter, batch_norm_relu_backward, *inputs)
    assert len(kernels(compiled)) == 1, compiled.program
    for got, want in zip(compiled(*on_device(emitter, inputs)), batch_norm_relu_backward(*inputs)):
        torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-4)


def relu_sum_then_transposed(x):
    """The second pointwise reads the first one's output transposed within each channel: still
    inside the row (it joins after a barrier); rolled across channels it is not. (A sigmoid:
    a value as cheap as relu(x) * 2 would be recomputed by each reader, no member at all.)"""
    y = torch.sigmoid(x) * 2
    total = y.sum(DIMS)
    return y.transpose(2, 3) + total[None, :, None, None], torch.roll(y, 1, 1) - total[None, :, None, None]


@pytest.mark.parametrize("emitter", EMITTERS)
def test_permuted_members_read_elsewhere_in_their_row_or_not_at_all(emitter):
    x = torch.randn(2, 4, 3, 3)
    compiled = compile_with(emitter, relu_sum_then_transposed, x)
    [group] = groups(compiled)
    assert len(group.members) == 3 and len(kernels(compiled)) == 2, compiled.program  # the roll stays out
    for got, want in zip(compiled(*on_device(emitter, (x,))), relu_sum_then_transposed(x)):
        torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("emitter", EMITTERS)
def test_var_mean_returned_whole_is_reduced_once(emitter):
    """The autograd partitioner saves var_mean's result whole for the backward; its getitems
    read it too. Each reduction runs once (it ran twice: one more pass over the activation per
    batch norm of a training step)."""
    def statistics(x):
        var, mean = torch.var_mean(x, DIMS, correction=0, keepdim=True)
        return (x - mean) * torch.rsqrt(var + 1e-5), mean

    [x] = on_device(emitter, (torch.randn(4, 6, 5, 3),))
    gm = make_fx(statistics, decomposition_table=decompositions())(x)
    [var_mean] = [n for n in gm.graph.nodes if n.target == torch.ops.aten.var_mean.correction]
    output = next(n for n in gm.graph.nodes if n.op == "output")
    output.args = (tuple(output.args[0]) + (var_mean,),)
    gm.recompile()
    compiled = compile_traced(emitter, gm, x)
    reductions = [m for s in compiled.program.steps for m in getattr(s, "members", (s,)) if isinstance(m, ir.Reduction)]
    assert len(reductions) == 2, compiled.program
    normed, mean, (var, mean_again) = compiled(x)
    expected_var, expected_mean = torch.var_mean(x, DIMS, correction=0, keepdim=True)
    torch.testing.assert_close(var, expected_var)
    torch.testing.assert_close(mean_again, expected_mean)


@pytest.mark.parametrize("emitter", EMITTERS)
def test_an_output_in_eager_permuted_strides_joins_its_group(emitter):
    def transposed_softmax(x):
        return x.softmax(-1).t() * 2

    [x] = on_device(emitter, (torch.randn(8, 16),))
    compiled = compile_with(emitter, transposed_softmax, x)
    assert len(kernels(compiled)) == 1, compiled.program
    got, want = compiled(x), transposed_softmax(x)
    torch.testing.assert_close(got, want)
    assert got.stride() == want.stride()


@pytest.mark.parametrize("emitter", EMITTERS)
def test_channels_last_statistics_stay_a_column_reduction(emitter):
    """Over NHWC the channels are the unit-stride loop: looping them as rows would read each
    row's elements a row apart, so the normalisation stays its own kernel and the statistics
    a column reduction (tiled across channels on the GPU)."""
    inputs = (torch.randn(4, 16, 5, 3).to(memory_format=torch.channels_last), torch.randn(16), torch.randn(16))
    compiled = compile_with(emitter, batch_norm_relu, *inputs)
    for group in groups(compiled):
        assert all(isinstance(m, ir.Reduction) for m in group.members), group
    for got, want in zip(compiled(*on_device(emitter, inputs)), batch_norm_relu(*inputs)):
        torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-4)


def test_few_rows_are_not_stacked_below_two_programs_per_multiprocessor():
    """Stacking short rows XBLOCK to a program is for many rows: 512 channels of 16x4x4 pixels
    stacked 16 to a program ran on 32 programs (0.21 ms where 512 programs take microseconds)."""
    from tensorjit.codegen.triton import heuristics

    for rows, length in [(512, 256), (128, 1024), (128, 16)]:
        shape = heuristics.persistent_reduction_shape(rows, length)
        assert shape.grid[0] >= min(rows, heuristics.MIN_PROGRAMS), (rows, length, shape)
    assert heuristics.persistent_reduction_shape(4096, 768).xblock > 1  # many rows still share programs
    assert heuristics.persistent_reduction_shape(128, 1024).num_warps >= 4  # (one warp took 4.6 us a row)
    assert heuristics.pointwise_shape(32768, heavy=True).grid[0] >= heuristics.MIN_PROGRAMS
    assert heuristics.pointwise_shape(1 << 22).xblock == 1024


@pytest.mark.parametrize("emitter", EMITTERS)
def test_a_permuted_producer_read_lane_by_lane_stays_in_registers(emitter):
    """ReLU's backward feeds only its group's sums and the input gradient: the Triton kernel
    keeps it in registers (never stored); C++ scratch rows are indexed by offset in the row,
    where a permuted member's offsets do not fit, so there it is stored."""
    shape = (2, 16, 4, 4)
    inputs = (torch.randn(shape), torch.randn(shape), torch.randn(shape), torch.randn(16),
              torch.rand(16) + 0.5, torch.randn(16))
    compiled = compile_with(emitter, batch_norm_relu_backward, *inputs)
    [group] = groups(compiled)
    producer = group.members[0]
    assert isinstance(producer, ir.Pointwise) and producer.store is not None, group
    assert (producer.output in group.local) == (emitter == "triton"), group
    for got, want in zip(compiled(*on_device(emitter, inputs)), batch_norm_relu_backward(*inputs)):
        torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-4)


def batch_norm_then_pooling(x, running_mean):
    """The running-mean update reads the batch mean but comes after the next layer's ATen call
    in the graph's order (as in a traced training step; pooling here: a convolution would make
    the GPU graph channels-last, whose statistics are column reductions)."""
    mean = x.mean(DIMS)
    var = ((x - mean[None, :, None, None]) ** 2).mean(DIMS)
    normed = torch.relu((x - mean[None, :, None, None]) * torch.rsqrt(var + 1e-5)[None, :, None, None])
    y = F.avg_pool2d(normed, 2)
    return y, running_mean * 0.9 + mean * 0.1, var * 1.5


@pytest.mark.parametrize("emitter", EMITTERS)
def test_running_statistics_updates_join_the_statistics_group(emitter):
    channels = 8
    inputs = (torch.randn(2, channels, 6, 6), torch.randn(channels))
    compiled = compile_with(emitter, batch_norm_then_pooling, *inputs)
    assert len(kernels(compiled)) == 1, compiled.program
    [group] = groups(compiled)
    assert sum(isinstance(m, ir.Pointwise) and m.ranges == (channels,) for m in group.members) == 2, group
    for got, want in zip(compiled(*on_device(emitter, inputs)), batch_norm_then_pooling(*inputs)):
        torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-4)


def column_sum_then_product(x, w):
    total = x.sum(0)
    return x @ w, total * 2 + 1


@pytest.mark.parametrize("emitter", EMITTERS)
def test_an_epilogue_of_a_split_column_sum_runs_in_its_second_kernel(emitter):
    """A bias gradient's epilogue joins the column sum's group; on the GPU the sum is split in
    two kernels (split_reductions.py) and the epilogue runs in the second."""
    inputs = (torch.randn(16384, 64), torch.randn(64, 16))
    compiled = compile_with(emitter, column_sum_then_product, *inputs)
    names = [s.name for s in compiled.program.steps if not isinstance(s, ir.Extern)]
    assert len(names) == (2 if emitter == "triton" else 1), compiled.program
    if emitter == "triton":
        assert names[0].endswith("_partials") and isinstance(compiled.program.steps[-1], ir.LoopGroup)
    for got, want in zip(compiled(*on_device(emitter, inputs)), column_sum_then_product(*inputs)):
        torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-3)
