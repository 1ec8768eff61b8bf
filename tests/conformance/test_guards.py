"""Guards: change one thing a graph was specialized on, expect a recompile and a right answer.

Each test compiles with a CountingBackend, calls once, changes exactly one
property (dtype, device, shape, strides, requires_grad, a Python argument, a
global, a closure cell, module.training, a submodule, a module attribute, grad
mode, a list's length) and checks both the graph count and the result. Also:
no recompile when nothing changed, and the recompile limit.
"""

import logging
import warnings

import pytest
import torch

from .harness import (
    REFERENCE, CountingBackend, assert_same, compile, set_cache_size_limit, xfail_on_reference,
)


class Compiled:
    """A compiled function beside its eager original, with a graph counter."""

    def __init__(self, fn, **compile_kwargs):
        self.fn = fn
        self.counter = CountingBackend()
        self.compiled = compile(fn, backend=self.counter, **compile_kwargs)

    def __call__(self, *args, **kwargs):
        expected = self.fn(*args, **kwargs)
        actual = self.compiled(*args, **kwargs)
        assert_same(expected, actual)
        return actual

    @property
    def graphs(self):
        return self.counter.graph_count


def double_plus_one(x):
    return x * 2 + 1


def test_no_recompile_for_new_values_same_metadata():
    run = Compiled(double_plus_one)
    for _ in range(4):
        run(torch.randn(3, 4))
    assert run.graphs == 1


def test_no_recompile_for_same_python_arguments():
    def fn(x, n, flag, name):
        return x * n if flag else x + len(name)

    run = Compiled(fn)
    for _ in range(3):
        run(torch.randn(3), 2, True, "ab")
    assert run.graphs == 1


def test_dtype_guard():
    run = Compiled(double_plus_one)
    run(torch.randn(4))
    out = run(torch.randn(4, dtype=torch.float64))
    assert out.dtype == torch.float64
    assert run.graphs == 2
    run(torch.arange(4))
    assert run.graphs == 3
    run(torch.randn(4))
    assert run.graphs == 3


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_device_guard():
    run = Compiled(double_plus_one)
    run(torch.randn(4))
    out = run(torch.randn(4, device="cuda"))
    assert out.device.type == "cuda"
    assert run.graphs == 2


def test_shape_guard_static():
    run = Compiled(double_plus_one, dynamic=False)
    run(torch.randn(4))
    run(torch.randn(5))
    run(torch.randn(2, 3))
    assert run.graphs == 3
    run(torch.randn(5))
    assert run.graphs == 3


def test_shape_guard_rank_change_dynamic_none():
    run = Compiled(double_plus_one)
    run(torch.randn(4))
    run(torch.randn(4, 4))
    assert run.graphs == 2


def test_dynamic_true_one_graph_for_many_sizes():
    def fn(x):
        return x.sin() * x.shape[0]

    run = Compiled(fn, dynamic=True)
    for size in (3, 5, 7, 11):
        run(torch.randn(size))
    assert run.graphs == 1


def test_stride_guard_contiguous_vs_transposed():
    def fn(x):
        return x.reshape(-1) * 2, x.is_contiguous(), x.stride()

    run = Compiled(fn)
    base = torch.randn(3, 4)
    run(base)
    run(base.t().contiguous())
    graphs = run.graphs
    out = run(base.t())
    assert out[1] is False
    assert run.graphs == graphs + 1


def test_requires_grad_guard():
    def fn(x):
        return (x * 3).sin()

    run = Compiled(fn)
    run(torch.randn(4))
    x = torch.randn(4, requires_grad=True)
    out = run(x)
    assert out.requires_grad
    assert run.graphs == 2
    out.sum().backward()
    torch.testing.assert_close(x.grad, 3 * torch.cos(3 * x.detach()))


def test_python_int_value_guard_static():
    def fn(x, n):
        return x * n + n

    run = Compiled(fn, dynamic=False)
    run(torch.randn(4), 2)
    run(torch.randn(4), 2)
    assert run.graphs == 1
    run(torch.randn(4), 3)
    assert run.graphs == 2
    run(torch.randn(4), 2)
    assert run.graphs == 2


def test_python_int_value_change_dynamic_none_correct():
    def fn(x, n):
        return x.repeat(n), n * 2

    run = Compiled(fn)
    for n in (1, 2, 3, 2):
        run(torch.randn(3), n)
    assert 2 <= run.graphs <= 3


def test_int_vs_float_argument_type_guard():
    def fn(x, s):
        return x * s, s * 2

    run = Compiled(fn)
    run(torch.randn(3), 2)
    out = run(torch.randn(3), 2.5)
    assert isinstance(out[1], float)
    assert run.graphs == 2


def test_bool_flag_guard():
    def fn(x, flag):
        if flag:
            return x + 1
        return x - 1

    run = Compiled(fn)
    run(torch.randn(4), True)
    run(torch.randn(4), False)
    assert run.graphs == 2
    run(torch.randn(4), True)
    assert run.graphs == 2


GLOBAL_FLAG = True
GLOBAL_SCALE = 2.0


def uses_global_flag(x):
    if GLOBAL_FLAG:
        return x * GLOBAL_SCALE
    return x / GLOBAL_SCALE


def test_global_flag_guard():
    global GLOBAL_FLAG
    run = Compiled(uses_global_flag)
    try:
        run(torch.randn(4))
        GLOBAL_FLAG = False
        run(torch.randn(4))
        assert run.graphs == 2
    finally:
        GLOBAL_FLAG = True


def test_global_number_guard():
    global GLOBAL_SCALE
    run = Compiled(uses_global_flag, dynamic=False)
    try:
        run(torch.randn(4))
        GLOBAL_SCALE = 5.0
        run(torch.randn(4))
        assert run.graphs == 2
    finally:
        GLOBAL_SCALE = 2.0


def test_global_tensor_rebound():
    namespace = {"torch": torch}
    exec("W = torch.ones(4)\ndef fn(x):\n    return x * W\n", namespace)
    run = Compiled(namespace["fn"])
    run(torch.randn(4))
    namespace["W"] = torch.full((4,), 3.0)
    out = run(torch.ones(4))
    torch.testing.assert_close(out, torch.full((4,), 3.0))


def make_closure():
    scale = 2

    def fn(x):
        return x * scale

    def set_scale(value):
        nonlocal scale
        scale = value

    return fn, set_scale


def test_closure_variable_guard():
    fn, set_scale = make_closure()
    run = Compiled(fn, dynamic=False)
    run(torch.randn(4))
    set_scale(7)
    out = run(torch.ones(4))
    torch.testing.assert_close(out, torch.full((4,), 7.0))
    assert run.graphs == 2


def test_closure_flag_guard():
    def make(flag):
        def fn(x):
            return x.relu() if flag else x.neg()
        return fn

    relu_fn, neg_fn = make(True), make(False)
    counter = CountingBackend()
    x = torch.randn(4)
    torch.testing.assert_close(compile(relu_fn, backend=counter)(x), relu_fn(x))
    torch.testing.assert_close(compile(neg_fn, backend=counter)(x), neg_fn(x))
    assert counter.graph_count == 2


class Normed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.bn = torch.nn.BatchNorm1d(4)
        self.drop = torch.nn.Dropout(0.0)
        self.act = torch.nn.ReLU()
        self.scale = 2.0

    def forward(self, x):
        return self.act(self.drop(self.bn(self.lin(x)))) * self.scale


def module_pair():
    torch.manual_seed(0)
    eager = Normed()
    twin = Normed()
    twin.load_state_dict(eager.state_dict())
    counter = CountingBackend()
    return eager, twin, compile(twin, backend=counter), counter


def test_module_training_guard():
    eager, twin, compiled, counter = module_pair()
    x = torch.randn(3, 4)
    assert_same(eager(x), compiled(x))
    eager.eval()
    compiled.eval()
    assert not twin.training
    assert_same(eager(x), compiled(x))
    assert counter.graph_count == 2
    eager.train()
    compiled.train()
    assert_same(eager(x), compiled(x))
    assert counter.graph_count == 2
    assert_same(eager, twin, "module after calls")


def test_swapped_submodule_guard():
    eager, twin, compiled, counter = module_pair()
    x = torch.randn(3, 4)
    assert_same(eager(x), compiled(x))
    eager.act = torch.nn.Tanh()
    compiled.act = torch.nn.Tanh()
    assert isinstance(twin.act, torch.nn.Tanh)
    assert_same(eager(x), compiled(x))
    assert counter.graph_count == 2


def test_module_attribute_guard():
    eager, twin, compiled, counter = module_pair()
    x = torch.randn(3, 4)
    assert_same(eager(x), compiled(x))
    eager.scale = 3.0
    twin.scale = 3.0
    assert_same(eager(x), compiled(x))
    assert counter.graph_count == 2


def test_module_parameter_replaced():
    eager, twin, compiled, counter = module_pair()
    x = torch.randn(3, 4)
    assert_same(eager(x), compiled(x))
    with torch.no_grad():
        eager.lin.weight.mul_(2)
        twin.lin.weight.mul_(2)
    assert_same(eager(x), compiled(x))
    new_bias = torch.nn.Parameter(torch.randn(4))
    eager.lin.bias = new_bias
    twin.lin.bias = torch.nn.Parameter(new_bias.detach().clone())
    assert_same(eager(x), compiled(x))


def test_grad_mode_guard():
    def fn(x):
        return x * 2

    run = Compiled(fn)
    x = torch.randn(4, requires_grad=True)
    assert run(x).requires_grad
    with torch.no_grad():
        out = run(x)
    assert not out.requires_grad
    assert run.graphs == 2
    assert run(x).requires_grad
    assert run.graphs == 2


def test_list_length_guard():
    def fn(xs):
        total = xs[0]
        for x in xs[1:]:
            total = total + x
        return total

    run = Compiled(fn)
    run([torch.randn(3), torch.randn(3)])
    run([torch.randn(3), torch.randn(3), torch.randn(3)])
    assert run.graphs == 2
    run([torch.randn(3), torch.randn(3)])
    assert run.graphs == 2


def test_dict_keys_guard():
    def fn(d):
        return sum(d[key] * index for index, key in enumerate(sorted(d)))

    run = Compiled(fn)
    run({"a": torch.randn(2), "b": torch.randn(2)})
    run({"a": torch.randn(2), "c": torch.randn(2)})
    assert run.graphs == 2


def test_object_attribute_guard():
    class Settings:
        def __init__(self, mode):
            self.mode = mode

    def fn(x, settings):
        if settings.mode == "add":
            return x + 1
        return x * 3

    run = Compiled(fn)
    settings = Settings("add")
    run(torch.randn(4), settings)
    settings.mode = "mul"
    run(torch.randn(4), settings)
    assert run.graphs == 2


def test_argument_type_guard_tensor_vs_number():
    def fn(x, y):
        return x + y

    run = Compiled(fn)
    run(torch.randn(3), torch.randn(3))
    run(torch.randn(3), 2.0)
    assert run.graphs == 2


class _Captured:
    """Warnings and log records mentioning the recompile limit."""

    def __init__(self):
        self.records = []

    def __enter__(self):
        self.handler = logging.Handler()
        self.handler.emit = self.records.append
        self.loggers = [logging.getLogger(), logging.getLogger("torch._dynamo"), logging.getLogger("tensorjit")]
        for logger in self.loggers:
            logger.addHandler(self.handler)
        self.warnings = warnings.catch_warnings(record=True)
        self.caught = self.warnings.__enter__()
        warnings.simplefilter("always")
        return self

    def __exit__(self, *exc):
        self.warnings.__exit__(*exc)
        for logger in self.loggers:
            logger.removeHandler(self.handler)

    def mentions(self, word):
        texts = [str(w.message) for w in self.caught] + [r.getMessage() for r in self.records]
        return [text for text in texts if word in text.lower()]


def test_recompile_limit_falls_back_to_eager_with_one_warning():
    def fn(x, n):
        return x * n

    set_cache_size_limit(8)
    run = Compiled(fn, dynamic=False)
    with _Captured() as captured:
        for n in range(1, 13):
            run(torch.ones(2), n)
        for n in range(1, 13):
            out = run(torch.ones(2), n)
            torch.testing.assert_close(out, torch.full((2,), float(n)))
    assert run.graphs == 8
    # the same warning message may be logged on several loggers; unique messages
    assert len(set(captured.mentions("limit"))) == 1


def test_recompile_limit_is_configurable():
    def fn(x, n):
        return x + n

    set_cache_size_limit(2)
    run = Compiled(fn, dynamic=False)
    with _Captured():
        for n in range(5):
            run(torch.zeros(2), n)
    assert run.graphs == 2


def test_default_dtype_guard():
    def fn(x):
        return x + torch.ones(x.shape[0])

    run = Compiled(fn)
    run(torch.randn(3))
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        out = run(torch.randn(3, dtype=torch.float64))
        assert out.dtype == torch.float64
    finally:
        torch.set_default_dtype(old)


def test_global_function_rebound():
    namespace = {"torch": torch}
    exec("def helper(x):\n    return x + 1\ndef fn(x):\n    return helper(x) * 2\n", namespace)
    run = Compiled(namespace["fn"])
    run(torch.zeros(2))
    exec("def helper(x):\n    return x - 1\n", namespace)
    out = run(torch.zeros(2))
    torch.testing.assert_close(out, torch.full((2,), -2.0))


def test_string_argument_guard():
    def fn(x, mode):
        return x.relu() if mode == "relu" else x.sigmoid()

    run = Compiled(fn)
    run(torch.randn(3), "relu")
    run(torch.randn(3), "sigmoid")
    assert run.graphs == 2


def test_list_of_ints_value_guard():
    def fn(x, dims):
        return x.permute(*dims)

    run = Compiled(fn)
    run(torch.randn(2, 3, 4), [0, 1, 2])
    run(torch.randn(2, 3, 4), [2, 0, 1])
    assert run.graphs == 2


def test_tensor_inside_list_shape_guard():
    def fn(items):
        return items[0] * 2 + items[1].sum()

    run = Compiled(fn, dynamic=False)
    run([torch.randn(3), torch.randn(3)])
    run([torch.randn(3), torch.randn(5)])
    assert run.graphs == 2


def test_tensor_argument_replaced_by_none():
    def fn(x, mask):
        return x + 1 if mask is None else x * mask

    run = Compiled(fn)
    run(torch.randn(3), torch.ones(3))
    run(torch.randn(3), None)
    assert run.graphs == 2


def test_input_aliasing_guard():
    def fn(a, b):
        a.add_(1)
        return b * 2

    counter = CountingBackend()
    compiled = compile(fn, backend=counter)
    x, y = torch.zeros(3), torch.zeros(3)
    compiled(x, y)
    eager_z = torch.zeros(3)
    expected = fn(eager_z, eager_z)
    z = torch.zeros(3)
    actual = compiled(z, z)
    torch.testing.assert_close(actual, expected)
    torch.testing.assert_close(z, eager_z)


def test_parameters_frozen_after_compile():
    eager, twin, compiled, counter = module_pair()
    x = torch.randn(3, 4)
    assert compiled(x).requires_grad
    for p in list(eager.parameters()) + list(twin.parameters()):
        p.requires_grad_(False)
    expected, actual = eager(x), compiled(x)
    assert not expected.requires_grad
    assert_same(expected, actual)


def test_different_module_instance_same_class():
    def fn(x, module):
        return module(x)

    torch.manual_seed(0)
    first, second = torch.nn.Linear(3, 3), torch.nn.Linear(3, 3)
    run = Compiled(fn)
    x = torch.randn(2, 3)
    run(x, first)
    run(x, second)
    run(x, first)


@xfail_on_reference("hook guards are skipped by default (skip_nnmodule_hook_guards)")
def test_forward_hook_added_after_compile_runs():
    eager, twin, compiled, counter = module_pair()
    x = torch.randn(3, 4)
    assert_same(eager(x), compiled(x))
    eager.bn.register_forward_hook(lambda module, args, out: out * 3 + 100)
    twin.bn.register_forward_hook(lambda module, args, out: out * 3 + 100)
    assert_same(eager(x), compiled(x))


def test_global_grad_mode_set_globally():
    def fn(x):
        return x * 2

    run = Compiled(fn)
    x = torch.randn(2, requires_grad=True)
    run(x)
    torch.set_grad_enabled(False)
    try:
        assert not run(x).requires_grad
    finally:
        torch.set_grad_enabled(True)
    assert run(x).requires_grad


def test_module_namespace_attribute_guard():
    import types

    settings = types.ModuleType("conformance_settings")
    settings.ACTIVATION = "relu"

    def fn(x):
        return x.relu() if settings.ACTIVATION == "relu" else x.tanh()

    run = Compiled(fn)
    run(torch.randn(3))
    settings.ACTIVATION = "tanh"
    out = run(torch.tensor([-1.0, 0.5]))
    torch.testing.assert_close(out, torch.tanh(torch.tensor([-1.0, 0.5])))


def test_object_tensor_attribute_replaced_with_new_shape():
    class Holder:
        def __init__(self):
            self.table = torch.ones(3)

    def fn(x, holder):
        return x.sum() * holder.table

    run = Compiled(fn)
    holder = Holder()
    run(torch.randn(2), holder)
    holder.table = torch.arange(5.0)
    run(torch.randn(2), holder)


def test_module_in_closure_swapped():
    layer = {"current": torch.nn.ReLU()}

    def fn(x):
        return layer["current"](x)

    run = Compiled(fn)
    run(torch.randn(3))
    layer["current"] = torch.nn.Sigmoid()
    run(torch.randn(3))
    assert run.graphs == 2


def test_guard_in_resume_function():
    import zlib

    def fn(x, mode):
        y = x * 2
        zlib.crc32(b"break")
        if mode == "add":
            return y + 1
        return y - 1

    run = Compiled(fn)
    run(torch.randn(2), "add")
    run(torch.randn(2), "sub")
    run(torch.randn(2), "add")


def test_no_recompile_for_module_list_slice_in_forward():
    class Sliced(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList([torch.nn.Linear(4, 4) for _ in range(3)])

        def forward(self, x):
            for layer in self.layers[:-1]:
                x = torch.relu(layer(x))
            return self.layers[-1](x)

    torch.manual_seed(0)
    model = Sliced()
    counter = CountingBackend()
    compiled = compile(model, backend=counter)
    x = torch.randn(2, 4)
    for _ in range(4):
        assert_same(model(x), compiled(x))
    assert counter.graph_count == 1


def test_storages_unshared_finds_a_shared_buffer_among_many():
    from tensorjit.capture.guards import storages_unshared

    state = [torch.randn(4) for _ in range(50)]
    written = tuple(state[::2])
    assert storages_unshared(written, tuple(state))
    assert not storages_unshared(written, tuple(state) + (state[10][1:],))  # a view of a written one
    assert storages_unshared(written, tuple(state) + (state[11][1:],))  # a view of one only read
    assert storages_unshared((torch.empty(0),), (torch.empty(0), torch.empty(0)))  # no buffer, no sharing
