"""Kernels that read views starting past their base's first element (regressions for wrong answers).

make_fx in its default ("real") tracing mode records every value as a fresh
`empty_strided`, so `meta["val"].storage_offset()` is 0 even for `x[1:]`; the
old Triton lowering took view offsets from there and read `x[1:]` from
x[0] (glu, gradient, trapezoid, linalg.cond's `s[..., -1]`). Every case runs
in both tracing modes.
"""

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from tensorjit.codegen.triton import compile_aten_graph, decompositions

MODES = ["real", "fake"]


def compile_and_compare(function, arguments, mode):
    graph = make_fx(function, decomposition_table=decompositions(), tracing_mode=mode)(*arguments)
    compiled = compile_aten_graph(graph, arguments)
    assert getattr(compiled, "kernel_sources", None), "expected the graph to be compiled, not run eagerly"
    torch.testing.assert_close(compiled(*arguments), function(*arguments), rtol=1e-6, atol=1e-6)
    return graph


@pytest.mark.parametrize("mode", MODES)
def test_glu_reads_the_second_half_from_its_start(mode, device):
    compile_and_compare(lambda x: (F.glu(x, -1),), [torch.randn(3, 8, device=device)], mode)


@pytest.mark.parametrize("mode", MODES)
def test_differences_of_shifted_slices(mode, device):
    def function(x):
        return (x[1:] - x[:-1], x[:, 2:5] * x[:, -3:], x[-2])

    compile_and_compare(function, [torch.randn(6, 7, device=device)], mode)


@pytest.mark.parametrize("mode", MODES)
def test_select_with_a_negative_index_into_a_reduction(mode, device):
    def function(x):
        largest = x.amax(-1)
        return (largest[..., 0] / largest[..., -1],)

    compile_and_compare(function, [torch.rand(2, 5, 4, device=device) + 0.5], mode)


@pytest.mark.parametrize("mode", MODES)
def test_view_offsets_sum_along_a_chain(mode, device):
    def function(x):
        return (x[2:][:, 1:].select(0, 1) + 1,)

    compile_and_compare(function, [torch.randn(5, 6, device=device)], mode)


@pytest.mark.parametrize("mode", MODES)
def test_as_strided_with_a_storage_offset_is_not_folded(mode, device):
    def function(x):
        return (torch.as_strided(x, (2, 3), (4, 1), 5) * 2,)

    compile_and_compare(function, [torch.randn(4, 4, device=device)], mode)
