"""Shapes that change between calls: static, automatic dynamic (dynamic=None) and dynamic=True.

Whatever a compiler decides to specialize or generalize, every result must
equal eager, including Python code that reads sizes (views, loops, branches on
shapes) and sizes 0 and 1, which behave differently from the rest.
"""

import pytest
import torch

from .harness import CountingBackend, assert_same, compile


class Run:
    def __init__(self, fn, **compile_kwargs):
        self.fn = fn
        self.counter = CountingBackend()
        self.compiled = compile(fn, backend=self.counter, **compile_kwargs)

    def __call__(self, *args):
        expected = self.fn(*args)
        actual = self.compiled(*args)
        assert_same(expected, actual)
        return actual

    @property
    def graphs(self):
        return self.counter.graph_count


def shape_reader(x):
    n = x.shape[0]
    y = x.view(n // 2, 2) if n % 2 == 0 else x.view(1, n)
    return y.sum(0) * n, n * 3, tuple(y.shape)


@pytest.mark.parametrize("dynamic", [None, True, False])
def test_shape_dependent_python_all_correct(dynamic):
    run = Run(shape_reader, dynamic=dynamic)
    for size in (4, 6, 8, 7, 9, 4, 2):
        run(torch.randn(size))


def test_automatic_dynamic_settles_after_second_size():
    def fn(x):
        return x * 2 + x.shape[0]

    run = Run(fn)
    run(torch.randn(8))
    run(torch.randn(10))
    assert run.graphs == 2
    for size in (12, 14, 20):
        run(torch.randn(size))
    assert run.graphs == 2


def test_dynamic_false_specializes_every_size():
    def fn(x):
        return x.cos()

    run = Run(fn, dynamic=False)
    for size in (3, 4, 5):
        run(torch.randn(size))
    assert run.graphs == 3


def test_sizes_zero_and_one_are_correct():
    def fn(x):
        return x.sum(0) + x.mean(0) if x.shape[0] > 0 else x.new_zeros(x.shape[1:]), x.shape[0]

    run = Run(fn)
    for size in (3, 5, 1, 0, 2, 1):
        run(torch.randn(size, 2))


def test_branch_on_size_under_dynamic():
    def fn(x):
        if x.shape[0] > 5:
            return x[:5] * 2
        return x * 3

    run = Run(fn, dynamic=True)
    for size in (3, 8, 4, 9, 5, 6):
        run(torch.randn(size))


def test_loop_over_size_under_dynamic():
    def fn(x):
        total = x.new_zeros(())
        for i in range(x.shape[0]):
            total = total + x[i] * i
        return total

    run = Run(fn)
    for size in (2, 3, 4, 3):
        run(torch.randn(size))


def test_dynamic_two_inputs_broadcast_and_matmul():
    def fn(a, b):
        return (a @ b).relu() + a.sum(-1, keepdim=True)

    run = Run(fn)
    for n, k, m in ((2, 3, 4), (3, 3, 4), (5, 3, 2), (4, 6, 4)):
        run(torch.randn(n, k), torch.randn(k, m))


def test_dynamic_with_module():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.Linear(8, 2))
    run = Run(model)
    for batch in (1, 2, 3, 5, 8):
        run(torch.randn(batch, 4))


def test_dynamic_int_arguments():
    def fn(x, n):
        return x.repeat(n)[: n * 2], n + 1

    run = Run(fn)
    for n in (1, 2, 3, 4, 7):
        run(torch.randn(3), n)


def test_dynamic_reshape_with_inferred_dimension():
    def fn(x):
        b = x.shape[0]
        return x.reshape(b, -1).transpose(0, 1).contiguous().view(-1), x.flatten(1).shape

    run = Run(fn)
    for b in (2, 3, 4):
        run(torch.randn(b, 2, 3))


def test_dynamic_cat_split_chunk():
    def fn(x):
        parts = x.split(2)
        chunks = x.chunk(2)
        return torch.cat([p * i for i, p in enumerate(parts)]), len(parts), [c.shape[0] for c in chunks]

    run = Run(fn)
    for size in (4, 6, 5, 9):
        run(torch.randn(size))


def test_dynamic_shape_with_grad():
    def fn(x, w):
        return (x @ w).tanh().sum(0)

    run = Run(fn)
    w_eager = torch.randn(3, 2, requires_grad=True)
    for batch in (2, 4, 6):
        x = torch.randn(batch, 3)
        w_compiled = w_eager.detach().clone().requires_grad_()
        w_reference = w_eager.detach().clone().requires_grad_()
        run.fn(x, w_reference).sum().backward()
        run.compiled(x, w_compiled).sum().backward()
        torch.testing.assert_close(w_compiled.grad, w_reference.grad)


def test_dynamic_stride_and_slicing():
    def fn(x):
        return x[::2] + 1, x[1:-1].sum(), x[-3:]

    run = Run(fn)
    for size in (5, 8, 11):
        run(torch.randn(size))


@pytest.mark.parametrize("fn, values, graphs", [
    (lambda x, n: x * n + x.shape[0], (2, 3, 4, 5), 2),       # an int that changes: symbolic after one change
    (lambda x, k: x.topk(k).values.sum() * 2, (1, 2, 3, 4), 2),
    (lambda x, n: x.roll(n) * n, (2, -3, 4, 7), 2),
    (lambda x, n: x[:n].sum() + x[n], (2, 3, 4, 5), 2),       # slicing and indexing keep it symbolic
    (lambda x, n: x * n, (2, 3, 1, 0, 5), 2),                 # 0 and 1 stay specialized, still correct
], ids=["arith", "topk", "roll", "index", "zero-one"])
def test_changing_int_argument_recompiles_once_as_dynamo_does(fn, values, graphs):
    run = Run(fn)
    for value in values:
        run(torch.randn(9), value)
    assert run.graphs == graphs


def test_int_used_by_python_control_flow_is_specialized_per_value():
    def fn(x, n):
        for _ in range(n):
            x = x * 2
        return x

    run = Run(fn)
    for n in (2, 3, 4):
        run(torch.randn(3), n)
    assert run.graphs == 3  # as torch.compile: range(n) needs n's value


def test_dynamic_true_makes_int_arguments_symbolic_from_the_start():
    run = Run(lambda x, n: (x * n).sum() + n, dynamic=True)
    for n in (2, 3, 4):
        run(torch.randn(5), n)
    assert run.graphs == 1


def test_symbolic_ints_reach_the_inductor_backend_correctly():
    fn = lambda x, n: (x[:n] * n).sum(0) + x[n]  # noqa: E731
    compiled = compile(fn, backend="inductor")
    for n in (2, 3, 4, 6):
        x = torch.randn(8, 3)
        assert_same(fn(x, n), compiled(x, n))
