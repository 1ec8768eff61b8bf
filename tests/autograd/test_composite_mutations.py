"""Ops whose implementation mutates inside one op: the traced graphs must still be functional.

`torch.func.functionalize` lets a CompositeImplicitAutograd op through whole (circular
padding, instance_norm, rms_norm, the CPU GRU/LSTM cells), and the in-place steps of its
implementation and of its backward were recorded as they are; the partitioner and the
code generator, which assume functional graphs, then dropped or reordered them: garbage
forward outputs, unchanged running statistics, wrong gradients (issue 11, item 11).
"""

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import tensorjit
from tensorjit.autograd.joint import trace_forward, trace_joint

BACKENDS = ["aot_eager", "inductor"]


def mutating_nodes(traced) -> list[str]:
    """In-place ops in a traced graph other than functionalization's write-back into inputs."""
    placeholders = {n for n in traced.graph.nodes if n.op == "placeholder"}
    return [n.format_node() for n in traced.graph.nodes
            if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
            and n.target._schema.is_mutable
            and not (n.target is torch.ops.aten.copy_.default and n.args[0] in placeholders)]


def train_step(module, *inputs):
    """Outputs, input gradients, parameter gradients and buffers after one forward and backward."""
    inputs = [x.detach().clone().requires_grad_(x.requires_grad) for x in inputs]
    outputs = module(*inputs)
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    generator = torch.Generator().manual_seed(0)
    torch.autograd.backward(outputs, [torch.randn(o.shape, generator=generator) for o in outputs])
    return ([o.detach() for o in outputs], [x.grad for x in inputs],
            [p.grad for p in module.parameters()], [b.clone() for b in module.buffers()])


def assert_training_matches_eager(module, *inputs, backend):
    eager = copy.deepcopy(module)
    expected = train_step(eager, *inputs)
    tensorjit.reset()
    actual = train_step(tensorjit.compile(module, backend=backend), *inputs)
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("module", [nn.CircularPad1d((2, 1)), nn.CircularPad2d((1, 2, 2, 1)),
                                    nn.CircularPad3d(1)], ids=["1d", "2d", "3d"])
def test_circular_padding_trains_like_eager(module, backend):
    dims = {nn.CircularPad1d: 1, nn.CircularPad2d: 2, nn.CircularPad3d: 3}[type(module)]
    x = torch.randn(2, 3, *[5] * dims, requires_grad=True)
    assert_training_matches_eager(module, x, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_circular_padding_without_grad_matches_eager(backend):
    x = torch.randn(2, 3, 6, 5)
    tensorjit.reset()
    compiled = tensorjit.compile(lambda t: F.pad(t, (2, 3, 1, 2), mode="circular") * 2, backend=backend)
    torch.testing.assert_close(compiled(x), F.pad(x, (2, 3, 1, 2), mode="circular") * 2)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("cls", [nn.InstanceNorm1d, nn.InstanceNorm2d])
def test_instance_norm_updates_running_statistics(cls, backend):
    torch.manual_seed(0)
    module = cls(3, affine=True, track_running_stats=True)
    x = torch.randn(4, 3, *([6] * (1 if cls is nn.InstanceNorm1d else 2)), requires_grad=True) * 2 + 1
    assert_training_matches_eager(module, x, backend=backend)
    assert not torch.equal(module.running_mean, torch.zeros(3))


@pytest.mark.parametrize("backend", BACKENDS)
def test_rms_norm_input_gradient_with_eps_that_matters(backend):
    # Inputs small enough that eps (added in place to the mean of squares) changes the result.
    torch.manual_seed(0)
    module = nn.RMSNorm(8)
    x = (torch.randn(5, 8) * 3e-4).requires_grad_()
    eager = copy.deepcopy(module)
    expected = train_step(eager, x)
    tensorjit.reset()
    actual = train_step(tensorjit.compile(module, backend=backend), x)
    torch.testing.assert_close(actual, expected, atol=1e-3, rtol=1e-4)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("cls", [nn.GRUCell, nn.LSTMCell, nn.RNNCell])
def test_recurrent_cells_train_like_eager(cls, backend):
    torch.manual_seed(0)
    assert_training_matches_eager(cls(6, 5), torch.randn(3, 6, requires_grad=True), backend=backend)


def composite_cases():
    x = torch.randn(2, 3, 6, requires_grad=True)
    stats = [torch.zeros(3), torch.ones(3)]
    weight = torch.randn(6, requires_grad=True)
    return {
        "circular padding": (lambda t: F.pad(t, (2, 2), mode="circular"), [x]),
        "instance_norm": (lambda t, m, v: F.instance_norm(t, m, v, use_input_stats=True), [x, *stats]),
        "rms_norm": (lambda t, w: F.rms_norm(t, (6,), w), [x, weight]),
    }


@pytest.mark.parametrize("name", ["circular padding", "instance_norm", "rms_norm"])
def test_joint_and_forward_graphs_have_no_hidden_mutations(name):
    function, inputs = composite_cases()[name]
    gm = torch.fx.symbolic_trace(function)
    assert mutating_nodes(trace_joint(gm, inputs, None).graph_module) == []
    plain = [t.detach() for t in inputs]
    assert mutating_nodes(trace_forward(gm, plain, None).graph_module) == []


def test_instance_norm_statistics_become_lifted_input_mutations():
    function, inputs = composite_cases()["instance_norm"]
    traced = trace_joint(torch.fx.symbolic_trace(function), inputs, None)
    assert traced.mutated_inputs == [1, 2]


class Loss(nn.Module):
    """A functional loss as a module of its inputs, its targets a buffer."""

    def __init__(self, function, target):
        super().__init__()
        self.function = function
        self.register_buffer("target", target)

    def forward(self, *inputs):
        return self.function(*inputs, self.target)


SIGNS = torch.tensor([1.0, -1.0, -1.0, 1.0, 1.0] * 10)
LOSSES = {  # each clamps, fills or masks in place inside its implementation or its backward
    "margin_ranking": (lambda a, b, t: F.margin_ranking_loss(a, b, t, reduction="none"), 2),
    "hinge_embedding": (lambda a, t: F.hinge_embedding_loss(a, t, reduction="none"), 1),
    "cosine_embedding": (lambda a, b, t: F.cosine_embedding_loss(a.view(5, 10), b.view(5, 10), t[:5]), 2),
    "triplet_margin": (lambda a, b, t: F.triplet_margin_loss(a.view(5, 10), b.view(5, 10), (a * t).view(5, 10)), 2),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(LOSSES))
def test_losses_with_in_place_steps_give_eager_gradients(name, backend):
    function, arity = LOSSES[name]
    torch.manual_seed(0)
    inputs = [torch.randn(50, requires_grad=True) for _ in range(arity)]
    assert_training_matches_eager(Loss(function, SIGNS), *inputs, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_convolution_with_circular_padding_mode_trains_like_eager(backend):
    torch.manual_seed(0)
    module = nn.Conv2d(3, 4, 3, padding=1, padding_mode="circular")
    assert_training_matches_eager(module, torch.randn(2, 3, 6, 6, requires_grad=True), backend=backend)


class SpectralFilter(nn.Module):
    """A learned complex filter in the frequency domain: the backward of rfft copies into slices."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(8, 5, 2))

    def forward(self, x):
        return torch.fft.irfft(torch.fft.rfft(x) * torch.view_as_complex(self.weight), n=8).abs()


@pytest.mark.parametrize("backend", BACKENDS)
def test_spectral_filter_gradients_match_eager(backend):
    torch.manual_seed(0)
    assert_training_matches_eager(SpectralFilter(), torch.randn(8, 8, requires_grad=True), backend=backend)
