"""The IR verifier accepts what lowering produces and names the rule a broken program breaks."""

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from tensorjit.codegen import ir
from tensorjit.codegen.decomp import decompositions
from tensorjit.codegen.graph import GraphLowering
from tensorjit.codegen.schedule import fuse_loops
from tensorjit.codegen.verify import IRError, verify

i0, i1 = ir.IndexVar("i0"), ir.IndexVar("i1")
IN = ir.Buffer("in0", "float32", (4,), (1,), "input")
OUT = ir.Buffer("buf1", "float32", (4,), (1,))


def pointwise(output, body, name="kernel0"):
    return ir.Pointwise(name, output, (4,), body, (i0,))


def program(steps, buffers=(IN, OUT), outputs=("buf1",)):
    return ir.Program(tuple(buffers), tuple(steps), ("in0",), outputs)


def test_lowered_and_fused_programs_pass():
    gm = make_fx(lambda x: (x.softmax(-1), x.var(-1)), decomposition_table=decompositions())(torch.randn(3, 8))
    program = GraphLowering(gm, [torch.randn(3, 8)]).run()
    verify(program)
    verify(fuse_loops(program))


def test_a_read_before_the_write_is_refused():
    load = ir.Load("buf1", i0, "float32")
    with pytest.raises(IRError, match="reads buf1 before it is written"):
        verify(program([pointwise("buf1", load)]))


def test_a_variable_of_another_loop_is_refused():
    with pytest.raises(IRError, match=r"uses \['i1'\]"):
        verify(program([pointwise("buf1", ir.Load("in0", i1, "float32"))]))


def test_unknown_dtypes_and_undeclared_outputs_are_refused():
    with pytest.raises(IRError, match="dtype 'complex64'"):
        verify(program([pointwise("buf1", ir.Constant(1.0, "complex64"))]))
    with pytest.raises(IRError, match="undeclared buffer buf9"):
        verify(program([pointwise("buf9", ir.Load("in0", i0, "float32"))], outputs=()))


def test_row_local_buffers_stay_inside_their_group():
    member = ir.Reduction("kernel0", "buf1", (4,), (4,), "sum", ir.Load("in0", i0, "float32"), (i0,),
                          (ir.IndexVar("r0"),), "float32")
    group = ir.LoopGroup("group0", (4,), (i0,), (member,), local=("buf1",))
    with pytest.raises(IRError, match="returns buf1, row-local to group0"):
        verify(program([group]))
    later = pointwise("buf2", ir.Load("buf1", i0, "float32"), "kernel1")
    with pytest.raises(IRError, match="reads buf1, row-local to group0"):
        verify(program([group, later], buffers=(IN, OUT, ir.Buffer("buf2", "float32", (4,), (1,))),
                       outputs=("buf2",)))


def test_a_load_outside_its_buffer_is_refused():
    # in0 holds 4 elements; i0 + 1 reaches offset 4 on the last iteration
    body = ir.Load("in0", ir.index_add(i0, ir.IndexConst(1)), "float32")
    with pytest.raises(IRError, match=r"reaches offsets 1\.\.4, outside the buffer's 0\.\.3"):
        verify(program([pointwise("buf1", body)]))


def test_a_load_discarded_by_a_select_must_still_be_in_bounds():
    # cat's pieces are all loaded and one selected: the first piece (4 of 12 rows) used to be
    # read at rows 4..11 too, out of its buffer (an illegal memory access on the GPU)
    pieces = [torch.randn(4, 8), torch.randn(3, 8), torch.randn(5, 8)]
    gm = make_fx(lambda a, b, c: torch.cat([a, b, c]) * 2, decomposition_table=decompositions())(*pieces)
    program = GraphLowering(gm, pieces).run()
    verify(program)
    verify(fuse_loops(program))


def test_indirect_indices_need_an_integer_value_of_this_kernel():
    float_index = ir.IndirectIndex(ir.Load("in0", i0, "float32"), 4)
    with pytest.raises(IRError, match="needs an integer value"):
        verify(program([pointwise("buf1", ir.Load("in0", float_index, "float32"))]))
    stray = ir.IndirectIndex(ir.Load("idx", i1, "int64"), 4)
    index_buffer = ir.Buffer("idx", "int64", (4,), (1,), "input")
    with pytest.raises(IRError, match=r"uses \['i1'\]"):
        verify(ir.Program((IN, index_buffer, OUT), (pointwise("buf1", ir.Load("in0", stray, "float32")),),
                          ("in0", "idx"), ("buf1",)))


def test_a_scatter_base_is_read_by_nothing_after_the_scatter():
    base, result, later = OUT, ir.Buffer("buf2", "float32", (4,), (1,)), ir.Buffer("buf3", "float32", (4,), (1,))
    fill = pointwise("buf1", ir.Constant(0.0, "float32"))
    scatter = ir.Pointwise("kernel1", "buf2", (4,), ir.Load("in0", i0, "float32"), (i0,),
                           ir.Scatter("buf1", ir.IndirectIndex(ir.Load("idx", i0, "int64"), 4), accumulate=True))
    index_buffer = ir.Buffer("idx", "int64", (4,), (1,), "input")
    buffers = (IN, index_buffer, base, result, later)
    verify(ir.Program(buffers, (fill, scatter), ("in0", "idx"), ("buf2",)))
    assert "buf2[indirect(load(idx, i0), 4)] += load(in0, i0)  (in place of buf1)" in str(scatter)
    stale = pointwise("buf3", ir.Load("buf1", i0, "float32"), "kernel2")
    with pytest.raises(IRError, match="reads buf1, which kernel1 updated in place"):
        verify(ir.Program(buffers, (fill, scatter, stale), ("in0", "idx"), ("buf3",)))
    with pytest.raises(IRError, match="scatters into in0, which is not a temporary"):
        into_input = ir.Pointwise("kernel1", "buf2", (4,), ir.Constant(1.0, "float32"), (i0,), ir.Scatter("in0", i0))
        verify(ir.Program(buffers, (into_input,), ("in0", "idx"), ("buf2",)))
