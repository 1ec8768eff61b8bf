"""Gradients and training: a compiled model trained for a few SGD steps equals eager.

Run with backend="eager" (capture only) and backend="aot_eager" (capture plus
the ahead-of-time autograd stage; marked `aot_eager`, skipped if missing).
"""

import copy

import pytest
import torch

from .harness import assert_same, check, compile, require_backend

BACKENDS = ["eager", pytest.param("aot_eager", marks=pytest.mark.aot_eager)]


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(6, 8)
        self.norm = torch.nn.LayerNorm(8)
        self.fc2 = torch.nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(torch.nn.functional.gelu(self.norm(self.fc1(x))))


class ConvNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.head = torch.nn.Linear(4, 3)

    def forward(self, x):
        x = torch.relu(self.bn(self.conv(x)))
        return self.head(x.mean((2, 3)))


def train(model, steps, make_batch, compiled_backend=None):
    torch.manual_seed(1)
    runner = compile(model, backend=compiled_backend) if compiled_backend else model
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for _ in range(steps):
        inputs, targets = make_batch()
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(runner(inputs), targets)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return losses


def mlp_batch():
    return torch.randn(5, 6), torch.randint(3, (5,))


def conv_batch():
    return torch.randn(2, 2, 6, 6), torch.randint(3, (2,))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("model_class,make_batch", [(MLP, mlp_batch), (ConvNet, conv_batch)])
def test_sgd_training_matches_eager(backend, model_class, make_batch):
    require_backend(backend)
    torch.manual_seed(0)
    eager_model = model_class()
    compiled_model = copy.deepcopy(eager_model)
    eager_losses = train(eager_model, 4, make_batch)
    compiled_losses = train(compiled_model, 4, make_batch, compiled_backend=backend)
    torch.testing.assert_close(compiled_losses, eager_losses, rtol=1e-4, atol=1e-5)
    assert_same(eager_model, compiled_model, "model after training", rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_whole_train_step_compiled(backend):
    require_backend(backend)

    def step(model, optimizer, inputs, targets):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()
        return loss

    torch.manual_seed(0)
    eager_model = MLP()
    compiled_model = copy.deepcopy(eager_model)
    eager_opt = torch.optim.SGD(eager_model.parameters(), lr=0.05)
    compiled_opt = torch.optim.SGD(compiled_model.parameters(), lr=0.05)
    compiled_step = compile(step, backend=backend)
    for _ in range(3):
        inputs, targets = torch.randn(4, 6), torch.randn(4, 3)
        expected = step(eager_model, eager_opt, inputs, targets)
        actual = compiled_step(compiled_model, compiled_opt, inputs, targets)
        torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-5)
    assert_same(eager_model, compiled_model, "model after steps", rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_input_gradients_through_many_ops(backend):
    require_backend(backend)

    def fn(x, w, b):
        h = torch.tanh(x @ w + b)
        h = h * torch.sigmoid(h) - h.pow(2).mean(-1, keepdim=True)
        return torch.softmax(h, -1), h.logsumexp(-1), (h.abs() + 1).log().sum()

    check(fn, torch.randn(3, 4, requires_grad=True), torch.randn(4, 5, requires_grad=True),
          torch.randn(5, requires_grad=True), backend=backend, grad=True, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gradients_with_views_and_indexing(backend):
    require_backend(backend)

    def fn(x):
        y = x.view(4, 3).t()[1:]
        z = torch.cat([y, y * 2], 0)
        return z.reshape(-1)[::2], x[0].expand(2, 3)

    check(fn, torch.randn(12, requires_grad=True), backend=backend, grad=True)


def test_frozen_parameters_get_no_gradient():
    torch.manual_seed(0)
    model = MLP()
    model.fc1.weight.requires_grad_(False)
    check(model, torch.randn(2, 6), grad=True)
    compiled_copy = copy.deepcopy(model)
    compile(compiled_copy, backend="eager")(torch.randn(2, 6)).sum().backward()
    assert compiled_copy.fc1.weight.grad is None
    assert compiled_copy.fc2.weight.grad is not None


def test_detach_inside_blocks_gradient():
    def fn(x):
        return x * x.detach(), (x * 2).detach()

    check(fn, torch.randn(3, requires_grad=True), grad=True, graphs=1)


def test_gradient_accumulates_over_calls():
    torch.manual_seed(0)
    eager_model = MLP()
    compiled_model = copy.deepcopy(eager_model)
    compiled = compile(compiled_model, backend="eager")
    for _ in range(3):
        x = torch.randn(2, 6)
        eager_model(x).sum().backward()
        compiled(x).sum().backward()
    assert_same(eager_model, compiled_model, "accumulated gradients", rtol=1e-5, atol=1e-6)


def test_backward_twice_with_retain_graph():
    def fn(x):
        return (x.sin() * x).sum()

    x_eager = torch.randn(3, requires_grad=True)
    x_compiled = x_eager.detach().clone().requires_grad_()
    eager_out = fn(x_eager)
    compiled_out = compile(fn, backend="eager")(x_compiled)
    for _ in range(2):
        eager_out.backward(retain_graph=True)
        compiled_out.backward(retain_graph=True)
    torch.testing.assert_close(x_compiled.grad, x_eager.grad)


def test_autograd_grad_inside_compiled_function():
    def fn(x):
        y = (x ** 3).sum()
        (grad,) = torch.autograd.grad(y, x, create_graph=True)
        return grad

    check(fn, torch.randn(3, requires_grad=True), grad=True)


def test_custom_autograd_function():
    class Square(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, grad_output):
            (x,) = ctx.saved_tensors
            return 2 * x * grad_output

    def fn(x):
        return Square.apply(x.sin()) + 1

    check(fn, torch.randn(4, requires_grad=True), grad=True)


def test_outputs_requiring_grad_mixed_with_constants():
    def fn(x, c):
        return x * 2, c * 2, x.shape[0]

    check(fn, torch.randn(3, requires_grad=True), torch.randn(3), grad=True, graphs=1)


def test_no_grad_call_of_module_with_parameters():
    torch.manual_seed(0)
    model = MLP()
    compiled = compile(copy.deepcopy(model), backend="eager")
    x = torch.randn(2, 6)
    with torch.no_grad():
        out = compiled(x)
        expected = model(x)
    assert not out.requires_grad
    torch.testing.assert_close(out, expected)


@pytest.mark.inductor
@pytest.mark.slow
def test_training_step_inductor():
    require_backend("inductor")
    torch.manual_seed(0)
    eager_model = MLP()
    compiled_model = copy.deepcopy(eager_model)
    eager_losses = train(eager_model, 2, mlp_batch)
    compiled_losses = train(compiled_model, 2, mlp_batch, compiled_backend="inductor")
    torch.testing.assert_close(compiled_losses, eager_losses, rtol=1e-3, atol=1e-4)
    assert_same(eager_model, compiled_model, "model after training", rtol=1e-3, atol=1e-4)


def test_tensor_hook_registered_inside():
    def fn(x):
        y = x * 2
        y.register_hook(lambda grad: grad * 10)
        return y.sin()

    check(fn, torch.randn(3, requires_grad=True), grad=True)


def test_requires_grad_set_inside():
    def fn(x):
        w = torch.ones(3).requires_grad_()
        return x * w, w.requires_grad

    check(fn, torch.randn(3), grad=True)
