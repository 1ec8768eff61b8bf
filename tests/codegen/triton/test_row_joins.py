"""A recomputation joins the later row group that reads its input (`triton.row_joins`): a
training step's backward recomputes a layer norm's output for the weight gradient's matrix
product in a kernel of its own, and the norm's backward row group then reads the same input,
mean and inverse deviation again. The recomputation becomes a member of the row group, and
the product (with the views it reads the recomputation through) moves after the group."""

import copy

import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from tensorjit import autograd
from tensorjit.codegen import ir
from tensorjit.codegen.memory import names_read
from tensorjit.codegen.triton import compile as triton_compile, compile_aten_graph, decompositions
from tensorjit.codegen.verify import verify


def compile_fn(fn, *inputs):
    compiled = triton_compile.compile_graph(make_fx(fn, decomposition_table=decompositions())(*inputs), list(inputs))
    verify(compiled.program)
    return compiled


def kernels(program: ir.Program) -> list:
    return [step for step in program.steps if not isinstance(step, ir.Extern)]


def norm_backward_with_recomputation(x, mean, rstd, weight, bias, grad_out, linear_weight):
    """What a layer norm followed by a linear layer leaves the backward: the norm's output
    recomputed for the linear weight's gradient (read through views), the norm's output
    gradient from a product, then the norm's input gradient (row sums over the features)."""
    normed = (x - mean) * rstd
    recomputed = normed * weight + bias
    linear_weight_grad = grad_out.flatten(0, 1).t() @ recomputed.flatten(0, 1)
    scaled = (grad_out @ linear_weight) * weight
    width = x.shape[-1]
    total, dot = scaled.sum(-1, keepdim=True), (scaled * normed).sum(-1, keepdim=True)
    return linear_weight_grad, rstd / width * (scaled * width - total - normed * dot)


def norm_inputs(device, rows=(4, 8), width=64, out=48):
    x = torch.randn(*rows, width, device=device)
    mean, rstd = x.mean(-1, keepdim=True), torch.rsqrt(x.var(-1, keepdim=True, unbiased=False) + 1e-5)
    return (x, mean, rstd, torch.randn(width, device=device), torch.randn(width, device=device),
            torch.randn(*rows, out, device=device), torch.randn(out, width, device=device))


def test_the_recomputed_norm_joins_the_norm_backward_and_its_product_waits(device):
    inputs = norm_inputs(device)
    compiled = compile_fn(norm_backward_with_recomputation, *inputs)
    [group] = kernels(compiled.program)
    assert isinstance(group, ir.LoopGroup) and len(group.members) == 4, compiled.program
    recomputation = group.members[-1]
    position = compiled.program.steps.index(group)
    readers = [k for k, step in enumerate(compiled.program.steps) if recomputation.output in names_read(step)]
    assert readers and min(readers) > position, compiled.program  # (its views and the product run after)
    for got, want in zip(compiled(*inputs), norm_backward_with_recomputation(*inputs)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def recomputation_past_an_update(x, mean, rstd, weight, bias, grad_out, linear_weight):
    recomputed = ((x - mean) * rstd) * weight + bias
    product = grad_out.flatten(0, 1).t() @ recomputed.flatten(0, 1)
    bias.mul_(2)  # (read by the recomputation: it may not move past this)
    scaled = (grad_out @ linear_weight) * weight
    return product, scaled / scaled.sum(-1, keepdim=True) + x


def test_a_recomputation_does_not_move_past_a_write_of_what_it_reads(device):
    inputs = norm_inputs(device)
    compiled = compile_fn(recomputation_past_an_update, *inputs)
    recomputation, group = kernels(compiled.program)  # (the recomputation alone, then the row group)
    assert isinstance(recomputation, ir.Pointwise) and len(group.members) == 2, compiled.program
    expected = recomputation_past_an_update(*[t.clone() for t in inputs])
    for got, want in zip(compiled(*[t.clone() for t in inputs]), expected):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


class NormMlp(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.norm = torch.nn.LayerNorm(width)
        self.up, self.down = torch.nn.Linear(width, 4 * width), torch.nn.Linear(4 * width, width)

    def forward(self, x):
        return x + self.down(F.gelu(self.up(self.norm(x)), approximate="tanh"))


def test_a_norm_mlp_training_step_has_no_recomputation_kernel_and_matches_eager(device):
    """The backward of layer norm -> linear -> GELU -> linear: GELU's recomputation and backward
    with the first bias gradient (fused_column_sums.py), the second bias gradient, the norm's
    backward with its recomputed output, the norm's weight and bias gradients: four kernels
    (five with the recomputation alone, six before either)."""
    torch.manual_seed(0)
    model = NormMlp(32).to(device)
    reference = copy.deepcopy(model)
    x = torch.randn(2, 8, 32, device=device, requires_grad=True)
    x_reference = x.detach().clone().requires_grad_()
    parameters, names = list(model.parameters()), [name for name, _ in model.named_parameters()]

    def step(x, *values):
        return (torch.func.functional_call(model, dict(zip(names, values)), (x,)),)

    programs = []

    def compiler(gm, example_inputs):
        compiled = compile_aten_graph(gm, example_inputs)
        programs.append(compiled.program)
        return compiled

    arguments = [x, *parameters]
    training = autograd.aot_compile(make_fx(step)(*arguments), arguments, fw_compiler=compiler,
                                    decompositions=decompositions())
    training(*arguments)[0].square().mean().backward()
    reference(x_reference).square().mean().backward()
    backward = programs[-1]
    assert len(kernels(backward)) == 4, backward
    for mine, theirs in zip([x, *parameters], [x_reference, *reference.parameters()]):
        torch.testing.assert_close(mine.grad, theirs.grad, rtol=1e-5, atol=1e-6)


def residual_chain(x, attention, mlp, grad, weight):
    """A backward's start as the partitioner leaves it: the residual stream recomputed layer
    after layer (each sum read by a reduction, so stored), a product, then the row groups
    reading the sums."""
    first = x + attention
    second = first + mlp
    product = grad @ weight
    return product, second - second.mean(-1, keepdim=True), first * first.sum(-1, keepdim=True)


def test_a_chain_of_stored_sums_moves_into_the_row_group_reading_the_last(device):
    """Each sum's first reader is the next sum, the last sum's is a row group: the chain follows
    it into the group, as leading members in program order, past the product."""
    inputs = [torch.randn(4, 8, 64, device=device) for _ in range(3)] + \
        [torch.randn(16, 32, device=device), torch.randn(32, 16, device=device)]
    compiled = compile_fn(residual_chain, *inputs)
    found = kernels(compiled.program)
    assert all(isinstance(k, ir.LoopGroup) for k in found), compiled.program
    leading = found[0].members[:2]
    assert all(isinstance(m, ir.Pointwise) and m.ranges == (4, 8, 64) for m in leading), compiled.program
    for got, want in zip(compiled(*inputs), residual_chain(*inputs)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def sum_read_before_the_group(x, attention, grad, weight):
    first = x + attention
    product = (grad @ weight) * first.sum()  # (reads the sum before the row group does)
    return product, first - first.mean(-1, keepdim=True)


def test_a_kernel_read_before_the_row_group_stays_where_it_is(device):
    inputs = [torch.randn(4, 8, 64, device=device) for _ in range(2)] + \
        [torch.randn(16, 32, device=device), torch.randn(32, 16, device=device)]
    compiled = compile_fn(sum_read_before_the_group, *inputs)
    for got, want in zip(compiled(*inputs), sum_read_before_the_group(*inputs)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def sum_past_an_update(x, attention, grad, weight):
    first = x + attention
    product = grad @ weight
    attention.mul_(2)  # (read by the sum: it may not move past this)
    return product, first - first.mean(-1, keepdim=True)


def test_a_stored_sum_does_not_move_past_a_write_of_what_it_reads(device):
    inputs = [torch.randn(4, 8, 64, device=device) for _ in range(2)] + \
        [torch.randn(16, 32, device=device), torch.randn(32, 16, device=device)]
    expected = sum_past_an_update(*[t.clone() for t in inputs])
    compiled = compile_fn(sum_past_an_update, *[t.clone() for t in inputs])
    for got, want in zip(compiled(*[t.clone() for t in inputs]), expected):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
