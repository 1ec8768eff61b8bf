"""Guards on a compiled module's state: each protected property, changed after compiling,
makes the next call recompile (or read the new value) and give eager's answer, on the fast
path (the first entry's inline guards) as on the general one; with the tensors checked in
Python and by the native check (capture/native_guards.py), every test in both ways."""

import pytest
import torch

import tensorjit
from tensorjit.capture import native_guards
from tensorjit.config import config as default_config


@pytest.fixture(autouse=True, params=["python", "native"])
def tensor_checks(request, monkeypatch):
    """The native check for entries with any tensor guard, or for none."""
    if request.param == "native":
        if native_guards.checker(default_config, wait=True) is None:
            pytest.skip("no native tensor check on this machine (no C++ compiler)")
        monkeypatch.setattr(native_guards, "MIN_TENSORS", 1)
    else:
        monkeypatch.setattr(native_guards, "MIN_TENSORS", 10 ** 9)
    return request.param


class Counter:
    """backend="eager" that counts its compilations."""

    def __init__(self):
        self.graphs = 0

    def __call__(self, gm, example_inputs):
        self.graphs += 1
        return gm.forward


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.norm = torch.nn.BatchNorm2d(4)
        self.head = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4 * 5 * 5, 6))
        self.scale = 2
        self.offsets = (1, 2)

    def forward(self, x):
        y = torch.relu(self.norm(self.conv(x)))
        return self.head(y) * self.scale + self.offsets[1]


def compiled_net(train=False):
    torch.manual_seed(0)
    net = Net().train(train)
    counter = Counter()
    compiled = tensorjit.compile(net, backend=counter)
    x = torch.randn(2, 3, 5, 5)
    for _ in range(3):
        torch.testing.assert_close(compiled(x), net(x))
    assert counter.graphs == 1
    return net, compiled, counter, x


def check_same(net, compiled, x):
    expected = net(x)
    for _ in range(2):  # the first call may recompile; the second runs the new entry's fast path
        actual = compiled(x)
        assert actual.dtype == expected.dtype
        torch.testing.assert_close(actual, expected)


def test_a_deleted_submodule_is_a_miss_not_an_error():
    class Optional(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(4, 4)
            self.b = torch.nn.Linear(4, 4)

        def forward(self, x):
            y = self.a(x)
            if hasattr(self, "b"):
                y = self.b(y)
            return y

    module = Optional()
    compiled = tensorjit.compile(module, backend="eager")
    x = torch.randn(2, 4)
    compiled(x)
    compiled(x)
    del module.b  # the fast path's guards read `_modules['b']`: a KeyError there is a failed guard
    torch.testing.assert_close(compiled(x), module(x))


def test_a_replaced_parameter_is_read_anew():
    net, compiled, counter, x = compiled_net()
    net.conv.weight = torch.nn.Parameter(torch.randn_like(net.conv.weight))
    check_same(net, compiled, x)


def test_requires_grad_flipped_recompiles():
    net, compiled, counter, x = compiled_net()
    net.head[1].weight.requires_grad_(False)
    check_same(net, compiled, x)
    assert counter.graphs == 2


@pytest.mark.parametrize("change", ["dtype", "shape", "stride"])
def test_parameter_metadata_changed_in_place_recompiles(change):
    net, compiled, counter, x = compiled_net()
    weight = net.head[1].weight
    if change == "dtype":
        net.double()  # nn.Module._apply assigns `.data`: the same Parameter objects, new dtype
        x = x.double()
    elif change == "shape":
        net.head[1].weight.data = torch.randn(6, 4 * 5 * 5 + 0)[:, :].clone().t().contiguous().t()
        net.head[1].bias.data = torch.randn(6)
    else:
        weight.data = torch.randn(4 * 5 * 5, 6).t()  # same shape, transposed strides
    assert net.head[1].weight is weight
    check_same(net, compiled, x)
    assert counter.graphs == 2 or change == "shape"


def test_the_tensor_checks_are_the_ones_asked_for(tensor_checks):
    net, compiled, counter, x = compiled_net()
    text = compiled._compiled_forward.entries[0].guards.source_text
    assert ("_tensors_match(" in text) == (tensor_checks == "native")
    assert (".requires_grad" in text) == (tensor_checks == "python")
    assert ("_empty_entries(" in text) == (tensor_checks == "native")  # the modules' hook tables


@pytest.mark.parametrize("change", ["as_strided_", "requires_grad_", "detach_"])
def test_parameter_changed_by_an_in_place_method_recompiles(change):
    net, compiled, counter, x = compiled_net()
    weight = net.head[1].weight
    with torch.no_grad():
        if change == "as_strided_":  # same shape, strides of the transpose: another reading of the memory
            weight.as_strided_(weight.shape, (1, weight.shape[0]))
        else:
            getattr(weight, change)() if change == "detach_" else weight.requires_grad_(False)
    check_same(net, compiled, x)
    assert counter.graphs == 2


def test_input_changed_recompiles():
    net, compiled, counter, x = compiled_net()
    for other in (x[:1], x.transpose(2, 3), torch.nn.Parameter(x.clone()), x.clone().requires_grad_()):
        expected = net(other)
        torch.testing.assert_close(compiled(other), expected)
    assert counter.graphs > 1


def test_buffer_strides_changed_in_place_recompile():
    net, compiled, counter, x = compiled_net()
    net.norm.running_var.data = torch.full((8,), 2.0)[::2]
    check_same(net, compiled, x)
    assert counter.graphs == 2


def test_a_replaced_buffer_is_read_anew():
    net, compiled, counter, x = compiled_net()
    net.norm.running_mean = torch.full((4,), 0.5)
    check_same(net, compiled, x)


def test_module_attributes_changed_recompile():
    net, compiled, counter, x = compiled_net()
    net.norm.eps = 0.5
    check_same(net, compiled, x)
    assert counter.graphs == 2
    net.conv.padding = (0, 0)
    with pytest.raises(RuntimeError):
        net(x)  # the head no longer fits: both raise
    with pytest.raises(RuntimeError):
        compiled(x)
    net.conv.padding = (1, 1)
    check_same(net, compiled, x)


def test_constants_of_another_type_recompile():
    net, compiled, counter, x = compiled_net()
    net.scale = 2.0  # equal, another type
    check_same(net, compiled, x)
    net.offsets = (1, 2.0)  # an equal tuple with a float item
    check_same(net, compiled, x)
    net.offsets = [1, 2]  # an equal list
    check_same(net, compiled, x)
    net.offsets = (1, 3)
    check_same(net, compiled, x)
    assert counter.graphs == 5


def test_integer_constant_types_change_the_result_dtype():
    class Scale(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.factors = (2, 3)

        def forward(self, x):
            return x * self.factors[0] + self.factors[1]

    module = Scale()
    compiled = tensorjit.compile(module, backend="eager")
    x = torch.arange(4)
    for _ in range(2):
        assert compiled(x).dtype == torch.int64
    module.factors = (2.0, 3)
    assert compiled(x).dtype == torch.float32
    module.factors = (True, 3)
    torch.testing.assert_close(compiled(x), module(x))


def test_training_flag_recompiles():
    net, compiled, counter, x = compiled_net()
    net.train()
    check_same(net, compiled, x)
    net.eval()
    check_same(net, compiled, x)


def test_a_hook_added_to_a_submodule_runs():
    net, compiled, counter, x = compiled_net()
    seen = []
    handle = net.norm.register_forward_hook(lambda module, args, out: seen.append(out.shape) or out * 0)
    check_same(net, compiled, x)
    assert seen
    handle.remove()
    check_same(net, compiled, x)


def test_a_hook_written_into_the_hook_table_directly_runs():
    net, compiled, counter, x = compiled_net()
    net.norm._forward_hooks[12345] = lambda module, args, out: out * 0  # no RemovableHandle
    check_same(net, compiled, x)


def test_a_replaced_submodule_of_another_class_recompiles():
    net, compiled, counter, x = compiled_net()
    net.head[1] = torch.nn.Sequential(torch.nn.Linear(4 * 5 * 5, 6))
    check_same(net, compiled, x)
    assert counter.graphs == 2


def test_an_attribute_moved_to_the_class_is_read_there():
    net, compiled, counter, x = compiled_net()
    del net.scale
    Net.scale = 3
    try:
        check_same(net, compiled, x)
    finally:
        del Net.scale


def test_a_nan_attribute_does_not_recompile_every_call():
    """A constant guard compares the object it holds by identity first: a NaN attribute (never
    equal to itself) that nobody reassigned still passes; an equal NaN object in its place
    does not (equality fails) and recompiles, as before."""
    class Fill(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.value = float("nan")

        def forward(self, x):
            return torch.where(x > 0, x, self.value)

    module = Fill()
    counter = Counter()
    compiled = tensorjit.compile(module, backend=counter)
    x = torch.randn(8)
    for _ in range(4):
        torch.testing.assert_close(compiled(x), module(x), equal_nan=True)
    assert counter.graphs == 1
