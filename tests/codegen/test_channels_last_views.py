"""Convolutions made channels-last, then flattened: the view that eager takes of its contiguous
output does not exist over the new layout, so the layout pass turns it into a reshape (the
graph compiles, and matches eager); a code generator that fails after the pass runs the graph
as traced."""

from __future__ import annotations

import copy

import pytest
import torch

import tensorjit
from tensorjit.codegen import report


def depthwise_classifier() -> torch.nn.Module:
    # A grouped convolution: the C++ code generator runs such graphs channels-last.
    return torch.nn.Sequential(
        torch.nn.Conv2d(8, 8, 3, padding=1, groups=8), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.Flatten(), torch.nn.Linear(8 * 8 * 8, 10))


@pytest.fixture(autouse=True)
def fresh():
    tensorjit.reset()
    report.reset()
    yield
    tensorjit.reset()


@pytest.mark.parametrize("train", [False, True], ids=["inference", "training"])
def test_flatten_after_a_channels_last_convolution_compiles_and_matches(train, caplog):
    torch.manual_seed(0)
    model = depthwise_classifier().train(train)
    reference = copy.deepcopy(model)
    x = torch.randn(4, 8, 8, 8)
    with caplog.at_level("WARNING"):
        out = tensorjit.compile(model)(x)
        expected = reference(x)
        torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-5)
        if train:
            out.square().mean().backward()
            expected.square().mean().backward()
            for p, q in zip(model.parameters(), reference.parameters()):
                torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
    assert not [r for r in caplog.records if "codegen failed" in r.getMessage()], caplog.text


def test_the_layout_pass_turns_an_impossible_view_into_a_reshape():
    from tensorjit.codegen.triton.layout import prefer_channels_last

    model = depthwise_classifier().eval()
    x = torch.randn(4, 8, 8, 8)
    gm = torch.fx.experimental.proxy_tensor.make_fx(model)(x)
    views = [n for n in gm.graph.nodes if n.target is torch.ops.aten.view.default]
    assert views
    assert prefer_channels_last(gm, [x], require_cuda=False)
    assert not [n for n in gm.graph.nodes if n.target is torch.ops.aten.view.default
                and not n.args[0].meta["val"].is_contiguous()]
    assert [n for n in gm.graph.nodes if n.target is torch.ops.aten.reshape.default]
    torch.testing.assert_close(gm(x), model(x))


def test_a_failing_code_generator_still_answers_as_eager(monkeypatch):
    from tensorjit.codegen import pipeline

    def fail(*args, **kwargs):
        raise RuntimeError("lowering gap")

    monkeypatch.setattr(pipeline.GraphLowering, "run", fail)  # after the layout pass rewrote the graph
    torch.manual_seed(0)
    model = depthwise_classifier().eval()
    x = torch.randn(4, 8, 8, 8)
    torch.testing.assert_close(tensorjit.compile(model)(x), model(x))
