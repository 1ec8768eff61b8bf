"""nested_compile_region: one subgraph for every call site with equal inputs, as torch.compile.

torch.compile's graph holds one subgraph (`subgraph_0`) and an invoke_subgraph per call of a
marked region; tensorjit's holds one submodule (`region`) and a call_module per call. Outputs and
gradients equal eager's through every backend; inputs of other shapes get a subgraph of their own,
and a call with side effects stays inline.
"""

from __future__ import annotations

import pytest
import torch
import torch._dynamo

import tensorjit

from .harness import REFERENCE, CountingBackend

pytestmark = pytest.mark.skipif(REFERENCE, reason="compares tensorjit with torch.compile in one run")

MARKERS = {"torch.compiler": torch.compiler.nested_compile_region,
           "tensorjit.compiler": tensorjit.compiler.nested_compile_region}


def programs(mark):
    @mark
    def block(x, w):
        return torch.relu(x @ w) + x

    def function_region(x, ws):
        for w in ws:
            x = block(x, w)
        return x.sum()

    class Layer(torch.nn.Module):
        def __init__(self, width: int) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(width, width)

        @mark
        def forward(self, x):
            return torch.tanh(self.fc(x)) + x

    torch.manual_seed(0)
    layers = torch.nn.ModuleList([Layer(8) for _ in range(10)])

    def module_region(x):
        for layer in layers:
            x = layer(x)
        return x * 2

    return function_region, module_region, layers


def regions(gm) -> tuple[int, int]:
    """(subgraph modules, calls of them) in a recorded graph."""
    modules = {name for name, _ in gm.named_children()}
    calls = [n for n in gm.graph.nodes if n.op == "call_module" and n.target in modules
             or "invoke_subgraph" in str(n.target)]
    return len(modules), len(calls)


@pytest.mark.parametrize("marker", ["torch.compiler", "tensorjit.compiler"])
def test_one_subgraph_for_every_call_site(marker):
    function_region, module_region, _ = programs(MARKERS[marker])
    ws = [torch.randn(8, 8) for _ in range(4)]
    x = torch.randn(3, 8)
    for program, arguments, count in ((function_region, (x, ws), 4), (module_region, (x,), 10)):
        tensorjit.reset()
        ours = CountingBackend()
        torch.testing.assert_close(tensorjit.compile(program, backend=ours)(*arguments), program(*arguments))
        assert ours.graph_count == 1
        assert regions(ours.graphs[0]) == (1, count)
        if marker == "torch.compiler":  # torch.compile reads its own mark only
            torch._dynamo.reset()
            theirs = CountingBackend()
            torch.compile(program, backend=theirs)(*arguments)
            subgraphs, calls = regions(theirs.graphs[0])
            # torch.compile makes a second subgraph for the first layer, whose input needs no grad
            assert regions(ours.graphs[0])[0] <= subgraphs and calls <= count


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_outputs_and_gradients_equal_eager(backend):
    function_region, module_region, layers = programs(tensorjit.compiler.nested_compile_region)

    def run(fn):
        layers.zero_grad()
        x = torch.randn(3, 8, generator=torch.Generator().manual_seed(1)).requires_grad_()
        ws = [torch.randn(8, 8, generator=torch.Generator().manual_seed(i)).requires_grad_() for i in range(3)]
        first = fn[0](x, ws)
        second = fn[1](x).sum()
        grads = torch.autograd.grad(first + second, [x, *ws, *layers.parameters()])
        return first, second, grads
    tensorjit.reset()
    compiled = (tensorjit.compile(function_region, backend=backend), tensorjit.compile(module_region, backend=backend))
    torch.testing.assert_close(run(compiled), run((function_region, module_region)))


def test_other_shapes_get_their_own_subgraph():
    @tensorjit.compiler.nested_compile_region
    def scale(x):
        return x * 2 + 1

    def program(a, b):
        return scale(a).sum() + scale(b).sum() + scale(a * 3).sum()
    tensorjit.reset()
    counter = CountingBackend()
    a, b = torch.randn(4), torch.randn(2, 3)
    torch.testing.assert_close(tensorjit.compile(program, backend=counter)(a, b), program(a, b))
    assert regions(counter.graphs[0]) == (2, 3)


def test_a_region_with_side_effects_stays_inline():
    seen = []

    @tensorjit.compiler.nested_compile_region
    def logged(x):
        seen.append(1)
        return x.cos()

    def program(x):
        return logged(x) + logged(x + 1)
    tensorjit.reset()
    counter = CountingBackend()
    x = torch.randn(5)
    torch.testing.assert_close(tensorjit.compile(program, backend=counter)(x), program(x))
    assert len(seen) == 4  # two calls eagerly, two compiled
    assert regions(counter.graphs[0]) == (0, 0)


def test_symbolic_sizes():
    @tensorjit.compiler.nested_compile_region
    def scale(x):
        return x * 2 + x.shape[0]

    def program(a):
        return scale(scale(a))
    tensorjit.reset()
    counter = CountingBackend()
    compiled = tensorjit.compile(program, backend=counter, dynamic=True)
    for n in (3, 5, 7):
        a = torch.randn(n)
        torch.testing.assert_close(compiled(a), program(a))
    assert counter.graph_count == 1 and regions(counter.graphs[0]) == (1, 2)


def test_a_region_writing_in_place_stays_inline():
    @tensorjit.compiler.nested_compile_region
    def bump(x):
        x[0] = 5.0
        x.add_(1)
        return x * 2

    def program(x):
        bump(x)  # result unused: the write must survive
        return x + 1
    tensorjit.reset()
    counter = CountingBackend()
    a, b = torch.zeros(3), torch.zeros(3)
    torch.testing.assert_close(tensorjit.compile(program, backend=counter)(a), program(b))
    torch.testing.assert_close(a, b)
    assert regions(counter.graphs[0]) == (0, 0)
