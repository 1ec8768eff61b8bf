"""What the generated CPU wrapper does per call: concatenations fused into kernels, a view of a
buffer as one as_strided call, batch-of-one shapes still fused into one pass; and on the GPU
side, each kernel launched by its generated launch function, called directly."""

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from tensorjit.codegen import compile_aten_graph, ir
from tensorjit.codegen.decomp import decompositions
from tensorjit.codegen.graph import strided_view
from two_emitters import EMITTERS, compile_with, on_device


def _compiled(fn, *inputs):
    gm = make_fx(fn, decomposition_table=decompositions())(*inputs)
    compiled = compile_aten_graph(gm, list(inputs))
    result = compiled(*inputs)
    expected = fn(*inputs)
    torch.testing.assert_close(list(result) if isinstance(result, (list, tuple)) else [result],
                               list(expected) if isinstance(expected, (list, tuple)) else [expected])
    return compiled.program


def _externs(program) -> list:
    return [step.target for step in program.steps if isinstance(step, ir.Extern)]


def test_rotary_concatenation_fuses_into_its_consumer():
    def rotary(x, cos, sin):
        half = x.shape[-1] // 2
        return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin

    program = _compiled(rotary, torch.randn(2, 4, 8, 16), torch.randn(8, 16), torch.randn(8, 16))
    assert _externs(program) == [] and len(program.steps) == 1


def test_concatenation_of_mixed_dtypes_and_repeated_pieces():
    def fn(a, b):
        return torch.cat([a, b.double(), a, a], 0).sin(), torch.cat([torch.empty(0), a.flatten()])

    program = _compiled(fn, torch.randn(3, 4, dtype=torch.float64), torch.randn(2, 4))
    assert torch.ops.aten.cat.default not in _externs(program)


def test_a_chain_of_views_feeding_an_extern_is_one_strided_view():
    def fn(x, w):
        y = (x * 2).reshape(4, 8, 16).permute(1, 0, 2)[:, 1:3].reshape(8, 32)  # a copy: a kernel
        z = x.view(4, 8, 16).transpose(1, 2)[1:3]  # views of an input: one as_strided
        return y @ w.t(), torch.bmm(z, z.transpose(1, 2))

    program = _compiled(fn, torch.randn(32, 16), torch.randn(5, 32))
    assert sorted(map(str, _externs(program))) == sorted(map(str, [
        strided_view, strided_view, strided_view, torch.ops.aten.mm.default, torch.ops.aten.bmm.default]))


def test_batch_of_one_softmax_is_one_pass():
    def fn(x):
        return torch.softmax(x.view(1, 4, 8, 8) * 0.5, -1).view(4, 8, 8)

    program = _compiled(fn, torch.randn(1, 4, 8, 8))
    assert [type(step) for step in program.steps] == [ir.LoopGroup]


def test_a_value_read_by_several_externs_through_views_is_computed_once():
    def fn(x, a, b, c):
        normed = x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6)
        flat = normed.view(8, 16)
        return flat @ a, flat @ b, flat @ c

    x, a, b, c = torch.randn(1, 8, 16), torch.randn(16, 4), torch.randn(16, 4), torch.randn(16, 4)
    program = _compiled(fn, x, a, b, c)
    kernels = [s for s in program.steps if not isinstance(s, ir.Extern)]
    assert len(kernels) == 1, program


def test_split_of_a_buffer_is_views_of_it():
    """A fused projection split into query, key and value: the parts are views of the product
    (one as_strided each where an ATen call reads them), not a split call, getitem calls and
    layout checks; a split of a computed value is slices loaded by its consumers."""
    def fn(x, w, y):
        query, key, value = (x @ w).split(8, dim=-1)
        scores = torch.bmm(query.view(4, 2, 8), key.view(4, 2, 8).transpose(1, 2))
        first, second = torch.split_with_sizes(y.exp(), [3, 5], dim=1)
        return torch.bmm(scores, value.view(4, 2, 8)), first * 2, second.sum(1)

    program = _compiled(fn, torch.randn(8, 16), torch.randn(16, 24), torch.randn(4, 8))
    externs = _externs(program)
    assert torch.ops.aten.split.Tensor not in externs and torch.ops.aten.split_with_sizes.default not in externs
    assert externs.count(strided_view) == 3, program


def test_a_returned_piece_of_a_split_that_is_no_strided_view_runs_through_aten():
    """A piece of a split of a view of a returned value, itself returned: where its index
    arithmetic is not found linear (the piece's view of the product is one as_strided call
    otherwise), the split and the getitem run as ATen calls (the getitem's extern referred to the
    split's lowered views, a tuple, and failed)."""
    def fn(x):
        doubled = x * 2
        return doubled, torch.ops.aten.split_with_sizes.default(doubled.view(11, 21, 3), [3, 3, 3, 2])[3]

    program = _compiled(fn, torch.randn(7, 1, 11, dtype=torch.float64).expand(7, 9, 11))
    assert [s for s in program.steps if not isinstance(s, ir.Extern)], program


@pytest.mark.parametrize("emitter", EMITTERS)
def test_an_aten_result_eager_lays_out_overlapping_is_relaid_so(emitter):
    """select of a piece of an expanded argmin: ATen's select of the kernel's dense buffer has
    strides (2, 1) where eager's had (1, 0); kernels were built for eager's, and copying into an
    overlapping layout raises in ATen: each address is written once instead."""
    def fn(x):
        expanded = x.sum((0, 2), keepdim=True).argmin(1)[..., None].expand(1, 1, 4)
        return expanded.chunk(3, 2)[0].select(1, -1).cumsum(0)

    x = on_device(emitter, (torch.randint(-5, 5, (6, 7, 6), dtype=torch.int32),))[0]
    compiled = compile_with(emitter, fn, x)
    assert torch.ops.aten.select.int in _externs(compiled.program), compiled.program
    result = compiled(x)
    torch.testing.assert_close(result[0] if isinstance(result, (list, tuple)) else result, fn(x))


@pytest.mark.parametrize("shape, strides, overlaps", [
    ((2, 3), (0, 1), True), ((2, 3), (1, 0), True), ((4, 3), (1, 1), True), ((2, 2, 3), (0, 3, 1), True),
    ((3, 2), (1, 3), False), ((2, 3), (6, 1), False), ((2, 0, 3), (0, 3, 1), True)])
def test_relaid_gives_the_layout_and_the_values(shape, strides, overlaps):
    from tensorjit.codegen.externs import overlapping, relaid

    extent = 1 + sum((size - 1) * stride for size, stride in zip(shape, strides) if size)
    want = torch.randn(extent).as_strided(shape, strides)
    got = relaid(want.contiguous(), shape, strides)
    assert got.stride() == strides and torch.equal(got, want)
    assert overlapping(shape, strides) == overlaps


def test_matrix_products_are_not_checked_after_they_run():
    """mm/addmm/bmm always return a new contiguous tensor: no shape or stride check follows them."""
    def fn(x, w, b):
        return torch.addmm(b, x, w).relu() @ w.t()

    x, w, b = torch.randn(8, 16), torch.randn(16, 16), torch.randn(16)
    gm = make_fx(fn, decomposition_table=decompositions())(x, w, b)
    compiled = compile_aten_graph(gm, [x, w, b])
    result = compiled(x, w, b)
    torch.testing.assert_close(result[0] if isinstance(result, (list, tuple)) else result, fn(x, w, b))
    assert ".stride() !=" not in compiled.wrapper_source and ".shape !=" not in compiled.wrapper_source


def test_a_shared_value_counts_the_work_of_its_indices_and_transcendentals():
    """T5's relative-position bucket (a log and a dozen integer ops per element, read through
    an embedding lookup) feeds two attention layers: computed once into memory, not once per
    layer and head (count_ops saw only the lookup's zero ops and shared it)."""
    def fn(first, second, table):
        positions = torch.arange(16)
        distance = (positions[None, :] - positions[:, None]).abs()
        bucket = (torch.log(distance.float() + 1.0) * 4.0).long().clamp(max=15)
        bias = table[bucket].permute(2, 0, 1)  # (heads, 16, 16)
        return torch.softmax(first + bias, -1), torch.softmax(second + bias, -1)

    inputs = torch.randn(4, 16, 16), torch.randn(4, 16, 16), torch.randn(16, 4)
    gm = make_fx(fn, decomposition_table=decompositions())(*inputs)
    compiled = compile_aten_graph(gm, list(inputs))
    for got, want in zip(compiled(*inputs), fn(*inputs)):
        torch.testing.assert_close(got, want)
    assert compiled.source.count("= tj_log<float>(") == 1, compiled.source


def test_cpu_convolutions_run_channels_last():
    """oneDNN runs NHWC convolutions natively (an NCHW depthwise convolution reorders its input
    every call): the C++ path gives every convolution channels-last operands, and the kernels
    between them store channels-last; the output keeps eager's layout."""
    def fn(x, w1, w2, scale):
        y = torch.nn.functional.conv2d(x, w1, padding=1)
        y = torch.nn.functional.hardswish(y * scale.view(1, -1, 1, 1))
        return torch.nn.functional.conv2d(y, w2, padding=1, groups=8).mean((2, 3))

    inputs = torch.randn(1, 3, 12, 12), torch.randn(8, 3, 3, 3), torch.randn(8, 1, 3, 3), torch.randn(8)
    program = _compiled(fn, *inputs)
    buffers = {b.name: b for b in program.buffers}
    convolutions = [s for s in program.steps if isinstance(s, ir.Extern) and s.target == torch.ops.aten.convolution.default]
    assert len(convolutions) == 2
    for step in convolutions:
        image = buffers[step.args[0].name]
        assert image.strides[1] == 1, (image, program)  # channels innermost


def test_cpu_graphs_without_grouped_convolutions_keep_eager_layout():
    """Dense convolutions are not faster NHWC on the CPU (ResNet-18: 9.5 ms against 8.8 NCHW)."""
    def fn(x, w):
        return torch.nn.functional.conv2d(x, w, padding=1).relu()

    program = _compiled(fn, torch.randn(1, 3, 12, 12), torch.randn(8, 3, 3, 3))
    buffers = {b.name: b for b in program.buffers}
    [convolution] = [s for s in program.steps if isinstance(s, ir.Extern)]
    assert buffers[convolution.args[0].name].strides == (432, 144, 12, 1)


def _sin_mul(x, w):
    return (x.sin() * w).cos()


def test_inputs_proven_by_guards_are_not_checked_again():
    """capture's exact tensor guards prove an input's layout before every call: the wrapper tests
    only the inputs no guard proves (here `w`), and only where the proven layout is the traced one."""
    from tensorjit.capture.guards import GUARDED_INPUTS
    x, w = torch.randn(4, 8), torch.randn(4, 8)
    gm = make_fx(_sin_mul, decomposition_table=decompositions())(x, w)
    gm.meta[GUARDED_INPUTS] = ((x.shape, x.stride(), x.dtype, x.device), None)
    compiled = compile_aten_graph(gm, [x, w])
    first = compiled.wrapper_source.splitlines()[1]
    assert "in1.stride()" in first and "in0" not in first
    torch.testing.assert_close(compiled(x, w), _sin_mul(x, w))
    wide = torch.randn(8, 4).t()  # w unproven: another layout still falls back, correctly
    torch.testing.assert_close(compiled(x, wide), _sin_mul(x, wide))

    gm = make_fx(_sin_mul, decomposition_table=decompositions())(x, w)
    gm.meta[GUARDED_INPUTS] = ((x.shape, (1, 4), x.dtype, x.device), None)  # not the traced strides
    assert "in0.stride()" in compile_aten_graph(gm, [x, w]).wrapper_source.splitlines()[1]


def test_a_compiled_function_with_new_layouts_recompiles_rather_than_trusting_the_wrapper():
    import tensorjit
    compiled = tensorjit.compile(_sin_mul)
    x, w = torch.randn(4, 8), torch.randn(4, 8)
    for _ in range(2):
        torch.testing.assert_close(compiled(x, w), _sin_mul(x, w))
    for other in (torch.randn(8, 4).t(), torch.randn(4, 8, dtype=torch.float64), torch.randn(4, 16)[:, ::2]):
        for _ in range(2):
            torch.testing.assert_close(compiled(other, w.to(other.dtype)), _sin_mul(other, w.to(other.dtype)))


def test_filtered_guards_keep_the_wrapper_check():
    """A guard_filter_fn that drops tensor guards leaves the wrapper's own check in place: the
    entry then runs for inputs of other layouts, and the wrapper falls back for them."""
    import tensorjit
    compiled = tensorjit.compile(_sin_mul, options={"guard_filter_fn": lambda entries: [
        entry.guard_type != "TENSOR_MATCH" for entry in entries]})
    x, w = torch.randn(4, 8), torch.randn(4, 8)
    compiled(x, w)
    other = torch.randn(8, 4).t()
    torch.testing.assert_close(compiled(other, w), _sin_mul(other, w))


def test_generated_wrappers_call_the_launch_itself():
    """A kernel launch in the wrapper is `launchN.launch(...)`: no `KernelLauncher.__call__` frame
    between the wrapper and the generated fast launch (hundreds of launches a step)."""
    import re

    from two_emitters import compile_with, on_device

    [x] = on_device("triton", (torch.randn(16, 24),))
    compiled = compile_with("triton", lambda x: ((x * 0.5).exp().sum(1), x.sin()), x)
    launches = re.findall(r"\b(launch\d+)(\.launch)?\(", compiled.wrapper_source)
    assert launches and all(direct for _, direct in launches), compiled.wrapper_source
    for got, want in zip(compiled(x), ((x * 0.5).exp().sum(1), x.sin())):
        torch.testing.assert_close(got, want)


def test_launches_count_kernels_and_aten_calls_but_not_views():
    """A linear layer's program is a view of the weight (the transpose) and one product: one launch
    (runtime.cudagraphs records graphs of two launches or more)."""
    from tensorjit.codegen.memory import launches

    x, w, b = torch.randn(4, 8), torch.randn(6, 8), torch.randn(6)
    linear = _compiled(lambda x, w, b: torch.nn.functional.linear(x, w, b), x, w, b)
    assert len(linear.steps) == 2 and launches(linear) == 1
    assert launches(_compiled(lambda x, w, b: torch.nn.functional.linear(x, w, b).relu() * 2, x, w, b)) == 2
