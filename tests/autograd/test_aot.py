"""Ahead-of-time autograd: partitioning decisions and the runtime's training semantics."""

import copy

import pytest
import torch

import tensorjit
from tensorjit.autograd import aot_compile
from tensorjit.autograd.joint import trace_joint
from tensorjit.autograd.partition import partition


def two_cosines(x):
    return torch.cos(torch.cos(x))


def saved_bytes(fn, *inputs, mode):
    gm = torch.fx.symbolic_trace(fn)
    parts = partition(trace_joint(gm, list(inputs), None), mode)
    vals = [n.meta["val"] for n in parts.backward.graph.nodes if n.op == "placeholder"][:parts.num_saved]
    return parts.num_saved, sum(v.numel() * v.element_size() for v in vals if isinstance(v, torch.Tensor))


def test_two_cosines_min_cut_saves_one_tensor():
    x = torch.randn(16, requires_grad=True)
    assert saved_bytes(two_cosines, x, mode="min_cut") == (1, 64)
    assert saved_bytes(two_cosines, x, mode="save_all")[0] == 2


def test_matmul_is_saved_not_recomputed():
    def fn(a, b):
        return (a @ b).relu().sum()

    a, b = torch.randn(8, 8, requires_grad=True), torch.randn(8, 8, requires_grad=True)
    gm = torch.fx.symbolic_trace(fn)
    parts = partition(trace_joint(gm, [a, b], None), "min_cut")
    backward_ops = [n.target for n in parts.backward.graph.nodes if n.op == "call_function"]
    forward_mms = [n for n in parts.forward.graph.nodes if n.target is torch.ops.aten.mm.default]
    assert len(forward_mms) == 1
    assert sum(t is torch.ops.aten.mm.default for t in backward_ops) == 2  # the two gradient products only


def test_min_cut_never_saves_more_than_save_all():
    def block(x, w):
        h = torch.nn.functional.linear(x, w)
        return torch.nn.functional.gelu(h).sin().mul(2).tanh().sum()

    x, w = torch.randn(8, 32, requires_grad=True), torch.randn(32, 32, requires_grad=True)
    assert saved_bytes(block, x, w, mode="min_cut")[1] <= saved_bytes(block, x, w, mode="save_all")[1]


def run_both(model, steps=3, inputs=lambda: torch.randn(4, 3, 8, 8), backend="aot_eager"):
    eager = copy.deepcopy(model)
    compiled = tensorjit.compile(model, backend=backend)
    opt_a = torch.optim.SGD(model.parameters(), lr=0.1)
    opt_b = torch.optim.SGD(eager.parameters(), lr=0.1)
    for step in range(steps):
        x = inputs()
        torch.manual_seed(step)
        loss_a = compiled(x).square().mean()
        loss_a.backward()
        torch.manual_seed(step)
        loss_b = eager(x).square().mean()
        loss_b.backward()
        torch.testing.assert_close(loss_a, loss_b, rtol=1e-5, atol=1e-5)
        for p, q in zip(model.parameters(), eager.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
        opt_a.step(); opt_b.step(); opt_a.zero_grad(); opt_b.zero_grad()
    for p, q in zip(model.state_dict().values(), eager.state_dict().values()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)


def test_cnn_with_batchnorm_and_dropout_trains_like_eager():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                                torch.nn.Dropout(0.25), torch.nn.Flatten(), torch.nn.Linear(144, 3))
    run_both(model)


def test_small_transformer_trains_like_eager():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    run_both(layer, inputs=lambda: torch.randn(2, 5, 16))


def test_lstm_trains_like_eager():
    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = torch.nn.LSTM(6, 8, batch_first=True)

        def forward(self, x):
            return self.lstm(x)[0]

    run_both(Net(), inputs=lambda: torch.randn(2, 4, 6))


def test_input_mutation_is_visible_to_the_caller():
    def fn(x, state):
        state.add_(x.detach())
        return (x * 2).sum()

    x, state = torch.randn(3, requires_grad=True), torch.zeros(3)
    compiled = tensorjit.compile(fn, backend="aot_eager")
    compiled(x, state).backward()
    torch.testing.assert_close(state, x.detach())
    torch.testing.assert_close(x.grad, torch.full((3,), 2.0))


def test_no_grad_call_builds_no_autograd_graph():
    lin = torch.nn.Linear(3, 3)
    compiled = tensorjit.compile(lin, backend="aot_eager")
    with torch.no_grad():
        out = compiled(torch.randn(2, 3))
    assert not out.requires_grad and out.grad_fn is None


def test_inputs_without_grad_and_outputs_without_grad():
    def fn(x, y):
        return x * y, (x > 0).sum()

    x, y = torch.randn(4, requires_grad=True), torch.randn(4)
    out, count = tensorjit.compile(fn, backend="aot_eager")(x, y)
    assert not count.requires_grad
    out.sum().backward()
    torch.testing.assert_close(x.grad, y)


def test_double_backward_is_an_error_not_a_wrong_gradient():
    x = torch.randn(3, requires_grad=True)
    compiled = tensorjit.compile(lambda t: (t ** 3).sum(), backend="aot_eager")
    (grad,) = torch.autograd.grad(compiled(x), x, create_graph=True)
    with pytest.raises(RuntimeError):
        torch.autograd.grad(grad.sum(), x)


def test_requires_grad_flip_recompiles():
    calls = []

    def backend(gm, example_inputs):
        calls.append(1)
        return tensorjit.backends.aot_eager.aot_eager(gm, example_inputs)

    import tensorjit.backends.aot_eager  # noqa: F401
    compiled = tensorjit.compile(lambda t: t.sin() * 2, backend=backend)
    a = torch.randn(3)
    compiled(a)
    b = torch.randn(3, requires_grad=True)
    compiled(b).sum().backward()
    torch.testing.assert_close(b.grad, b.detach().cos() * 2)
    assert len(calls) == 2


def test_aot_compile_hands_forward_and_backward_to_the_compilers():
    seen = []

    def compiler(gm, example_inputs):
        seen.append(gm)
        return gm.forward

    gm = torch.fx.symbolic_trace(two_cosines)
    x = torch.randn(4, requires_grad=True)
    fn = aot_compile(gm, [x], fw_compiler=compiler)
    fn(x)[0].sum().backward()
    assert len(seen) == 2
    torch.testing.assert_close(x.grad, torch.sin(torch.cos(x.detach())) * torch.sin(x.detach()))


def test_dropout_mask_is_saved_not_regenerated():
    def fn(t):
        return torch.nn.functional.dropout(t, 0.5, training=True) * 3

    x = torch.ones(1000, requires_grad=True)
    out = tensorjit.compile(fn, backend="aot_eager")(x)
    out.sum().backward()
    kept = (out != 0).float()
    assert 0 < kept.sum() < 1000
    torch.testing.assert_close(x.grad, kept * 6.0)


def test_seeded_dropout_matches_eager_bit_for_bit():
    def fn(t):
        return torch.nn.functional.dropout(t.sin(), 0.3, training=True)

    x = torch.randn(64, 64)
    compiled = tensorjit.compile(fn, backend="aot_eager")
    torch.manual_seed(7)
    got = compiled(x)
    torch.manual_seed(7)
    want = fn(x)
    assert torch.equal(got, want)


def test_backward_gets_tangents_in_the_traced_layout():
    """The backward graph was traced with contiguous tangents and views them accordingly; what
    autograd hands over has the caller's layout (.sum().backward() gives an expanded scalar,
    strides all 0). The runtime makes such a tangent contiguous before calling it."""
    seen = []

    def compiler(gm, example_inputs):
        def run(*args):
            seen.append([a.stride() for a in args if isinstance(a, torch.Tensor)])
            return gm.forward(*args)
        return run

    def fn(x):
        return (x * 2).view(4, 6).t()  # the backward views the tangent: .t().view(2, 12)

    gm = torch.fx.symbolic_trace(fn)
    x = torch.randn(2, 12, requires_grad=True)
    compiled = aot_compile(gm, [x], fw_compiler=compiler)
    compiled(x)[0].sum().backward()
    assert seen[-1] == [(4, 1)], "the backward saw the tangent contiguous, as traced"
    torch.testing.assert_close(x.grad, torch.full((2, 12), 2.0))


def test_many_mutated_inputs_are_written_back_in_batches():
    """Batch-norm statistics of many layers (mixed dtypes, one mismatched shape) written back."""
    from tensorjit.autograd.runtime import WriteBack

    write_back = WriteBack(list(range(8)))
    for call in range(2):  # the second call takes the plan the first made
        inputs = [torch.zeros(3) for _ in range(5)] + [torch.zeros((), dtype=torch.long), torch.zeros(2, 2),
                                                       torch.zeros(2)]
        values = [torch.full((3,), float(i + call)) for i in range(5)] + [torch.tensor(7), torch.ones(2)]
        values.append(inputs[7] if call == 0 else torch.full((2,), 5.0))  # written in place, then not
        write_back(inputs, values)
        for i in range(5):
            assert torch.equal(inputs[i], torch.full((3,), float(i + call)))
        assert inputs[5].item() == 7 and torch.equal(inputs[6], torch.ones(2, 2))  # broadcast like copy_
        assert torch.equal(inputs[7], torch.zeros(2) if call == 0 else torch.full((2,), 5.0))
        assert all(t._version == 1 for t in inputs[:7]) and inputs[7]._version == call
