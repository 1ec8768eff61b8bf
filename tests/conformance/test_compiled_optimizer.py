"""The compiled-optimizer pattern, against torch.compile in one process.

`compile(optimizer.step)` must capture the update into a graph (torch.compile: one graph),
and a whole training step (zero_grad, forward, backward, AdamW step, LR scheduler step)
must break no more often than torch.compile and leave the parameters eager leaves them.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch._dynamo  # imported as users' programs do: it marks every optimizer's _init_group disabled

import tensorjit
from tensorjit import logs

from .harness import REFERENCE, CountingBackend

pytestmark = pytest.mark.skipif(REFERENCE, reason="compares tensorjit with torch.compile in one run")

STEPS = 6


def training_setup():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    return model, optimizer, scheduler


def batch(step: int):
    generator = torch.Generator().manual_seed(step)
    return torch.randn(4, 8, generator=generator), torch.randn(4, 4, generator=generator)


def eager_parameters(with_scheduler: bool):
    model, optimizer, scheduler = training_setup()
    for step in range(STEPS):
        x, y = batch(step)
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        if with_scheduler:
            scheduler.step()
    return list(model.parameters())


def compiled_step(use_tensorjit: bool):
    """(counter, graphs compiled by the first call, parameters after STEPS steps), optimizer.step compiled."""
    (tensorjit.reset if use_tensorjit else torch._dynamo.reset)()
    model, optimizer, _ = training_setup()
    counter = CountingBackend()
    step = (tensorjit.compile if use_tensorjit else torch.compile)(optimizer.step, backend=counter)
    first_call = 0
    for index in range(STEPS):
        x, y = batch(index)
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        step()
        first_call = first_call or counter.graph_count
    return counter, first_call, list(model.parameters())


def test_optimizer_step_is_one_graph_as_in_torch():
    """The update is one graph, as torch's. The first call also captures the state initialization
    (torch runs _init_group eagerly at trace time): small graphs, one per parameter, never again."""
    ours, first_call, parameters = compiled_step(True)
    theirs, _, _ = compiled_step(False)
    update = [graph for graph in ours.graphs if any("lerp" in str(node.target) for node in graph.graph.nodes)]
    assert len(update) == 1 and theirs.graph_count == 1
    assert ours.graph_count == first_call  # nothing recompiled after the first step
    torch.testing.assert_close(parameters, eager_parameters(with_scheduler=False))


def whole_step_program(model, optimizer, scheduler):
    def train_step(x, y):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        scheduler.step()
        return loss
    return train_step


def break_sites(lines: list[str]) -> set[str]:
    return {line.split("Graph break in user code at ")[1].split("\n")[0]
            for line in lines if "Graph break in user code at " in line}


def test_whole_training_step_with_adamw_and_scheduler():
    tensorjit.reset()
    logs.clear()
    model, optimizer, scheduler = training_setup()
    counter = CountingBackend()
    compiled = tensorjit.compile(whole_step_program(model, optimizer, scheduler), backend=counter)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(STEPS):
            compiled(*batch(step))
    assert not [w for w in caught if "recompile_limit" in str(w.message)]  # never fell back to eager
    torch.testing.assert_close(list(model.parameters()), eager_parameters(with_scheduler=True))
    assert any(any("lerp" in str(node.target) for node in graph.graph.nodes) for graph in counter.graphs)
    # Where the step breaks once warmed up (the first call also breaks where the optimizer's
    # state is made): zero_grad (torch marks it disabled), backward(), the two
    # torch._dynamo.graph_break() calls the optimizer's _use_grad makes around the update, and
    # scheduler.step() (torch/optim/lr_scheduler.py is skipped, as Dynamo skips it: torch's log
    # shows the same 5 sites).
    sites = break_sites(logs.recent("graph_breaks"))
    steady = {site for site in sites if "adam.py" not in site}
    assert len(steady) <= 5, sites


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_optimizer_step_through_autograd_and_code_generation(backend):
    tensorjit.reset()
    model, optimizer, _ = training_setup()
    step = tensorjit.compile(optimizer.step, backend=backend)
    for index in range(STEPS):
        x, y = batch(index)
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        step()
    torch.testing.assert_close(list(model.parameters()), eager_parameters(with_scheduler=False))


SCHEDULERS = {
    "StepLR": lambda optimizer: torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5),
    "CosineAnnealingLR": lambda optimizer: torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=10),
}


def scheduled_run(compile_fn, scheduler_name: str, whole_step: bool, backend, steps: int = 10):
    """Graph counts after each step and the parameters, with the LR changed by a scheduler.
    compile_fn None runs eagerly."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    scheduler = SCHEDULERS[scheduler_name](optimizer)
    compile_fn = compile_fn or (lambda fn, backend: fn)
    if whole_step:
        train = compile_fn(whole_step_program(model, optimizer, scheduler), backend=backend)
    else:
        update = compile_fn(optimizer.step, backend=backend)

        def train(x, y):
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            update()
            scheduler.step()
    counts = []
    for step in range(steps):
        train(*batch(step))
        counts.append(getattr(backend, "graph_count", 0))
    return counts, list(model.parameters())


@pytest.mark.parametrize("whole_step", [False, True], ids=["optimizer_step", "whole_step"])
@pytest.mark.parametrize("scheduler_name", sorted(SCHEDULERS))
def test_lr_scheduler_recompiles_as_torch(scheduler_name, whole_step):
    """A float LR that changes every step or every other step: the first change recompiles with the LR a
    graph input (Dynamo's automatic dynamic for floats), then nothing recompiles; the scheduler's own
    step runs eagerly (Dynamo skips torch/optim/lr_scheduler.py) but the optimizer.step it wraps is
    captured. Graph counts after every step equal torch.compile's."""
    torch._dynamo.reset()
    theirs, _ = scheduled_run(torch.compile, scheduler_name, whole_step, CountingBackend())
    tensorjit.reset()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ours, parameters = scheduled_run(tensorjit.compile, scheduler_name, whole_step, CountingBackend())
    assert ours == theirs
    assert not [w for w in caught if "recompile_limit" in str(w.message)]
    torch.testing.assert_close(parameters, scheduled_run(None, scheduler_name, whole_step, None)[1])


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_changing_lr_through_autograd_and_code_generation(backend):
    """A float graph input through the static backends: compiled per value up to FLOAT_VARIANTS, then the
    captured graph runs as it is; the parameters equal eager's all along."""
    tensorjit.reset()
    steps = 12  # past FLOAT_VARIANTS values of the cosine schedule
    _, parameters = scheduled_run(tensorjit.compile, "CosineAnnealingLR", True, backend, steps)
    torch.testing.assert_close(parameters, scheduled_run(None, "CosineAnnealingLR", True, None, steps)[1])


OPTIMIZERS = {
    "SGD_momentum": lambda parameters: torch.optim.SGD(parameters, lr=0.1, momentum=0.9),
    "Adam_foreach": lambda parameters: torch.optim.Adam(parameters, lr=0.01, foreach=True),
    "AdamW_tensor_lr": lambda parameters: torch.optim.AdamW(parameters, lr=torch.tensor(0.01)),
    "RMSprop": lambda parameters: torch.optim.RMSprop(parameters, lr=0.01),
}


def cosine_scheduled_step(compile_fn, optimizer_name: str, steps: int = 8):
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4)
    optimizer = OPTIMIZERS[optimizer_name](model.parameters())
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=10)
    counter = CountingBackend()
    update = compile_fn(optimizer.step, backend=counter) if compile_fn else optimizer.step
    counts = []
    for step in range(steps):
        optimizer.zero_grad()
        model(batch(step)[0]).sum().backward()
        update()
        scheduler.step()
        counts.append(counter.graph_count)
    return counts, list(model.parameters())


@pytest.mark.parametrize("optimizer_name", sorted(OPTIMIZERS))
def test_other_optimizers_with_a_changing_lr_recompile_as_torch(optimizer_name):
    """A float LR recompiles once (then it is a graph input); a tensor LR never: as torch.compile."""
    torch._dynamo.reset()
    theirs, _ = cosine_scheduled_step(torch.compile, optimizer_name)
    tensorjit.reset()
    ours, parameters = cosine_scheduled_step(tensorjit.compile, optimizer_name)
    assert ours == theirs
    torch.testing.assert_close(parameters, cosine_scheduled_step(None, optimizer_name)[1])
