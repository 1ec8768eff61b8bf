"""Runtime wrapper: mutation, aliasing, grad/no-grad inputs, inference, double backward, dropout."""

import pytest
import torch
import torch.fx as fx

from tensorjit.autograd import aot_compile
from tensorjit.autograd.aot import _Compiled
from tensorjit.backends.aot_eager import aot_eager, run_graph_eagerly


def compile_fn(fn, inputs):
    compiled = aot_eager(fx.symbolic_trace(fn), inputs)
    assert isinstance(compiled, _Compiled), "fell back to eager"
    return compiled


def leaf(*shape):
    return torch.randn(*shape, requires_grad=True)


def test_input_mutation_is_copied_back():
    def f(x, buffer):
        buffer.mul_(2)
        buffer.add_(x.detach())
        return (x * buffer,)

    x, buffer = leaf(4), torch.ones(4)
    compiled = compile_fn(f, [x, buffer.clone()])
    eager_buffer = buffer.clone()
    (out,) = compiled(x, buffer)
    (expected,) = f(x, eager_buffer)
    torch.testing.assert_close(buffer, eager_buffer)
    torch.testing.assert_close(out, expected)
    (grad,) = torch.autograd.grad(out.sum(), x)
    (expected_grad,) = torch.autograd.grad(expected.sum(), x)
    torch.testing.assert_close(grad, expected_grad)


def test_batchnorm_running_stats_update_like_eager():
    def f(x, weight, bias, mean, var):
        return (torch.nn.functional.batch_norm(x, mean, var, weight, bias, training=True),)

    x, weight, bias = torch.randn(8, 3), leaf(3), leaf(3)
    mean, var = torch.zeros(3), torch.ones(3)
    compiled = compile_fn(f, [x, weight, bias, mean.clone(), var.clone()])
    eager_mean, eager_var = mean.clone(), var.clone()
    (out,) = compiled(x, weight, bias, mean, var)
    (expected,) = f(x, weight, bias, eager_mean, eager_var)
    torch.testing.assert_close(mean, eager_mean)
    torch.testing.assert_close(var, eager_var)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    grads = torch.autograd.grad(out.pow(2).sum(), (weight, bias))
    expected_grads = torch.autograd.grad(expected.pow(2).sum(), (weight, bias))
    torch.testing.assert_close(grads, expected_grads, atol=1e-5, rtol=1e-5)


def test_mutating_an_input_that_requires_grad_falls_back_to_eager():
    def f(x):
        y = x * 1
        x.mul_(2)
        return (y,)

    x = leaf(3)
    gm = fx.symbolic_trace(f)
    assert aot_eager(gm, [x]) is gm


def test_outputs_aliasing_inputs_are_views_of_them():
    def f(x, y):
        return (x.view(-1), x[0], y.t(), x, x * 2)

    x, y = leaf(2, 3), torch.randn(3, 4)
    compiled = compile_fn(f, [x, y])
    flat, first, transposed, same, doubled = compiled(x, y)
    assert flat._base is x and first._base is x and transposed._base is y and same is x
    torch.testing.assert_close(transposed, y.t())
    (grad,) = torch.autograd.grad(flat.sum() + 3 * first.sum() + doubled.sum(), x)
    (expected,) = torch.autograd.grad(sum(t.sum() * k for t, k in zip(f(x, y)[:2], (1, 3))) +
                                      f(x, y)[4].sum(), x)
    torch.testing.assert_close(grad, expected)
    with torch.no_grad():
        first.zero_()  # writing through the view changes the input, as in eager
    assert x[0].abs().sum() == 0


def test_output_aliasing_another_output():
    def f(x):
        y = x.sin()
        return (y, y.view(-1))

    x = leaf(2, 3)
    y, flat = compile_fn(f, [x])(x)
    assert flat._base is y or flat._base is y._base
    (grad,) = torch.autograd.grad(flat.sum() * 2, x)
    torch.testing.assert_close(grad, 2 * x.cos())


def test_inputs_without_grad_and_outputs_without_grad():
    def f(x, w, index):
        return (x @ w, index + 1, (x @ w).detach().sum())

    x, w, index = torch.randn(3, 4), leaf(4, 2), torch.arange(3)
    compiled = compile_fn(f, [x, w, index])
    out, next_index, detached = compiled(x, w, index)
    assert out.requires_grad and not next_index.requires_grad and not detached.requires_grad
    torch.testing.assert_close(next_index, index + 1)
    (grad,) = torch.autograd.grad(out.sum(), w)
    torch.testing.assert_close(grad, x.t() @ torch.ones(3, 2))


def test_no_grad_and_inference_mode_use_the_forward_only_graph():
    def f(x, w):
        return (torch.tanh(x @ w),)

    x, w = torch.randn(3, 4), leaf(4, 2)
    compiled = compile_fn(f, [x, w])
    with torch.no_grad():
        (out,) = compiled(x, w)
    assert compiled.inference is not None and out.grad_fn is None
    with torch.inference_mode():
        (out2,) = compiled(x, w)
    torch.testing.assert_close(out, f(x, w)[0].detach())
    torch.testing.assert_close(out2, out)


def test_no_input_requires_grad_compiles_inference_only():
    def f(x):
        return (x.exp(),)

    compiled = compile_fn(f, [torch.randn(3)])
    assert compiled.training is None and compiled.inference is not None


def test_double_backward_raises_instead_of_wrong_gradient():
    def f(x):
        return (x.pow(3),)

    x = leaf(3)
    (out,) = compile_fn(f, [x])(x)
    (grad,) = torch.autograd.grad(out.sum(), x, create_graph=True)
    with pytest.raises(RuntimeError):
        torch.autograd.grad(grad.sum(), x)


def test_dropout_mask_saved_and_bit_identical_to_eager():
    def f(x):
        return (torch.nn.functional.dropout(x, p=0.5, training=True) * 3,)

    x = leaf(64)
    compiled = compile_fn(f, [x])
    part = compiled.partition
    random_ops = [n for n in part.backward.graph.nodes if n.op == "call_function"
                  and torch.Tag.nondeterministic_seeded in getattr(n.target, "tags", ())]
    assert not random_ops, "the backward must reuse the forward's mask"
    torch.manual_seed(7)
    (out,) = compiled(x)
    (grad,) = torch.autograd.grad(out.sum(), x)
    torch.manual_seed(7)
    (expected,) = f(x)
    (expected_grad,) = torch.autograd.grad(expected.sum(), x)
    assert torch.equal(out, expected) and torch.equal(grad, expected_grad)
    # The gradient is nonzero exactly where the forward kept elements.
    assert torch.equal(grad != 0, out != 0)


def test_separate_compilers_receive_forward_and_backward():
    seen = []

    def recording(name):
        def compiler(gm, example_inputs):
            seen.append(name)
            return gm
        return compiler

    x = leaf(5)
    compiled = aot_compile(fx.symbolic_trace(lambda x: (x.sin() * 2,)), [x],
                           fw_compiler=recording("forward"), bw_compiler=recording("backward"),
                           inference_compiler=recording("inference"))
    compiled(x)[0].sum().backward()
    with torch.no_grad():
        compiled(x)
    assert seen == ["forward", "backward", "inference"]
    torch.testing.assert_close(x.grad, 2 * x.cos())


def test_decompositions_are_applied():
    from torch._decomp import get_decompositions

    table = get_decompositions([torch.ops.aten.gelu])
    x = leaf(6)
    compiled = aot_compile(fx.symbolic_trace(lambda x: (torch.nn.functional.gelu(x),)), [x],
                           fw_compiler=run_graph_eagerly, decompositions=table)
    targets = {n.target for n in compiled.partition.forward.graph.nodes}
    assert torch.ops.aten.gelu.default not in targets
    torch.testing.assert_close(compiled(x)[0], torch.nn.functional.gelu(x))


def test_grad_mode_switch_in_graph_falls_back_and_gradient_is_right():
    graph = fx.Graph()
    x = graph.placeholder("x")
    graph.call_function(torch._C._set_grad_enabled, (False,))
    doubled = graph.call_function(torch.mul, (x, 2))
    graph.call_function(torch._C._set_grad_enabled, (True,))
    graph.output((graph.call_function(torch.add, (doubled, x)),))
    gm = fx.GraphModule(torch.nn.Module(), graph)
    inputs = [leaf(3)]
    compiled = aot_eager(gm, inputs)
    (grad,) = torch.autograd.grad(compiled(*inputs)[0].sum(), inputs[0])
    torch.testing.assert_close(grad, torch.ones(3))


def test_param_add_under_no_grad_matches_eager():
    # What capture records for `with torch.no_grad(): w.add_(1)`; runs eagerly.
    graph = fx.Graph()
    x, w = graph.placeholder("x"), graph.placeholder("w")
    graph.call_function(torch._C._set_grad_enabled, (False,))
    graph.call_method("add_", (w, 1))
    graph.call_function(torch._C._set_grad_enabled, (True,))
    graph.output((graph.call_function(torch.mul, (x, w)),))
    gm = fx.GraphModule(torch.nn.Module(), graph)

    x, w = torch.randn(3), leaf(3)
    eager_w = w.detach().clone().requires_grad_(True)
    (out,) = aot_eager(gm, [x, w])(x, w)
    with torch.no_grad():
        eager_w.add_(1)
    expected = x * eager_w
    torch.testing.assert_close(w.detach(), eager_w.detach())
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(torch.autograd.grad(out.sum(), w)[0],
                               torch.autograd.grad(expected.sum(), eager_w)[0])


def test_detached_alias_and_none_outputs():
    def f(x):
        return (x.detach(), None, x * 2)

    x = leaf(3)
    detached, nothing, doubled = compile_fn(f, [x])(x)
    assert not detached.requires_grad and nothing is None and doubled.requires_grad
    torch.testing.assert_close(detached, x.detach())
    (grad,) = torch.autograd.grad(doubled.sum(), x)
    torch.testing.assert_close(grad, torch.full((3,), 2.0))
