"""Compiled entries must not keep modules or their parameters alive."""

import gc
import weakref

import torch

import tensorjit


def test_compiled_module_is_freed():
    def make():
        m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
        c = tensorjit.compile(m, backend="eager")
        c(torch.randn(2, 4))
        return weakref.ref(m), weakref.ref(m[0].weight)

    module, weight = make()
    gc.collect()
    assert module() is None and weight() is None


def test_module_reached_after_a_graph_break_is_freed():
    def make():
        m = torch.nn.Linear(4, 4)

        def inner(x):
            print("break")
            return m(x)

        f = tensorjit.compile(lambda x: inner(x).relu(), backend="eager")
        f(torch.randn(2, 4))
        return weakref.ref(m)

    module = make()
    gc.collect()
    assert module() is None


def test_a_finished_capture_holds_none_of_the_calls_objects_without_the_cycle_collector():
    """A capture's frames, values and graph form reference cycles; what they held of the call
    (the optimizer, its state tensors) is dropped when capture ends (Capture.release), so the
    state dies as soon as the program lets go, the cycle collector not run."""
    model = torch.nn.Linear(16, 16, bias=False)
    optimizer = torch.optim.Adadelta(model.parameters(), lr=0.01)

    def opt_step():
        optimizer.step()

    compiled = tensorjit.compile(opt_step, backend="eager")
    gc.collect()
    gc.disable()
    try:
        torch.sum(model(torch.ones(16))).backward()
        compiled()
        state = weakref.ref(optimizer.state[optimizer.param_groups[0]["params"][0]]["square_avg"])
        optimizer = None  # the compiled step reads it through its closure cell
        assert state() is None
    finally:
        gc.enable()
