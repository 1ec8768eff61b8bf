"""A whole training step compiled as one function: forward, backward, optimizer step, zero_grad."""

import copy

import pytest
import torch

import tensorjit


def step(model, optimizer, x, y):
    optimizer.zero_grad(True)
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


@pytest.mark.parametrize("optimizer", [torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW])
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_compiled_training_step_matches_eager(optimizer, backend):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    a, b = copy.deepcopy(model), copy.deepcopy(model)
    opt_a, opt_b = optimizer(a.parameters(), lr=0.01), optimizer(b.parameters(), lr=0.01)
    compiled = tensorjit.compile(step, backend=backend)
    for _ in range(4):
        x, y = torch.randn(5, 8), torch.randn(5, 4)
        torch.testing.assert_close(compiled(a, opt_a, x, y), step(b, opt_b, x, y))
    for p, q in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(p, q)
