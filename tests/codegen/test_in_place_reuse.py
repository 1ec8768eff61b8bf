"""A kernel writes its output over a tensor it reads for the last time, only where it reads
that tensor at the very element it writes (memory.reuses with in_place, both emitters), and a
dead tensor is held for a later output only where that raises no peak of the plan."""

import pytest
import torch

from tensorjit.codegen import ir, memory
from two_emitters import EMITTERS, compile_with, on_device

I, J, R = ir.IndexVar("i0"), ir.IndexVar("i1"), ir.IndexVar("r0")
MM = torch.ops.aten.mm.default


def buffer(name, kind="temp", shape=(8, 8)):
    return ir.Buffer(name, "float32", shape, (shape[1], 1), kind)


def at(row, column):
    return ir.strided_index((row, column), (8, 1))


def load(name, index):
    return ir.Load(name, index, "float32")


def twice(value):
    return ir.Op("mul", (value, ir.Constant(2.0, "float32")), "float32")


def pointwise(output, body, name="kernel1"):
    return ir.Pointwise(name, output, (8, 8), body, (I, J))


def after_product(*steps, buffers=(), outputs=("buf2",)):
    """in0 @ in1 -> buf1 (an ATen result), then `steps` (writing buf2, ...)."""
    product = ir.Extern("extern0", MM, (ir.BufferRef("in0"), ir.BufferRef("in1")), (), "buf1")
    declared = (buffer("in0", "input"), buffer("in1", "input"), buffer("buf1", "extern"), buffer("buf2"), *buffers)
    return ir.Program(declared, (product, *steps), ("in0", "in1"), outputs)


def test_a_kernel_reading_a_dying_tensor_at_its_own_element_writes_over_it():
    program = after_product(pointwise("buf2", twice(load("buf1", at(I, J)))))
    assert memory.in_place_pairs(program) == {"buf2": "buf1"}
    # the product and the kernel's output were alive at once; now one 8x8 float32 tensor
    assert memory.planned_peak_bytes(program, in_place=True) == 256
    assert memory.planned_peak_bytes(program) == 512


@pytest.mark.parametrize("index", [
    at(J, I),                                                    # a transpose
    ir.index_add(at(I, J), ir.IndexConst(1)),                    # a shifted element
    at(I, ir.IndexConst(0)),                                     # a broadcast of one column
], ids=["transpose", "shifted", "broadcast"])
def test_a_read_of_another_element_keeps_the_tensor(index):
    program = after_product(pointwise("buf2", ir.Op("add", (load("buf1", at(I, J)), load("buf1", index)), "float32")))
    assert memory.in_place_pairs(program) == {}
    only_there = after_product(pointwise("buf2", twice(load("buf1", index))))
    assert memory.in_place_pairs(only_there) == {}


def test_a_concatenation_of_the_tensor_with_itself_keeps_it():
    # out[:, :4] = buf1[:, 4:], out[:, 4:] = buf1[:, :4]: each half read at the other half's element
    first = ir.Op("lt", (ir.IndexValue(J, "int64"), ir.Constant(4, "int64")), "bool")
    body = ir.Op("where", (first, load("buf1", at(I, ir.index_add(J, ir.IndexConst(4)))),
                           load("buf1", at(I, ir.index_add(J, ir.IndexConst(-4))))), "float32")
    assert memory.in_place_pairs(after_product(pointwise("buf2", body))) == {}


def normalised_rows(reduction_reads: str) -> ir.LoopGroup:
    """A row group: a sum over row i0 of `reduction_reads`, then buf2 = buf1 / that sum."""
    total = ir.Reduction("kernel1", "buf3", (8,), (8,), "sum", load(reduction_reads, at(I, R)), (I,), (R,), "float32")
    divided = ir.Pointwise("kernel2", "buf2", (8, 8), ir.Op("truediv", (load("buf1", at(I, J)), load("buf3", I)),
                                                              "float32"), (I, J))
    return ir.LoopGroup("group1", (8,), (I,), (total, divided), local=("buf3",))


def test_a_group_member_writes_over_what_only_it_reads_at_its_own_element():
    program = after_product(normalised_rows("in0"), buffers=(ir.Buffer("buf3", "float32", (8,), (1,)),))
    assert memory.in_place_pairs(program) == {"buf2": "buf1"}


def test_a_row_reduction_reading_the_tensor_before_the_pass_that_writes_keeps_it():
    # softmax-like: the reduction member reads all of the row, then the second pass writes
    program = after_product(normalised_rows("buf1"), buffers=(ir.Buffer("buf3", "float32", (8,), (1,)),))
    assert memory.in_place_pairs(program) == {}


def test_a_group_where_another_member_reads_the_tensor_keeps_it():
    first = pointwise("buf2", twice(load("buf1", at(I, J))), "kernel1")
    second = pointwise("buf3", ir.Op("neg", (load("buf1", at(I, J)),), "float32"), "kernel2")
    group = ir.LoopGroup("group1", (8, 8), (I, J), (first, second))
    program = after_product(group, buffers=(buffer("buf3"),), outputs=("buf2", "buf3"))
    assert memory.in_place_pairs(program) == {}


def test_a_tensor_another_member_of_the_group_writes_is_not_written_over():
    # buf3 = buf1 * 2 by one member, buf2 = -buf3 by the next, at the same element; buf3 dies in
    # the group. It is allocated for this launch: taking it over named a tensor the wrapper had
    # just dropped (the kernel's arguments still held it), and gave the kernel two pointers to it.
    first = pointwise("buf3", twice(load("buf1", at(I, J))), "kernel1")
    second = pointwise("buf2", ir.Op("neg", (load("buf3", at(I, J)),), "float32"), "kernel2")
    group = ir.LoopGroup("group1", (8, 8), (I, J), (first, second))
    program = after_product(group, buffers=(buffer("buf3"),), outputs=("buf2",))
    assert "buf3" not in memory.reuses(program, in_place=True).values()


def norm_of_a_row(x):
    # forward graph: one row group writes x / norm (saved) and then, at the same element,
    # where(norm == 0, 0, that): the second was planned over the first
    return (x + x).sin().select(0, -3).norm(dim=1).exp()


def std_of_a_broadcast_maximum(x):
    # the backward graph groups a division by the (zero) deviation with its use
    v1 = x / (x.abs() + 1)
    return v1.repeat((1, 1, 3)), v1.sin()[1:6].amax((0, 1)).expand(2, 3).std(0)


@pytest.mark.parametrize("emitter", EMITTERS)
@pytest.mark.parametrize("fn, shape", [(norm_of_a_row, (13, 9, 4)), (std_of_a_broadcast_maximum, (9, 6))])
def test_training_graphs_with_a_group_made_tensor_dying_in_the_group_equal_eager(emitter, fn, shape):
    import tensorjit
    from tensorjit.autograd import aot_compile
    from tensorjit.codegen.decomp import decompositions

    base = on_device(emitter, (torch.randn(*shape, dtype=torch.float64, generator=torch.Generator().manual_seed(0)),))
    x = base[0].permute(*reversed(range(len(shape)))).detach().requires_grad_()
    backend = None
    if emitter == "triton":
        from tensorjit.codegen.triton import compile as triton_compile
        backend = lambda gm, inputs: aot_compile(gm, inputs, fw_compiler=triton_compile.compile_graph,  # noqa: E731
                                                 decompositions=decompositions())
    compiled = tensorjit.compile(fn, **({} if backend is None else {"backend": backend}))
    got, want = compiled(x), fn(x)
    torch.testing.assert_close(got, want)
    generator = torch.Generator().manual_seed(1)
    cotangents = [torch.randn(w.shape, dtype=w.dtype, generator=generator).to(w.device)
                  for w in (want if isinstance(want, tuple) else (want,))]
    torch.testing.assert_close(torch.autograd.grad(got, x, cotangents), torch.autograd.grad(want, x, cotangents),
                               equal_nan=True)


def test_inputs_returned_tensors_and_viewed_tensors_are_never_written_over():
    kernel = pointwise("buf2", twice(load("buf1", at(I, J))))
    returned = after_product(kernel, outputs=("buf2", "buf1"))
    assert memory.in_place_pairs(returned) == {}
    from_input = after_product(pointwise("buf2", twice(load("in0", at(I, J)))))
    assert memory.in_place_pairs(from_input) == {}
    # a view of buf1 read after the kernel keeps buf1's memory alive
    view = ir.Extern("extern2", torch.ops.aten.alias.default, (ir.BufferRef("buf1"),), (), "buf3")
    later = pointwise("buf4", twice(load("buf3", at(I, J))), "kernel3")
    viewed = after_product(view, kernel, later, buffers=(buffer("buf3", "extern"), buffer("buf4")),
                           outputs=("buf2", "buf4"))
    assert memory.in_place_pairs(viewed) == {}


def test_an_aten_result_is_dropped_after_its_last_reader():
    kernel = pointwise("buf2", twice(load("buf1", at(J, I))))  # transposed: not in place
    later = pointwise("buf3", twice(load("buf2", at(I, J))), "kernel2")
    program = after_product(kernel, later, buffers=(buffer("buf3"),), outputs=("buf3",))
    assert memory.last_uses(program) == [[], ["buf1"], ["buf2"]]


def test_a_dead_tensor_is_not_held_across_an_allocation_it_would_have_served():
    """buf1 dies at the first product; handed to the last kernel's output it would be held
    through the second product's result, raising the peak from two tensors to three."""
    first = pointwise("buf1", twice(load("in0", at(I, J))), "kernel0")
    product = ir.Extern("extern1", MM, (ir.BufferRef("buf1"), ir.BufferRef("in1")), (), "buf2")
    second = ir.Extern("extern2", MM, (ir.BufferRef("buf2"), ir.BufferRef("in1")), (), "buf3")
    last = pointwise("buf4", twice(load("buf3", at(J, I))), "kernel3")  # transposed: not in place
    buffers = (buffer("in0", "input"), buffer("in1", "input"), buffer("buf1"), buffer("buf2", "extern"),
               buffer("buf3", "extern"), buffer("buf4"))
    held = ir.Program(buffers, (first, product, second, last), ("in0", "in1"), ("buf4",))
    assert memory.reuses(held, in_place=True) == {"buf4": "buf2"}  # dead just before, not buf1
    assert memory.planned_peak_bytes(held, in_place=True) == 512
    # with nothing allocated in between, the dead tensor is handed over
    direct = ir.Program(buffers[:4] + buffers[5:], (first, product, pointwise("buf4", twice(load("buf2", at(J, I))),
                                                                             "kernel3")), ("in0", "in1"), ("buf4",))
    assert memory.reuses(direct, in_place=True) == {"buf4": "buf1"}


def scaled_product(x, w, scale):
    b = x @ w                                 # an ATen result read by one kernel, at each element
    return (b * scale + 1).relu(), (x.t() @ w).t() * 2


def normalised_product(x, w):
    b = x @ w                                 # read at each element by a row group's second member
    return (b * torch.rsqrt(x.pow(2).mean(1, keepdim=True) + 1e-5)).relu()


def softmax_of_product(x, w):
    return torch.softmax(x @ w, 1)            # read by the row's maximum before the pass writing


def normalised_long_rows(x, w, y):
    # rows of 20000: the Triton group loops over each row in blocks, a loop per member
    return (x @ w) * torch.rsqrt(y.pow(2).mean(1, keepdim=True) + 1e-5)


INPUTS = {scaled_product: lambda: (torch.randn(24, 24), torch.randn(24, 24), torch.randn(24)),
          normalised_product: lambda: (torch.randn(24, 24), torch.randn(24, 24)),
          softmax_of_product: lambda: (torch.randn(24, 24), torch.randn(24, 24)),
          normalised_long_rows: lambda: (torch.randn(2, 8), torch.randn(8, 20000), torch.randn(2, 20000))}


@pytest.mark.parametrize("emitter", EMITTERS)
@pytest.mark.parametrize("fn, expected", [(scaled_product, 1), (normalised_product, 1), (softmax_of_product, 0),
                                          (normalised_long_rows, 1)])
def test_compiled_kernels_writing_in_place_equal_eager(emitter, fn, expected):
    """The kernel takes over the product's tensor and reads it through its output's pointer
    (the donor is no argument of the C++ or Triton kernel); the values are eager's."""
    inputs = on_device(emitter, INPUTS[fn]())
    compiled = compile_with(emitter, fn, *inputs)
    pairs = memory.in_place_pairs(compiled.program)
    assert len(pairs) == expected, compiled.program
    for receiver, donor in pairs.items():
        assert f"{receiver} = {donor}; del {donor}" in compiled.wrapper_source
        kernel = next(s for s in compiled.program.steps if receiver in memory.names_written(s))
        if emitter == "triton":
            from tensorjit.codegen.triton.kernels import is_persistent
            assert fn is not normalised_long_rows or not is_persistent(kernel)
            arguments = compiled.hook.kernels[kernel.name].arguments
        else:
            arguments = compiled.hook.orders[kernel.name]
        assert donor not in arguments and receiver in arguments, arguments
    for _ in range(2):  # a second call: nothing of the first call's tensors is read again
        got, want = compiled(*inputs), fn(*inputs)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
