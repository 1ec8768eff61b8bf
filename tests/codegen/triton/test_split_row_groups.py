"""Row groups with few, long rows are divided (`triton/split_row_groups.py`): their reductions
become split reductions and their per-element members pointwise kernels over all elements,
so that a batch norm over few channels of many pixels (densenet121's stem: 64 rows of 65,536)
runs many programs instead of one per channel, and gives eager's values and gradients."""

import copy
import math
import re

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from codegen.batch_norm_reference import DIMS, batch_norm_relu, batch_norm_relu_backward
from tensorjit.codegen import ir
from tensorjit.codegen.memory import expression_loads
from tensorjit.codegen.triton import compile as triton_compile, decompositions
from tensorjit.codegen.triton.heuristics import pointwise_shape
from tensorjit.codegen.triton.kernels import is_horizontal
from tensorjit.codegen.triton.split_row_groups import split_row_groups
from tensorjit.codegen.verify import verify

SHAPE = (4, 3, 64, 80)
"""Three channels of 4 x 64 x 80 = 20,480 elements: rows longer than a persistent kernel holds."""


@pytest.fixture
def small_splits(monkeypatch):
    """Split small reductions too, so that the interpreter runs these tests quickly (the
    densenet121 stem's 64 x 65,536 elements pass split_reductions.MIN_WORK as they are)."""
    from tensorjit.codegen.triton import split_reductions

    monkeypatch.setattr(split_reductions, "MIN_WORK", 1 << 14)


def compile_fn(fn, *inputs):
    compiled = triton_compile.compile_graph(make_fx(fn, decomposition_table=decompositions())(*inputs), list(inputs))
    verify(compiled.program)
    return compiled


def batch_norm_relu_and_sigmoid(x, weight, bias):
    """Two per-element outputs over the same loops: one pointwise kernel after the division."""
    out, mean, var = batch_norm_relu(x, weight, bias)
    return out, torch.sigmoid((x - mean) * weight[None, :, None, None]), mean, var


def kernels(program: ir.Program) -> list:
    return [step for step in program.steps if not isinstance(step, ir.Extern)]


def row_groups_with_lanes(program: ir.Program, rows: tuple = SHAPE[1:2]) -> list:
    """Row groups over `rows` (one program a channel; a reduction among the members) holding a
    per-element member."""
    return [s for s in program.steps if isinstance(s, ir.LoopGroup) and s.ranges == rows and
            any(isinstance(m, ir.Reduction) for m in s.members) and
            any(isinstance(m, ir.Pointwise) and m.ranges != s.ranges for m in s.members)]


def programs_of(compiled, step) -> int:
    return compiled.hook.kernels[step.name].shapes[0].grid[0]


def test_batch_norm_forward_over_few_long_rows_is_divided(device, small_splits):
    """The mean's split, the variance's (it reads the mean: a phase of its own), then the
    normalisation as a pointwise kernel of one program per 1024 elements, not one per channel."""
    x = torch.randn(SHAPE, device=device)
    weight, bias = torch.randn(SHAPE[1], device=device), torch.randn(SHAPE[1], device=device)
    compiled = compile_fn(batch_norm_relu, x, weight, bias)
    program = compiled.program
    assert not row_groups_with_lanes(program), program
    assert len([s for s in program.steps if s.name.endswith("_partials")]) == 2, program
    [normalise] = [s for s in kernels(program) if isinstance(s, ir.Pointwise) and s.ranges[-2:] == SHAPE[-2:]]
    assert programs_of(compiled, normalise) == pointwise_shape(x.numel()).grid[0] > 16 * SHAPE[1]
    for got, want in zip(compiled(x, weight, bias), batch_norm_relu(x, weight, bias)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_per_element_members_over_the_same_loops_stay_one_kernel(device, small_splits):
    """Divided, the group's two per-element members are one pointwise kernel with two outputs
    (kernels.is_horizontal), each shared value loaded once, as they were one group."""
    x = torch.randn(SHAPE, device=device)
    weight, bias = torch.randn(SHAPE[1], device=device), torch.randn(SHAPE[1], device=device)
    compiled = compile_fn(batch_norm_relu_and_sigmoid, x, weight, bias)
    program = compiled.program
    assert not row_groups_with_lanes(program), program
    [both] = [s for s in kernels(program) if s.ranges[-2:] == SHAPE[-2:]]
    assert is_horizontal(both) and len(both.members) == 2, program
    for got, want in zip(compiled(x, weight, bias), batch_norm_relu_and_sigmoid(x, weight, bias)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_batch_norm_backward_reads_the_sums_from_their_buffers(device, small_splits):
    """Both sums in one split (neither reads the other), led by the gradient through ReLU that
    they sum (computed, stored and summed from registers in the partials' kernel); the input
    gradient, which read the sums from registers inside the group, is a pointwise kernel
    reading their buffers."""
    channels = SHAPE[1]
    inputs = (torch.randn(SHAPE, device=device), torch.randn(SHAPE, device=device), torch.randn(SHAPE, device=device),
              torch.randn(channels, device=device), torch.rand(channels, device=device) + 0.5,
              torch.randn(channels, device=device))
    compiled = compile_fn(batch_norm_relu_backward, *inputs)
    program = compiled.program
    assert not row_groups_with_lanes(program), program
    [partials] = [s for s in program.steps if s.name.endswith("_partials")]
    assert [type(m) for m in partials.members] == [ir.Pointwise, ir.Reduction, ir.Reduction], program
    assert partials.members[0].output in {load.buffer for load in expression_loads(partials.members[1].body)}
    [gradient] = [s for s in kernels(program) if isinstance(s, ir.Pointwise) and
                  math.prod(s.ranges) == inputs[0].numel()]
    assert programs_of(compiled, gradient) == pointwise_shape(inputs[0].numel()).grid[0], program
    for got, want in zip(compiled(*inputs), batch_norm_relu_backward(*inputs)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-3)


def relu_backward_sums(grad, x, mean):
    """Batch norm's backward as training leaves it: the ReLU's mask recomputed from the input,
    which the second sum reads too."""
    g = torch.where(x <= mean[None, :, None, None], 0.0, grad)
    return g.sum(DIMS), (g * (x - mean[None, :, None, None])).sum(DIMS), g * 3


def test_the_partials_kernel_loads_each_input_element_once(device, small_splits):
    """The moved gradient through ReLU and the second sum read the input at the same element,
    their index terms in another order: one load (`kernels.RowWriter.load` compares linear
    forms), where the text compared made two."""
    inputs = (torch.randn(SHAPE, device=device), torch.randn(SHAPE, device=device), torch.randn(SHAPE[1], device=device))
    compiled = compile_fn(relu_backward_sums, *inputs)
    [partials] = [s for s in compiled.program.steps if s.name.endswith("_partials")]
    source = compiled.hook.kernels[partials.name].source
    assert len(re.findall(r"tl\.load\(.*rmask", source)) == 2, source  # the gradient and the input
    for got, want in zip(compiled(*inputs), relu_backward_sums(*inputs)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-3)


def heavy_backward_sums(grad, x, mean):
    g = torch.where(x <= mean[None, :, None, None], 0.0, torch.tanh(torch.sigmoid(grad) * torch.exp(x)))
    return g.sum(DIMS), (g * (x - mean[None, :, None, None])).sum(DIMS), g * 3


def test_a_heavy_value_summed_at_its_element_keeps_its_own_kernel(device, small_splits):
    """Three transcendental functions (split_row_groups.LEAD_MAX_OPS): in the partials' kernel,
    16 elements a thread of each live value; in its own kernel, 4."""
    from tensorjit.codegen.triton.split_row_groups import LEAD_MAX_OPS

    inputs = (torch.randn(SHAPE, device=device), torch.randn(SHAPE, device=device), torch.randn(SHAPE[1], device=device))
    compiled = compile_fn(heavy_backward_sums, *inputs)
    [partials] = [s for s in compiled.program.steps if s.name.endswith("_partials")]
    assert all(isinstance(m, ir.Reduction) for m in partials.members) and LEAD_MAX_OPS < 60, compiled.program
    for got, want in zip(compiled(*inputs), heavy_backward_sums(*inputs)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-3)


def transposed_sums(x, y):
    g = torch.sigmoid(x) * 2
    return g.sum(DIMS), (g.transpose(2, 3) * y).sum(DIMS), g


def test_a_value_summed_at_another_element_stays_in_its_own_kernel(device, small_splits):
    """A sum reads the per-element member transposed (within its channel: one row group), so
    a block of the partials' kernel would read elements another program computes: the member
    keeps its kernel, before the partials'."""
    x, y = torch.randn(4, 3, 72, 72, device=device), torch.randn(4, 3, 72, 72, device=device)
    compiled = compile_fn(transposed_sums, x, y)
    [partials] = [s for s in compiled.program.steps if s.name.endswith("_partials")]
    assert all(isinstance(m, ir.Reduction) for m in partials.members), compiled.program
    for got, want in zip(compiled(x, y), transposed_sums(x, y)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-3)


class Stem(torch.nn.Module):
    """densenet121's stem in small: convolution, batch norm, ReLU, max pooling."""

    def __init__(self, channels):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, channels, 3, padding=1, bias=False)
        self.norm = torch.nn.BatchNorm2d(channels)

    def forward(self, x):
        return F.max_pool2d(torch.relu(self.norm(self.conv(x))), 3, 2, 1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_a_stem_training_step_over_few_channels_matches_eager(device, small_splits, dtype):
    """Forward and backward both divided; the output, every gradient and the running statistics
    as close to float64's as eager's in `dtype` are (16-bit: the max pooling's ties, which
    rounding decides, put both 0.37 of the largest input gradient off in bfloat16)."""
    import tensorjit
    from tensorjit.autograd import aot_compile

    torch.manual_seed(0)
    model = Stem(SHAPE[1]).to(device=device, dtype=dtype).train()
    reference, exact = copy.deepcopy(model), copy.deepcopy(model).double()
    programs = []

    def compiler(gm, inputs):
        compiled = triton_compile.compile_graph(gm, inputs)
        verify(compiled.program)
        programs.append(compiled.program)
        return compiled

    compiled = tensorjit.compile(model, backend=lambda gm, inputs: aot_compile(
        gm, inputs, fw_compiler=compiler, decompositions=decompositions()))
    x = torch.randn(SHAPE, device=device).to(dtype)
    results = []
    for module, call, value in ((model, compiled, x), (reference, reference, x), (exact, exact, x.double())):
        value = value.clone().requires_grad_()
        out = call(value)
        out.float().square().mean().backward()
        results.append([out, value.grad] + [p.grad for p in module.parameters()] + list(module.buffers()))
    assert len(programs) == 2 and all(not row_groups_with_lanes(p) for p in programs), programs
    assert all(any(s.name.endswith("_partials") for s in p.steps) for p in programs), programs
    tolerance = 1e-5 if dtype == torch.float32 else 2e-3
    for position, (mine, eager, truth) in enumerate(zip(*results)):
        truth = truth.double()
        scale = truth.abs().max().item() or 1.0
        error, eager_error = ((t.double() - truth).abs().max().item() / scale for t in (mine, eager))
        assert error <= 2 * eager_error + tolerance, (position, error, eager_error)


def lowered(fn, *inputs) -> ir.Program:
    program, _ = triton_compile.lower(make_fx(fn, decomposition_table=decompositions())(*inputs), list(inputs))
    return program


def test_many_short_rows_stay_one_group():
    """GPT-2's layer norms (rows many and short, each in registers) are not divided."""
    x, weight, bias = torch.randn(2048, 768), torch.randn(768), torch.randn(768)
    program = lowered(lambda x, w, b: F.layer_norm(x, (768,), w, b), x, weight, bias)
    assert split_row_groups(program).steps == program.steps


def test_many_long_rows_stay_one_group():
    """Rows enough to fill the GPU: a program per row does."""
    x = torch.randn(512, 20000)
    program = lowered(lambda x: x.softmax(-1), x)
    assert row_groups_with_lanes(program, (512,))
    assert split_row_groups(program).steps == program.steps


def test_few_rows_that_fit_in_registers_stay_one_group():
    """A persistent row group reads its row once; divided, each kernel would read it again."""
    x = torch.randn(16, 4, 32, 32)  # 4 rows of 16,384
    program = lowered(lambda x, w, b: batch_norm_relu(x, w, b)[0], x, torch.randn(4), torch.randn(4))
    assert row_groups_with_lanes(program, (4,))
    assert split_row_groups(program).steps == program.steps


def test_argmax_keeps_its_group_whole(small_splits):
    """A reduction that split_reductions does not split keeps the whole group one kernel."""
    x = torch.randn(4, 20000)
    program = lowered(lambda x: (x.argmax(-1), x - x.amax(-1, keepdim=True)), x)
    assert split_row_groups(program).steps == program.steps


def test_members_reading_each_other_at_other_elements_stay_apart(small_splits):
    """A row group (built here) whose second per-element member reads the first transposed,
    and whose sum reads the second: divided, the first keeps a kernel of its own (one kernel
    with both, or both in the partials' kernel, would read elements other programs compute);
    the second, summed at its own element, leads the partials."""
    c, n, h, w = (ir.IndexVar(f"i{d}") for d in range(4))
    r = tuple(ir.IndexVar(f"r{d}") for d in range(3))
    size = (4, 3, 72, 72)
    strides = (15552, 5184, 72, 1)
    at = lambda *indices: ir.strided_index(indices, strides)  # noqa: E731
    first = ir.Pointwise("kernel0", "buf0", (3, 4, 72, 72),
                         ir.Op("sigmoid", (ir.Load("in0", at(n, c, h, w), "float32"),), "float32"), (c, n, h, w),
                         store=at(n, c, h, w))
    second = ir.Pointwise("kernel1", "buf1", (3, 4, 72, 72),
                          ir.Op("tanh", (ir.Load("buf0", at(n, c, w, h), "float32"),), "float32"), (c, n, h, w),
                          store=at(n, c, h, w))
    total = ir.Reduction("kernel2", "buf2", (3,), (4, 72, 72), "sum", ir.Load("buf1", at(r[0], c, r[1], r[2]), "float32"),
                         (c,), r, "float32")
    buffers = (ir.Buffer("in0", "float32", size, strides, "input"), ir.Buffer("buf0", "float32", size, strides),
               ir.Buffer("buf1", "float32", size, strides), ir.Buffer("buf2", "float32", (3,), (1,)))
    program = ir.Program(buffers, (ir.LoopGroup("group0_kernel0", (3,), (c,), (first, second, total)),),
                         ("in0",), ("buf1", "buf2"))
    verify(program)
    divided = split_row_groups(program)
    verify(divided)
    assert divided.steps[0] == first, divided
    [partials] = [s for s in divided.steps if s.name.endswith("_partials")]
    assert [m.name for m in partials.members] == ["kernel1", "kernel2_partials"], divided
