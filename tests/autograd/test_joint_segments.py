"""Repeated blocks traced once in the joint graph (autograd/joint_segments.py).

A training graph whose blocks repeat traces the prefix, block 1 and the suffix, forward and backward,
and stamps block 1's forward and backward regions for the other blocks. The joint graph must be the
one a whole trace gives, node for node, name for name, with values of the same metadata; where the
argument does not hold (a value shared by the blocks that requires grad, a block's value read beyond
the next block, a block making constants, an in-place write of a block's input), the whole graph is
traced as before."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.fx._lazy_graph_module import _LazyGraphModule
from torch.fx.experimental import proxy_tensor

import tensorjit
from tensorjit import logs
from tensorjit.autograd import aot_compile
from tensorjit.autograd import joint
from tensorjit.autograd.joint import REUSE, fake_outputs, segment_plan, trace_joint
from tensorjit.autograd.repeats import metadata
from tests.autograd.test_repeated_blocks import DEPTH, Scaled, Stack, _assert_same_graph


def _captured(model, inputs, **compile_args):
    """(captured graph, example inputs) of `model`, its parameters requiring grad."""
    graphs = []

    def backend(gm, example_inputs):
        graphs.append((gm, list(example_inputs)))
        return gm.forward
    tensorjit.compile(model, backend=backend, **compile_args)(*inputs)
    return graphs[0]


def _joint(model, inputs, reuse: bool, **compile_args) -> torch.fx.GraphModule:
    gm, example_inputs = _captured(model, inputs, **compile_args)
    traced = trace_joint(gm, example_inputs, None, reuse_repeated_blocks=reuse).graph_module
    _LazyGraphModule.force_recompile(traced)
    return traced


def _assert_whole(model, inputs, reason: str | None = None) -> None:
    """Traced whole, for `reason` (logged), and the graph a whole trace gives."""
    logs.clear()
    traced = _joint(model, inputs, reuse=True)
    assert REUSE not in traced.meta
    if reason is not None:
        assert any(reason in line for line in logs.recent("compile_time")), logs.recent("compile_time")
    _assert_same_graph(_joint(model, inputs, reuse=False), traced)


@pytest.mark.parametrize("options", [{}, {"p": 0.25}, {"inplace_local": True}, {"inplace_input": True}],
                         ids=["plain", "dropout", "inplace-local", "inplace-input"])
def test_stamped_joint_is_the_whole_trace(options):
    model, inputs = Stack(depth=DEPTH, **options), [torch.randn(2, 8)]
    whole, stamped = _joint(model, inputs, reuse=False), _joint(model, inputs, reuse=True)
    count = stamped.meta[REUSE]
    assert REUSE not in whole.meta
    assert (count.blocks, count.stamped_blocks) == (DEPTH, DEPTH - 1)
    assert count.stamped_nodes > 5 * count.traced_nodes > 0
    _assert_same_graph(whole, stamped)


def test_make_fx_traces_one_block(monkeypatch):
    """The trace's cost is make_fx's, per ATen node recorded: with reuse it records the prefix, one
    block and the suffix, forward and backward; the graph holds every block's nodes all the same."""
    recorded = []
    original = proxy_tensor.proxy_call

    def counted(*args, **kwargs):
        recorded.append(args[1])
        return original(*args, **kwargs)
    monkeypatch.setattr(proxy_tensor, "proxy_call", counted)
    model, inputs = Stack(depth=DEPTH), [torch.randn(2, 8)]
    gm, example_inputs = _captured(model, inputs)
    whole = trace_joint(gm, example_inputs, None, reuse_repeated_blocks=False).graph_module
    whole_calls, recorded[:] = len(recorded), []
    stamped = trace_joint(gm, example_inputs, None, reuse_repeated_blocks=True).graph_module
    assert len(recorded) * 4 < whole_calls
    assert len(stamped.graph.nodes) == len(whole.graph.nodes)


class Tied(torch.nn.Module):
    """GPT-2's shape: an embedding whose weight the head reads again (its gradient is summed across
    the prefix and the suffix), a mask made in the prefix that every block reads (no grad)."""

    def __init__(self, depth: int = DEPTH, width: int = 16):
        super().__init__()
        self.embed = torch.nn.Embedding(50, width)
        self.blocks = torch.nn.ModuleList(Stack(depth=1, width=width).blocks[0] for _ in range(depth))
        self.gates = torch.nn.ParameterList(torch.nn.Parameter(torch.randn(width)) for _ in range(depth))

    def forward(self, ids):
        h = self.embed(ids)
        mask = (ids > 10).unsqueeze(-1).to(h.dtype)
        for block, gate in zip(self.blocks, self.gates):
            h = block(h) * (gate * mask + 1.0)
        return F.linear(h, self.embed.weight).logsumexp(-1).sum()


def test_tied_weights_and_a_shared_mask_are_stamped():
    model, inputs = Tied(), [torch.randint(0, 50, (2, 5))]
    whole, stamped = _joint(model, inputs, reuse=False), _joint(model, inputs, reuse=True)
    assert stamped.meta[REUSE].stamped_blocks == DEPTH - 1
    _assert_same_graph(whole, stamped)


class SharedScale(torch.nn.Module):
    """Every block reads one parameter: its gradient sums over the blocks."""

    def __init__(self, depth: int = DEPTH, width: int = 16):
        super().__init__()
        self.inner = Stack(depth=depth, width=width)
        self.scale = torch.nn.Parameter(torch.ones(width))

    def forward(self, x):
        h = self.inner.embed(x)
        for block in self.inner.blocks:
            h = block(h) * self.scale
        return h.sum()


class AllHidden(torch.nn.Module):
    """Every block's output is read at the end (as output_hidden_states would)."""

    def __init__(self, depth: int = DEPTH):
        super().__init__()
        self.inner = Stack(depth=depth)

    def forward(self, x):
        h, seen = self.inner.embed(x), []
        for block in self.inner.blocks:
            h = block(h)
            seen.append(h)
        return torch.stack(seen).sum()


class Constants(torch.nn.Module):
    """Blocks that make a tensor constant each (make_fx lifts it: a get_attr in each block's trace)."""

    def __init__(self, depth: int = DEPTH):
        super().__init__()
        self.embed = torch.nn.Linear(8, 8)
        self.layers = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(depth))

    def forward(self, x):
        x = self.embed(x)
        for layer in self.layers:
            x = torch.tanh(layer(x) * torch.tensor([2.0]).view(1, 1)[0] + 1.0).relu()
        return x.sum()


@pytest.mark.parametrize("model, reason", [
    (SharedScale(), "a value shared by every block requires grad"),
    (AllHidden(), "read beyond the next block"),
    (Constants(), "get_attr node in block 1's trace"),
    (Scaled(shared=False), "the carried value does not require grad"),
], ids=["shared-grad", "all-hidden", "constants", "no-grad-input"])
def test_what_the_argument_does_not_cover_is_traced_whole(model, reason):
    _assert_whole(model, [torch.randn(2, 8)], reason)


@pytest.mark.parametrize("name", ["stack", "inplace-input", "tied", "shared", "constants", "all-hidden"])
def test_compiled_training_equals_eager(name):
    model, x = {"stack": (Stack(depth=DEPTH, p=0.0), torch.randn(3, 8)),
                "tied": (Tied(), torch.randint(0, 50, (3, 4))),
                "shared": (SharedScale(), torch.randn(3, 8)),
                "inplace-input": (Stack(depth=DEPTH, inplace_input=True), torch.randn(3, 8)),
                "constants": (Constants(), torch.randn(3, 8)),
                "all-hidden": (AllHidden(), torch.randn(3, 8))}[name]
    seen = []

    def backend(gm, example_inputs):
        def compiler(aten_gm, aten_inputs):
            return aten_gm.forward
        compiled = aot_compile(gm, example_inputs, fw_compiler=compiler, reuse_repeated_blocks=True)
        seen.append(compiled)
        return compiled
    expected = model(x)
    expected = expected.sum() if expected.dim() else expected
    expected.backward()
    grads = [p.grad for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    logs.clear()
    got = tensorjit.compile(model, backend=backend)(x)
    (got.sum() if got.dim() else got).backward()
    torch.testing.assert_close(got.sum(), expected)
    for p, g in zip(model.parameters(), grads):
        assert (p.grad is None) == (g is None)
        if g is not None:
            torch.testing.assert_close(p.grad, g)
    stamped = any(line.startswith("autograd: joint graph of") for line in logs.recent("compile_time"))
    assert stamped == (name in ("stack", "inplace-input", "tied"))


@pytest.mark.parametrize("name", ["stack", "tied", "inplace-input"])
def test_fake_outputs_of_the_reduced_graph_are_the_whole_graphs(name, monkeypatch):
    """aot_compile learns which outputs require grad, and the tangents' metadata, from the reduced
    graph (prefix, one block, suffix) where the blocks stamp: the same values as the whole graph's,
    at the cost of one block."""
    model, x = {"stack": (Stack(depth=DEPTH, p=0.25), torch.randn(3, 8)), "tied": (Tied(), torch.randint(0, 50, (3, 4))),
                "inplace-input": (Stack(depth=DEPTH, inplace_input=True), torch.randn(3, 8))}[name]
    gm, example_inputs = _captured(model, [x])
    plan = segment_plan(gm)
    assert plan is not None
    reduced, whole = fake_outputs(gm, example_inputs, plan), fake_outputs(gm, example_inputs)
    assert [metadata(v) for v in reduced] == [metadata(v) for v in whole]
    def whole_graph(gm):
        raise AssertionError("the whole captured graph runs")
    monkeypatch.setattr(joint, "_functional", whole_graph)
    assert [metadata(v) for v in fake_outputs(gm, example_inputs, plan)] == [metadata(v) for v in whole]
