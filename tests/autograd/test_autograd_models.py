"""Small real models trained 3 steps compiled (aot_eager) vs eager with the same seed."""

import copy

import torch

from autograd_helpers import lift_make_fx, lift_symbolic, module_state
from tensorjit.autograd.aot import _Compiled
from tensorjit.backends.aot_eager import aot_eager


class SmallCNN(torch.nn.Module):
    def __init__(self, dropout: float):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 6, 3, padding=1)
        self.norm = torch.nn.BatchNorm2d(6)
        self.dropout = torch.nn.Dropout(dropout)
        self.head = torch.nn.Linear(6 * 4 * 4, 5)

    def forward(self, x):
        x = torch.relu(self.norm(self.conv(x)))
        x = torch.nn.functional.max_pool2d(x, 2)
        return self.head(self.dropout(torch.flatten(x, 1)))


def train(step_fn, parameters, steps=3):
    optimizer = torch.optim.SGD(parameters, lr=0.1)
    losses = []
    for step in range(steps):
        torch.manual_seed(100 + step)
        optimizer.zero_grad()
        loss = step_fn()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def compare_training(model, x, lift, exact=False, steps=3):
    torch.manual_seed(0)
    eager_model, compiled_model = copy.deepcopy(model), copy.deepcopy(model)
    gm, state = lift(compiled_model, x) if lift is lift_make_fx else lift(compiled_model)
    compiled = aot_eager(gm, [*state, x])
    assert isinstance(compiled, _Compiled), "fell back to eager"

    def eager_step():
        return eager_model(x).pow(2).mean()

    def compiled_step():
        return compiled(*state, x)[0].pow(2).mean()

    eager_losses = train(eager_step, list(eager_model.parameters()), steps)
    compiled_losses = train(compiled_step, list(compiled_model.parameters()), steps)
    tolerance = dict(atol=0, rtol=0) if exact else dict(atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(compiled_losses, eager_losses, **tolerance)
    _, eager_state = module_state(eager_model)
    _, compiled_state = module_state(compiled_model)
    for eager_tensor, compiled_tensor in zip(eager_state, compiled_state):
        torch.testing.assert_close(compiled_tensor, eager_tensor, **tolerance)
    return compiled, eager_losses, compiled_losses


def test_cnn_with_batchnorm_no_dropout():
    compare_training(SmallCNN(dropout=0.0), torch.randn(4, 3, 8, 8), lift_symbolic)


def test_cnn_with_dropout_seeded_matches():
    # Random ops run through the same ATen kernels in eager's order, so a seeded
    # run reproduces eager's masks; losses agree to floating-point tolerance
    # (BatchNorm is decomposed, so not bit for bit).
    compare_training(SmallCNN(dropout=0.3), torch.randn(4, 3, 8, 8), lift_symbolic)


def test_cnn_eval_mode_matches():
    model = SmallCNN(dropout=0.3).eval()
    compare_training(model, torch.randn(2, 3, 8, 8), lift_symbolic)


def small_transformer(dropout):
    torch.manual_seed(0)
    return torch.nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32,
                                            dropout=dropout, batch_first=True)


def test_small_transformer_layer():
    compare_training(small_transformer(0.0), torch.randn(2, 5, 16), lift_make_fx)


def test_small_transformer_with_dropout_same_curve_shape():
    # Eager's CPU attention kernel draws its dropout mask inside a fused kernel;
    # the traced graph draws it with bernoulli, so masks differ (see docs/autograd.md).
    # The training curve must still have the same shape.
    torch.manual_seed(0)
    model, x = small_transformer(0.1), torch.randn(2, 5, 16)
    eager_model = copy.deepcopy(model)
    gm, state = lift_make_fx(model, x)
    compiled = aot_eager(gm, [*state, x])
    compiled_losses = train(lambda: compiled(*state, x)[0].pow(2).mean(), list(model.parameters()), 6)
    eager_losses = train(lambda: eager_model(x).pow(2).mean(), list(eager_model.parameters()), 6)
    torch.testing.assert_close(compiled_losses, eager_losses, atol=0.05, rtol=0.05)


def test_small_lstm():
    torch.manual_seed(0)

    class Tagger(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = torch.nn.LSTM(6, 8, batch_first=True)
            self.head = torch.nn.Linear(8, 3)

        def forward(self, x):
            return self.head(self.lstm(x)[0])

    compare_training(Tagger(), torch.randn(2, 4, 6), lift_make_fx)


def test_cnn_with_core_aten_decompositions():
    # The table a code generator passes; BatchNorm and friends become core ops.
    from torch._decomp import core_aten_decompositions

    from tensorjit.autograd import aot_compile
    from tensorjit.backends.aot_eager import run_graph_eagerly

    torch.manual_seed(0)
    model, x = SmallCNN(dropout=0.0), torch.randn(4, 3, 8, 8)
    eager_model = copy.deepcopy(model)
    gm, state = lift_symbolic(model)
    compiled = aot_compile(gm, [*state, x], fw_compiler=run_graph_eagerly,
                           decompositions=core_aten_decompositions())
    assert isinstance(compiled, _Compiled)
    losses = train(lambda: compiled(*state, x)[0].pow(2).mean(), list(model.parameters()))
    expected = train(lambda: eager_model(x).pow(2).mean(), list(eager_model.parameters()))
    torch.testing.assert_close(losses, expected, atol=1e-4, rtol=1e-4)
