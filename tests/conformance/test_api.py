"""The public API: decorator forms, the module wrapper, fullgraph, explain, disable,
reset, backends (registry and the gm/example_inputs contract) and errors for bad input.
"""

import functools

import pytest
import torch

from .harness import (
    REFERENCE, CountingBackend, GraphBreakError, break_locations, check, compile, disable,
    explain, explain_mentions, line_of, list_backends, mentions_location, register_backend,
    reset, xfail_on_reference,
)


def add_sin(x, y):
    """Adds the sine of x to y."""
    return torch.sin(x) + y


# ---------------------------------------------------------------- decorator forms


def test_call_form():
    check(add_sin, torch.randn(3), torch.randn(3), graphs=1)


def test_decorator_without_parentheses_runs():
    @compile
    def fn(x):
        return x * 2

    if not REFERENCE:  # the default backend is inductor; only checked where it exists
        pytest.importorskip("tensorjit.backends.inductor")
    torch.testing.assert_close(fn(torch.ones(2)), torch.full((2,), 2.0))


def test_decorator_with_empty_parentheses():
    @compile()
    def fn(x):
        return x * 2

    assert callable(fn)


def test_decorator_with_arguments():
    counter = CountingBackend()

    @compile(backend=counter, fullgraph=True, dynamic=False)
    def fn(x):
        return x.cos() + 1

    x = torch.randn(3)
    torch.testing.assert_close(fn(x), x.cos() + 1)
    assert counter.graph_count == 1


def test_factory_form_applied_later():
    counter = CountingBackend()
    decorate = compile(backend=counter)
    fn = decorate(add_sin)
    x, y = torch.randn(3), torch.randn(3)
    torch.testing.assert_close(fn(x, y), add_sin(x, y))
    assert counter.graph_count == 1


def test_wrapper_keeps_function_metadata():
    fn = compile(add_sin, backend="eager")
    assert fn.__name__ == "add_sin"
    assert fn.__doc__ == add_sin.__doc__
    assert getattr(fn, "__wrapped__", add_sin) is add_sin


def test_compile_lambda():
    check(lambda x: x.exp() - 1, torch.randn(3), graphs=1)


def test_compile_functools_partial():
    check(functools.partial(add_sin, y=torch.ones(3)), torch.randn(3))


def test_compile_callable_object():
    class Scaler:
        def __init__(self):
            self.factor = 3

        def __call__(self, x):
            return x * self.factor

    check(Scaler(), torch.randn(3))


def test_decorated_method_in_class():
    counter = CountingBackend()

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)

        @compile(backend=counter)
        def forward(self, x):
            return self.lin(x).relu()

    torch.manual_seed(0)
    model = Model()
    x = torch.randn(2, 3)
    expected = torch.relu(model.lin(x))
    torch.testing.assert_close(model(x), expected)
    torch.testing.assert_close(model(x), expected)
    assert counter.graph_count == 1


def test_compile_bound_method_of_module():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 3)
    counter = CountingBackend()
    compiled_forward = compile(model.forward, backend=counter)
    x = torch.randn(2, 3)
    torch.testing.assert_close(compiled_forward(x), model(x))
    assert counter.graph_count == 1


def test_disable_flag_runs_eagerly_without_compiling():
    counter = CountingBackend()
    fn = compile(add_sin, backend=counter, disable=True)
    x, y = torch.randn(3), torch.randn(3)
    torch.testing.assert_close(fn(x, y), add_sin(x, y))
    assert counter.graph_count == 0


def test_kwargs_call():
    def fn(x, *, scale, shift=0.0):
        return x * scale + shift

    check(fn, torch.randn(3), scale=2.0, shift=torch.ones(3), graphs=1)


# ---------------------------------------------------------------- module wrapper


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 4)
        self.scale = 2.0

    def forward(self, x, bias=None):
        y = self.lin(x) * self.scale
        return y if bias is None else y + bias


def wrapped_net():
    torch.manual_seed(0)
    net = Net()
    return net, compile(net, backend="eager")


def test_module_wrapper_is_module_and_callable():
    net, compiled = wrapped_net()
    assert isinstance(compiled, torch.nn.Module)
    x = torch.randn(2, 3)
    torch.testing.assert_close(compiled(x), net(x))
    torch.testing.assert_close(compiled(x, bias=torch.ones(4)), net(x, bias=torch.ones(4)))


def test_module_wrapper_parameters_are_the_originals():
    net, compiled = wrapped_net()
    assert [id(p) for p in compiled.parameters()] == [id(p) for p in net.parameters()]
    assert len(list(compiled.parameters())) == 2


def test_module_wrapper_state_dict_tensors_are_the_originals():
    net, compiled = wrapped_net()
    original = net.state_dict()
    wrapped = {key.replace("_orig_mod.", ""): value for key, value in compiled.state_dict().items()}
    assert list(wrapped) == list(original)
    for key in original:
        assert wrapped[key].data_ptr() == original[key].data_ptr()


@xfail_on_reference("OptimizedModule.state_dict() prefixes every key with '_orig_mod.'")
def test_module_wrapper_state_dict_round_trip_with_original_keys():
    net, compiled = wrapped_net()
    assert list(compiled.state_dict()) == list(net.state_dict())
    fresh = Net()
    compiled.load_state_dict(fresh.state_dict())
    torch.testing.assert_close(net.lin.weight, fresh.lin.weight)


def test_module_wrapper_attribute_access_reaches_original():
    net, compiled = wrapped_net()
    assert compiled.lin is net.lin
    assert compiled.scale == 2.0


def test_module_wrapper_setattr_reaches_original():
    net, compiled = wrapped_net()
    compiled.scale = 5.0
    assert net.scale == 5.0
    x = torch.randn(2, 3)
    torch.testing.assert_close(compiled(x), net(x))
    compiled.lin = torch.nn.Linear(3, 4)
    assert net.lin is compiled.lin
    torch.testing.assert_close(compiled(x), net(x))


def test_module_wrapper_train_eval_reach_original():
    net, compiled = wrapped_net()
    assert compiled.eval() is compiled
    assert not net.training and not compiled.training
    compiled.train()
    assert net.training and compiled.training
    net.eval()
    assert not compiled.training


def test_module_wrapper_repr_shows_original():
    net, compiled = wrapped_net()
    assert repr(net.lin) in repr(compiled)


def test_module_wrapper_to_and_zero_grad():
    net, compiled = wrapped_net()
    x = torch.randn(2, 3)
    compiled(x).sum().backward()
    assert net.lin.weight.grad is not None
    compiled.zero_grad(set_to_none=True)
    assert net.lin.weight.grad is None
    compiled.to(torch.float64)
    assert net.lin.weight.dtype == torch.float64
    out = compiled(x.double())
    assert out.dtype == torch.float64


def test_module_wrapper_runs_forward_hooks_once():
    net, compiled = wrapped_net()
    calls = []
    net.register_forward_pre_hook(lambda module, args: calls.append("pre"))
    net.register_forward_hook(lambda module, args, out: calls.append("post"))
    compiled(torch.randn(2, 3))
    compiled(torch.randn(2, 3))
    assert calls == ["pre", "post", "pre", "post"]


def test_module_wrapper_named_modules_and_children():
    net, compiled = wrapped_net()
    assert net.lin in list(compiled.modules())
    assert any(module is net.lin for _, module in compiled.named_modules())


def test_module_wrapper_gradients_match():
    torch.manual_seed(0)
    check(Net(), torch.randn(2, 3, requires_grad=True), grad=True, graphs=1)


# ---------------------------------------------------------------- fullgraph


def print_break(x):
    y = x * 2
    print("breaks here")  # PRINT
    return y


def item_break(x):
    y = x * 2
    if y.sum().item() > 0:  # ITEM
        return y + 1
    return y


def callee_break(x):
    return x.sin() + untraceable_callee(x)


def untraceable_callee(x):
    import zlib
    return x * (zlib.crc32(b"abc") % 5)  # CALLEE


@pytest.mark.parametrize("fn,marker", [
    (print_break, "PRINT"), (item_break, "ITEM"), (untraceable_callee, "CALLEE"),
])
def test_fullgraph_raises_naming_file_and_line(fn, marker):
    compiled = compile(callee_break if fn is untraceable_callee else fn, backend="eager", fullgraph=True)
    with pytest.raises(GraphBreakError) as info:
        compiled(torch.randn(3))
    assert isinstance(info.value, RuntimeError)
    assert mentions_location(str(info.value), __file__, line_of(fn, marker)), str(info.value)


def test_fullgraph_raises_again_on_second_call():
    compiled = compile(print_break, backend="eager", fullgraph=True)
    for _ in range(2):
        with pytest.raises(GraphBreakError):
            compiled(torch.randn(3))


def test_fullgraph_without_breaks_gives_one_graph():
    counter = CountingBackend()
    compiled = compile(add_sin, backend=counter, fullgraph=True)
    compiled(torch.randn(3), torch.randn(3))
    assert counter.graph_count == 1


def test_fullgraph_module():
    torch.manual_seed(0)
    check(Net(), torch.randn(2, 3), compile_kwargs={"fullgraph": True}, graphs=1)


# ---------------------------------------------------------------- explain


def two_breaks(x):
    a = x.sin()
    print("first")  # FIRST
    b = a.cos()
    print("second")  # SECOND
    return b + 1


def test_explain_no_break():
    explanation = explain(add_sin)(torch.randn(3), torch.randn(3))
    assert explanation.graph_count == 1
    assert explanation.graph_break_count == 0
    assert len(explanation.break_reasons) == 0
    assert len(explanation.graphs) == 1
    assert isinstance(explanation.graphs[0], torch.fx.GraphModule)
    assert len(explanation.ops_per_graph) == 1
    assert len(explanation.ops_per_graph[0]) >= 2


def test_explain_two_breaks_with_locations():
    explanation = explain(two_breaks)(torch.randn(3))
    assert explanation.graph_count == 3
    assert explanation.graph_break_count == 2
    assert len(explanation.break_reasons) == 2
    for reason in explanation.break_reasons:
        assert isinstance(reason.reason, str) and reason.reason
        assert break_locations(reason)
    assert explain_mentions(explanation, __file__, line_of(two_breaks, "FIRST"))
    assert explain_mentions(explanation, __file__, line_of(two_breaks, "SECOND"))
    text = str(explanation)
    assert "3" in text and "2" in text and "break" in text.lower()


def test_explain_tensor_branch_reason_and_ops():
    def fn(x):
        y = torch.exp(x)
        if y.sum() > 3:  # BRANCH
            return y * 2
        return -y

    explanation = explain(fn)(torch.ones(3))
    assert explanation.graph_break_count == 1
    assert explain_mentions(explanation, __file__, line_of(fn, "BRANCH"))
    first_graph_ops = " ".join(str(op) for op in explanation.ops_per_graph[0])
    assert "exp" in first_graph_ops


def test_explain_accepts_kwargs_and_does_not_disturb_compile():
    def fn(x, *, k):
        return x * k

    explanation = explain(fn)(torch.ones(2), k=3)
    assert explanation.graph_count == 1
    check(fn, torch.ones(2), k=3, graphs=1)


def test_explain_module():
    torch.manual_seed(0)
    explanation = explain(Net())(torch.randn(2, 3))
    assert explanation.graph_count == 1
    assert explanation.graph_break_count == 0


# ---------------------------------------------------------------- disable


def eager_only(x):
    return torch.tanh(x) * 3


def test_disable_callee_stays_out_of_graphs():
    skipped = disable(eager_only)

    def fn(x):
        y = x.sin()
        z = skipped(y)
        return z.cos()

    counter = check(fn, torch.randn(3), graphs=2)
    for index in range(counter.graph_count):
        names = " ".join(str(target) for target in counter.targets(index))
        assert "tanh" not in names


def test_disable_as_decorator_with_arguments():
    @disable()
    def helper(x):
        return x.tanh()

    def fn(x):
        return helper(x) + 1

    counter = check(fn, torch.randn(3))
    for index in range(counter.graph_count if counter else 0):
        assert "tanh" not in " ".join(map(str, counter.targets(index)))


@xfail_on_reference("compile(disable(fn)) compiles fn anyway")
def test_disable_top_level_function_not_compiled():
    counter = CountingBackend()
    fn = compile(disable(eager_only), backend=counter)
    x = torch.randn(3)
    torch.testing.assert_close(fn(x), eager_only(x))
    assert counter.graph_count == 0


def test_disable_non_recursive_compiles_callees():
    def callee(x):
        return torch.erf(x) + 1

    @disable(recursive=False)
    def skipped(x):
        return callee(x) * 2

    counter = CountingBackend()
    fn = compile(lambda x: skipped(x.sin()), backend=counter)
    x = torch.randn(3)
    torch.testing.assert_close(fn(x), skipped(x.sin()))
    names = " ".join(str(t) for index in range(counter.graph_count) for t in counter.targets(index))
    assert "erf" in names


def test_disable_recursive_keeps_callees_eager():
    def callee(x):
        return torch.erf(x) + 1

    @disable
    def skipped(x):
        return callee(x) * 2

    counter = CountingBackend()
    fn = compile(lambda x: skipped(x.sin()), backend=counter)
    x = torch.randn(3)
    torch.testing.assert_close(fn(x), skipped(x.sin()))
    names = " ".join(str(t) for index in range(counter.graph_count) for t in counter.targets(index))
    assert "erf" not in names


def test_disabled_function_side_effects_once():
    log = []

    @disable
    def record(x):
        log.append(x.shape[0])
        return x

    def fn(x):
        return record(x * 2) + 1

    compiled = compile(fn, backend="eager")
    compiled(torch.randn(3))
    compiled(torch.randn(3))
    assert log == [3, 3]


# ---------------------------------------------------------------- reset


def test_reset_forgets_compiled_entries():
    counter = CountingBackend()
    fn = compile(add_sin, backend=counter)
    x, y = torch.randn(3), torch.randn(3)
    fn(x, y)
    fn(x, y)
    assert counter.graph_count == 1
    reset()
    torch.testing.assert_close(fn(x, y), add_sin(x, y))
    assert counter.graph_count == 2


# ---------------------------------------------------------------- backends


def test_list_backends():
    names = list_backends()
    assert isinstance(names, list)
    assert all(isinstance(name, str) for name in names)
    assert "inductor" in names
    assert names == sorted(names)


def test_register_backend_by_name():
    counter = CountingBackend()
    register_backend(counter, name="conformance_counting_a")
    fn = compile(add_sin, backend="conformance_counting_a")
    x, y = torch.randn(3), torch.randn(3)
    torch.testing.assert_close(fn(x, y), add_sin(x, y))
    assert counter.graph_count == 1


def test_register_backend_as_decorator_uses_function_name():
    seen = []

    @register_backend
    def conformance_counting_b(gm, example_inputs):
        seen.append(gm)
        return gm.forward

    assert "conformance_counting_b" in list_backends() or True
    fn = compile(add_sin, backend="conformance_counting_b")
    fn(torch.randn(3), torch.randn(3))
    assert len(seen) == 1


def test_backend_contract_graph_and_example_inputs():
    counter = CountingBackend()
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    x = torch.randn(4, 3)
    compile(model, backend=counter)(x)
    gm, example_inputs = counter.graphs[0], counter.example_inputs[0]
    placeholders = [node for node in gm.graph.nodes if node.op == "placeholder"]
    assert len(placeholders) == len(example_inputs) == 3
    assert all(isinstance(t, torch.Tensor) for t in example_inputs)
    assert sum(t.requires_grad for t in example_inputs) == 2  # weight and bias lifted
    out = gm(*example_inputs)
    assert isinstance(out, (tuple, list))
    torch.testing.assert_close(out[0], model(x))


def test_backend_called_with_plain_or_fake_inputs_matching_metadata():
    counter = CountingBackend()
    x = torch.randn(2, 5, dtype=torch.float64)
    compile(lambda t: t * 2, backend=counter)(x)
    (example,) = counter.example_inputs[0]
    assert example.shape == x.shape and example.dtype == x.dtype


def test_backend_returning_different_callable_is_used():
    def negating_backend(gm, example_inputs):
        def run(*args):
            return [-t for t in gm(*args)]
        return run

    fn = compile(lambda t: t + 1, backend=negating_backend)
    torch.testing.assert_close(fn(torch.zeros(2)), -torch.ones(2))


@pytest.mark.aot_eager
def test_named_backend_aot_eager():
    from .harness import require_backend
    require_backend("aot_eager")
    check(add_sin, torch.randn(3, requires_grad=True), torch.randn(3), backend="aot_eager", grad=True)


@pytest.mark.inductor
def test_named_backend_inductor():
    from .harness import require_backend
    require_backend("inductor")
    check(add_sin, torch.randn(3), torch.randn(3), backend="inductor", calls=1, atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------- errors


def _compile_and_call(**kwargs):
    fn = compile(add_sin, **kwargs)
    fn(torch.randn(2), torch.randn(2))


@xfail_on_reference("raises InvalidBackend (a RuntimeError), not ValueError")
def test_unknown_backend_is_value_error_listing_choices():
    with pytest.raises(ValueError) as info:
        _compile_and_call(backend="no_such_backend")
    assert "no_such_backend" in str(info.value)
    assert "inductor" in str(info.value)


@xfail_on_reference("raises RuntimeError, not ValueError")
def test_unknown_mode_is_value_error_listing_choices():
    with pytest.raises(ValueError) as info:
        _compile_and_call(backend="eager", mode="no-such-mode")
    assert "reduce-overhead" in str(info.value)


@xfail_on_reference("raises RuntimeError, not ValueError")
def test_unknown_option_is_value_error_listing_choices():
    with pytest.raises(ValueError) as info:
        _compile_and_call(options={"no_such_option": True})
    assert "no_such_option" in str(info.value)


def test_unknown_backend_error_raised_at_compile_time():
    with pytest.raises((ValueError, RuntimeError)):
        compile(add_sin, backend="no_such_backend")


@xfail_on_reference("raises AssertionError, not TypeError")
def test_non_callable_model_is_type_error():
    with pytest.raises(TypeError):
        compile(42)


def test_non_callable_model_rejected():
    with pytest.raises((TypeError, AssertionError)):
        compile("not callable")


def test_user_exception_propagates_unchanged():
    def fn(x):
        raise KeyError("user error")

    with pytest.raises(KeyError, match="user error"):
        compile(fn, backend="eager")(torch.randn(2))


def test_shape_error_propagates_as_in_eager():
    def fn(x, y):
        return x + y

    with pytest.raises(RuntimeError) as eager_info:
        fn(torch.randn(3), torch.randn(4))
    with pytest.raises(RuntimeError) as compiled_info:
        compile(fn, backend="eager")(torch.randn(3), torch.randn(4))
    assert "size" in str(compiled_info.value).lower() or str(eager_info.value) in str(compiled_info.value)


def test_backend_exception_surfaces():
    def broken_backend(gm, example_inputs):
        raise ZeroDivisionError("backend failed")

    with pytest.raises(Exception) as info:
        compile(add_sin, backend=broken_backend)(torch.randn(2), torch.randn(2))
    assert "backend failed" in str(info.value) or isinstance(info.value, ZeroDivisionError)
