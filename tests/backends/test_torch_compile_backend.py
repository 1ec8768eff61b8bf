"""tensorjit as a torch.compile backend: `torch.compile(model, backend="tensorjit")`.

The entry point in pyproject.toml (group `torch_dynamo_backends`) names
`tensorjit.backends.torch_compile.tensorjit_backend`; torch.compile finds backends there by
name. The tests resolve the name the way torch does, from an installed distribution's entry
points (simulated here: the editable install in this checkout may predate the entry point),
and check that Dynamo's graphs run through tensorjit's autograd and code generators with
eager's outputs and gradients: modules, custom autograd.Functions, dynamic shapes.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import pathlib
import tomllib

import pytest
import torch
import torch._dynamo
import torch._dynamo.backends.registry as dynamo_registry

from tensorjit import logs
from tensorjit.backends.torch_compile import tensorjit_backend

PYPROJECT = pathlib.Path(__file__).resolve().parents[2] / "pyproject.toml"


def entry_point() -> importlib.metadata.EntryPoint:
    declared = tomllib.loads(PYPROJECT.read_text())["project"]["entry-points"]["torch_dynamo_backends"]
    return importlib.metadata.EntryPoint(name="tensorjit", value=declared["tensorjit"],
                                         group="torch_dynamo_backends")


def test_pyproject_declares_the_backend_entry_point():
    assert entry_point().load() is tensorjit_backend


@pytest.fixture
def named_backend(monkeypatch):
    """torch.compile(backend="tensorjit") as with tensorjit installed: torch reads the entry point."""
    point = entry_point()
    monkeypatch.setitem(dynamo_registry._BACKENDS, "tensorjit", point)
    monkeypatch.delitem(dynamo_registry._COMPILER_FNS, "tensorjit", raising=False)
    torch._dynamo.reset()
    yield "tensorjit"
    dynamo_registry._COMPILER_FNS.pop("tensorjit", None)
    torch._dynamo.reset()


def no_eager_fallback() -> None:
    assert not [line for line in logs.recent("graph_breaks") if "eagerly" in line]


def test_module_training_by_name(named_backend):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    reference = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    reference.load_state_dict(model.state_dict())
    logs.clear()
    compiled = torch.compile(model, backend=named_backend)
    for rows in (4, 6, 9):  # the second size makes Dynamo's graph dynamic
        x = torch.randn(rows, 8)
        out, expected = compiled(x), reference(x)
        torch.testing.assert_close(out, expected)
        out.sum().backward()
        expected.sum().backward()
        for ours, theirs in zip(model.parameters(), reference.parameters()):
            torch.testing.assert_close(ours.grad, theirs.grad)
    no_eager_fallback()


class Exp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = x.exp()
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        y, = ctx.saved_tensors
        return grad * y


def test_custom_autograd_function_from_dynamos_graph(named_backend):
    def program(x):
        return Exp.apply(x.sin()).sum()

    logs.clear()
    x = torch.randn(5, requires_grad=True)
    reference = x.detach().clone().requires_grad_()
    torch.compile(program, backend=named_backend)(x).backward()
    program(reference).backward()
    torch.testing.assert_close(x.grad, reference.grad)
    no_eager_fallback()


def test_dynamic_true_one_capture_for_every_size():
    calls = []

    def counting(gm, example_inputs):
        calls.append(gm)
        return tensorjit_backend(gm, example_inputs)

    torch._dynamo.reset()
    compiled = torch.compile(lambda a: (a * 2).relu().sum(1), backend=counting, dynamic=True)
    for rows in (3, 5, 7):
        a = torch.randn(rows, 4)
        torch.testing.assert_close(compiled(a), (a * 2).relu().sum(1))
    assert len(calls) == 1
    torch._dynamo.reset()


def test_the_product_does_not_import_dynamo_for_it():
    text = pathlib.Path(importlib.util.find_spec("tensorjit.backends.torch_compile").origin).read_text()
    assert "import torch._dynamo" not in text and "from torch._dynamo" not in text


@pytest.mark.parametrize("with_scheduler", [False, True], ids=["constant_lr", "cosine_lr"])
def test_compiled_optimizer_step_updates_once(with_scheduler):
    """Dynamo keeps an optimizer's parameters and state as attributes of its graph module; written in
    place, they are lifted to inputs, so each update is applied once (it was applied twice: the
    autograd stage's tracing wrote the real tensors before it failed and the graph ran eagerly)."""
    def run(compiled: bool):
        torch.manual_seed(0)
        model = torch.nn.Linear(8, 4)
        optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=10)
        step = torch.compile(optimizer.step, backend=tensorjit_backend) if compiled else optimizer.step
        for index in range(4):
            optimizer.zero_grad()
            model(torch.randn(4, 8, generator=torch.Generator().manual_seed(index))).sum().backward()
            step()
            if with_scheduler:
                scheduler.step()
        return [*model.parameters(), *(t for state in optimizer.state.values() for t in state.values())]
    torch._dynamo.reset()
    torch.testing.assert_close(run(True), run(False))
