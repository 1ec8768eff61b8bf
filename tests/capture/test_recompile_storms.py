"""Values made anew on every call must not make every call capture again."""

import gc
import warnings

import torch

import tensorjit
from conformance.harness import CountingBackend


class BuildsModulesInForward(torch.nn.Module):
    def forward(self, x):
        norm = torch.nn.LayerNorm(x.shape[-1])
        block = torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Identity())
        return block(norm(x)) + 1


def test_modules_built_in_forward_reuse_the_entries():
    backend = CountingBackend()
    model = BuildsModulesInForward()
    compiled = tensorjit.compile(model, backend=backend)
    x = torch.randn(3, 4)
    compiled(x)
    graphs = backend.graph_count
    for _ in range(4):
        torch.testing.assert_close(compiled(x), model(x))
    assert backend.graph_count == graphs


def test_a_module_of_the_same_class_reuses_the_entry_and_reads_its_own_parameters():
    backend = CountingBackend()
    compiled = tensorjit.compile(lambda m, x: m(x) * 2, backend=backend)
    x = torch.randn(2, 3)
    for _ in range(3):
        layer = torch.nn.Linear(3, 4)
        torch.testing.assert_close(compiled(layer, x), layer(x) * 2)
    assert backend.graph_count == 1


def test_objects_dying_between_calls_bound_the_recompiles():
    def fn(x, cls):
        return x * cls.k

    backend = CountingBackend()
    compiled = tensorjit.compile(fn, backend=backend)
    x = torch.randn(3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(20):
            cls = type("Scale", (), {"k": i})
            torch.testing.assert_close(compiled(x, cls), x * i)
            del cls
            gc.collect()
    assert backend.graph_count <= tensorjit.config.config.cache_size_limit


def test_lazy_modules_initialize_on_the_first_call_and_then_stay_compiled():
    x = torch.randn(4, 3, 8, 8)
    torch.manual_seed(0)
    eager = torch.nn.Sequential(torch.nn.LazyConv2d(6, 3), torch.nn.Flatten(), torch.nn.LazyLinear(5))
    expected = eager(x)
    torch.manual_seed(0)
    lazy = torch.nn.Sequential(torch.nn.LazyConv2d(6, 3), torch.nn.Flatten(), torch.nn.LazyLinear(5))
    backend = CountingBackend()
    compiled = tensorjit.compile(lazy, backend=backend)
    torch.testing.assert_close(compiled(x), expected)
    graphs = backend.graph_count
    for _ in range(3):
        torch.testing.assert_close(compiled(x), lazy(x))
    assert type(lazy[2]) is torch.nn.Linear
    assert backend.graph_count <= graphs + 1  # at most once more: the modules changed class


class Box:
    pass


def test_id_of_an_object_holds_for_that_object_only():
    def fn(x, obj):
        return x + 1, id(obj)

    compiled = tensorjit.compile(fn, backend="eager")
    x = torch.randn(2)
    for module in (torch.nn.ReLU(), torch.nn.ReLU(), Box(), Box()):
        assert compiled(x, module)[1] == id(module)


def test_identity_of_two_objects_holds_for_those_objects_only():
    def fn(x, a, b):
        return x + 1, a is b

    compiled = tensorjit.compile(fn, backend="eager")
    x = torch.randn(2)
    first, second = torch.nn.ReLU(), torch.nn.ReLU()
    assert compiled(x, first, second)[1] is False
    assert compiled(x, first, first)[1] is True
    assert compiled(x, second, first)[1] is False
