"""What tracing does once and no more: the work a cold compile pays per graph.

A call under no_grad or inference_mode traces its inference graph at once, reading from the
trace that no output requires grad, instead of running the graph on fake tensors first; a joint
graph's Python code is generated only by make_fx unless a pass edits the graph."""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._python_dispatch import TorchDispatchMode

import tensorjit
import tensorjit.autograd as autograd
from tensorjit.autograd import aot_compile, joint
from tensorjit.autograd.joint import trace_joint


def _counting_fake_outputs(monkeypatch) -> list:
    calls = []
    original = joint.fake_outputs

    def counted(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)
    monkeypatch.setattr(autograd, "fake_outputs", counted)
    return calls


def _compiled(fn, inputs):
    seen = []

    def compiler(gm, example_inputs):
        seen.append(gm)
        return gm.forward
    return aot_compile(torch.fx.symbolic_trace(fn), inputs, fw_compiler=compiler), seen


def test_inference_call_traces_once(monkeypatch):
    calls = _counting_fake_outputs(monkeypatch)
    layer = torch.nn.Linear(4, 3)
    x = torch.randn(2, 4)
    for context in (torch.no_grad, torch.inference_mode):
        with context():
            function, seen = _compiled(layer, [x])
            (out,) = function(x)
        torch.testing.assert_close(out, layer(x).detach())
        assert not out.requires_grad and len(seen) == 1
    assert calls == []


def test_enable_grad_inside_a_no_grad_call_still_gets_its_backward(monkeypatch):
    calls = _counting_fake_outputs(monkeypatch)

    def fn(x):
        with torch.enable_grad():
            return x.sin() * 2

    x = torch.randn(5, requires_grad=True)
    with torch.no_grad():
        out = tensorjit.compile(fn, backend="aot_eager")(x)
    assert out.requires_grad
    out.sum().backward()
    torch.testing.assert_close(x.grad, x.detach().cos() * 2)
    assert calls == [1]  # the trace showed an output requiring grad: the general path ran


def test_requires_grad_inside_a_no_grad_call_runs_as_eager():
    def fn(x):
        leaf = x.clone().requires_grad_()
        return leaf, leaf * 2

    x = torch.randn(3)
    with torch.no_grad():
        got = tensorjit.compile(fn, backend="aot_eager")(x)
        expected = fn(x)
    assert [t.requires_grad for t in got] == [t.requires_grad for t in expected] == [True, False]
    torch.testing.assert_close(got, expected)


def test_joint_graph_code_is_generated_once(monkeypatch):
    generated = []
    original = torch.fx.GraphModule.recompile

    def recompile(self):
        generated.append(self)
        return original(self)
    gm = torch.fx.symbolic_trace(lambda t: (t.cos() * t).sum())
    monkeypatch.setattr(torch.fx.GraphModule, "recompile", recompile)
    x = torch.randn(8, requires_grad=True)
    traced = trace_joint(gm, [x], None)
    assert generated == []  # never run, only partitioned: no code until something calls it
    gradient = traced.graph_module(x, torch.tensor(1.0))[-1]
    torch.testing.assert_close(gradient, x.detach().cos() - x.detach() * x.detach().sin())


class RealAllocations(TorchDispatchMode):
    """The shapes of the real (not fake, not meta) tensors ops make while it is active."""

    def __init__(self):
        super().__init__()
        self.shapes = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if isinstance(out, torch.Tensor) and not isinstance(out, FakeTensor) and out.device.type != "meta":
            self.shapes.append(tuple(out.shape))
        return out


def test_the_joint_trace_makes_no_real_tangents():
    # Real zeros of each output's size, made for make_fx to fake, stayed cached by the device's
    # allocator (GPT-2 training's logits: 196 MB reserved for good on the H100).
    gm = torch.fx.symbolic_trace(lambda x, w: (x @ w,))
    x, w = torch.randn(64, 32), torch.randn(32, 512, requires_grad=True)
    with RealAllocations() as made:
        trace_joint(gm, [x, w], None)
    assert (64, 512) not in made.shapes, made.shapes
