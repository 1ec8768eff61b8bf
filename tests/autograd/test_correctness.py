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
    out = fn(*inputs)
    outs = out if isinstance(out, tuple) else (out,)
    sum(o.float().sum() for o in outs if o.requires_grad).backward()
    return [o.detach() for o in outs], [x.grad for x in inputs] + [p.grad.clone() for p in params]


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
