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
