"""Pointwise kernels of a few elements run as one kernel with an output each
(`triton.small_kernels`): a training step's batch-norm layers each count their batches
(`num_batches_tracked += 1`), one launch per layer otherwise."""

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from tensorjit.codegen import ir
from tensorjit.codegen.triton import compile as triton_compile, decompositions
from tensorjit.codegen.triton import small_kernels


def compile_fn(fn, *inputs):
    gm = make_fx(fn, decomposition_table=decompositions())(*inputs)
    return triton_compile.compile_graph(gm, list(inputs))


def kernels(compiled) -> list:
    return [s for s in compiled.program.steps if not isinstance(s, ir.Extern)]


def counters_and_work(x, w, a, b, c):
    """Three one-element updates with no input in common, around a matrix product."""
    y = torch.relu(x @ w)
    return y, a + 1, b * 2, torch.where(c > 0, c, -c)


def test_one_element_kernels_with_no_input_in_common_are_one_kernel(device):
    inputs = (torch.randn(64, 48, device=device), torch.randn(48, 40, device=device),
              torch.tensor(3, device=device), torch.tensor(1.5, device=device), torch.tensor(-2.0, device=device))
    compiled = compile_fn(counters_and_work, *inputs)
    scalars = [k for k in kernels(compiled) if k.ranges == ()]
    assert len(scalars) == 1 and len(scalars[0].members) == 3, compiled.program
    for got, want in zip(compiled(*inputs), counters_and_work(*inputs)):
        torch.testing.assert_close(got, want)


def batch_norms(x, *buffers):
    """Training batch norm, three layers, as the autograd stage hands it on: the updated
    statistics and batch counts are outputs (written back into the buffers afterwards)."""
    updated = []
    for layer in range(3):
        mean, var, count = (t.clone() for t in buffers[3 * layer:3 * layer + 3])
        x = torch.relu(torch.nn.functional.batch_norm(x, mean, var, training=True, momentum=0.1))
        updated += [mean, var, count + 1]
    return (x, *updated)


def test_batch_counts_of_every_layer_in_one_kernel(device):
    inputs = [torch.randn(4, 6, 5, 5, device=device)]
    for _ in range(3):
        inputs += [torch.zeros(6, device=device), torch.ones(6, device=device),
                   torch.tensor(7, device=device)]
    compiled = compile_fn(batch_norms, *inputs)
    scalars = [k for k in kernels(compiled) if k.ranges == ()]
    assert len(scalars) == 1 and len(scalars[0].members) == 3, compiled.program
    for got, want in zip(compiled(*inputs), batch_norms(*inputs)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def in_place_between(a, b):
    first = a * 2
    b.add_(first)  # a write of what the second kernel reads
    return first, b + 1


def test_a_small_kernel_does_not_move_up_past_a_write_of_what_it_reads(device):
    a, b = torch.randn(4, device=device), torch.randn(4, device=device)
    compiled = compile_fn(in_place_between, a, b.clone())
    expected = in_place_between(a, b.clone())
    for got, want in zip(compiled(a, b.clone()), expected):
        torch.testing.assert_close(got, want)


def test_no_more_than_max_buffers_in_one_kernel(device, monkeypatch):
    monkeypatch.setattr(small_kernels, "MAX_BUFFERS", 4)  # two members: an input and an output each
    inputs = tuple(torch.tensor(float(k), device=device) for k in range(5))

    def fn(*scalars):
        return tuple(s * (k + 2) for k, s in enumerate(scalars))
    compiled = compile_fn(fn, *inputs)
    assert sorted(len(getattr(k, "members", (k,))) for k in kernels(compiled)) == [1, 2, 2], compiled.program
    for got, want in zip(compiled(*inputs), fn(*inputs)):
        torch.testing.assert_close(got, want)


def test_larger_kernels_stay_apart(device):
    x, y = torch.randn(64, 32, device=device), torch.randn(64, 32, device=device)

    def fn(x, y):
        return torch.exp(x), torch.sin(y)
    compiled = compile_fn(fn, x, y)
    assert len(kernels(compiled)) == 2, compiled.program
