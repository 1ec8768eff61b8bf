"""Autograd correctness against eager (issue 11): gradients, requires_grad of outputs, grad modes.

Each test compiles with the backends that go through `tensorjit.autograd` (aot_eager and
inductor) and compares what a user sees with eager: gradients of inputs and parameters,
and `requires_grad` / `grad_fn` of every output.
"""

import pytest
import torch

import tensorjit
from tensorjit.autograd.joint import trace_forward, trace_joint

BACKENDS = ["aot_eager", "inductor"]


def gradients(fn, params, *inputs):
    """(outputs, gradients of inputs and params) of one forward and `.sum().backward()`."""
    inputs = [x.detach().clone().requires_grad_(x.requires_grad) for x in inputs]
    for p in params:
        p.grad = None
    params = [p for p in params if p.requires_grad]
    out = fn(*inputs)
    outs = out if isinstance(out, tuple) else (out,)
    sum(o.float().sum() for o in outs if o.requires_grad).backward()
    return [o.detach() for o in outs], [x.grad for x in inputs] + [None if p.grad is None else p.grad.clone() for p in params]


def assert_same_gradients(fn, params, *inputs, backend, atol=1e-5):
    expected = gradients(fn, params, *inputs)
    actual = gradients(tensorjit.compile(fn, backend=backend), params, *inputs)
    torch.testing.assert_close(actual, expected, atol=atol, rtol=1e-4)


# --- item 4: CompositeImplicitAutograd ops whose decomposition works in place ---------------

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("cell", [torch.nn.GRUCell, torch.nn.LSTMCell, torch.nn.RNNCell])
def test_recurrent_cell_gradients(cell, backend):
    torch.manual_seed(0)
    module = cell(16, 16)

    def fn(x):
        out = module(x[:, 0])
        return (out[0] if isinstance(out, tuple) else out).sum()

    assert_same_gradients(fn, list(module.parameters()), torch.randn(4, 3, 16, requires_grad=True),
                          backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_cells_unrolled_with_state(backend):
    torch.manual_seed(0)
    gru, lstm = torch.nn.GRUCell(8, 8), torch.nn.LSTMCell(8, 8)

    def fn(x, h):
        c = torch.zeros_like(h)
        for step in range(x.shape[1]):
            h = gru(x[:, step], h)
            h, c = lstm(h, (h, c))
        return (h * c).sum()

    params = list(gru.parameters()) + list(lstm.parameters())
    assert_same_gradients(fn, params, torch.randn(2, 3, 8, requires_grad=True),
                          torch.randn(2, 8, requires_grad=True), backend=backend)


@pytest.mark.parametrize("op", [torch.gru_cell, torch.lstm_cell])
def test_traced_graphs_hold_no_in_place_ops(op):
    """What a composite op decomposes into below functionalization is functionalized too:
    an in-place node recomputed in the backward would apply its update twice."""
    x, h = torch.randn(2, 4, requires_grad=True), torch.randn(2, 4)
    weights = [torch.randn(4 * (4 if op is torch.lstm_cell else 3), 4, requires_grad=True) for _ in range(2)]
    state = (h, h) if op is torch.lstm_cell else h

    def fn(x, w_ih, w_hh):
        out = op(x, state, w_ih, w_hh)
        return (out[0] if op is torch.lstm_cell else out).sum()

    gm = torch.fx.symbolic_trace(fn)
    for traced in (trace_joint(gm, [x, *weights], None), trace_forward(gm, [x, *weights], None)):
        mutable = [n for n in traced.graph_module.graph.nodes if isinstance(n.target, torch._ops.OpOverload)
                   and n.target._schema.is_mutable]
        assert mutable == []


# --- items 1 and 2: which outputs require grad is eager's, decided by the graph ------------

def detached_and_attached(x):
    y = x * 2
    return y.detach(), y


def integer_and_boolean(x):
    return x.argmax(), x > 0, x * 2


def from_inputs_without_grad(x, w):
    return w * 2, x * w, w.sum()


def under_no_grad_region(x):
    with torch.no_grad():
        a = x * 2
    return a, x * 3


def enable_grad_region(x):
    with torch.enable_grad():
        return x * 2


def no_grad_inside_enable_grad(x):
    with torch.enable_grad():
        y = x * 2
        with torch.no_grad():
            z = y * 3
    return y, z


def set_grad_enabled_region(x):
    with torch.set_grad_enabled(False):
        a = x.sin()
    return a, x.cos()


def set_grad_enabled_function(x):
    torch.set_grad_enabled(False)
    a = x * 2
    torch.set_grad_enabled(True)
    return a, x * 3


def inference_mode_region(x):
    with torch.inference_mode():
        a = x * 2
    return a.clone(), x * 3


def requires_grad_inside(x, w):
    leaf = w.clone().requires_grad_()
    return leaf * 2, x * 2


def same_tensor_twice(x):
    y = x.sin()
    return y, y, y.detach()


def input_returned(x, w):
    return x, w, x.detach()


GRAD_MODE_PROGRAMS = [
    (detached_and_attached, "enabled"),
    (integer_and_boolean, "enabled"),
    (from_inputs_without_grad, "enabled"),
    (under_no_grad_region, "enabled"),
    (enable_grad_region, "no_grad"),
    (enable_grad_region, "enabled"),
    (no_grad_inside_enable_grad, "no_grad"),
    (set_grad_enabled_region, "enabled"),
    (set_grad_enabled_function, "enabled"),
    (inference_mode_region, "enabled"),
    (requires_grad_inside, "enabled"),
    (requires_grad_inside, "no_grad"),
    (same_tensor_twice, "enabled"),
    (input_returned, "enabled"),
]


def _call(fn, mode, *args):
    with torch.set_grad_enabled(mode == "enabled"):
        out = fn(*args)
    return out if isinstance(out, tuple) else (out,)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn,mode", GRAD_MODE_PROGRAMS,
                         ids=[f"{fn.__name__}-{mode}" for fn, mode in GRAD_MODE_PROGRAMS])
def test_outputs_require_grad_as_in_eager(fn, mode, backend):
    x, w = torch.randn(5, requires_grad=True), torch.randn(5)
    args = (x, w)[:fn.__code__.co_argcount]
    expected = _call(fn, mode, *args)
    actual = _call(tensorjit.compile(fn, backend=backend), mode, *args)
    assert [o.requires_grad for o in actual] == [o.requires_grad for o in expected]
    assert [o.grad_fn is None for o in actual] == [o.grad_fn is None for o in expected]
    torch.testing.assert_close(actual, expected)
    differentiable = [o for o in actual if o.requires_grad and o.is_floating_point()]
    if differentiable and x.requires_grad:
        (grad,) = torch.autograd.grad(sum(o.sum() for o in differentiable), x, allow_unused=True)
        (want,) = torch.autograd.grad(sum(o.sum() for o in expected if o.requires_grad and o.is_floating_point()),
                                      x, allow_unused=True)
        torch.testing.assert_close(grad, want)


# --- item 5: complex values: view_as_complex/view_as_real, conj, complex outputs ------------

def _complex_programs():
    torch.manual_seed(0)
    as_pairs = torch.randn(9, 2, requires_grad=True)
    weight = torch.randn(9, dtype=torch.complex64, requires_grad=True)
    programs = {
        "fft_filter_view_as_complex": lambda x: torch.fft.irfft(torch.fft.rfft(x) * torch.view_as_complex(as_pairs),
                                                                n=16),
        "complex_parameter": lambda x: torch.fft.irfft(torch.fft.rfft(x) * weight, n=16),
        "complex_output_conj": lambda x: torch.fft.rfft(x) * weight.conj(),
        "view_as_real_output": lambda x: torch.view_as_real(torch.fft.rfft(x) * weight),
        "abs_and_angle": lambda x: (torch.fft.rfft(x) * weight).abs() + (torch.fft.rfft(x) * weight).angle(),
        "conj_physical": lambda x: torch.view_as_real((torch.fft.rfft(x).conj() * weight).conj_physical()),
        "polar": lambda x: torch.polar(x.abs() + 0.1, x).sum(-1),
    }
    return programs, [as_pairs, weight]


COMPLEX_PROGRAMS, COMPLEX_PARAMETERS = _complex_programs()


def _real_loss(out):
    return (out.abs() ** 2 if out.is_complex() else out.square()).sum()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(COMPLEX_PROGRAMS))
def test_complex_gradients(name, backend, caplog):
    """The loss inside the compiled region, and outside it (the compiled region's complex
    outputs then get complex tangents from autograd)."""
    fn = COMPLEX_PROGRAMS[name]
    x = torch.randn(4, 16, requires_grad=True)
    with caplog.at_level("WARNING", logger="tensorjit.codegen"):
        expected = gradients(lambda t: _real_loss(fn(t)), COMPLEX_PARAMETERS, x)
        inside = gradients(tensorjit.compile(lambda t: _real_loss(fn(t)), backend=backend), COMPLEX_PARAMETERS, x)
        compiled = tensorjit.compile(fn, backend=backend)
        outside = gradients(lambda t: _real_loss(compiled(t)), COMPLEX_PARAMETERS, x)
    torch.testing.assert_close(inside, expected, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(outside, expected, atol=1e-4, rtol=1e-4)
    assert "codegen failed" not in caplog.text


# --- item 6: constants created while tracing reach both partitioned graphs -----------------

def constant_vector(x):
    return x * torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0])


def constant_in_backward(x):
    return (x * torch.tensor(2.0)).sin() * torch.tensor([0.5]).exp()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("partitioner", ["min_cut", "save_all"])
@pytest.mark.parametrize("fn", [constant_vector, constant_in_backward])
def test_tensor_constants_in_training_graphs(fn, partitioner, backend):
    from tensorjit.config import config
    old, config.partitioner = config.partitioner, partitioner
    try:
        assert_same_gradients(fn, [], torch.randn(2, 8, requires_grad=True), backend=backend)
    finally:
        config.partitioner = old


@pytest.mark.parametrize("backend", BACKENDS)
def test_multihead_attention_with_masks_made_inside(backend):
    torch.manual_seed(0)
    attention = torch.nn.MultiheadAttention(8, 2, batch_first=True)

    def fn(q):
        padding = torch.tensor([[False, False, False, False, True], [False] * 5])
        causal = torch.ones(5, 5, dtype=torch.bool).triu(1)
        return attention(q, q, q, key_padding_mask=padding, attn_mask=causal)[0]

    assert_same_gradients(fn, list(attention.parameters()), torch.randn(2, 5, 8, requires_grad=True),
                          backend=backend)


# --- item 10: a whole training step compiled (graph breaks around backward and step) --------

def _training_setup():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=10)

    def step(x, y):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        schedule.step()
        return loss.detach(), loss, loss.detach() * 2
    return model, step


@pytest.mark.parametrize("backend", BACKENDS)
def test_training_step_returns_losses_as_eager(backend):
    eager_model, eager_step = _training_setup()
    model, step = _training_setup()
    step = tensorjit.compile(step, backend=backend)
    torch.manual_seed(1)
    for _ in range(3):
        x, y = torch.randn(4, 8), torch.randn(4, 1)
        expected, actual = eager_step(x, y), step(x, y)
        assert [t.requires_grad for t in actual] == [t.requires_grad for t in expected]
        torch.testing.assert_close(actual, expected)
    torch.testing.assert_close(list(model.parameters()), list(eager_model.parameters()))


# --- found by the OpInfo gradient tier (tests/ops/test_opinfo_grad.py) ----------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_rrelu_backward_reads_the_noise_it_drew(backend):
    """rrelu_with_noise fills its noise buffer in place; functionalized, the backward must read
    the filled buffer (the functional variant's result), not the empty one."""
    def fn(x):
        noise = torch.empty_like(x)
        return torch.ops.aten.rrelu_with_noise(x, noise, 0.125, 0.25, True) * 2 + noise

    x = torch.randn(64, requires_grad=True)
    torch.manual_seed(3)
    expected = gradients(fn, [], x)
    torch.manual_seed(3)
    actual = gradients(tensorjit.compile(fn, backend=backend), [], x)
    torch.testing.assert_close(actual, expected)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("partitioner", ["min_cut", "save_all"])
def test_gradient_that_needs_no_tangent(partitioner, backend):
    """angle of a real input has a zero gradient built from the input alone: the backward
    graph returns a forward value."""
    from tensorjit.config import config
    old, config.partitioner = config.partitioner, partitioner
    try:
        assert_same_gradients(lambda x, y: torch.angle(x) + y * 2, [], torch.randn(5, requires_grad=True),
                              torch.randn(5, requires_grad=True), backend=backend)
    finally:
        config.partitioner = old


@pytest.mark.parametrize("backend", BACKENDS)
def test_sizes_known_only_at_run_time(backend):
    """index_fill with a tensor value: its backward sums the gradient at data-dependent
    positions; the partitioner weighs such values without guarding on their size."""
    from torch.fx.experimental.proxy_tensor import make_fx

    def fn(x, index, value):
        return x.index_fill(0, index, value)

    x, value = torch.randn(8, 3, requires_grad=True), torch.tensor(2.0, requires_grad=True)
    index = torch.tensor([1, 3])
    from tensorjit.backends.registry import lookup_backend
    compiled = lookup_backend(backend)(make_fx(fn)(x, index, value), [x, index, value])
    (out,) = compiled(x, index, value)
    expected = torch.autograd.grad((fn(x, index, value) * torch.arange(24.0).view(8, 3)).sum(), [x, value])
    actual = torch.autograd.grad((out * torch.arange(24.0).view(8, 3)).sum(), [x, value])
    torch.testing.assert_close(actual, expected)


@pytest.mark.parametrize("backend", BACKENDS)
def test_sparse_output_runs_eagerly(backend):
    def fn(x):
        return (x * 2).to_sparse()

    x = torch.randn(4, 4, requires_grad=True)
    out = tensorjit.compile(fn, backend=backend)(x)
    torch.testing.assert_close(out.to_dense(), fn(x).to_dense())
    (grad,) = torch.autograd.grad(out.to_dense().sum(), x)
    torch.testing.assert_close(grad, torch.full((4, 4), 2.0))
