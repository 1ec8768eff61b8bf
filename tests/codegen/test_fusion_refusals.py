"""Where the scheduler does not fuse two kernels it says which two and why (TENSORJIT_LOGS=fusion)."""

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from tensorjit import logs
from tensorjit.codegen.decomp import decompositions
from tensorjit.codegen.graph import GraphLowering
from tensorjit.codegen.schedule import FusionRefusal, fuse_loops


def refusals_of(fn, *inputs):
    gm = make_fx(fn, decomposition_table=decompositions())(*inputs)
    refusals = []
    fuse_loops(GraphLowering(gm, list(inputs)).run(), refusals)
    return refusals


def test_a_read_of_another_row_is_refused_with_the_buffer_and_index():
    refusals = refusals_of(lambda x: (lambda y: y + y.t())(x.softmax(-1)), torch.randn(8, 8))
    assert refusals == [FusionRefusal("kernel2", "kernel3", "it reads buf3 at i1, outside the current row")]


def test_an_aten_call_after_a_group_is_refused():
    refusals = refusals_of(lambda x: (x.softmax(-1) @ x).sum(-1), torch.randn(8, 8))
    assert [(r.first, r.second) for r in refusals] == [("kernel3", "extern4")]
    assert "ATen call" in refusals[0].reason


def test_an_output_in_permuted_strides_joins_where_it_stores():
    """(It was refused while group members had to store row-major; test_batch_norm_fusion
    checks the values and strides.)"""
    assert refusals_of(lambda x: x.softmax(-1).t() * 2, torch.randn(8, 8)) == []


def test_refusals_print_through_the_fusion_log(capsys):
    logs.set_logs("fusion")
    try:
        refusals_of(lambda x: (lambda y: y + y.t())(x.softmax(-1)), torch.randn(8, 8))
    finally:
        logs.set_logs("")
    assert "[tensorjit fusion] not fusing kernel3 after kernel2: it reads buf3 at i1" in capsys.readouterr().err
    assert any("not fusing kernel3 after kernel2" in text for text in logs.recent("fusion"))


def test_fused_graphs_have_no_refusals():
    assert refusals_of(lambda x: torch.softmax(x, -1) * 2, torch.randn(4, 16)) == []
