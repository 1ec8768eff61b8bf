"""The shared loop IR with the Triton emitter (codegen/triton/compile.py), against eager.

Without CUDA the kernels run in Triton's interpreter on CPU tensors (conftest.py).
Every compiled program also passes the IR verifier.
"""

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from tensorjit.codegen import ir, ops
from tensorjit.codegen.cpp.emitter import CppOps
from tensorjit.codegen.decomp import decompositions
from tensorjit.codegen.triton import compile as triton_compile, kernels
from tensorjit.codegen.triton.emitter import TritonOps
from tensorjit.codegen.verify import verify
from tensorjit.config import Config


def compile_fn(fn, *inputs, config=None):
    with torch.no_grad():
        gm = make_fx(fn, decomposition_table=decompositions())(*inputs)
    compiled = triton_compile.compile_graph(gm, list(inputs), config)
    verify(compiled.program)
    return compiled


def as_list(result):
    return list(result) if isinstance(result, (tuple, list)) else [result]


def check(fn, *inputs, tolerance=None):
    compiled = compile_fn(fn, *inputs)
    with torch.no_grad():
        expected = as_list(fn(*inputs))
    actual = as_list(compiled(*inputs))
    tolerances = {} if tolerance is None else {"rtol": tolerance, "atol": tolerance}
    torch.testing.assert_close(actual, expected, equal_nan=True, **tolerances)
    return compiled


def kinds(compiled):
    return [type(step).__name__ for step in compiled.program.steps]


@pytest.fixture
def x(device):
    return torch.randn(8, 33, device=device)


def test_pointwise_chain_is_one_kernel(x):
    compiled = check(lambda x: ((x * 2 + 1).exp().tanh() - x.abs()).sigmoid().relu(), x)
    assert kinds(compiled) == ["Pointwise"]


def test_broadcasting_and_scalars(device):
    a, b = torch.randn(8, 1, device=device), torch.randn(1, 16, device=device)
    check(lambda a, b: torch.where(a > b, a * b, a - 3.5).clamp(-1, 1) + torch.maximum(a, b), a, b)


def test_views_are_index_arithmetic(device):
    x = torch.randn(4, 6, 8, device=device)
    compiled = check(lambda x: x.permute(2, 0, 1)[:, 1:3].reshape(8, 12) * 2 + x[:2, :, 3].reshape(12), x)
    assert "Extern" not in kinds(compiled)


def test_strided_inputs(device):
    x = torch.randn(16, 12, device=device).t()
    check(lambda x: (x + 1).exp(), x)


def test_comparisons_and_integers(device):
    x = torch.randint(-5, 5, (6, 7), device=device)
    check(lambda x: ((x * 3 + 1) % 4 == 1, (x > 0) & (x < 3), x.abs() + torch.arange(7, device=x.device)), x)


@pytest.mark.parametrize("reduction", ["sum", "amax", "amin", "mean", "var", "argmax", "argmin", "prod"])
def test_row_reductions(reduction, x):
    fn = getattr(torch, reduction)
    compiled = check(lambda x: fn(x, -1), x, tolerance=1e-5)
    assert "Extern" not in kinds(compiled)


def test_reductions_over_other_dims_and_everything(device):
    x = torch.randn(5, 6, 7, device=device)
    check(lambda x: (x.sum(), x.amax(1), x.mean((0, 2)), x.var(0), x.argmax(0)), x, tolerance=1e-5)


def test_nan_propagates_through_max_and_argmax(device):
    x = torch.randn(4, 9, device=device)
    x[1, 3] = float("nan")
    x[2, 0] = float("nan")
    check(lambda x: (x.amax(-1), x.argmax(-1), x.amin(-1), x.argmin(-1)), x)


def test_softmax_is_one_kernel(x):
    compiled = check(lambda x: torch.softmax(x, -1), x)
    assert kinds(compiled) == ["LoopGroup"]


def test_layer_norm_is_one_kernel(device):
    x, weight, bias = torch.randn(6, 32, device=device), torch.randn(32, device=device), torch.randn(32, device=device)
    compiled = check(lambda x, w, b: F.gelu(F.layer_norm(x, (32,), w, b)) * 2 + x.softmax(-1), x, weight, bias,
                     tolerance=1e-5)
    assert kinds(compiled) == ["LoopGroup"]


def test_long_rows_loop_over_the_row(device):
    x = torch.randn(3, 20000, device=device)
    compiled = check(lambda x: (x.softmax(-1), x.var(-1, keepdim=True), x.argmax(-1)), x, tolerance=1e-5)
    assert not kernels.is_persistent(next(s for s in compiled.program.steps if isinstance(s, ir.LoopGroup)))


def test_rows_reading_other_lanes_go_through_memory(device):
    # The last member reads lanes r and r + 8 of the exp member's row: the second is another
    # lane's value, so the row goes to memory and is read back after a barrier.
    def fn(x):
        y = x.exp()
        return (y[:, :8] + y[:, 8:]) / y.sum(-1, keepdim=True)

    x = torch.randn(4, 16, device=device)
    compiled = check(fn, x)
    assert kinds(compiled) == ["LoopGroup"]
    group = compiled.program.steps[0]
    assert group.local == ("buf2",)  # fuse_loops made buf1 row-local too; prepare_groups keeps it in memory
    assert "tl.debug_barrier()" in compiled.kernel_sources[0]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_floats_compute_in_float32(dtype, device):
    x = torch.randn(8, 64, device=device, dtype=dtype)
    weight = torch.randn(64, device=device, dtype=dtype)
    compiled = check(lambda x, w: (torch.softmax(x, -1) * 3, F.layer_norm(x, (64,), w), x.sum(-1), x * w + 1),
                     x, weight, tolerance=2e-2)
    assert "Extern" not in kinds(compiled)
    assert all(r.dtype == dtype for r in compiled(x, weight))


def test_other_layouts_fall_back_to_the_graph(x):
    compiled = compile_fn(lambda x: x + 1, x)
    y = torch.randn(33, 8, device=x.device).t()
    torch.testing.assert_close(compiled(y), y + 1)


def test_every_op_of_the_protocol_has_both_emitters():
    names = ops.UNARY + ops.BINARY + ops.TERNARY
    for handler in (CppOps("  "), TritonOps(lambda buffer, index: buffer, iter(range(1000)).__iter__())):
        for name in names:
            arity = 1 if name in ops.UNARY else 2 if name in ops.BINARY else 3
            dtypes = ("bool", "float32", "float32")[3 - arity:] if name == "where" else ("float32",) * arity
            assert handler.op(name, tuple(f"a{k}" for k in range(arity)), "float32", dtypes), (type(handler), name)
        for method in ("load", "constant", "index_expr", "to_dtype"):
            assert callable(getattr(handler, method))


def test_inductor_backend_routes_cuda_graphs_through_the_shared_pipeline():
    from tensorjit.backends import inductor
    from tensorjit.codegen import triton

    generator, table = inductor._code_generator("cuda", Config())
    assert generator is triton.compile_aten_graph
    assert table == decompositions()


def test_single_element_loads_and_bool_constants_combine_with_blocks(device):
    # A load at a constant index and a bool constant are [1] blocks, like other constants:
    # Triton's interpreter cannot `|` or `&` a 0-d value or a Python bool with a block.
    x = torch.randn(6, 5, device=device)
    true = torch.ones((), dtype=torch.bool, device=device)
    check(lambda x: (torch.logical_or(x > 0, x[0, 0] > 0.5), torch.logical_and(x, true),
                     torch.arange(5, device=x.device)[2] + x, torch.heaviside(x, x[0:1, 0:1])), x)


def test_gpt2_training_step_matches_eager(device):
    """Forward and backward graphs of a 2-layer GPT-2 (autograd's joint graph, min-cut split)."""
    import copy
    import sys
    from pathlib import Path

    import tensorjit
    from tensorjit.autograd import aot_compile

    sys.path.insert(0, str(Path(__file__).parents[3] / "bench"))
    from gpu_models import GPT2, GPT2Settings

    torch.manual_seed(0)
    model = GPT2(GPT2Settings(vocab_size=100, context=32, layers=2, heads=2, width=64)).to(device)
    reference = copy.deepcopy(model)
    graphs = []

    def compiler(gm, inputs):
        graphs.append(triton_compile.compile_graph(gm, inputs))
        verify(graphs[-1].program)
        return graphs[-1]

    compiled = tensorjit.compile(model, backend=lambda gm, inputs: aot_compile(
        gm, inputs, fw_compiler=compiler, decompositions=decompositions()))

    def step(module, tokens):
        logits = module(tokens)
        logits = logits[0] if isinstance(logits, (tuple, list)) else logits
        loss = logits.logsumexp(-1).mean()
        loss.backward()
        return loss

    tokens = torch.randint(0, 100, (2, 16), device=device)
    torch.testing.assert_close(step(compiled, tokens), step(reference, tokens))
    assert len(graphs) == 2  # forward and backward, each compiled (not run eagerly)
    for parameter, expected in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(parameter.grad, expected.grad, rtol=1e-4, atol=1e-5)


def test_column_reductions_are_tiled_across_outputs(device):
    x = torch.randn(300, 48, device=device)
    compiled = check(lambda x: (x.sum(0), x.amax(0), (x * 2).mean(0, keepdim=True)), x, tolerance=1e-5)
    groups = [step if isinstance(step, ir.LoopGroup) else ir.LoopGroup(step.name, step.ranges, step.variables, (step,))
              for step in compiled.program.steps]
    assert all(kernels.is_column_reduction(group) for group in groups)
    assert all(source.count("for roffset in range(0, 300, RBLOCK)") == 3 for source in compiled.kernel_sources)
    row = triton_compile.lower(make_fx(lambda x: x.sum(1))(x), [x])[0].steps[0]
    assert not kernels.is_column_reduction(ir.LoopGroup(row.name, row.ranges, row.variables, (row,)))


def test_channels_last_outputs_are_stored_in_memory_order(device):
    # eager keeps x's channels-last layout for x * 2 + 1: consecutive lanes must store to
    # consecutive addresses (iterate N, H, W, C), not C-strided ones
    x = torch.randn(2, 5, 3, 4, device=device).contiguous(memory_format=torch.channels_last)
    compiled = check(lambda x: (x * 2 + 1).relu(), x)
    assert compiled(x).stride() == (x * 2).stride()
    assert "+ (xindex)" in compiled.kernel_sources[0], compiled.kernel_sources[0]
