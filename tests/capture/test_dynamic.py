"""Dynamic shapes: one graph for many sizes, automatic dynamic after a size change, shape guards."""

import torch

import tensorjit


class Recorder:
    def __init__(self):
        self.graphs = []

    def __call__(self, gm, example_inputs):
        self.graphs.append((gm, example_inputs))
        return gm.forward


def f(x, y):
    n = x.shape[0]
    z = x.view(n * 2, -1) + 1
    if n > 3:
        z = z * 2
    return z.sum(0) + y.mean(), x.size(1)


def test_dynamic_true_captures_once_for_many_sizes():
    rec = Recorder()
    c = tensorjit.compile(f, backend=rec, dynamic=True)
    for n in (4, 6, 8):
        x, y = torch.randn(n, 4), torch.randn(n)
        out, size = c(x, y)
        expected, expected_size = f(x, y)
        torch.testing.assert_close(out, expected)
        assert size == expected_size and type(size) is int
    assert len(rec.graphs) == 1
    gm, example_inputs = rec.graphs[0]
    assert any(type(v) is int for v in example_inputs)  # symbolic sizes arrive as int inputs


def test_shape_guard_recompiles_outside_the_assumed_range():
    rec = Recorder()
    c = tensorjit.compile(f, backend=rec, dynamic=True)
    c(torch.randn(4, 4), torch.randn(4))
    x, y = torch.randn(2, 4), torch.randn(2)
    out, _ = c(x, y)  # n > 3 was assumed: a new graph, and the other branch
    torch.testing.assert_close(out, f(x, y)[0])
    assert len(rec.graphs) == 2


def test_automatic_dynamic_static_then_symbolic():
    rec = Recorder()
    c = tensorjit.compile(f, backend=rec)
    for n in (4, 6, 8, 10):
        x, y = torch.randn(n, 4), torch.randn(n)
        torch.testing.assert_close(c(x, y)[0], f(x, y)[0])
    assert len(rec.graphs) == 2  # [4], then [s0]
    first, second = rec.graphs[0][0], rec.graphs[1][0]
    assert not any(n.op == "placeholder" and isinstance(n.meta["example_value"], torch.SymInt)
                   for n in first.graph.nodes)
    assert any(n.op == "placeholder" and isinstance(n.meta["example_value"], torch.SymInt)
               for n in second.graph.nodes)


def test_dynamic_false_specializes_every_size():
    rec = Recorder()
    c = tensorjit.compile(f, backend=rec, dynamic=False)
    for n in (4, 6, 8):
        c(torch.randn(n, 4), torch.randn(n))
    assert len(rec.graphs) == 3
