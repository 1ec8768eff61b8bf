"""Reads at positions held in index tensors (embedding, gather, index_select, x[idx]) as
kernels, on both emitters, against eager: values, fusion with producers and consumers,
negative indices, and out-of-range indices, which must never be read.
"""

import pytest
import torch
import torch.nn.functional as F

from tensorjit.codegen import ir
from two_emitters import EMITTERS, check, compile_with, steps


@pytest.mark.parametrize("emitter", EMITTERS)
def test_embedding_fuses_with_its_consumer(emitter):
    weight, ids = torch.randn(50, 16), torch.tensor([[1, 49, 0, 7], [3, 3, 2, 49]])
    compiled = check(emitter, lambda w, ids: F.embedding(ids, w) * 2 + 1, weight, ids)
    assert steps(compiled) == ["Pointwise"]
    load = str(compiled.program.steps[0].body)
    assert "indirect(load(in1" in load, load


@pytest.mark.parametrize("emitter", EMITTERS)
def test_embedding_then_rms_norm(emitter):
    weight, ids, gain = torch.randn(50, 16), torch.randint(0, 50, (2, 5)), torch.randn(16)

    def fn(w, ids, gain):
        h = F.embedding(ids, w)
        return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * gain
    check(emitter, fn, weight, ids, gain)


@pytest.mark.parametrize("emitter", EMITTERS)
@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_gather_along_each_dim(emitter, dim):
    x = torch.randn(4, 5, 6)
    size = x.shape[dim]
    index = torch.randint(0, size, (3, 4, 5))
    compiled = check(emitter, lambda x, i: torch.gather(x.exp(), dim, i) - 1, x, index)
    assert steps(compiled) == ["Pointwise"]


@pytest.mark.parametrize("emitter", EMITTERS)
def test_index_select_and_a_0d_index(emitter):
    x = torch.randn(6, 7)
    index = torch.tensor([5, 0, 0, 3])
    check(emitter, lambda x, i: (torch.index_select(x, 0, i), torch.index_select(x, 1, i) * 3), x, index)
    check(emitter, lambda x, i: torch.index_select(x, 1, i) + 1, x, torch.tensor(6))


@pytest.mark.parametrize("emitter", EMITTERS)
def test_index_with_one_and_several_tensors(emitter):
    x = torch.randn(5, 6, 7)
    a, b = torch.tensor([4, 0, 2]), torch.tensor([1, 5, 5])
    check(emitter, lambda x, a, b: (x[a], x[a, b], x[:, a, b], x[a, :, b],
                                    x[a[:, None], b[None, :]]), x, a, b)


@pytest.mark.parametrize("emitter", EMITTERS)
def test_index_broadcasts_index_tensors(emitter):
    x = torch.randn(5, 6, 7)
    rows, columns = torch.tensor([[0], [4], [2]]), torch.tensor([[1, 6, 3, 0]])
    compiled = check(emitter, lambda x, r, c: x[:, r, c] * 2, x, rows, columns)
    assert steps(compiled) == ["Pointwise"]
    check(emitter, lambda x, r, c: x[r, :, c], x, rows, columns)  # separated: broadcast dims first


@pytest.mark.parametrize("emitter", EMITTERS)
def test_negative_indices_count_from_the_end(emitter):
    x = torch.randn(5, 6)
    index = torch.tensor([-1, -5, 0, 4, -3])
    compiled = check(emitter, lambda x, i: (x[i] * 2, x[:, i - 1]), x, index)
    assert "wrap" in str(compiled.program)


OUT_OF_RANGE = {
    "index": (lambda x, i: x[i] * 2, [torch.tensor([0, 6]), torch.tensor([-7, 1])]),
    "embedding": (lambda x, i: F.embedding(i, x) + 1, [torch.tensor([0, 6]), torch.tensor([-1, 1])]),
    "index_select": (lambda x, i: torch.index_select(x, 0, i) + 1, [torch.tensor([0, 6]), torch.tensor([-1, 1])]),
}


@pytest.mark.parametrize("name", sorted(OUT_OF_RANGE))
def test_out_of_range_raises_eagers_error_on_cpu(name):
    # the C++ kernel reads element 0 instead and reports it; the wrapper runs ATen, which raises
    fn, bad_indices = OUT_OF_RANGE[name]
    x = torch.randn(6, 3)
    compiled = compile_with("cpp", fn, x, torch.tensor([0, 1]))
    assert "Extern" not in steps(compiled)
    for index in bad_indices:
        with pytest.raises(IndexError) as expected:
            fn(x, index)
        with pytest.raises(IndexError, match=str(expected.value)):
            compiled(x, index)


def test_out_of_range_gather_raises_on_cpu():
    x = torch.randn(4, 5)
    compiled = compile_with("cpp", lambda x, i: torch.gather(x, 1, i) * 2, x, torch.tensor([[0], [4], [1], [2]]))
    with pytest.raises(RuntimeError, match="index 5 is out of bounds for dimension 1 with size 5"):
        compiled(x, torch.tensor([[0], [5], [1], [2]]))


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU the assert fires and ends the CUDA context")
def test_triton_kernels_assert_indices_on_the_device():
    # Triton's interpreter compiles no device asserts: check the kernel text, and that an
    # out-of-range index reads element 0 rather than outside the tensor.
    x = torch.randn(6, 3)
    compiled = compile_with("triton", lambda x, i: F.embedding(i, x) + 1, x, torch.tensor([0, 1]))
    [source] = compiled.kernel_sources
    assert "@triton.jit(debug=True)" in source
    assert 'tl.device_assert(' in source and "index out of bounds: 0 <= index < 6" in source
    torch.testing.assert_close(compiled(x, torch.tensor([1, 600])), x[[1, 0]] + 1)


@pytest.mark.parametrize("emitter", EMITTERS)
def test_gather_in_a_row_group(emitter):
    # the gathered row feeds a softmax: the gather is inlined into the group's members
    x, index = torch.randn(4, 9), torch.randint(0, 9, (4, 12))
    compiled = check(emitter, lambda x, i: torch.softmax(torch.gather(x, 1, i), -1), x, index)
    assert steps(compiled) == ["LoopGroup"]


def test_indirect_index_prints_and_verifies():
    value = ir.Load("idx", ir.IndexVar("i0"), "int64")
    node = ir.IndirectIndex(value, 10, wrap=True)
    assert str(ir.Load("x", ir.index_add(ir.index_mul(node, ir.IndexConst(4)), ir.IndexVar("i1")), "float32")) == \
        "load(x, ((indirect(load(idx, i0), 10, wrap) * 4) + i1))"
    assert ir.variables_of(node) == {"i0"}


@pytest.mark.parametrize("emitter", EMITTERS)
def test_constant_pad_is_a_masked_load(emitter):
    x = torch.randn(3, 4, 5)
    compiled = check(emitter, lambda x: F.pad(x.exp(), (2, 1, 0, 3), value=-1.5) * 2, x)
    assert steps(compiled) == ["Pointwise"]
    check(emitter, lambda x: (F.pad(x, (-1, 2, 1, -2, 1, 1)), F.pad(x, (7, 0)), F.pad(x, (0, 0, -1, -1))), x)
    n = torch.arange(12).reshape(3, 4)
    check(emitter, lambda n: F.pad(n, (1, 1, 2, 0), value=7) + 1, n)


@pytest.mark.parametrize("emitter", EMITTERS)
def test_pads_and_upsampling_that_decompose_into_index_reads_are_one_kernel(emitter):
    x = torch.randn(1, 2, 5, 6)
    for fn in (lambda x: F.pad(x, (1, 2, 2, 1), mode="reflect") * 2,
               lambda x: F.pad(x, (1, 2, 2, 1), mode="replicate") + 1,
               lambda x: F.interpolate(x, scale_factor=2, mode="nearest").relu()):
        compiled = check(emitter, fn, x)
        assert steps(compiled) == ["Pointwise"]


@pytest.mark.parametrize("emitter", EMITTERS)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_scatter_add_and_scatter_along_each_dim(emitter, dim):
    x, source = torch.randn(4, 5), torch.randn(4, 5)
    index = torch.randint(0, x.shape[dim], (3, 4))  # repeats: adds accumulate; one scattered value
    compiled = check(emitter, lambda x, i, s: (torch.scatter_add(x.exp(), dim, i, s * 2) + 1,
                                               torch.scatter(x, dim, i, -3.0)), x, index, source)
    assert "Extern" not in steps(compiled)
    # without repeats, scatter of a tensor is defined: each column (dim 0) or row holds distinct indices
    if dim == 0:
        unique = torch.stack([torch.randperm(4)[:3] for _ in range(4)], 1)
    else:
        unique = torch.stack([torch.randperm(5)[:3] for _ in range(4)], 0)
    check(emitter, lambda x, i, s: torch.scatter(x, dim, i, s), x, unique, source)


@pytest.mark.parametrize("emitter", EMITTERS)
def test_index_put_accumulates_repeated_and_negative_indices(emitter):
    x, values = torch.randn(6, 3), torch.randn(5, 3)
    index = torch.tensor([1, -1, 1, 5, 0])
    compiled = check(emitter, lambda x, i, v: torch.index_put(x * 2, (i,), v.exp(), accumulate=True), x, index, values)
    assert steps(compiled) == ["Pointwise", "Pointwise"]
    check(emitter, lambda x, i, v: torch.index_put(x, (i.abs(), i.abs() % 3), v[:, 0] + 1), x, torch.tensor([4, 0, 2]),
          values[:3])


@pytest.mark.parametrize("emitter", EMITTERS)
def test_accumulating_one_value_into_every_position_adds_it_everywhere(emitter):
    # unfold's backward of a sum: the scalar gradient, expanded, is index_put at each window's
    # positions; a value of one element must reach every lane (Triton's interpreter wrote only
    # the first and added bytes past the value to the rest)
    grad = torch.tensor(0.3, dtype=torch.float64)
    compiled = check(emitter, lambda g: torch.ops.aten.unfold_backward(g.expand(3, 4, 2, 2), [3, 4, 4], 2, 2, 2),
                     grad, externs=1)  # the window positions: unfold of an arange
    assert steps(compiled).count("Pointwise") >= 2, compiled.program
    x = torch.randn(6, 3)
    check(emitter, lambda x, i, v: torch.index_put(x, (i,), v, accumulate=True), x, torch.tensor([1, 1, 5, 0]),
          torch.tensor(0.7))


@pytest.mark.parametrize("emitter", EMITTERS)
def test_embedding_backward_is_a_scatter_kernel(emitter):
    grad, ids = torch.randn(2, 7, 4), torch.randint(0, 10, (2, 7))
    ids[0, :3] = 3  # repeated rows add up
    compiled = check(emitter, lambda g, ids: torch.ops.aten.embedding_dense_backward(g, ids, 10, 2, False), grad, ids)
    assert "Extern" not in steps(compiled)


def test_out_of_range_scatter_raises_eagers_error_on_cpu():
    x, values = torch.randn(6, 3), torch.randn(2, 3)
    compiled = compile_with("cpp", lambda x, i, v: torch.index_put(x, (i,), v, accumulate=True) * 2, x,
                            torch.tensor([0, 1]), values)
    with pytest.raises(IndexError, match="index 6 is out of bounds for dimension 0 with size 6"):
        compiled(x, torch.tensor([0, 6]), values)


def test_triton_scatter_adds_atomically():
    x, index, values = torch.randn(6, 3), torch.tensor([1, 1, 2]), torch.randn(3, 3)
    compiled = check("triton", lambda x, i, v: torch.index_put(x, (i,), v, accumulate=True), x, index, values)
    assert "tl.atomic_add(" in compiled.kernel_sources[-1]


def test_an_embedding_kernel_still_vectorises_in_cpp():
    # the checks are an OR-reduction into tj_bad: the row loop stays a vector loop
    from tensorjit.codegen.cpp.compiler import vectorisation_report

    compiled = compile_with("cpp", lambda w, ids: F.embedding(ids, w) * 2 + 1, torch.randn(500, 64),
                            torch.randint(0, 500, (4, 32)))
    assert "loop vectorized" in vectorisation_report(compiled.source)


@pytest.mark.parametrize("emitter", EMITTERS)
def test_slice_and_select_scatter_are_piecewise_loads(emitter):
    x = torch.randn(3, 10)
    cases = [
        (lambda x, s: torch.slice_scatter(x * 2, s.exp(), 1, 2, 9, 3) + 1, torch.randn(3, 3)),
        (lambda x, s: torch.slice_scatter(x, s, 1, -8, None, 3), torch.randn(3, 3)),
        (lambda x, s: torch.slice_scatter(x, s, 1, 4, 8), torch.randn(3, 4)),
        (lambda x, s: torch.slice_scatter(x, s, 0, 1), torch.randn(2, 10)),
        (lambda x, s: torch.slice_scatter(x, s, 1, 7, 100, 2), torch.randn(3, 2)),
        (lambda x, s: torch.select_scatter(x, s, 1, -2) * 3, torch.randn(3)),
    ]
    for fn, source in cases:
        compiled = check(emitter, fn, x, source)
        assert steps(compiled) == ["Pointwise"]


@pytest.mark.parametrize("emitter", EMITTERS)
def test_assigning_into_slices_inside_the_graph(emitter):
    # functionalisation (as the backends run it) turns the writes into slice_scatter / select_scatter
    def fn(x, y):
        z = x.clone()
        z[:, 1:4] = y
        z[2] = 0.5
        z[:, ::3] *= 2
        return z
    compiled = check(emitter, torch.func.functionalize(fn), torch.randn(4, 9), torch.randn(4, 3))
    assert steps(compiled) == ["Pointwise"]


@pytest.mark.parametrize("emitter", EMITTERS)
def test_a_returned_slice_of_a_computed_value_keeps_eagers_gaps(emitter):
    # eager returns x.exp()[:, :4] with strides (9, 1): the value is computed into memory and
    # the output is a view of it (a dense copy would not be the same tensor to as_strided)
    x = torch.randn(2, 9)
    fn = lambda x: (x.exp()[:, :4], x.sum(-1, keepdim=True)[:, :, None][1:], x.exp()[:, 2])  # noqa: E731
    compiled = check(emitter, fn, x, externs=2)  # the two views (as_strided of the buffers)
    for actual, expected in zip(compiled(x), fn(x)):
        assert actual.stride() == expected.stride()
