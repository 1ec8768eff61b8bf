"""Pointwise kernels over one range that read the same input run as one kernel with an output
each (`triton.horizontal`): GPT-2's backward recomputes GELU(x) for a weight gradient and
computes GELU's backward from x in two kernels, each reading x, with the weight gradient's
matrix product between them."""

import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from tensorjit.codegen import ir
from tensorjit.codegen.triton import compile as triton_compile, decompositions


def compile_fn(fn, *inputs):
    gm = make_fx(fn, decomposition_table=decompositions())(*inputs)
    return triton_compile.compile_graph(gm, list(inputs))


def kernels(compiled) -> list:
    return [s for s in compiled.program.steps if not isinstance(s, ir.Extern)]


def mlp_backward(x, grad_out, weight):
    h = F.gelu(x, approximate="tanh")  # recomputed for the weight gradient
    grad_h = grad_out @ weight.t()
    grad_weight = grad_out.t() @ h
    return grad_weight, torch.ops.aten.gelu_backward(grad_h, x, approximate="tanh")


def test_gelu_recomputed_and_its_backward_are_one_kernel_reading_x_once(device):
    x, grad_out, weight = (torch.randn(32, 48, device=device), torch.randn(32, 16, device=device),
                           torch.randn(48, 16, device=device))
    compiled = compile_fn(mlp_backward, x, grad_out, weight)
    [kernel] = kernels(compiled)
    assert isinstance(kernel, ir.LoopGroup) and len(kernel.members) == 2, compiled.program
    [text] = [k.source for k in compiled.hook.kernels.values()]
    assert text.count("tl.load(") == 2, text  # x and the gradient, each once
    for got, want in zip(compiled(x, grad_out, weight), mlp_backward(x, grad_out, weight)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_bf16_outputs_in_one_kernel(device):
    inputs = (torch.randn(32, 48, device=device).bfloat16(), torch.randn(32, 16, device=device).bfloat16(),
              torch.randn(48, 16, device=device).bfloat16())
    compiled = compile_fn(mlp_backward, *inputs)
    assert len(kernels(compiled)) == 1, compiled.program
    for got, want in zip(compiled(*inputs), mlp_backward(*(t.float() for t in inputs))):
        torch.testing.assert_close(got.float(), want, rtol=5e-2, atol=5e-2)


def in_place_between(x, y, z):
    a = torch.exp(x) * 2
    product = a @ z  # (a is computed into memory for the product)
    y.mul_(3)
    return product, torch.sin(x) + y


def test_a_kernel_does_not_move_up_past_a_write_of_what_it_reads(device):
    x, y, z = torch.randn(8, 8, device=device), torch.randn(8, 8, device=device), torch.randn(8, 8, device=device)
    compiled = compile_fn(in_place_between, x, y.clone(), z)
    assert not any(isinstance(k, ir.LoopGroup) for k in kernels(compiled)), compiled.program
    expected = in_place_between(x, y.clone(), z)
    for got, want in zip(compiled(x, y.clone(), z), expected):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_kernels_over_other_ranges_or_inputs_stay_apart(device):
    # (over small_kernels.SMALL elements: smaller kernels join whatever they read)
    x, y = torch.randn(40, 48, device=device), torch.randn(40, 48, device=device)

    def fn(x, y):
        return torch.exp(x) @ y.t(), torch.sin(y) * 2, torch.cos(x).t().contiguous()
    compiled = compile_fn(fn, x, y)
    assert not any(isinstance(k, ir.LoopGroup) for k in kernels(compiled)), compiled.program
    for got, want in zip(compiled(x, y), fn(x, y)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
