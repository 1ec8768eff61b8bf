"""Float inputs under automatic dynamic, against torch.compile in one process.

Dynamo (specialize_float=False) bakes a float argument into the first graph, and after a recompile
caused by its value changing passes it as a graph input: one more graph, whatever values follow.
tensorjit gives the graph a SymFloat placeholder; math functions of it stay in the graph.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch._dynamo

import tensorjit

from .harness import REFERENCE, CountingBackend

pytestmark = pytest.mark.skipif(REFERENCE, reason="compares tensorjit with torch.compile in one run")


class Settings:
    def __init__(self, scale: float) -> None:
        self.scale = scale
        self.table = {"shift": scale / 2}


def float_argument(x, lr):
    return x * lr + lr


def float_math(x, angle):
    return x * math.cos(angle) + math.sqrt(angle)


def float_attribute_and_item(x, settings):
    return x * settings.scale - settings.table["shift"]


def float_branch(x, lr):
    if lr > 0.3:
        return x + lr
    return x - lr


PROGRAMS = {
    "argument": (float_argument, lambda v: (v,)),
    "math": (float_math, lambda v: (v,)),
    "attribute_and_item": (float_attribute_and_item, lambda v: (Settings(v),)),
    "branch": (float_branch, lambda v: (v,)),
}


def graph_counts(compile_fn, program, values):
    fn, arguments = PROGRAMS[program]
    counter = CountingBackend()
    compiled = compile_fn(fn, backend=counter)
    x = torch.randn(5)
    counts = []
    for value in values:
        torch.testing.assert_close(compiled(x, *arguments(value)), fn(x, *arguments(value)))
        counts.append(counter.graph_count)
    return counts


@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_float_inputs_recompile_as_in_torch(program):
    values = [0.5, 0.25, 0.125, 0.75, 0.4]
    torch._dynamo.reset()
    theirs = graph_counts(torch.compile, program, values)
    tensorjit.reset()
    ours = graph_counts(tensorjit.compile, program, values)
    assert ours == theirs


def test_float_input_is_a_graph_input_after_one_change():
    tensorjit.reset()
    counter = CountingBackend()
    compiled = tensorjit.compile(float_math, backend=counter)
    x = torch.randn(3)
    for value in (0.5, 0.25, 2.0):
        torch.testing.assert_close(compiled(x, value), float_math(x, value))
    assert counter.graph_count == 2
    assert any(type(example) is float for example in counter.example_inputs[-1])
    assert torch._sym_cos in counter.targets()  # math.cos stays in the graph, not specialized


class Counter:
    def __init__(self, step: int) -> None:
        self.step = step


def exp_of_a_symbolic_ratio(x, counter):
    return x * math.exp(counter.step / 10)  # math.exp has no symbolic form: the float is specialized


def test_a_specialized_symbolic_float_keeps_its_fraction():
    """An int attribute made symbolic, divided into a float that Python then needs (math.exp): the
    float is specialized to its value, not truncated to an int (which gave a wrong answer, silently:
    a cosine LR schedule drifted from eager's from its fourth step)."""
    tensorjit.reset()
    compiled = tensorjit.compile(exp_of_a_symbolic_ratio, backend=CountingBackend())
    x = torch.randn(4)
    for step in (2, 3, 4, 5, 7):
        torch.testing.assert_close(compiled(x, Counter(step)), exp_of_a_symbolic_ratio(x, Counter(step)))


def mixed_dtypes(x, lr):
    scale = 1 - lr * 0.1
    return (x * scale, x.to(torch.int32) * lr, x.half() + lr, lr / x.sum(), math.cos(lr) * x, x.double().mul(lr))


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_float_input_compiles_once_through_static_backends(backend, monkeypatch):
    """The float reaches aot_eager and inductor as a 0-d tensor: one compile serves every value, and
    results (dtypes included) are those of the float, next to float16, int, 0-d and float64 tensors."""
    import importlib
    module = importlib.import_module(f"tensorjit.backends.{backend}")
    compiles = []
    original = module.aot_compile
    monkeypatch.setattr(module, "aot_compile", lambda *a, **k: compiles.append(1) or original(*a, **k))
    tensorjit.reset()
    compiled = tensorjit.compile(mixed_dtypes, backend=backend)
    x = torch.randn(6)
    for value in (0.5, 0.25, 0.125, 0.75, 2.5, 1e-3):  # the second value recompiles with the float an input
        torch.testing.assert_close(compiled(x, value), mixed_dtypes(x, value))
    assert len(compiles) == 2


def reciprocal(x, lr):
    return x * (1 / lr)


def test_python_only_float_semantics_keep_the_per_value_compile():
    """1 / lr raises ZeroDivisionError for lr = 0.0 in Python, where a tensor gives inf: such a graph
    is not lifted, and lr = 0.0 raises as eagerly."""
    from tensorjit.backends.float_inputs import lift
    tensorjit.reset()
    counter = CountingBackend()
    compiled = tensorjit.compile(reciprocal, backend=counter)
    x = torch.randn(3)
    for value in (0.5, 0.25):
        torch.testing.assert_close(compiled(x, value), reciprocal(x, value))
    assert lift(counter.graphs[-1]) is None
    compiled = tensorjit.compile(reciprocal, backend="aot_eager")
    for value in (0.5, 0.25):
        compiled(x, value)
    with pytest.raises(ZeroDivisionError):
        compiled(x, 0.0)
