"""The CPU-runnable examples of /work/shared/seeds/, eager against compiled.

000: backends and custom backends; 001: TinyBlock and the graph-break example;
002: the official tutorial (foo, decorator, MyModule, nested modules, disable,
a training step, data-dependent control flow, bar's graphs, explain, fullgraph);
004: the just-in-time example (guards on module type), the dict-input
function, two cosines with gradients, and shape recompiles.
"""

import pytest
import torch

from .harness import (
    REFERENCE, CountingBackend, GraphBreakError, assert_same, check, compile, disable,
    explain, explain_mentions, line_of, mentions_location, require_backend,
)


# ---------------------------------------------------------------- 000 backends


def test_seed000_sequential_eager_backend():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(10, 20), torch.nn.ReLU(), torch.nn.Linear(20, 30))
    check(model, torch.randn(10), graphs=1)


def test_seed000_custom_backend_returning_forward():
    seen = []

    def my_custom_backend(gm, example_inputs):
        seen.append((gm, example_inputs))
        return gm.forward

    torch.manual_seed(0)
    model = torch.nn.Linear(10, 10)
    compiled = compile(model, backend=my_custom_backend)
    x = torch.randn(1, 10)
    torch.testing.assert_close(compiled(x), model(x))
    assert len(seen) == 1
    gm, example_inputs = seen[0]
    assert isinstance(gm, torch.fx.GraphModule)
    assert all(isinstance(t, torch.Tensor) for t in example_inputs)
    # parameters are lifted to graph inputs, as in Dynamo's graphs
    shapes = sorted(tuple(t.shape) for t in example_inputs)
    assert shapes == sorted([(1, 10), (10, 10), (10,)])


def test_seed000_debug_backend_wrapping_forward():
    calls = []

    def debug_backend(gm, example_inputs):
        code = gm.code
        assert isinstance(code, str) and "def forward" in code

        def forward(*args, **kwargs):
            calls.append(len(args))
            return gm.forward(*args, **kwargs)

        return forward

    model = torch.nn.Linear(10, 10)
    compiled = compile(model, backend=debug_backend)
    x = torch.randn(1, 10)
    torch.testing.assert_close(compiled(x), model(x))
    compiled(x)
    assert calls == [3, 3]


class SimpleOptimizerBackend:
    """The seed's class-based backend: copies the graph and runs it."""

    def __init__(self):
        self.count = 0

    def __call__(self, gm, example_inputs):
        import copy
        self.count += 1
        optimized = copy.deepcopy(gm)
        optimized.recompile()
        return optimized.forward


def test_seed000_class_instance_backend():
    backend = SimpleOptimizerBackend()
    model = torch.nn.Sequential(torch.nn.Linear(10, 20), torch.nn.ReLU(), torch.nn.Linear(20, 30))
    compiled = compile(model, backend=backend)
    x = torch.randn(4, 10)
    torch.testing.assert_close(compiled(x), model(x))
    assert backend.count == 1


def test_seed000_relu_matmul_function():
    def model(x, y):
        return torch.relu(x @ y + 1)

    check(model, torch.randn(4, 5), torch.randn(5, 3), graphs=1)


@pytest.mark.aot_eager
def test_seed000_sequential_aot_eager_backend():
    require_backend("aot_eager")
    model = torch.nn.Sequential(torch.nn.Linear(10, 20), torch.nn.ReLU(), torch.nn.Linear(20, 30))
    check(model, torch.randn(3, 10), backend="aot_eager", grad=True, atol=1e-5, rtol=1e-5)


@pytest.mark.inductor
def test_seed000_sequential_inductor_backend():
    require_backend("inductor")
    model = torch.nn.Sequential(torch.nn.Linear(10, 20), torch.nn.ReLU(), torch.nn.Linear(20, 30))
    check(model, torch.randn(3, 10), backend="inductor", calls=1, atol=1e-4, rtol=1e-4)


# ---------------------------------------------------------------- 001 TinyBlock


class TinyBlock(torch.nn.Module):
    def __init__(self, hidden, expansion):
        super().__init__()
        self.ln = torch.nn.LayerNorm(hidden)
        self.fc1 = torch.nn.Linear(hidden, hidden * expansion)
        self.fc2 = torch.nn.Linear(hidden * expansion, hidden)

    def forward(self, x):
        residual = x
        x = self.ln(x)
        x = self.fc1(x)
        x = torch.nn.functional.gelu(x)
        x = x * 1.41421356 + 0.01
        x = self.fc2(x)
        return x + residual


def test_seed001_tinyblock_inference_mode():
    torch.manual_seed(0)
    model = TinyBlock(16, expansion=4).eval()
    x = torch.randn(2, 8, 16)
    counter = CountingBackend()
    compiled = compile(model, backend=counter, fullgraph=True)
    with torch.inference_mode():
        expected = model(x)
        actual = compiled(x)
        actual_again = compiled(x)
    torch.testing.assert_close(actual, expected)
    torch.testing.assert_close(actual_again, expected)
    assert counter.graph_count == 1


def test_seed001_tinyblock_training_gradients():
    torch.manual_seed(0)
    check(TinyBlock(8, expansion=2), torch.randn(2, 3, 8, requires_grad=True), grad=True, graphs=1)


def bad_fn(x, log):
    y = x.sin() + x.cos()
    if y.sum().item() > 0:
        log.append("positive")
        return y * 2
    return y - 2


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_seed001_bad_fn_item_branch(sign):
    x = sign * (torch.rand(16) + 2.0)
    check(bad_fn, x, [])


def test_seed001_bad_fn_fullgraph_raises():
    compiled = compile(bad_fn, backend="eager", fullgraph=True)
    with pytest.raises(GraphBreakError):
        compiled(torch.randn(16), [])


def test_seed001_compiled_submodule_inside_eager_model():
    class Model(torch.nn.Module):
        def __init__(self, block):
            super().__init__()
            self.block = block

        def forward(self, batch):
            x = batch * 2  # preprocess, stays eager
            x = self.block(x)
            return x.argmax(-1)  # postprocess

    torch.manual_seed(0)
    block = TinyBlock(8, 2)
    eager_model = Model(block)
    counter = CountingBackend()
    model = Model(compile(block, fullgraph=True, backend=counter))
    x = torch.randn(2, 8)
    assert torch.equal(model(x), eager_model(x))
    assert counter.graph_count == 1


# ---------------------------------------------------------------- 002 tutorial


def foo(x, y):
    a = torch.sin(x)
    b = torch.cos(y)
    return a + b


def test_seed002_foo():
    check(foo, torch.randn(10, 10), torch.randn(10, 10), graphs=1)


def test_seed002_decorator():
    t1, t2 = torch.randn(10, 10), torch.randn(10, 10)

    @compile(backend="eager")
    def opt_foo2(x, y):
        a = torch.sin(x)
        b = torch.cos(y)
        return a + b

    torch.testing.assert_close(opt_foo2(t1, t2), foo(t1, t2))


def test_seed002_bare_decorator_default_backend_callable():
    # @compile without arguments returns a callable wrapper without compiling yet
    @compile
    def opt_foo3(x, y):
        return foo(x, y)

    assert callable(opt_foo3)


class MyModule(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(100, 10)

    def forward(self, x):
        return torch.nn.functional.relu(self.lin(x))


class OuterModule(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner_module = MyModule()
        self.outer_lin = torch.nn.Linear(10, 2)

    def forward(self, x):
        x = self.inner_module(x)
        return torch.nn.functional.relu(self.outer_lin(x))


def test_seed002_my_module():
    torch.manual_seed(0)
    check(MyModule(), torch.randn(10, 100), graphs=1)


def test_seed002_outer_module_nested_calls_one_graph():
    torch.manual_seed(0)
    counter = check(OuterModule(), torch.randn(10, 100), graphs=1, grad=True)
    # both linears and both relus are in the single graph
    assert counter.op_count(0) >= 4


def complex_conjugate(z):
    return torch.conj(z)


def test_seed002_disable_not_recursive():
    @disable(recursive=False)
    def complex_function(real, imag):
        z = torch.complex(real, imag)
        return complex_conjugate(z)

    def outer_function():
        real = torch.tensor([2, 3], dtype=torch.float32)
        imag = torch.tensor([4, 5], dtype=torch.float32)
        z = complex_function(real, imag)
        return torch.abs(z)

    counter = CountingBackend()
    result = compile(outer_function, backend=counter)()
    torch.testing.assert_close(result, outer_function())
    assert counter.graph_count >= 1


def test_seed002_disable_recursive_default():
    @disable
    def complex_function(real, imag):
        z = torch.complex(real, imag)
        return complex_conjugate(z)

    def outer_function(real, imag):
        z = complex_function(real * 1, imag * 1)
        return torch.abs(z) + 1

    check(outer_function, torch.tensor([2.0, 3.0]), torch.tensor([4.0, 5.0]))


class TinyCNN(torch.nn.Module):
    """Stands in for densenet121: conv, batch norm, pooling, linear."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.conv2 = torch.nn.Conv2d(4, 8, 3, stride=2)
        self.fc = torch.nn.Linear(8, 10)

    def forward(self, x):
        x = torch.relu(self.bn(self.conv1(x)))
        x = torch.nn.functional.max_pool2d(torch.relu(self.conv2(x)), 2)
        x = torch.flatten(torch.nn.functional.adaptive_avg_pool2d(x, 1), 1)
        return self.fc(x)


def test_seed002_tiny_cnn_inference_no_grad():
    torch.manual_seed(0)
    model = TinyCNN().eval()
    x = torch.randn(2, 3, 12, 12)
    counter = CountingBackend()
    compiled = compile(model, backend=counter, fullgraph=True)
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(compiled(x), model(x))
    assert counter.graph_count == 1


def _train_step(opt, mod, data):
    opt.zero_grad(True)
    pred = mod(data[0])
    loss = torch.nn.CrossEntropyLoss()(pred, data[1])
    loss.backward()
    opt.step()
    return loss


def test_seed002_tiny_cnn_compiled_train_step():
    torch.manual_seed(0)
    eager_model = TinyCNN()
    compiled_model = TinyCNN()
    compiled_model.load_state_dict(eager_model.state_dict())
    eager_opt = torch.optim.SGD(eager_model.parameters(), lr=0.1)
    compiled_opt = torch.optim.SGD(compiled_model.parameters(), lr=0.1)
    train_opt = compile(_train_step, backend="eager")
    for _ in range(3):
        data = (torch.randn(4, 3, 12, 12), torch.randint(10, (4,)))
        eager_loss = _train_step(eager_opt, eager_model, data)
        compiled_loss = train_opt(compiled_opt, compiled_model, data)
        torch.testing.assert_close(compiled_loss, eager_loss)
    assert_same(eager_model, compiled_model, "model after 3 steps", rtol=1e-4, atol=1e-5)


def f1(x, y):
    if x.sum() < 0:
        return -y
    return y


def test_seed002_data_dependent_control_flow_both_paths():
    inp1, inp2 = torch.randn(5, 5), torch.randn(5, 5)
    compiled = compile(f1, backend="eager")
    for x in (inp1, -inp1, inp1.abs(), -inp1.abs()):
        torch.testing.assert_close(compiled(x, inp2), f1(x, inp2))


def f2(x, y):
    return x + y


def test_seed002_tensor_plus_int():
    check(f2, torch.randn(5, 5), 3)


def f3(x):
    x = x * 2
    x = torch.from_numpy(x.numpy() ** 2 + 1.0)
    x = x * 2
    return x


def test_seed002_numpy_call_inside():
    check(f3, torch.randn(5, 5))


def bar(a, b):
    x = a / (torch.abs(a) + 1)
    if b.sum() < 0:  # BREAK HERE
        b = b * -1
    return x * b


def test_seed002_bar_two_graphs_per_call_three_overall():
    counter = CountingBackend()
    opt_bar = compile(bar, backend=counter)
    inp1 = torch.randn(10)
    inp2 = torch.rand(10) + 0.1
    torch.testing.assert_close(opt_bar(inp1, inp2), bar(inp1, inp2))
    assert counter.graph_count == 2
    torch.testing.assert_close(opt_bar(inp1, -inp2), bar(inp1, -inp2))
    assert counter.graph_count == 3
    # both branches again: everything cached
    opt_bar(inp1, inp2)
    opt_bar(inp1, -inp2)
    assert counter.graph_count == 3


def test_seed002_explain_bar():
    explanation = explain(bar)(torch.randn(10), torch.randn(10))
    assert explanation.graph_count == 2
    assert explanation.graph_break_count == 1
    assert len(explanation.break_reasons) == 1
    assert len(explanation.graphs) == 2
    assert len(explanation.ops_per_graph) == 2
    assert explain_mentions(explanation, __file__, line_of(bar, "BREAK HERE"))
    text = str(explanation)
    assert "Graph Count: 2" in text or "graph count: 2" in text.lower()
    assert "Graph Break Count: 1" in text or "graph break count: 1" in text.lower()


def test_seed002_bar_fullgraph_raises_with_location():
    opt_bar = compile(bar, fullgraph=True, backend="eager")
    with pytest.raises(GraphBreakError) as info:
        opt_bar(torch.randn(10), torch.randn(10))
    assert isinstance(info.value, RuntimeError)
    assert mentions_location(str(info.value), __file__, line_of(bar, "BREAK HERE"))


def test_seed002_tiny_cnn_fullgraph_no_break():
    torch.manual_seed(0)
    model = TinyCNN().eval()
    x = torch.randn(2, 3, 12, 12)
    torch.testing.assert_close(compile(model, fullgraph=True, backend="eager")(x), model(x))


# ---------------------------------------------------------------- 004 walk-through


class A(torch.nn.Module):
    def forward(self, x):
        return torch.exp(2 * x)


class B(torch.nn.Module):
    def forward(self, x):
        return torch.exp(-x)


def f_mod(x, mod):
    y = mod(x)
    z = torch.log(y)
    return z


def test_seed004_guard_on_module_type():
    counter = CountingBackend()
    compiled = compile(f_mod, backend=counter)
    a, b = A(), B()
    x = torch.randn(5, 5, 5)
    torch.testing.assert_close(compiled(x, a), f_mod(x, a))
    assert counter.graph_count == 1
    torch.testing.assert_close(compiled(x, a), f_mod(x, a))
    assert counter.graph_count == 1
    torch.testing.assert_close(compiled(x, b), f_mod(x, b))
    assert counter.graph_count == 2
    torch.testing.assert_close(compiled(x, b), f_mod(x, b))
    torch.testing.assert_close(compiled(x, a), f_mod(x, a))
    assert counter.graph_count == 2


def dict_function(inputs):
    x = inputs["x"]
    y = inputs["y"]
    x = x.cos().cos()
    if x.mean() > 0.5:
        x = x / 1.1
    return x * y


def test_seed004_dict_input_function_both_shapes():
    torch.manual_seed(0)
    shape_10 = {"x": torch.randn(10, requires_grad=True), "y": torch.randn(10, requires_grad=True)}
    shape_8 = {"x": torch.randn(8, requires_grad=True), "y": torch.randn(8, requires_grad=True)}
    check(dict_function, shape_10, grad=True)
    check(dict_function, shape_8, grad=True)


def test_seed004_dict_input_warm_loop_bounded_graphs():
    counter = CountingBackend()
    compiled = compile(dict_function, backend=counter)
    shape_10 = {"x": torch.randn(10), "y": torch.randn(10)}
    shape_8 = {"x": torch.randn(8), "y": torch.randn(8)}
    for _ in range(5):
        torch.testing.assert_close(compiled(shape_10), dict_function(shape_10))
        torch.testing.assert_close(compiled(shape_8), dict_function(shape_8))
    settled = counter.graph_count
    for _ in range(3):
        compiled(shape_10)
        compiled(shape_8)
    assert counter.graph_count == settled


def two_cosine(x0):
    x1 = torch.cos(x0)
    x2 = torch.cos(x1)
    return x2


def test_seed004_two_cosine_gradients():
    check(two_cosine, torch.randn(5, 5, 5, requires_grad=True), grad=True, graphs=1)


@pytest.mark.aot_eager
def test_seed004_two_cosine_gradients_aot_eager():
    require_backend("aot_eager")
    check(two_cosine, torch.randn(5, 5, 5, requires_grad=True), grad=True, backend="aot_eager")


def test_seed004_shape_change_recompiles_dynamic_none():
    counter = CountingBackend()
    compiled = compile(two_cosine, backend=counter)
    x10, x8 = torch.randn(10), torch.randn(8)
    torch.testing.assert_close(compiled(x10), two_cosine(x10))
    assert counter.graph_count == 1
    torch.testing.assert_close(compiled(x10), two_cosine(x10))
    assert counter.graph_count == 1
    torch.testing.assert_close(compiled(x8), two_cosine(x8))
    assert counter.graph_count == 2
    x6 = torch.randn(6)
    torch.testing.assert_close(compiled(x6), two_cosine(x6))
    assert counter.graph_count <= 3
